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
from bayesnet.samplers import ChainRandom, make_sampler
from bayesnet.synthetic import (  # noqa: F401  (re-exported for the tests)
    Mixture, four_modes_2d, gaussian_mixture, ring_2d, run_tacthmc, three_modes_1d, total_variation_1d)


@dataclass
class Target:
    name: str
    potential: object  # FunctionPotential over (n_chains, dim) positions
    mean: np.ndarray  # (dim,)
    cov: np.ndarray  # (dim, dim)
    batches: object = None  # callable(step) -> batch, or None for full batch


def correlated_gaussian(n_chains: int, rho: float = 0.9, gradient_noise: float = 0.0, seed: int = 0,
                        per_chain: bool = False) -> Target:
    """2-D Gaussian, unit variances and correlation ``rho``, mean (1, -1).

    ``per_chain=True`` returns one potential per chain (for tacthmc)."""
    mean = torch.tensor([1.0, -1.0], dtype=torch.float64)
    cov = torch.tensor([[1.0, rho], [rho, 1.0]], dtype=torch.float64)
    prec = torch.linalg.inv(cov)

    def fn(params, batch):
        d = params[0] - mean
        return 0.5 * torch.einsum("ci,ij,cj->c" if per_chain else "ci,ij,cj->", d, prec, d)

    start = torch.zeros(n_chains, 2, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed + 1)
    return Target("gaussian2d", FunctionPotential(fn, [start], gradient_noise, gen), mean.numpy(), cov.numpy())


def ill_conditioned_gaussian(n_chains: int, dim: int = 10, condition: float = 100.0, seed: int = 0,
                             per_chain: bool = False, rotate: bool = True) -> Target:
    """``dim``-D Gaussian with a random rotation (``rotate=False``: axis-aligned, the case a diagonal mass
    matrix can undo) and covariance eigenvalues log-spaced in [1, condition].

    Mean drawn from N(0, I). The precision's largest eigenvalue is 1, its smallest 1 / condition.
    The chains start at exact draws from the target, so the test checks that the
    sampler *keeps* the distribution (stationarity) without a burn-in of
    ``condition / (step_size * lambda_max)`` steps along the slowest direction.
    ``per_chain=True`` returns one potential per chain.
    """
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    if not rotate:
        q = np.eye(dim)
    eig = np.logspace(0, np.log10(condition), dim)
    cov = (q * eig) @ q.T
    mean = rng.normal(size=dim)
    prec = torch.tensor(np.linalg.inv(cov))
    mu = torch.tensor(mean)

    def fn(params, batch):
        d = params[0] - mu
        return 0.5 * torch.einsum("ci,ij,cj->c" if per_chain else "ci,ij,cj->", d, prec, d)

    start = torch.tensor(rng.multivariate_normal(mean, cov, size=n_chains))
    name = f"gaussian{dim}d-cond{condition:g}" + ("" if rotate else "-axes")
    return Target(name, FunctionPotential(fn, [start]), mean, cov)


