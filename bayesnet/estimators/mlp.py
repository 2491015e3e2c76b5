"""Bayesian multilayer perceptrons."""

from __future__ import annotations

from ..networks import MLP, _dense_sizes
from ._docs import SAMPLING_DOC
from .base import BayesianNeuralNet
from .mixins import BayesianClassifierMixin, BayesianRegressorMixin

__all__ = ["MLP", "BayesianMLPClassifier", "BayesianMLPRegressor"]

_ARCH_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Widths of the hidden layers.
    activation : {"relu", "tanh", "sigmoid", "logistic", "gelu", "identity"}, default="relu"
"""


class BayesianMLPClassifier(BayesianClassifierMixin, BayesianNeuralNet):
    __doc__ = """Bayesian MLP classifier fitted by sampling the posterior over its weights.

    The likelihood is categorical on the network's logits; ``predict_proba``
    averages the class probabilities of the retained posterior draws.
    """ + _ARCH_DOC + SAMPLING_DOC

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, sampler="sghmc", n_draws=100,
                 burn_in=1000, thinning="auto", n_chains=1, n_jobs=None, prior_scale=1.0, batch_size="auto",
                 max_epochs=None, device="cpu",
                 random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, batch_size=batch_size, max_epochs=max_epochs,
                         device=device,
                         random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation

    def _build_module(self):
        return MLP(self.n_features_in_, _dense_sizes(self.hidden_layer_sizes, "hidden_layer_sizes"), self.n_outputs_, self.activation)


class BayesianMLPRegressor(BayesianRegressorMixin, BayesianNeuralNet):
    __doc__ = """Bayesian MLP regressor fitted by sampling the posterior over its weights and noise.

    The likelihood is Gaussian with an observation-noise variance that is
    sampled too (inverse-gamma prior, paper 001 Sec. 4, paper 003 eq. 5), so
    predictive intervals include aleatoric noise. Targets are standardised
    internally and predictions mapped back.
    """ + _ARCH_DOC + SAMPLING_DOC + """
    noise_shape, noise_scale : float, default=1.0, 0.1
        Inverse-gamma prior ``IG(noise_shape, noise_scale)`` on the noise
        variance of the *standardised* targets.
"""

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, sampler="sghmc", n_draws=100,
                 burn_in=1000, thinning="auto", n_chains=1, n_jobs=None, prior_scale=1.0, noise_shape=1.0,
                 noise_scale=0.1, batch_size="auto",
                 max_epochs=None, device="cpu", random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, batch_size=batch_size, max_epochs=max_epochs,
                         device=device,
                         random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.noise_shape = noise_shape
        self.noise_scale = noise_scale

    def _build_module(self):
        return MLP(self.n_features_in_, _dense_sizes(self.hidden_layer_sizes, "hidden_layer_sizes"), self.n_outputs_, self.activation)
