"""Calibration and interval metrics for probabilistic predictions."""

from __future__ import annotations

import numpy as np

from ._validation import is_count

__all__ = ["expected_calibration_error", "interval_coverage"]


def expected_calibration_error(y_true, proba, n_bins: int = 15, classes=None) -> float:
    """Expected calibration error of the top-class probability (Guo et al. 2017).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels (values of ``classes``, or 0..K-1 indices if None).
    proba : array-like of shape (n_samples, n_classes)
    n_bins : int, default=15
        Equal-width confidence bins on [0, 1].
    classes : array-like of shape (n_classes,), optional
        Label of each column of ``proba`` (an estimator's ``classes_``).

    Returns
    -------
    float
        ``sum_b (n_b / n) |accuracy_b - confidence_b|``, in [0, 1].

    Raises
    ------
    ValueError
        If ``proba`` is not 2-D, holds no row, or values that are not probabilities (outside [0, 1], or not
        finite), ``y_true`` (a column ``(n_samples, 1)`` is taken as 1-D) has another number of rows,
        ``n_bins`` is not a positive integer, ``classes`` has not one label per column, or, without ``classes``,
        ``y_true`` holds values that are not column indices ``0..K-1``.
    """
    proba = np.asarray(proba, dtype=np.float64)
    y_true = _one_dimensional(np.asarray(y_true), "y_true")
    if proba.ndim != 2 or len(proba) != len(y_true):
        raise ValueError(f"proba must have shape (n_samples, n_classes) for y_true of {len(y_true)} rows, got "
                         f"shape {proba.shape}.")
    if not is_count(n_bins):
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}.")
    if len(proba) == 0:
        raise ValueError("proba holds no row: the calibration error of no prediction is undefined.")
    if not np.all(np.isfinite(proba)) or proba.min() < -1e-6 or proba.max() > 1 + 1e-6:  # (rounding allowed)
        raise ValueError("proba must hold probabilities, finite and in [0, 1].")
    if classes is not None and len(np.asarray(classes)) != proba.shape[1]:
        raise ValueError(f"classes has {len(np.asarray(classes))} labels for {proba.shape[1]} columns of proba.")
    if classes is None:  # column indices: labels that are not (a helper's user test: labels {1, 2}, or strings,
        # counted every row wrong and gave about the mean confidence, silently)
        try:
            index = y_true.astype(np.float64)
        except (TypeError, ValueError):
            index = None
        if index is None or not np.all((index == np.round(index)) & (index >= 0) & (index < proba.shape[1])):
            raise ValueError(f"without classes, y_true must hold the column indices 0..{proba.shape[1] - 1} of "
                             f"proba; got labels {np.unique(y_true)[:5].tolist()}. Pass classes=est.classes_ (the "
                             "label of each column).")
    pred = np.argmax(proba, axis=1)
    if classes is not None:
        pred = np.asarray(classes)[pred]
    conf = proba.max(axis=1)
    correct = (pred == y_true).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.clip(np.digitize(conf, edges[1:-1], right=True), 0, n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        mask = bins == b
        if mask.any():
            ece += mask.mean() * abs(correct[mask].mean() - conf[mask].mean())
    return float(ece)


def interval_coverage(y_true, lower, upper) -> float:
    """Fraction of targets inside their predictive intervals ``[lower, upper]``.

    Parameters
    ----------
    y_true, lower, upper : array-like of shape (n_samples,) or (n_samples, n_outputs)
        The same shape (a column ``(n_samples, 1)`` is taken as 1-D, as a regressor fitted on a column returns
        its intervals).

    Raises
    ------
    ValueError
        If the shapes differ (they are not broadcast: a 1-D target against column intervals would compare every
        target with every interval), or they hold no value or a NaN (which would count as a miss).
    """
    arrays = [_column_as_1d(np.asarray(a, dtype=np.float64)) for a in (y_true, lower, upper)]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError("y_true, lower and upper must have the same shape, got "
                         f"{', '.join(str(np.shape(a)) for a in (y_true, lower, upper))}.")
    if arrays[0].size == 0:
        raise ValueError("y_true, lower and upper hold no value: the coverage of no interval is undefined.")
    if any(np.isnan(a).any() for a in arrays):
        raise ValueError("y_true, lower and upper must not hold NaN (a NaN would count as a miss).")
    y_true, lower, upper = arrays
    return float(np.mean((y_true >= lower) & (y_true <= upper)))


def _column_as_1d(a: np.ndarray) -> np.ndarray:
    """A column ``(n, 1)`` as ``(n,)``; anything else as it is."""
    return a[:, 0] if a.ndim == 2 and a.shape[1] == 1 else a


def _one_dimensional(a: np.ndarray, name: str) -> np.ndarray:
    """``a`` as 1-D (a column ``(n, 1)`` flattened); ValueError otherwise."""
    a = _column_as_1d(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n_samples,), got shape {a.shape}.")
    return a