def bayesian_linear_regression(n_chains: int, n: int = 200, batch_size: int | None = None, seed: int = 0,
                               per_chain: bool = False) -> Target:
    """Conjugate normal linear regression of Karagiannis's SGLD notes Sec. 4, in w = (beta, log sigma^2).

    Prior beta | sigma^2 ~ N(0, sigma^2 V), V = 100 I; sigma^2 ~ IG(phi=1, psi=1).
    The exact posterior is normal-inverse-gamma: beta is Student-t with mean
    mu_n and covariance b_n / (a_n - 1) V_n; log sigma^2 has mean
    log b_n - digamma(a_n) and variance trigamma(a_n). The beta-gamma
    covariance is zero by symmetry. ``per_chain=True`` returns one potential per chain (for tacthmc).
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
        u = -((n / m) * log_lik + log_prior_beta + log_prior_gamma)
        return u if per_chain else u.sum()

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
        state, info = sampler.step(state, pot, batch)
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


def assert_chain_alone_matches(name, settings, start, together, k, members, seed, steps):
    """Chain ``k`` run alone (its own stream: ``ChainRandom(seed, 1, first_chain=k)``) from its rows of ``start``
    on the correlated Gaussian retraces, bit for bit, its rows of ``together`` ``(S, steps, D)``: the run of all
    chains side by side."""
    target = correlated_gaussian(members, per_chain=True)
    rows = slice(k * members, (k + 1) * members)
    with torch.no_grad():
        target.potential.parameters[0].copy_(start[rows])
    alone = make_sampler(name, **settings)
    state = alone.init(target.potential.parameters, ChainRandom(seed, 1, first_chain=k), n_chains=1)
    for step in range(steps):
        state, _ = alone.step(state, target.potential, None)
        assert torch.equal(target.potential.parameters[0], together[rows, step]), (name, k, step)


def gaussian_chains(sampler, n_chains, seed=0, start=None):
    """``n_chains`` chains of ``sampler`` on independent correlated 2-D Gaussians, one per packed member, started
    at ``start`` (``(S, 2)``) when given: ``(target, state)``."""
    target = correlated_gaussian(n_chains * sampler.members_per_chain(), per_chain=True)
    if start is not None:
        with torch.no_grad():
            target.potential.parameters[0].copy_(start)
    return target, sampler.init(target.potential.parameters, ChainRandom(seed, n_chains), n_chains=n_chains)


# --------------------------------------------------------------------------- #
# a line as a ChainPosterior: the likelihood-tempered forms (pt-langevin, tacthmc)
# --------------------------------------------------------------------------- #
class KnownNoise(torch.nn.Module):
    """Gaussian rows of known sd, with the batched forms a :class:`ChainPosterior` takes (no parameters)."""

    def __init__(self, sd):
        super().__init__()
        self.sd = sd

    def forward(self, out, y):
        return (-0.5 * ((out.squeeze(-1) - y) / self.sd) ** 2).sum()

    def log_prior(self):
        return torch.zeros(())

    def log_likelihood_chains(self, mean, y, parameters):
        return (-0.5 * ((mean.squeeze(-1) - y) / self.sd) ** 2).sum(1)

    def log_prior_chains(self, parameters):
        return 0.0


def linear_posterior(prior, n_rows, members, bias=True, seed=0):
    """A line through ``n_rows`` points (noise sd 1) as a :class:`ChainPosterior` of ``members`` members started at
    random; returns it, the full batch and the design matrix (with a column of ones for the bias)."""
    from bayesnet.posterior import ChainPosterior

    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_rows, 1, generator=g, dtype=torch.float64)
    y = 0.8 * X[:, 0] - 0.3 + torch.randn(n_rows, generator=g, dtype=torch.float64)
    start = [[torch.randn(1, 1, generator=g, dtype=torch.float64)]
             + ([torch.randn(1, generator=g, dtype=torch.float64)] if bias else []) for _ in range(members)]
    post = ChainPosterior(torch.nn.Linear(1, 1, bias=bias).double(), KnownNoise(1.0), prior, n_rows, start)
    A = torch.cat([X, torch.ones(n_rows, 1, dtype=torch.float64)], 1) if bias else X
    return post, (X, y), A


def t2_line_moments(X, y, beta):
    """Mean and variance of ``p(y|w)^beta (1 + w^2/2)^(-3/2)`` (unit noise sd): the line through the origin under
    the hierarchical prior ``w | tau ~ N(0, 1/tau)``, ``tau ~ Gamma(1, 1)``, tau integrated out; by quadrature."""
    w = np.linspace(-8.0, 8.0, 160001)
    x, t = X[:, 0].numpy(), y.numpy()
    log_p = -0.5 * beta * ((t[None, :] - w[:, None] * x[None, :]) ** 2).sum(1) - 1.5 * np.log1p(w * w / 2.0)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    mean = float((w * p).sum())
    return mean, float(((w - mean) ** 2 * p).sum())
