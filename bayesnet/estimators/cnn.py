"""Bayesian convolutional networks for 1-D signals and images."""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ..networks import ACTIVATIONS, CNN, _positive_integers
from ._docs import estimator_doc
from .base import BayesianNeuralNet, one_dimensional
from .mixins import BayesianClassifierMixin, BayesianRegressorMixin
from ..samplers import DEFAULT_SAMPLER

__all__ = ["CNN", "BayesianCNNClassifier", "BayesianCNNRegressor"]

_ARCH_DOC = """
    The defaults are Luo et al. 2018 Sec. 5.2's CIFAR-10 network: two 3x3
    convolutions with 16 channels, ReLU, 2x2 pooling, dense 100, output.

    Parameters
    ----------
    channels : tuple of int, default=(16, 16)
        Output channels of the convolutional layers; each is followed by the
        activation and max pooling.
    kernel_size : int, default=3
        Odd side length of the kernels (3 -> 3x3 for images, 3 taps for
        signals); "same" padding, stride 1.
    dense_layer_sizes : tuple of int, default=(100,)
        Widths of the dense layers between the flattened feature map and the
        output.
    pool_size : int, default=2
        Max-pooling window and stride (2 -> 2x2 for images); 1 disables it.
    activation : {"relu", "tanh", "sigmoid", "logistic", "gelu", "identity"}, default="relu"
    input_shape : tuple of int or None, default=None
        Shape of one sample, ``(channels, length)`` or ``(channels, height,
        width)``, for 2-D ``X`` of shape ``(n_samples, prod(input_shape))``
        (what pipelines of scikit-learn transformers produce). With None, 2-D
        ``X`` is read as one-channel signals of length ``n_features``, and 3-D
        ``(n_samples, channels, length)`` or 4-D ``(n_samples, channels,
        height, width)`` ``X`` is taken as it is.
"""


def _check_shape(input_shape) -> tuple[int, ...]:
    try:
        shape = tuple(input_shape)
    except TypeError:
        shape = ()
    ok = not isinstance(input_shape, (str, bytes)) and len(shape) in (2, 3) and _positive_integers(shape)
    if not ok:
        raise ValueError("input_shape must be (channels, length) or (channels, height, width) with positive "
                         f"integers, or None, got {input_shape!r}.")
    return tuple(int(s) for s in shape)


