"""Takens delay embedding for one-step-ahead forecasting (Chandra et al. 2019, Sec. 3.1)."""

from __future__ import annotations

import datetime
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import _check_feature_names_in, check_is_fitted, validate_data

from ._validation import is_count

__all__ = ["make_forecasting_windows", "TakensEmbedding"]


def make_forecasting_windows(series, n_lags: int, horizon: int = 1, stride: int = 1):
    """Turn a univariate series into a lag matrix and one-step-ahead targets.

    Row ``i`` describes a time ``t``: ``X[i, j] = y[t - 1 - j]`` (lag ``j + 1``)
    and ``target[i] = y[t + horizon - 1]``. Feed ``X`` to
    :class:`TakensEmbedding`, which selects the delay coordinates, so that the
    number of rows does not depend on the embedding and ``GridSearchCV`` can
    tune ``dimension`` and ``delay`` inside a ``Pipeline``.

    Parameters
    ----------
    series : array-like of shape (n_timesteps,) or (n_timesteps, 1)
    n_lags : int
        Columns of the lag matrix; must be >= ``dimension * delay`` of any
        embedding tried later.
    horizon : int, default=1
        Steps ahead of the last lag the target lies.
    stride : int, default=1
        Spacing of consecutive windows; ``stride=2`` is Chandra et al. 2019's ``T=2``
        (its set ``A_{D,T}`` of eq. 2 keeps every T-th time point).

    Returns
    -------
    X : ndarray of shape (n_windows, n_lags)
    y : ndarray of shape (n_windows,)

    Raises
    ------
    ValueError
        If the series is not one-dimensional, holds complex numbers, strings, dates or durations, contains
        NaN/inf, or is too short.
    """
    raw = np.asarray(series)
    if raw.dtype.kind in "cUSMm" or (raw.dtype.kind == "O" and any(
            isinstance(v, (str, bytes, complex, np.complexfloating, np.datetime64, np.timedelta64, datetime.date,
                           datetime.timedelta)) for v in raw.ravel())):
        # (before: complex values lost their imaginary part with a ComplexWarning, strings of numbers were parsed,
        # dates and durations became nanosecond counts)
        raise ValueError(f"series must hold real numbers, got {raw.dtype.name if raw.dtype.kind != 'O' else 'objects'}"
                         " (complex numbers, strings, dates or durations).")
    y = np.asarray(series, dtype=np.float64)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"series must be one-dimensional, got shape {np.shape(series)}.")
    if not np.all(np.isfinite(y)):
        raise ValueError("series contains NaN or infinity.")
    for name, val in (("n_lags", n_lags), ("horizon", horizon), ("stride", stride)):
        if not is_count(val):
            raise ValueError(f"{name} must be a positive integer, got {val!r}.")
    times = np.arange(n_lags, len(y) - horizon + 1, stride)
    if times.size == 0:
        raise ValueError(f"series of length {len(y)} is too short for n_lags={n_lags}, horizon={horizon}.")
    X = np.stack([y[times - 1 - j] for j in range(n_lags)], axis=1)
    return X, y[times + horizon - 1]


class TakensEmbedding(TransformerMixin, BaseEstimator):
    """Delay-coordinate (Takens) embedding of a lag matrix.

    Maps the lag matrix of :func:`make_forecasting_windows` (column ``j`` =
    lag ``j + 1``) to the delay vector
    ``(y[t-delay], y[t-2*delay], ..., y[t-dimension*delay])``, the state-space
    reconstruction of Takens 1981 with embedding dimension ``D = dimension``
    and delay ``delay``. Chandra et al. 2019 Sec. 3.1 use ``D = 4`` consecutive
    lags ``x_t = (y_{t-1}, ..., y_{t-D})`` (``delay=1``); their time lag
    ``T`` (eq. 2) keeps every T-th window instead
    (:func:`make_forecasting_windows`' ``stride``).

    Parameters
    ----------
    dimension : int, default=4
        Embedding dimension ``D`` (Chandra et al. 2019 uses 4).
    delay : int, default=1
        Time lag between coordinates.

    Attributes
    ----------
    n_features_in_ : int
        Number of lag columns seen in ``fit``.

    Raises
    ------
    ValueError
        In ``fit``/``transform`` if ``dimension * delay`` exceeds the number of
        lag columns, or on NaN/inf input.
    """

    _parameter_constraints = {
        "dimension": [Interval(Integral, 1, None, closed="left")],
        "delay": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, dimension: int = 4, delay: int = 1):
        self.dimension = dimension
        self.delay = delay

    def fit(self, X, y=None):
        """Check the lag matrix; learns nothing else."""
        self._validate_params()
        X = validate_data(self, self._lag_matrix(X), reset=True)
        self._check_span(X.shape[1])
        return self

    @staticmethod
    def _lag_matrix(X):
        """``X`` unchanged, unless it is a series itself: then a ValueError that says how to make the lag matrix
        (scikit-learn's "Expected 2D array" did not)."""
        ndim = getattr(X, "ndim", None)  # (arrays, pandas)
        if ndim is None:
            try:
                ndim = np.ndim(X)
            except (TypeError, ValueError):  # (ragged input: scikit-learn's own message)
                return X
        if ndim == 1:
            raise ValueError("TakensEmbedding takes the lag matrix (n_windows, n_lags), not a series: build it from "
                             "a 1-D series with make_forecasting_windows(series, n_lags=...), whose X it takes "
                             "(its columns the lags 1, 2, ..., n_lags). Reshape your data with X.reshape(1, -1) if "
                             "it is one window.")
        return X

    def _check_span(self, n_lags: int) -> None:
        if self.dimension * self.delay > n_lags:
            raise ValueError(
                f"dimension * delay = {self.dimension * self.delay} exceeds the {n_lags} lag columns; "
                f"build the windows with n_lags >= {self.dimension * self.delay}."
            )

    def transform(self, X):
        """Select the delay coordinates: shape (n_samples, dimension)."""
        check_is_fitted(self)
        self._validate_params()  # (dimension or delay set since fit: values, then the span)
        X = validate_data(self, self._lag_matrix(X), reset=False)
        self._check_span(X.shape[1])
        cols = np.arange(1, self.dimension + 1) * self.delay - 1
        return X[:, cols]

    def get_feature_names_out(self, input_features=None):
        """``lag_<k*delay>`` for k = 1..dimension. ``input_features`` is checked as scikit-learn's transformers
        check it (one name per input column, those seen in fit if any), then not used."""
        check_is_fitted(self)
        _check_feature_names_in(self, input_features)
        return np.array([f"lag_{k * self.delay}" for k in range(1, self.dimension + 1)], dtype=object)
