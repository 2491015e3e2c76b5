"""Synthetic multimodal targets of Luo et al. 2018 Sec. 5.1 (TACT-HMC's Fig. 1 and Fig. 2).

Isotropic Gaussian mixtures whose potential is vectorised over a leading
chain axis and returns one value per chain, as samplers with per-chain state
(TACT-HMC's tempering variable and thermostats) need. The gradient can be
perturbed by Gaussian noise unknown to the sampler, as in the paper. The
paper does not give its mixtures' parameters; the ones here are chosen so
that the barriers are high at unit temperature (8 to 12.5 nats) and low at
the highest tempered temperature (9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .posterior import FunctionPotential
from .samplers import make_sampler

__all__ = ["Mixture", "gaussian_mixture", "three_modes_1d", "four_modes_2d", "ring_2d", "run_tacthmc",
           "total_variation_1d"]


@dataclass
class Mixture:
    """Isotropic Gaussian mixture; ``potential`` returns one value per chain (shape (C,))."""

    name: str
    potential: object
    means: np.ndarray  # (K, d)
    sds: np.ndarray  # (K,)
    weights: np.ndarray  # (K,)

    def mode_weights(self, x: np.ndarray) -> np.ndarray:
        """Fraction of the points ``x`` (n, d) nearest to each mode."""
        d2 = ((x[:, None, :] - self.means[None]) ** 2).sum(-1)
        return np.bincount(d2.argmin(1), minlength=len(self.weights)) / len(x)


def gaussian_mixture(name: str, means, sds, weights, n_chains: int, start, gradient_noise: float = 0.0,
                     seed: int = 0) -> Mixture:
    """An isotropic Gaussian mixture as a packed-chain potential (Luo et al. 2018 Sec. 5.1's kind of target).

    Parameters
    ----------
    name : str
    means : array-like, shape (K, d)
        Mode centres.
    sds : array-like, shape (K,)
        Standard deviation of each mode (the same in every coordinate).
    weights : array-like, shape (K,)
        Mode weights, summing to 1.
    n_chains : int
        Number of chains packed on the leading axis of the position, shape (n_chains, d).
    start : array-like, shape (d,)
        Where every chain starts.
    gradient_noise : float, default=0.0
        Standard deviation of the N(0, s^2) noise added to each gradient component, unknown to the sampler.
    seed : int, default=0
        Seeds the gradient noise.

    Returns
    -------
    Mixture
        Its ``potential`` returns ``-log density`` per chain, shape (n_chains,), float64.

    Raises
    ------
    ValueError
        If ``means`` is not ``(K, d)``, ``means``, ``sds`` and ``weights`` disagree on K, the weights are not
        non-negative summing to 1, the sds not positive, or ``start`` not of length d.
    """
    if not (len(means) == len(sds) == len(weights)) or not np.isclose(np.sum(weights), 1.0):
        raise ValueError("means, sds and weights need the same number of modes, and the weights must sum to 1.")
    # (before: negative weights or sds gave a NaN potential, 1-D means an IndexError, a short start a torch error)
    if np.ndim(means) != 2:
        raise ValueError(f"means must be (n_modes, n_dimensions), got shape {np.shape(means)}.")
    if np.any(np.asarray(weights, dtype=float) < 0) or not np.all(np.asarray(sds, dtype=float) > 0):
        raise ValueError("the weights must be non-negative and the sds positive.")
    if np.shape(start) != (np.shape(means)[1],):
        raise ValueError(f"start must be one point of {np.shape(means)[1]} coordinates, got shape {np.shape(start)}.")
    means_t = torch.tensor(np.asarray(means, dtype=float))
    sds_t = torch.tensor(np.asarray(sds, dtype=float))
    logw = torch.log(torch.tensor(np.asarray(weights, dtype=float)))
    dim = means_t.shape[1]

    def fn(params, batch):
        x = params[0]  # (C, d)
        z = ((x[:, None, :] - means_t[None]) / sds_t[None, :, None]) ** 2  # (C, K, d)
        lp = logw - 0.5 * z.sum(-1) - dim * torch.log(sds_t)
        return -torch.logsumexp(lp, dim=1)

    x0 = torch.tensor(np.asarray(start, dtype=float)).expand(n_chains, dim).clone()
    pot = FunctionPotential(fn, [x0], gradient_noise, torch.Generator().manual_seed(seed + 1))
    return Mixture(name, pot, np.asarray(means, float), np.asarray(sds, float), np.asarray(weights, float))


def three_modes_1d(n_chains: int, gradient_noise: float = 5.0) -> Mixture:
    """Luo et al. 2018 Fig. 1 setting: three 1-D modes at -4, 0, 4 (sd 0.5, weights .3/.4/.3), chains start at 0.

    The barriers are 8 nats high at unit temperature (0.9 at temperature 9)."""
    return gaussian_mixture("three-modes-1d", [[-4.0], [0.0], [4.0]], [0.5] * 3, [0.3, 0.4, 0.3], n_chains,
                            [0.0], gradient_noise)


def four_modes_2d(n_chains: int, gradient_noise: float = 5.0) -> Mixture:
    """Luo et al. 2018 Fig. 2 (first kind): modes at (+-2.5, +-2.5), sd 0.5, unequal weights; start in the lightest.

    Neighbouring modes are 12.5 nats apart at unit temperature (1.4 at temperature 9)."""
    means = [[-2.5, -2.5], [2.5, -2.5], [-2.5, 2.5], [2.5, 2.5]]
    return gaussian_mixture("four-modes-2d", means, [0.5] * 4, [0.1, 0.2, 0.3, 0.4], n_chains, means[0],
                            gradient_noise)


def ring_2d(n_chains: int, gradient_noise: float = 5.0) -> Mixture:
    """Luo et al. 2018 Fig. 2 (second kind): eight equal modes on a circle of radius 4, sd 0.4; start in one."""
    angles = np.arange(8) * np.pi / 4
    means = np.stack([4 * np.cos(angles), 4 * np.sin(angles)], 1)
    return gaussian_mixture("ring-2d", means, [0.4] * 8, [1 / 8] * 8, n_chains, means[0], gradient_noise)


def total_variation_1d(x: np.ndarray, target: Mixture, lo: float = -7.0, hi: float = 7.0, bins: int = 140) -> float:
    """Total variation distance between the histogram of ``x`` (n,) and the mixture, on ``bins`` equal bins
    over ``[lo, hi]`` plus the two tails beyond."""
    from scipy.stats import norm

    edges = np.concatenate([[-np.inf], np.linspace(lo, hi, bins + 1), [np.inf]])  # plus the two tails
    hist = np.histogram(x, edges)[0] / len(x)
    cdf = (target.weights * norm.cdf((edges[:, None] - target.means[:, 0]) / target.sds)).sum(1)
    return 0.5 * np.abs(hist - np.diff(cdf)).sum()


def run_tacthmc(target, n_steps: int, burn_in: int, seed: int = 0, batches=None, **hyper) -> dict:
    r"""Run packed TACT-HMC chains on ``target`` (every chain starts where the target says).

    Parameters
    ----------
    target : Mixture or any object with a ``potential``
        Whose parameters all have the leading chain axis ``(n_chains, ...)`` and whose potential
        returns one value per chain.
    n_steps, burn_in : int
        Steps in all, and steps before any sample or thermostat value is recorded.
    seed : int, default=0
        Seeds the sampler's generator.
    batches : callable, optional
        ``batches(step)`` gives the mini-batch passed to the potential at each (1-based) step; None passes
        None (full data).
    **hyper
        :class:`~bayesnet.samplers.TACTHMC` hyperparameters.

    Returns
    -------
    dict with
        ``draws`` (chain, draw, d): each chain's samples in order, truncated to the shortest chain (for ESS),
        with ``d`` the parameters flattened per chain; ``per_chain``: list of each chain's samples (n_c, d);
        ``pooled`` (n, d): all samples; ``sampler`` and final ``state``;
        ``z_theta``: mean of :math:`z_\theta` over the chains at unit temperature, averaged over steps;
        ``z_xi``: mean of :math:`z_\xi`; ``thermostat_samples`` and ``tempering_thermostat_samples``: every
        chain's :math:`z_\theta` and :math:`z_\xi` at every 10th step (Fig. 1b III's histograms).
    """
    sampler = make_sampler("tacthmc", **hyper)
    gen = torch.Generator().manual_seed(seed)
    pot = target.potential
    n_chains = pot.parameters[0].shape[0]
    state = sampler.init(pot.parameters, gen, n_chains=n_chains)
    per_chain = [[] for _ in range(n_chains)]
    z_theta, z_xi, thermostats = [], [], []
    for k in range(1, n_steps + 1):
        state, info = sampler.step(state, pot, None if batches is None else batches(k))
        if k <= burn_in:
            continue
        plateau = info.extra["on_plateau"].bool()
        z_theta.append(float(info.extra["thermostat"][plateau].mean()) if plateau.any() else np.nan)
        z_xi.append(float(info.extra["tempering_thermostat"].mean()))
        if k % 10 == 0:
            thermostats.append((state.thermostat.cpu().numpy().copy(),
                                state.tempering_thermostat.cpu().numpy().copy()))
        if bool(info.is_draw.any()):
            x = torch.cat([p.detach().reshape(n_chains, -1) for p in pot.parameters], 1).numpy()
            for c in np.flatnonzero(info.is_draw.numpy()):
                per_chain[c].append(x[c].copy())
    dim = sum(p[0].numel() for p in pot.parameters)
    n_min = min(len(c) for c in per_chain)
    draws = np.stack([np.stack(c[:n_min]) for c in per_chain]) if n_min else np.empty((n_chains, 0, dim))
    kept = [np.stack(c) for c in per_chain if c]
    pooled = np.concatenate(kept) if kept else np.empty((0, dim))
    return dict(draws=draws, pooled=pooled, per_chain=per_chain, sampler=sampler, state=state,
                z_theta=np.nanmean(z_theta), z_xi=np.mean(z_xi),
                thermostat_samples=np.concatenate([t[0] for t in thermostats]) if thermostats else np.empty(0),
                tempering_thermostat_samples=np.concatenate([t[1] for t in thermostats]) if thermostats else
                np.empty(0))
