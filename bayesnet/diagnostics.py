"""MCMC diagnostics over (chain, draw) arrays: autocorrelation, ESS, IAT, split R-hat.

Conventions follow Vehtari, Gelman, Simpson, Carpenter and Buerkner (2021),
"Rank-normalization, folding, and localization: an improved R-hat", with
Geyer's initial monotone sequence to truncate the autocorrelation sum; the
ESS formula is the one Luo et al. 2018 Sec. 5.1 uses, ``n / (1 + 2 sum_k rho_k)``,
extended to several chains.
"""

from __future__ import annotations

import numpy as np

__all__ = ["autocorrelation", "effective_sample_size", "integrated_autocorrelation_time", "split_rhat",
           "rank_normalize", "bulk_effective_sample_size", "tail_effective_sample_size", "rank_normalized_split_rhat",
           "bulk_effective_sample_size_many", "rank_normalized_split_rhat_many",
           "chain_summaries"]

#: the fewest draws per chain that the bulk and tail ESS (and so the convergence checks) take: they split each chain
#: in two, and each half's rank-normalised series needs a few draws
MIN_DRAWS = 8


def _as_chains(draws: np.ndarray) -> np.ndarray:
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"expected draws shaped (draw,) or (chain, draw), got {x.shape}.")
    if x.shape[1] < 4:
        raise ValueError("need at least 4 draws per chain.")
    return x


