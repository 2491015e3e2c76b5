"""Task heads: what classifiers and regressors add on top of :class:`BayesianNeuralNet`."""

from __future__ import annotations

import warnings
from numbers import Number, Real

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import Interval
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from ..likelihoods import CategoricalLikelihood, GaussianLikelihood
from .run import user_stacklevel
from .scaling import moments, scaled_moments, standardise

__all__ = ["BayesianClassifierMixin", "BayesianRegressorMixin"]


def _check_level(level) -> float:
    if isinstance(level, bool) or not isinstance(level, Real) or not 0 < level < 1:
        raise ValueError(f"level must be a probability in (0, 1), got {level!r}.")
    return float(level)


def _target_scale(y2: np.ndarray, warn: bool) -> tuple[np.ndarray, np.ndarray]:
    """The mean and scale that standardise the columns of ``y2`` (shape ``(n, k)``), each shape ``(k,)``.

    A column whose values are all equal has no scale of its own. (Exactly equal: unlike an input's, a target's
    scale only multiplies the network's outputs, so a spread at rounding level does no harm and is fitted as it
    is, and a real spread of one part in 1e13 stays a spread.) Its mean is the value itself, not a sum's rounding
    of it, and its scale is the value's float32 resolution, ``|value| * 1.19e-7`` (1 for a column of zeros), so
    that the model predicts the value with an interval far below it. The float64 mean and standard deviation of
    equal values are off by a rounding error or not, depending on the count, which gave such a column either a
    scale of 1e-17 or of 1: a constant 5e-6 was predicted as 5e-4 +- 0.06. With ``warn`` a UserWarning names the
    constant columns.

    A column that varies at a scale whose squares underflow (values near 1e-200) has its standard deviation
    computed on the column divided by its largest magnitude, then scaled back; 1 where even that underflows.
    """
    mean, scale = moments(y2, 0)  # (overflow-safe: targets near float64's limit)
    constant = (y2 == y2[:1]).all(axis=0) if len(y2) else np.zeros(y2.shape[1], dtype=bool)
    tiny = ~constant & ~(scale > 0)
    if tiny.any():
        scale = scale.copy()
        scale[tiny] = scaled_moments(y2[:, tiny], 0)[1]
        scale = np.where(constant | (scale > 0), scale, 1.0)
    if not constant.any():
        return mean, scale
    value = y2[0].astype(np.float64)
    mean = np.where(constant, value, mean)
    floor = np.abs(value) * np.finfo(np.float32).eps
    scale = np.where(constant, np.where(floor > 0, floor, 1.0), scale)
    if warn:
        columns = np.flatnonzero(constant)
        values = ", ".join(f"{v:.6g}" for v in value[columns])
        what = (f"y is constant ({value[0]:.6g} in every row)" if y2.shape[1] == 1 else
                f"y's column {columns[0]} is constant ({values})" if len(columns) == 1 else
                f"y's columns {columns.tolist()} are constant ({values})")
        warnings.warn(f"{what}: the model predicts {'that value' if len(columns) == 1 else 'those values'}, and its "
                      "intervals come from the noise prior alone (scaled to the value's float32 resolution, or to 1 "
                      "for zeros), not from the data. A later partial_fit standardises its targets with this scale; "
                      "fit a target that varies instead.", UserWarning, stacklevel=user_stacklevel())
    return mean, scale


def _check_label_types(y: np.ndarray) -> None:
    """Object labels that cannot be sorted into classes: missing ones (None, pandas' NA, NaN) among others, or
    several kinds (text, bytes and numbers). ValueError naming the first such rows; scikit-learn's sort raised
    "'<' not supported between instances of 'NoneType' and 'str'" (stop 54's user finding), its validation "Input
    y contains NaN" without the row, and pandas "boolean value of NA is ambiguous"."""
    if y.dtype != object or not len(y):
        return
    missing = np.array([v is None or type(v).__name__ == "NAType" or (isinstance(v, float) and v != v) for v in y])
    if missing.any() and not missing.all():
        first = int(np.flatnonzero(missing)[0])
        raise ValueError(f"y holds {int(missing.sum())} missing labels ({y[first]!r}), the first in row {first}: drop "
                         "those rows or give them a label.")
    kinds = {"text": np.array([isinstance(v, str) for v in y]),
             "bytes": np.array([isinstance(v, bytes) for v in y]),
             "numeric": np.array([isinstance(v, (Number, np.number)) for v in y])}
    present = {k: int(np.flatnonzero(v)[0]) for k, v in kinds.items() if v.any()}
    if len(present) > 1:
        (a, i), (b, j) = sorted(present.items(), key=lambda kv: kv[1])[:2]
        raise ValueError(f"y mixes {a} and {b} labels (row {i} holds {y[i]!r}, row {j} holds {y[j]!r}): write every "
                         "label one way, for example y.astype(str).")


