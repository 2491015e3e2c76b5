"""Real datasets that ship with bayesnet (no downloads at run time)."""

from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["load_sunspots", "make_chaotic_series"]


def load_sunspots(return_years: bool = False):
    """Yearly mean sunspot numbers, 1700-2008 (309 values).

    The series of the Langevin-gradient parallel tempering paper's Sunspot
    benchmark (Chandra et al. 2019, Sec. 4), at yearly resolution. Source: NOAA National
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


def _rk4(f, state: np.ndarray, dt: float, n_steps: int, every: int) -> np.ndarray:
    """Integrate ``d state / dt = f(state)`` with classical Runge-Kutta; keep every ``every``-th state."""
    out = np.empty((n_steps // every, state.size))
    for i in range(n_steps):
        k1 = f(state)
        k2 = f(state + 0.5 * dt * k1)
        k3 = f(state + 0.5 * dt * k2)
        k4 = f(state + dt * k3)
        state = state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        if (i + 1) % every == 0:
            out[(i + 1) // every - 1] = state
    return out


def make_chaotic_series(name: str, n_points: int = 1000, discard: int = 500) -> np.ndarray:
    """A chaotic benchmark series generated from its published equations (deterministic, offline).

    The four synthetic series of Chandra et al. 2019's Table 5 (Sec. 4.1), observed in
    their first coordinate:

    ``"henon"``
        Henon map ``x' = 1 - 1.4 x^2 + y``, ``y' = 0.3 x`` from ``(0.1, 0.1)``
        (Henon 1976).
    ``"mackey_glass"``
        ``dx/dt = 0.2 x(t-17) / (1 + x(t-17)^10) - 0.1 x(t)`` with constant
        history 1.2, integrated by Runge-Kutta with step 0.1 (the delayed term
        held over each step), sampled every time unit (Mackey & Glass 1977).
    ``"lorenz"``
        ``(10 (y - x), x (28 - z) - y, x y - 8/3 z)`` from ``(1, 1, 1)``,
        Runge-Kutta with step 0.01, sampled every 0.05 (Lorenz 1963).
    ``"rossler"``
        ``(-y - z, x + 0.2 y, 0.2 + z (x - 5.7))`` from ``(1, 1, 1)``,
        Runge-Kutta with step 0.01, sampled every 0.1 (Rossler 1976).

    Parameters
    ----------
    name : {"henon", "mackey_glass", "lorenz", "rossler"}
    n_points : int, default=1000
        Length of the returned series (Chandra et al. 2019 uses the first 1000 points).
    discard : int, default=500
        Initial samples dropped so that the series starts on the attractor.

    Returns
    -------
    series : ndarray of shape (n_points,)
        Unscaled first coordinate. Chandra et al. 2019 scale it to [0, 1] before
        embedding it (D=4) and forecasting one step ahead.

    Raises
    ------
    ValueError
        For an unknown name or a non-positive length.
    """
    if int(n_points) != n_points or n_points < 1 or int(discard) != discard or discard < 0:
        raise ValueError(f"n_points must be a positive and discard a non-negative integer, got {n_points}, {discard}.")
    n = int(n_points) + int(discard)
    if name == "henon":
        x, y = 0.1, 0.1
        out = np.empty(n)
        for i in range(n):
            x, y = 1.0 - 1.4 * x * x + y, 0.3 * x
            out[i] = x
    elif name == "mackey_glass":
        dt, per_unit, tau = 0.1, 10, 17
        lag = tau * per_unit
        hist = np.full(n * per_unit + lag + 1, 1.2)
        for i in range(lag, len(hist) - 1):
            x, xd = hist[i], hist[i - lag]
            delayed = 0.2 * xd / (1.0 + xd**10)
            f = lambda v: delayed - 0.1 * v  # noqa: E731 -- the delayed term held over the step
            k1 = f(x)
            k2 = f(x + 0.5 * dt * k1)
            k3 = f(x + 0.5 * dt * k2)
            k4 = f(x + dt * k3)
            hist[i + 1] = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out = hist[lag + per_unit:: per_unit][:n]
    elif name == "lorenz":
        out = _rk4(lambda s: np.array([10 * (s[1] - s[0]), s[0] * (28 - s[2]) - s[1], s[0] * s[1] - 8 / 3 * s[2]]),
                   np.ones(3), 0.01, 5 * n, 5)[:, 0]
    elif name == "rossler":
        out = _rk4(lambda s: np.array([-s[1] - s[2], s[0] + 0.2 * s[1], 0.2 + s[2] * (s[0] - 5.7)]),
                   np.ones(3), 0.01, 10 * n, 10)[:, 0]
    else:
        raise ValueError(f"name must be one of 'henon', 'mackey_glass', 'lorenz', 'rossler', got {name!r}.")
    return out[int(discard):].copy()
