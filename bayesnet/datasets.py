"""Real datasets that ship with bayesnet (no downloads at run time)."""

from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["load_sunspots"]


def load_sunspots(return_years: bool = False):
    """Yearly mean sunspot numbers, 1700-2008 (309 values).

    The series of the Langevin-gradient parallel tempering paper's Sunspot
    benchmark (paper 003, Sec. 4), at yearly resolution. Source: NOAA National
    Geophysical Data Center, as distributed with statsmodels; public domain.

    Parameters
    ----------
    return_years : bool, default=False
        Also return the calendar year of each value.

    Returns
    -------
    series : ndarray of shape (309,)
    years : ndarray of shape (309,), only with ``return_years``
    """
    with resources.files("bayesnet.data").joinpath("sunspots.csv").open("r") as fh:
        table = np.loadtxt(fh, delimiter=",", skiprows=1)
    series = table[:, 1].astype(np.float64)
    if return_years:
        return series, table[:, 0].astype(int)
    return series