class BayesianClassifierMixin(ClassifierMixin):
    """Classification head: categorical likelihood, Monte Carlo class probabilities."""

    def _validate_fit_data(self, X, y, reset: bool, classes=None):
        # the labels as given, before scikit-learn's validation reads NaN or pandas' NA in them (a column vector
        # too; other shapes are refused there)
        labels = None if y is None else np.asarray(y)
        if labels is not None and labels.dtype == object and labels.ndim in (1, 2) and labels.size == len(labels):
            _check_label_types(labels.reshape(-1))
        return super()._validate_fit_data(X, y, reset, classes)

    def _validate_targets(self, y, reset: bool, classes=None):
        # (not from fit's probe or a worker's group of chains: the fit itself warns, once)
        y = column_or_1d(y, warn=not vars(self).get("_quiet_data", False))
        check_classification_targets(y)
        if classes is not None and np.ndim(classes) != 1:  # (before: LabelEncoder's "y should be a 1d array")
            raise ValueError(f"classes must be a 1-D list of the class labels, got an array of shape "
                             f"{np.shape(classes)}.")
        if reset:
            encoder = LabelEncoder().fit(y if classes is None else np.asarray(classes))
            if classes is not None and len(encoder.classes_) < 2:
                raise ValueError(f"classes={encoder.classes_.tolist()} holds {len(encoder.classes_)} class(es); "
                                 f"{type(self).__name__} needs at least 2.")
            if len(encoder.classes_) < 2:
                raise ValueError(
                    f"{type(self).__name__} needs samples of at least 2 classes in the data, but the data "
                    f"contains only one class: {encoder.classes_[0]!r}."
                )
            self.classes_ = encoder.classes_
            self.n_outputs_ = len(self.classes_)
        elif classes is not None:  # (scikit-learn's partial_fit estimators refuse another set of classes too)
            given = np.unique(np.asarray(classes))
            if len(given) != len(self.classes_) or not np.all(given == self.classes_):
                raise ValueError(f"classes={given.tolist()} is not the set of classes of the running chains, "
                                 f"{self.classes_.tolist()}: the network's outputs are one per class; call fit() "
                                 "(with warm_start=False) to start new chains with other classes.")
        unknown = np.setdiff1d(np.unique(y), self.classes_)
        if unknown.size:
            where = f"not in classes={self.classes_.tolist()}" if reset else "not seen in the first fit"
            raise ValueError(f"y contains labels {where}: {unknown.tolist()}.")
        return np.searchsorted(self.classes_, y).astype(np.int64)

    def _build_likelihood(self):
        return CategoricalLikelihood()

    def predict_draws(self, X) -> np.ndarray:
        """Class probabilities under each retained posterior draw.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_draws, n_samples, n_classes)
            ``p(y = k | x, theta_d)`` for every draw ``theta_d``.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        ValueError
            On NaN/inf input, a feature count that differs from ``fit``, or a row whose outputs are not finite
            under any draw (as ``predict_proba``; some non-finite draws warn, their probabilities as softmax
            gives them).
        """
        return torch.softmax(self._network_outputs(X).double(), dim=-1).numpy()

    def predict_proba(self, X, return_interval: bool = False, level: float = 0.95):
        """Posterior predictive class probabilities (Monte Carlo average over draws).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_interval : bool, default=False
            Also return equal-tailed credible bounds of each probability across
            the posterior draws.
        level : float, default=0.95
            Credible level of the interval, in (0, 1).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            ``(1/D) sum_d p(y = k | x, theta_d)``; rows sum to 1.
        lower, upper : ndarray of shape (n_samples, n_classes)
            Only with ``return_interval=True``: the ``(1 - level)/2`` and
            ``(1 + level)/2`` quantiles over draws.
        """
        level = _check_level(level)
        predictive = self._predictive()
        X = self._validate_X(X, reset=False)
        # row blocks: the (n_draws, rows, n_classes) array stays small
        proba, lower, upper = predictive.class_probabilities(X, level if return_interval else None)
        return (proba, lower, upper) if return_interval else proba

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """Most probable class under the posterior predictive, shape (n_samples,)."""
        proba = self.predict_proba(X)
        if not np.all(np.isfinite(proba)):  # never turn NaN into a class (argmax of NaN is 0)
            raise ValueError("the predictive probabilities are not finite for some rows; see fit_status_.")
        return self.classes_[np.argmax(proba, axis=1)]


