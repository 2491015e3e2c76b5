"""Bayesian multilayer perceptrons."""

from __future__ import annotations

from numbers import Integral

from sklearn.utils._param_validation import Interval, StrOptions

from ..networks import ACTIVATIONS, MLP
from ._docs import estimator_doc
from .base import BayesianNeuralNet
from .mixins import BayesianClassifierMixin, BayesianRegressorMixin
from ..samplers import DEFAULT_SAMPLER

__all__ = ["MLP", "BayesianMLPClassifier", "BayesianMLPRegressor"]

_ARCH_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Widths of the hidden layers.
    activation : {"relu", "tanh", "sigmoid", "logistic", "gelu", "identity"}, default="relu"
"""


class _MLPNet(BayesianNeuralNet):
    """What the MLP estimators share: the network (tabular input is the base class's layout)."""

    # the architecture's settings are checked with the others, before the data are read (each size's value
    # also when the network is built)
    _parameter_constraints = {
        **BayesianNeuralNet._parameter_constraints,
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions(set(ACTIVATIONS))],
    }

    def _build_module(self):
        return MLP(self.n_features_in_, self.hidden_layer_sizes, self.n_outputs_, self.activation)


class BayesianMLPClassifier(BayesianClassifierMixin, _MLPNet):
    __doc__ = estimator_doc("Bayesian MLP classifier fitted by sampling the posterior over its weights.",
                            "classifier", _ARCH_DOC)

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, sampler=DEFAULT_SAMPLER, n_draws=100,
                 burn_in="auto", thinning="auto", n_chains=1, n_jobs=None, prior_scale="auto", standardize_inputs=True, batch_size="auto",
                 max_epochs=None, device="cpu",
                 random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, standardize_inputs=standardize_inputs, batch_size=batch_size, max_epochs=max_epochs,
                         device=device,
                         random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation


class BayesianMLPRegressor(BayesianRegressorMixin, _MLPNet):
    __doc__ = estimator_doc("Bayesian MLP regressor fitted by sampling the posterior over its weights and noise.",
                            "regressor", _ARCH_DOC)

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, sampler=DEFAULT_SAMPLER, n_draws=100,
                 burn_in="auto", thinning="auto", n_chains=1, n_jobs=None, prior_scale="auto", standardize_inputs=True, noise_shape=1.0,
                 noise_scale=0.1, batch_size="auto",
                 max_epochs=None, device="cpu", random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, standardize_inputs=standardize_inputs, batch_size=batch_size, max_epochs=max_epochs,
                         device=device,
                         random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.noise_shape = noise_shape
        self.noise_scale = noise_scale
