"""Calibration and interval metrics for probabilistic predictions."""

from __future__ import annotations

import numpy as np

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
    """
    proba = np.asarray(proba, dtype=np.float64)
    y_true = np.asarray(y_true)
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
    """Fraction of targets inside their predictive intervals ``[lower, upper]``."""
    y_true, lower, upper = (np.asarray(a, dtype=np.float64) for a in (y_true, lower, upper))
    return float(np.mean((y_true >= lower) & (y_true <= upper)))