class BayesianRegressorMixin(RegressorMixin):
    """Regression head: Gaussian likelihood with sampled noise, standardised targets."""

    # the noise prior's settings, checked with the others in fit (before: noise_scale="nan" or None was a bare
    # TypeError, "must be real number, not str", that named no parameter)
    _head_constraints = {"noise_shape": [Interval(Real, 0, np.inf, closed="neither")],
                         "noise_scale": [Interval(Real, 0, np.inf, closed="neither")]}

    @property
    def predict_proba(self):
        # skorch's NeuralNet defines predict_proba; a regressor has none.
        raise AttributeError(f"{type(self).__name__} has no predict_proba; use predict(X, return_std=True).")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _validate_targets(self, y, reset: bool, classes=None):
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the regression target y must be numeric: {exc}. For class labels use a classifier; "
                             "otherwise convert y to numbers.") from None
        if reset:
            self._y_is_1d = y.ndim == 1
        y2 = y.reshape(len(y), -1)
        if reset:
            self.n_outputs_ = y2.shape[1]
            self.y_mean_, self.y_scale_ = _target_scale(y2, warn=not vars(self).get("_quiet_data", False))
        elif y2.shape[1] != self.n_outputs_:
            raise ValueError(f"y has {y2.shape[1]} columns, but the model was fitted with {self.n_outputs_}.")
        return standardise(y2, self.y_mean_, self.y_scale_).astype(np.float32)

    def _build_likelihood(self):
        return GaussianLikelihood(self.n_outputs_, noise_shape=self.noise_shape, noise_scale=self.noise_scale)

    def _draws_standardised(self, X):
        mean = self._network_outputs(X).double()  # (D, n, k)
        log_var = self._draw_parameters()[-1].double()  # (D, k)
        return mean, torch.exp(0.5 * log_var)[:, None, :]

    def _noise_std(self) -> torch.Tensor:
        """Each draw's observation-noise sd in standardised units, shape (n_draws, n_outputs)."""
        return torch.exp(0.5 * self._draw_parameters()[-1].double())

    def _squeeze(self, a: np.ndarray) -> np.ndarray:
        return a[..., 0] if self._y_is_1d else a

    def predict_draws(self, X, return_noise_std: bool = False):
        """Predictive means (and noise scales) under each retained posterior draw.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_noise_std : bool, default=False
            Also return each draw's observation-noise standard deviation.

        Returns
        -------
        means : ndarray of shape (n_draws, n_samples) or (n_draws, n_samples, n_outputs)
            ``f_theta_d(x)`` in the units of ``y``.
        noise_std : ndarray of shape (n_draws,) or (n_draws, n_outputs)
            Only with ``return_noise_std=True``: ``sigma_d`` in the units of ``y``.

        Raises
        ------
        ValueError
            On NaN/inf input, a feature count that differs from ``fit``, or a row whose outputs are not finite
            under any draw (as ``predict``; some non-finite draws warn and come back as they are).
        """
        mean, std = self._draws_standardised(X)
        means = self._squeeze(mean.numpy() * self.y_scale_ + self.y_mean_)
        if not return_noise_std:
            return means
        return means, self._squeeze(std[:, 0, :].numpy() * self.y_scale_)

    def predict(self, X, return_std: bool = False, return_interval: bool = False, level: float = 0.95):
        """Posterior predictive mean, with optional standard deviation and interval.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior predictive standard deviation
            ``sqrt(mean_d sigma_d^2 + var_d f_d(x))``, which includes the
            sampled observation noise (as ``GaussianProcessRegressor``).
        return_interval : bool, default=False
            Also return the equal-tailed posterior predictive interval: the
            quantiles of the mixture ``(1/D) sum_d N(f_d(x), sigma_d^2)``,
            found by a safeguarded Newton iteration on its CDF
            (deterministic).
        level : float, default=0.95
            Probability mass of the interval, in (0, 1).

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        std : ndarray, same shape, only with ``return_std``
        lower, upper : ndarrays, same shape, only with ``return_interval``
        """
        level = _check_level(level)
        predictive = self._predictive()
        noise = self._noise_std()
        X = self._validate_X(X, reset=False)
        # row blocks, each reduced on the device: time and memory bounded by the block, as for the mean
        mean, std, lower, upper = predictive.gaussian_mixture(X, noise, std=return_std,
                                                              level=level if return_interval else None)
        out = [self._squeeze(mean * self.y_scale_ + self.y_mean_)]
        if return_std:
            out.append(self._squeeze(std * self.y_scale_))
        if return_interval:
            out += [self._squeeze(b * self.y_scale_ + self.y_mean_) for b in (lower, upper)]
        return out[0] if len(out) == 1 else tuple(out)
