"""Checks shared by the modules that take counts as plain arguments (outside scikit-learn's parameter
constraints)."""

from __future__ import annotations

from numbers import Integral

import numpy as np

__all__ = ["is_count"]


def is_count(value, low: int = 1) -> bool:
    """Whether ``value`` is a whole number (a Python or NumPy integer, not a bool) of at least ``low``."""
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_)) and bool(value >= low)