class _CNNNet(BayesianNeuralNet):
    """What the CNN estimators share: input layout and the network."""

    _allow_nd = True

    # the architecture's settings are checked with the others, before the data are read (the kernel's oddness,
    # each size's value and the input shape's also when the network is built)
    _parameter_constraints = {
        **BayesianNeuralNet._parameter_constraints,
        "channels": ["array-like", Interval(Integral, 1, None, closed="left")],
        "kernel_size": [Interval(Integral, 1, None, closed="left")],
        "dense_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "pool_size": [Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions(set(ACTIVATIONS))],
        "input_shape": ["array-like", None],
    }

    def _shape_input(self, X: np.ndarray, reset: bool) -> np.ndarray:
        # a fitted estimator reads X in the layout fit recorded (input_shape_), as scikit-learn's estimators use
        # their fitted state: an input_shape set since then applies at the next fit (before: predict on the
        # training X failed with "X has 1 features, but ... is expecting 16")
        fitted = None if reset else getattr(self, "input_shape_", None)
        shape = (tuple(fitted) if fitted is not None else
                 None if self.input_shape is None else _check_shape(self.input_shape))
        if X.ndim == 2:
            if shape is None:
                X = X[:, None, :]  # one-channel signals
            elif math.prod(shape) != X.shape[1]:
                raise ValueError(f"X has {X.shape[1]} features, which input_shape={shape} cannot hold "
                                 f"({math.prod(shape)} values per sample).")
            else:
                X = X.reshape(len(X), *shape)
        elif X.ndim in (3, 4):
            if shape is not None and shape != X.shape[1:]:
                raise ValueError(f"X has samples of shape {X.shape[1:]}, but input_shape={shape}.")
        else:
            raise ValueError(f"{type(self).__name__} expects X of shape (n_samples, n_features), (n_samples, "
                             f"channels, length) or (n_samples, channels, height, width), got {X.ndim} axes.")
        return self._check_input_shape(np.ascontiguousarray(X), reset, "channels, spatial axes")

    def _check_samples_shape(self, X, reset: bool):
        """Samples in the network's layout ``(n, *input_shape_)`` or flattened ``(n, prod(input_shape_))`` (as
        ``input_shape`` reads 2-D input), whichever layout ``fit`` saw: brought to that one, since scikit-learn's
        feature count reads the second axis only (before: "X has 2 features, but ... is expecting 72"). A 1-D X is
        refused with this estimator's layouts (stop 54's user finding: scikit-learn's advice, ``reshape(-1, 1)``,
        made one-value samples of the one sample meant)."""
        if one_dimensional(X):
            raise ValueError(f"{type(self).__name__} expects X of shape (n_samples, prod(input_shape)) or "
                             f"(n_samples, *input_shape), got a 1-D X of {len(X)} values. Reshape your data: for one "
                             "sample, pass X.reshape(1, -1).")
        X = super()._check_samples_shape(X, reset)
        fitted, shape = getattr(self, "input_shape_", None), getattr(X, "shape", None)
        n_in = getattr(self, "n_features_in_", None)
        if reset or fitted is None or shape is None or len(shape) < 2:
            return X
        fitted = tuple(fitted)
        if len(shape) > 2:
            if tuple(shape[1:]) != fitted:  # (before: "X has 1 features, but ... is expecting 16" for (n, 1, 16))
                raise ValueError(f"X has samples of shape {tuple(shape[1:])}, but {type(self).__name__} was fitted "
                                 f"with samples of shape {fitted}.")
            if shape[1] != n_in:  # fitted on flattened samples
                return np.asarray(X).reshape(len(X), -1)
            return X
        # 2-D: as fit saw it when fit saw flattened samples (_shape_input reads them back into the fitted layout);
        # else the flattened samples of a fit in the network's layout
        if shape[1] == n_in and n_in == math.prod(fitted):
            return X
        if shape[1] == math.prod(fitted):
            return np.asarray(X).reshape(len(X), *fitted)
        if n_in != math.prod(fitted):  # (else scikit-learn's own message, its checks' wording)
            raise ValueError(f"X has {shape[1]} features, but {type(self).__name__} was fitted with samples of "
                             f"shape {fitted} ({math.prod(fitted)} values per sample when flattened).")
        return X

    def _build_module(self):
        return CNN(self.input_shape_, self.n_outputs_, self.channels, self.kernel_size, self.dense_layer_sizes,
                   self.pool_size, self.activation)


class BayesianCNNClassifier(BayesianClassifierMixin, _CNNNet):
    __doc__ = estimator_doc("Bayesian convolutional classifier for signals and images, sampling its weights.",
                            "classifier", _ARCH_DOC)

    def __init__(self, channels=(16, 16), kernel_size=3, dense_layer_sizes=(100,), pool_size=2, activation="relu",
                 input_shape=None, *, sampler=DEFAULT_SAMPLER, n_draws=100, burn_in="auto", thinning="auto", n_chains=1,
                 n_jobs=None, prior_scale="auto", standardize_inputs=True, batch_size="auto", max_epochs=None, device="cpu", random_state=None,
                 verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, standardize_inputs=standardize_inputs, batch_size=batch_size, max_epochs=max_epochs,
                         device=device, random_state=random_state, verbose=verbose, **kwargs)
        self.channels = channels
        self.kernel_size = kernel_size
        self.dense_layer_sizes = dense_layer_sizes
        self.pool_size = pool_size
        self.activation = activation
        self.input_shape = input_shape


class BayesianCNNRegressor(BayesianRegressorMixin, _CNNNet):
    __doc__ = estimator_doc("Bayesian convolutional regressor for signals and images, sampling weights and noise.",
                            "regressor", _ARCH_DOC)

    def __init__(self, channels=(16, 16), kernel_size=3, dense_layer_sizes=(100,), pool_size=2, activation="relu",
                 input_shape=None, *, sampler=DEFAULT_SAMPLER, n_draws=100, burn_in="auto", thinning="auto", n_chains=1,
                 n_jobs=None, prior_scale="auto", standardize_inputs=True, noise_shape=1.0, noise_scale=0.1, batch_size="auto", max_epochs=None,
                 device="cpu", random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, standardize_inputs=standardize_inputs, batch_size=batch_size, max_epochs=max_epochs,
                         device=device, random_state=random_state, verbose=verbose, **kwargs)
        self.channels = channels
        self.kernel_size = kernel_size
        self.dense_layer_sizes = dense_layer_sizes
        self.pool_size = pool_size
        self.activation = activation
        self.input_shape = input_shape
        self.noise_shape = noise_shape
        self.noise_scale = noise_scale
