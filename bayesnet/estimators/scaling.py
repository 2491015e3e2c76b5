"""Standardising inputs and targets without overflow: finite values near float64's limit (about 1e154 and up) have
squares, and values of opposite signs differences, that overflow, which made a scale infinite and a model constant."""

from __future__ import annotations

import numpy as np


def moments(a: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray]:
    """The mean and standard deviation of ``a`` over ``axis`` (an int or a tuple), in float64. Where they overflow,
    the same moments of ``a`` divided by its largest magnitude, scaled back."""
    with np.errstate(over="ignore", invalid="ignore"):
        mean, std = a.mean(axis=axis, dtype=np.float64), a.std(axis=axis, dtype=np.float64)
    if np.isfinite(mean).all() and np.isfinite(std).all():
        return mean, std
    return scaled_moments(a, axis)


def scaled_moments(a: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray]:
    """The moments of :func:`moments`, computed on ``a`` divided by its largest magnitude over ``axis`` and scaled
    back: neither the squares of values near float64's limit overflow, nor those of values near its smallest
    (1e-200) underflow."""
    top = np.abs(a).max(axis=axis, keepdims=True).astype(np.float64)
    top = np.where(top > 0, top, 1.0)
    unit = a / top
    top = np.squeeze(top, axis=axis)
    return unit.mean(axis=axis) * top, unit.std(axis=axis) * top


def standardise(a: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(a - mean) / scale`` in float64 (``mean`` and ``scale`` broadcast against ``a``), one temporary divided in
    place; where the difference overflows (``a`` and ``mean`` of opposite signs near the limit), ``a / scale -
    mean / scale``. Values far outside the scale may still be infinite: the caller checks."""
    with np.errstate(over="ignore", invalid="ignore"):
        z = a - mean
        z /= scale
        if not np.isfinite(z).all():
            z = a / scale - mean / scale
    return z


def indistinguishable_from_constant(mean: np.ndarray, std: np.ndarray, n: int) -> np.ndarray:
    """Where a feature of ``n`` values with these float64 moments is constant up to the moments' rounding: scikit-learn's
    StandardScaler test (the error bound of the two-pass variance, Chan, Golub and LeVeque 1983), ``var <= n eps var
    + (n eps mean)^2``, written in standard deviations so that it does not overflow. Such a feature's computed sd is
    a rounding error (about 5e-16 for a column of 0.1), and dividing by it made any other value on new rows 1e14
    standard deviations away."""
    eps = np.finfo(np.float64).eps
    return std * np.sqrt(max(1.0 - n * eps, 0.0)) <= n * eps * np.abs(mean)