def autocorrelation(x: np.ndarray) -> np.ndarray:
    """Autocorrelation of a 1-D series at lags 0..n-1 (FFT, biased estimator).

    Returns
    -------
    ndarray, shape (n,)
        ``rho[0] == 1`` (all zeros for a constant series; all NaN for a series with a non-finite value: before,
        zeros, so a chain that went non-finite looked perfectly mixed).
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    finite = np.isfinite(x).all(axis=-1, keepdims=True)
    x = np.where(finite, x, 0.0)  # (NaN below: no FFT of infinities, no warnings)
    xc = x - x.mean(axis=-1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(xc, n=size, axis=-1)
    acov = np.fft.irfft(f * np.conj(f), n=size, axis=-1)[..., :n] / n
    var = acov[..., :1]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(var > 0, acov / np.where(var > 0, var, 1.0), 0.0)
    return np.where(finite, rho, np.nan)


def effective_sample_size(draws: np.ndarray) -> float:
    """Effective sample size of a scalar quantity.

    Parameters
    ----------
    draws : ndarray, shape (n_draws,) or (n_chains, n_draws)

    Returns
    -------
    float
        ``n_chains * n_draws / tau`` with ``tau = 1 + 2 sum rho_k``, the sum of
        the multi-chain autocorrelations truncated by Geyer's initial monotone
        positive-pair sequence. A constant series returns ``n_chains * n_draws``.
    """
    return float(_ess_many(_as_chains(draws)[..., None])[0])


def _ess_many(x: np.ndarray) -> np.ndarray:
    """:func:`effective_sample_size` of ``k`` quantities at once: ``x`` shaped (n_chains, n_draws, k) -> (k,)."""
    m, n, k = x.shape
    w = x.var(axis=1, ddof=1).mean(axis=0)  # (k,)
    b_over_n = x.mean(axis=1).var(axis=0, ddof=1) if m > 1 else np.zeros(k)
    var_plus = (n - 1) / n * w + b_over_n
    series = np.moveaxis(x, 2, 1)  # (m, k, n)
    acov = autocorrelation(series) * series.var(axis=2, ddof=0)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = 1.0 - (w[:, None] - acov.mean(axis=0)) / var_plus[:, None]  # (k, n)
    rho[:, 0] = 1.0
    # Geyer: sum pairs Gamma_k = rho_2k + rho_2k+1 while positive, made monotone.
    n_pairs = n // 2
    gamma = rho[:, : 2 * n_pairs].reshape(k, n_pairs, 2).sum(axis=2)
    nonpositive = gamma <= 0
    first = np.where(nonpositive.any(axis=1), nonpositive.argmax(axis=1), n_pairs)
    kept = np.arange(n_pairs)[None, :] < first[:, None]
    monotone = np.minimum.accumulate(np.where(kept, gamma, np.inf), axis=1)
    tau = -1.0 + 2.0 * np.where(kept, monotone, 0.0).sum(axis=1)
    tau = np.maximum(tau, 1.0 / np.log10(m * n))  # Stan's cap: ESS <= S log10(S) for antithetic chains
    # a constant quantity (every chain at one value) has all its draws; chains each constant at different values
    # (stuck) keep the formula's limit, about n_chains / 2 (before: all draws, the best score for the worst case)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((w == 0) & (b_over_n == 0), float(m * n), m * n / tau)


def integrated_autocorrelation_time(draws: np.ndarray) -> float:
    """Integrated autocorrelation time ``tau = total draws / ESS`` (in steps between draws)."""
    x = _as_chains(draws)
    return float(x.size / effective_sample_size(x))


def split_rhat(draws: np.ndarray) -> float:
    """Split potential scale reduction factor R-hat of a scalar quantity.

    Parameters
    ----------
    draws : ndarray, shape (n_draws,) or (n_chains, n_draws)
        Each chain is split into halves, so one chain also gives a value.

    Returns
    -------
    float
        Close to 1 when chains (and halves) agree; > 1.01 suggests
        non-convergence.
    """
    return float(_rhat_many(_split(_as_chains(draws)[..., None]))[0])


def _rhat_many(x: np.ndarray) -> np.ndarray:
    """R-hat of chains ``x`` (n_chains, n_draws, k) as given (already split), per quantity: (k,)."""
    n = x.shape[1]
    w = x.var(axis=1, ddof=1).mean(axis=0)
    b = n * x.mean(axis=1).var(axis=0, ddof=1)
    var_plus = (n - 1) / n * w + b / n
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.sqrt(var_plus / w)
    return np.where(w == 0, np.where(b == 0, 1.0, np.inf), r)


def _split(x: np.ndarray) -> np.ndarray:
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, -half:]], axis=0)


def rank_normalize(draws: np.ndarray) -> np.ndarray:
    """Normal scores of the pooled ranks: ``Phi^-1((r - 3/8) / (S + 1/4))``, ties averaged (Vehtari et al. eq. 14).

    Parameters
    ----------
    draws : ndarray, shape (n_chains, n_draws)

    Returns
    -------
    ndarray, same shape
    """
    x = np.asarray(draws, dtype=np.float64)
    return _rank_normalize_many(x.reshape(1, -1, 1)).reshape(x.shape)


def _rank_normalize_many(x: np.ndarray) -> np.ndarray:
    """:func:`rank_normalize` of ``k`` quantities at once, each pooled over its chains and draws: (m, n, k)."""
    from scipy.special import ndtri
    from scipy.stats import rankdata

    m, n, k = x.shape
    ranks = rankdata(x.reshape(m * n, k), method="average", axis=0).reshape(x.shape)
    return ndtri((ranks - 0.375) / (m * n + 0.25))


def _ess_chains(draws: np.ndarray) -> np.ndarray:
    """``draws`` as chains (n_chains, n_draws), at least ``MIN_DRAWS`` draws each (bulk and tail ESS split them)."""
    x = _as_chains(draws)
    if x.shape[1] < MIN_DRAWS:
        raise ValueError(f"need at least {MIN_DRAWS} draws per chain.")
    return x


def bulk_effective_sample_size(draws: np.ndarray) -> float:
    """Bulk effective sample size: the ESS of the rank-normalised split chains (Vehtari et al. 2021, Sec. 4.3).

    Parameters
    ----------
    draws : ndarray, shape (n_draws,) or (n_chains, n_draws), at least 8 draws per chain

    Returns
    -------
    float
        Robust to heavy tails and, through the split chains, sensitive to
        chains that have not mixed. A constant series returns the number of draws.
    """
    return float(bulk_effective_sample_size_many(_ess_chains(draws)[..., None])[0])


def bulk_effective_sample_size_many(draws: np.ndarray) -> np.ndarray:
    """:func:`bulk_effective_sample_size` of ``k`` quantities at once (the convergence checks' rows).

    Parameters
    ----------
    draws : ndarray, shape (n_chains, n_draws, k), at least 8 draws per chain

    Returns
    -------
    ndarray, shape (k,)
    """
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim != 3 or x.shape[1] < MIN_DRAWS:
        raise ValueError(f"expected draws shaped (chain, draw, k) with at least {MIN_DRAWS} draws, got {x.shape}.")
    constant = np.ptp(x, axis=(0, 1)) == 0
    return np.where(constant, float(x.shape[0] * x.shape[1]), _ess_many(_rank_normalize_many(_split(x))))


def tail_effective_sample_size(draws: np.ndarray) -> float:
    """Tail effective sample size: the smaller ESS of the indicators of the 5 % and 95 % quantiles, on split
    chains (Vehtari et al. 2021, Sec. 4.3), which tells how well the interval ends are estimated.

    Parameters
    ----------
    draws : ndarray, shape (n_draws,) or (n_chains, n_draws), at least 8 draws per chain

    Returns
    -------
    float
    """
    x = _ess_chains(draws)
    if not np.all(np.isfinite(x)):  # (as the other estimates: a NaN quantile would make the indicators constant)
        return float("nan")
    if np.ptp(x) == 0:
        return float(x.size)
    split = _split(x)
    out = []
    for q in (0.05, 0.95):
        indicator = (split <= np.quantile(x, q)).astype(np.float64)
        out.append(float(indicator.size) if np.ptp(indicator) == 0 else effective_sample_size(indicator))
    return float(min(out))


def rank_normalized_split_rhat(draws: np.ndarray) -> float:
    """Rank-normalised split R-hat: the larger of the bulk and the folded (tail) value (Vehtari et al. 2021, Sec. 4.2).

    Parameters
    ----------
    draws : ndarray, shape (n_draws,) or (n_chains, n_draws), at least 4 draws per chain

    Returns
    -------
    float
        Near 1 when the chains (and their halves) agree in location and scale;
        Vehtari et al. recommend requiring < 1.01.
    """
    return float(rank_normalized_split_rhat_many(_as_chains(draws)[..., None])[0])


def rank_normalized_split_rhat_many(draws: np.ndarray) -> np.ndarray:
    """:func:`rank_normalized_split_rhat` of ``k`` quantities at once (the convergence checks' rows).

    Parameters
    ----------
    draws : ndarray, shape (n_chains, n_draws, k), at least 4 draws per chain

    Returns
    -------
    ndarray, shape (k,)
    """
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim != 3 or x.shape[1] < 4:
        raise ValueError(f"expected draws shaped (chain, draw, k) with at least 4 draws, got {x.shape}.")
    x = _split(x)  # split first (an odd chain's middle draw is left out), then rank
    bulk = _rhat_many(_rank_normalize_many(x))
    folded = np.abs(x - np.median(x, axis=(0, 1)))
    tail = np.where(np.ptp(folded, axis=(0, 1)) > 0, _rhat_many(_rank_normalize_many(folded)), 1.0)
    return np.where(np.ptp(x, axis=(0, 1)) == 0, 1.0, _larger(bulk, tail))


def _larger(bulk: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """``max(bulk, tail)`` elementwise as Python's ``max`` takes it: ``tail`` only where it is larger (a NaN
    ``bulk`` stays NaN, a NaN ``tail`` is ignored)."""
    return np.where(tail > bulk, tail, bulk)


def chain_summaries(draws: np.ndarray, potentials: np.ndarray | None = None, n_projections: int = 3,
                    seed: int = 0) -> dict[str, dict[str, float]]:
    """Convergence summaries of multi-chain parameter draws, as the estimators report them.

    Scalar summaries are the potential (when given) and ``n_projections``
    fixed random unit directions of the parameters (a seeded Gaussian vector,
    the same for every fit of the same size; TATi projects on covariance
    eigenvectors, Heber et al. 2020 (TATi) Sec. 5.3.3, which need many more draws than
    parameters).

    Parameters
    ----------
    draws : ndarray, shape (n_chains, n_draws, D)
    potentials : ndarray, shape (n_chains, n_draws), optional
    n_projections : int, default=3
    seed : int, default=0

    Returns
    -------
    dict
        ``{name: {"rhat": float, "ess_bulk": float}}`` for ``"potential"`` and
        ``"projection_0"``, ... An empty dict with fewer than 8 draws per chain.
    """
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 3 or draws.shape[1] < MIN_DRAWS:
        return {}
    series = {}
    if potentials is not None:
        series["potential"] = np.asarray(potentials, dtype=np.float64)
    directions = np.random.default_rng(seed).normal(size=(n_projections, draws.shape[2]))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    for k, proj in enumerate(np.einsum("cnd,kd->kcn", draws, directions)):
        series[f"projection_{k}"] = proj
    return {name: {"rhat": rank_normalized_split_rhat(x), "ess_bulk": bulk_effective_sample_size(x)}
            for name, x in series.items() if np.all(np.isfinite(x))}
