"""Analytic targets and a shared driver for the statistical proof suite.

Every target is vectorised over a leading chain axis: positions are shaped
(n_chains, ...) and the potential is the sum of the chains' potentials, so
element-wise kernels (sgld, sghmc) advance ``n_chains`` independent chains in
one call. ``run_chains`` returns the draws as (chain, draw, dim) and the
multi-chain effective sample size of every checked statistic, from which the
tests derive their tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import digamma, polygamma

from bayesnet.diagnostics import effective_sample_size
from bayesnet.posterior import FunctionPotential
from bayesnet.samplers import make_sampler


@dataclass
class Target:
    name: str
    potential: object  # FunctionPotential over (n_chains, dim) positions
    mean: np.ndarray  # (dim,)
    cov: np.ndarray  # (dim, dim)
    batches: object = None  # callable(step) -> batch, or None for full batch


def correlated_gaussian(n_chains: int, rho: float = 0.9, gradient_noise: float = 0.0, seed: int = 0) -> Target:
    """2-D Gaussian, unit variances and correlation ``rho``, mean (1, -1)."""
    mean = torch.tensor([1.0, -1.0], dtype=torch.float64)
    cov = torch.tensor([[1.0, rho], [rho, 1.0]], dtype=torch.float64)
    prec = torch.linalg.inv(cov)

    def fn(params, batch):
        d = params[0] - mean
        return 0.5 * torch.einsum("ci,ij,cj->", d, prec, d)

    start = torch.zeros(n_chains, 2, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed + 1)
    return Target("gaussian2d", FunctionPotential(fn, [start], gradient_noise, gen), mean.numpy(), cov.numpy())


def ill_conditioned_gaussian(n_chains: int, dim: int = 10, condition: float = 100.0, seed: int = 0) -> Target:
    """``dim``-D Gaussian with a random rotation and covariance eigenvalues log-spaced in [1, condition].

    Mean drawn from N(0, I). The precision's largest eigenvalue is 1, its smallest 1 / condition.
    The chains start at exact draws from the target, so the test checks that the
    sampler *keeps* the distribution (stationarity) without a burn-in of
    ``condition / (step_size * lambda_max)`` steps along the slowest direction.
    """
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    eig = np.logspace(0, np.log10(condition), dim)
    cov = (q * eig) @ q.T
    mean = rng.normal(size=dim)
    prec = torch.tensor(np.linalg.inv(cov))
    mu = torch.tensor(mean)

    def fn(params, batch):
        d = params[0] - mu
        return 0.5 * torch.einsum("ci,ij,cj->", d, prec, d)

    start = torch.tensor(rng.multivariate_normal(mean, cov, size=n_chains))
    return Target(f"gaussian{dim}d-cond{condition:g}", FunctionPotential(fn, [start]), mean, cov)


def bayesian_linear_regression(n_chains: int, n: int = 200, batch_size: int | None = None, seed: int = 0) -> Target:
    """Conjugate normal linear regression of paper 001 Sec. 4, in w = (beta, log sigma^2).

    Prior beta | sigma^2 ~ N(0, sigma^2 V), V = 100 I; sigma^2 ~ IG(phi=1, psi=1).
    The exact posterior is normal-inverse-gamma: beta is Student-t with mean
    mu_n and covariance b_n / (a_n - 1) V_n; log sigma^2 has mean
    log b_n - digamma(a_n) and variance trigamma(a_n). The beta-gamma
    covariance is zero by symmetry.
    """
    rng = np.random.default_rng(seed)
    d = 3
    X = rng.normal(size=(n, d))
    beta_true = np.array([1.0, -2.0, 0.5])
    y = X @ beta_true + 0.5 * rng.normal(size=n)
    V_inv = np.eye(d) / 100.0
    phi, psi = 1.0, 1.0
    Vn = np.linalg.inv(V_inv + X.T @ X)
    mun = Vn @ X.T @ y
    an = phi + n / 2
    bn = psi + 0.5 * (y @ y - mun @ np.linalg.solve(Vn, mun))
    mean = np.concatenate([mun, [np.log(bn) - digamma(an)]])
    cov = np.zeros((d + 1, d + 1))
    cov[:d, :d] = bn / (an - 1) * Vn
    cov[d, d] = polygamma(1, an)

    Xt, yt = torch.tensor(X), torch.tensor(y)

    def fn(params, batch):
        beta, gamma = params  # (C, d), (C,)
        idx = slice(None) if batch is None else batch
        resid = yt[idx][None, :] - beta @ Xt[idx].T  # (C, m)
        m = resid.shape[1]
        log_lik = -0.5 * (m * gamma + (resid**2).sum(1) * torch.exp(-gamma))
        log_prior_beta = -0.5 * (d * gamma + (beta**2).sum(1) / 100.0 * torch.exp(-gamma))
        log_prior_gamma = -phi * gamma - psi * torch.exp(-gamma)
        return -((n / m) * log_lik + log_prior_beta + log_prior_gamma).sum()

    start = [torch.zeros(n_chains, d, dtype=torch.float64), torch.zeros(n_chains, dtype=torch.float64)]
    batches = None
    if batch_size is not None:
        gen = torch.Generator().manual_seed(seed + 2)
        batches = lambda step: torch.randperm(n, generator=gen)[:batch_size]  # noqa: E731
    return Target("linreg", FunctionPotential(fn, start), mean, cov, batches)


def run_chains(sampler_name: str, target: Target, n_steps: int, burn_in: int, thinning: int = 10,
               seed: int = 0, **hyper):
    """Run the vectorised chains; return draws (chain, draw, dim)."""
    sampler = make_sampler(sampler_name, **hyper)
    gen = torch.Generator().manual_seed(seed)
    pot = target.potential
    state = sampler.init(pot.parameters, gen)
    kept = []
    for k in range(1, n_steps + 1):
        batch = target.batches(k) if target.batches is not None else None
        state, info = sampler.step(state, pot, batch, gen)
        if k > burn_in and k % thinning == 0:
            kept.append(torch.cat([p.detach().reshape(p.shape[0], -1) for p in state.position], dim=1).numpy().copy())
    return np.stack(kept, axis=1)


def moment_errors(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray):
    """Errors of the sample mean and covariance, in posterior standard deviations, and their ESS-based tolerances.

    Returns
    -------
    dict with
      ``mean_err``: max_i |m_i - mu_i| / sd_i,
      ``mean_tol``: 4 / sqrt(min ESS of theta_i)  (4 Monte Carlo standard errors),
      ``cov_err``: max_ij |C_ij - S_ij| / (sd_i sd_j),
      ``cov_tol``: max_ij 4 sqrt((1 + rho_ij^2) / ESS_ij), ESS_ij that of (theta_i - mu_i)(theta_j - mu_j),
      ``ess``: min ESS over the checked statistics.
    """
    c, n, d = draws.shape
    sd = np.sqrt(np.diag(cov))
    flat = draws.reshape(-1, d)
    m = flat.mean(0)
    centred = draws - mean
    S = np.einsum("cni,cnj->ij", centred, centred) / (c * n)
    ess_mean = np.array([effective_sample_size(draws[:, :, i]) for i in range(d)])
    mean_err = np.max(np.abs(m - mean) / sd)
    mean_tol = 4.0 / np.sqrt(ess_mean.min())
    cov_err, cov_tol, ess_min = 0.0, 0.0, ess_mean.min()
    for i in range(d):
        for j in range(i, d):
            prod = centred[:, :, i] * centred[:, :, j]
            ess_ij = effective_sample_size(prod)
            ess_min = min(ess_min, ess_ij)
            rho = cov[i, j] / (sd[i] * sd[j])
            cov_err = max(cov_err, abs(S[i, j] - cov[i, j]) / (sd[i] * sd[j]))
            cov_tol = max(cov_tol, 4.0 * np.sqrt((1 + rho**2) / ess_ij))
    return dict(mean_err=mean_err, mean_tol=mean_tol, cov_err=cov_err, cov_tol=cov_tol, ess=ess_min)


# --------------------------------------------------------------------------- #
# Multimodal targets of paper 000 Sec. 5.1 (TACT-HMC), one potential value per chain
# --------------------------------------------------------------------------- #
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
    """Paper 000 Fig. 1 setting: three 1-D modes at -4, 0, 4 (sd 0.5, weights .3/.4/.3), chains start at 0.

    The barriers are 8 nats high at unit temperature (0.9 at temperature 9)."""
    return gaussian_mixture("three-modes-1d", [[-4.0], [0.0], [4.0]], [0.5] * 3, [0.3, 0.4, 0.3], n_chains,
                            [0.0], gradient_noise)


def four_modes_2d(n_chains: int, gradient_noise: float = 5.0) -> Mixture:
    """Paper 000 Fig. 2 (first kind): modes at (+-2.5, +-2.5), sd 0.5, unequal weights; start in the lightest.

    Neighbouring modes are 12.5 nats apart at unit temperature (1.4 at temperature 9)."""
    means = [[-2.5, -2.5], [2.5, -2.5], [-2.5, 2.5], [2.5, 2.5]]
    return gaussian_mixture("four-modes-2d", means, [0.5] * 4, [0.1, 0.2, 0.3, 0.4], n_chains, means[0],
                            gradient_noise)


def ring_2d(n_chains: int, gradient_noise: float = 5.0) -> Mixture:
    """Paper 000 Fig. 2 (second kind): eight equal modes on a circle of radius 4, sd 0.4; start in one."""
    angles = np.arange(8) * np.pi / 4
    means = np.stack([4 * np.cos(angles), 4 * np.sin(angles)], 1)
    return gaussian_mixture("ring-2d", means, [0.4] * 8, [1 / 8] * 8, n_chains, means[0], gradient_noise)


def run_tacthmc(target, n_steps: int, burn_in: int, seed: int = 0, **hyper):
    """Run packed TACT-HMC chains; return (samples (chain, draw, d) truncated to the shortest chain,
    all samples pooled (n, d), the sampler, its final state, and per-step mean thermostats)."""
    sampler = make_sampler("tacthmc", **hyper)
    gen = torch.Generator().manual_seed(seed)
    pot = target.potential
    n_chains = pot.parameters[0].shape[0]
    state = sampler.init(pot.parameters, gen, n_chains=n_chains)
    per_chain = [[] for _ in range(n_chains)]
    z_theta, z_xi, on_plateau = [], [], []
    for k in range(1, n_steps + 1):
        state, info = sampler.step(state, pot, None, gen)
        if k <= burn_in:
            continue
        plateau = info.extra["on_plateau"].bool()
        z_theta.append(float(info.extra["thermostat"][plateau].mean()) if plateau.any() else np.nan)
        z_xi.append(float(info.extra["tempering_thermostat"].mean()))
        if bool(info.is_draw.any()):
            x = pot.parameters[0].detach().numpy()
            for c in np.flatnonzero(info.is_draw.numpy()):
                per_chain[c].append(x[c].copy())
    n_min = min(len(c) for c in per_chain)
    draws = np.stack([np.stack(c[:n_min]) for c in per_chain]) if n_min else np.empty((n_chains, 0, 1))
    pooled = np.concatenate([np.stack(c) for c in per_chain if c])
    return dict(draws=draws, pooled=pooled, sampler=sampler, state=state,
                z_theta=np.nanmean(z_theta), z_xi=np.mean(z_xi))


def total_variation_1d(x: np.ndarray, target: Mixture, lo: float = -7.0, hi: float = 7.0, bins: int = 140) -> float:
    """Total variation distance between the histogram of ``x`` (n,) and the mixture on ``bins`` equal bins."""
    from scipy.stats import norm

    edges = np.linspace(lo, hi, bins + 1)
    hist = np.histogram(x, edges)[0] / len(x)
    cdf = (target.weights * norm.cdf((edges[:, None] - target.means[:, 0]) / target.sds)).sum(1)
    return 0.5 * np.abs(hist - np.diff(cdf)).sum() + 0.5 * (cdf[0] + 1 - cdf[-1])
