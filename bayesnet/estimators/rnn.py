"""Bayesian recurrent networks (LSTM, GRU) for sequences."""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ..networks import ACTIVATIONS, RNN
from ._docs import estimator_doc
from .base import BayesianNeuralNet, one_dimensional
from .mixins import BayesianClassifierMixin, BayesianRegressorMixin
from ..samplers import DEFAULT_SAMPLER

__all__ = ["RNN", "BayesianRNNClassifier", "BayesianRNNRegressor"]

_ARCH_DOC = """
    X is ``(n_samples, n_timesteps, n_features)``, or ``(n_samples,
    n_timesteps)`` for univariate sequences (the output of
    :class:`bayesnet.TakensEmbedding` or of
    :func:`bayesnet.make_forecasting_windows`); prediction needs the same
    ``n_timesteps`` as ``fit``. The defaults are Luo et al. 2018 Sec. 5.2's RNN:
    LSTM with 128 units, ReLU, dense 64 with ReLU, output.

    Parameters
    ----------
    hidden_size : int, default=128
        Units of every recurrent layer.
    num_layers : int, default=1
        Stacked recurrent layers.
    dense_layer_sizes : tuple of int, default=(64,)
        Widths of the dense layers between the last hidden state and the
        output.
    cell : {"lstm", "gru"}, default="lstm"
        PyTorch's ``nn.LSTM``/``nn.GRU`` equations and initialisation.
    activation : {"relu", "tanh", "sigmoid", "logistic", "gelu", "identity"}, default="relu"
        Applied to the last hidden state and after every dense layer.
"""


class _RNNNet(BayesianNeuralNet):
    """What the RNN estimators share: input layout and the network."""

    _allow_nd = True

    # the architecture's settings are checked with the others, before the data are read (each size's value
    # also when the network is built)
    _parameter_constraints = {
        **BayesianNeuralNet._parameter_constraints,
        "hidden_size": [Interval(Integral, 1, None, closed="left")],
        "num_layers": [Interval(Integral, 1, None, closed="left")],
        "dense_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "cell": [StrOptions({"lstm", "gru"})],
        "activation": [StrOptions(set(ACTIVATIONS))],
    }

    _input_feature_axis = -1  # (n, n_timesteps, n_features): statistics over the rows and the steps

    def _check_samples_shape(self, X, reset: bool):
        """A 2-D X holds one univariate sequence per row: its columns are time steps, which scikit-learn's count
        calls features ("X has 10 features, but ... is expecting 12"); the message keeps scikit-learn's words
        and says what they count."""
        if isinstance(X, (list, tuple)) and len(X) and all(hasattr(x, "__len__") and np.ndim(x) for x in X):
            lengths = {len(x) for x in X}
            if len(lengths) > 1:  # (numpy's own error: "inhomogeneous shape after 1 dimensions")
                raise ValueError(f"X holds sequences of {len(lengths)} different lengths ({min(lengths)} to "
                                 f"{max(lengths)} steps): {type(self).__name__} takes sequences of one length; pad "
                                 "or cut them to one length, or make fixed-length windows "
                                 "(bayesnet.timeseries.make_forecasting_windows).")
        if one_dimensional(X):
            raise ValueError(f"{type(self).__name__} expects X of shape (n_samples, n_timesteps) or (n_samples, "
                             f"n_timesteps, n_features), got a 1-D X of {len(X)} values. Reshape your data: for one "
                             "sequence, pass X.reshape(1, -1); to make windows from a series, use "
                             "bayesnet.timeseries.make_forecasting_windows.")
        X = super()._check_samples_shape(X, reset)
        fitted, shape = getattr(self, "input_shape_", None), getattr(X, "shape", None)
        if not reset and fitted is not None and shape is not None and len(shape) == 2 and shape[1] != fitted[0]:
            what = (f"so these are sequences of {shape[1]} time steps where the fit's had {fitted[0]}"
                    if fitted[1] == 1 else
                    f"but the fit's samples were sequences of shape {tuple(fitted)} (n_timesteps, n_features): pass X "
                    f"of shape (n_samples, {fitted[0]}, {fitted[1]})")
            raise ValueError(f"X has {shape[1]} features, but {type(self).__name__} is expecting {fitted[0]} features "
                             f"as input: a 2-D X holds one univariate sequence per row, {what}.")
        if not reset and fitted is not None and shape is not None and len(shape) == 2 and fitted[1] != 1:
            raise ValueError(f"X is 2-D, which {type(self).__name__} reads as one univariate sequence per row "
                             f"(samples of shape ({shape[1]}, 1): n_timesteps, n_features), but the fit's samples "
                             f"were sequences of shape {tuple(fitted)}: pass X of shape (n_samples, {fitted[0]}, "
                             f"{fitted[1]}).")
        return X

    def _shape_input(self, X: np.ndarray, reset: bool) -> np.ndarray:
        if X.ndim == 2:
            X = X[:, :, None]  # univariate sequences
        elif X.ndim != 3:
            raise ValueError(f"{type(self).__name__} expects X of shape (n_samples, n_timesteps) or (n_samples, "
                             f"n_timesteps, n_features), got {X.ndim} axes.")
        return self._check_input_shape(X, reset, "n_timesteps, n_features")

    def _build_module(self):
        return RNN(self.input_shape_[1], self.n_outputs_, self.hidden_size, self.num_layers, self.dense_layer_sizes,
                   self.cell, self.activation)


class BayesianRNNClassifier(BayesianClassifierMixin, _RNNNet):
    __doc__ = estimator_doc("Bayesian recurrent classifier for sequences, sampling the posterior over its weights.",
                            "classifier", _ARCH_DOC)

    def __init__(self, hidden_size=128, num_layers=1, dense_layer_sizes=(64,), cell="lstm", activation="relu", *,
                 sampler=DEFAULT_SAMPLER, n_draws=100, burn_in="auto", thinning="auto", n_chains=1, n_jobs=None,
                 prior_scale="auto", standardize_inputs=True, batch_size="auto", max_epochs=None, device="cpu", random_state=None, verbose=0,
                 **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, standardize_inputs=standardize_inputs, batch_size=batch_size, max_epochs=max_epochs,
                         device=device, random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dense_layer_sizes = dense_layer_sizes
        self.cell = cell
        self.activation = activation


class BayesianRNNRegressor(BayesianRegressorMixin, _RNNNet):
    __doc__ = estimator_doc("Bayesian recurrent regressor for sequences (forecasting), sampling weights and noise.",
                            "regressor", _ARCH_DOC)

    def __init__(self, hidden_size=128, num_layers=1, dense_layer_sizes=(64,), cell="lstm", activation="relu", *,
                 sampler=DEFAULT_SAMPLER, n_draws=100, burn_in="auto", thinning="auto", n_chains=1, n_jobs=None,
                 prior_scale="auto", standardize_inputs=True, noise_shape=1.0, noise_scale=0.1, batch_size="auto", max_epochs=None, device="cpu",
                 random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, standardize_inputs=standardize_inputs, batch_size=batch_size, max_epochs=max_epochs,
                         device=device, random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dense_layer_sizes = dense_layer_sizes
        self.cell = cell
        self.activation = activation
        self.noise_shape = noise_shape
        self.noise_scale = noise_scale
