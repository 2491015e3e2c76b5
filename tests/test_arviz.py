"""The results API against ArviZ (issue 12 item 4): our ESS and R-hat cross-checked with ArviZ's, and a fitted
estimator's ``to_arviz()`` through ArviZ's summary and plots. Skipped where ArviZ is not installed.

How the two implementations compare, read from both (``bayesnet/diagnostics.py``; ArviZ's
``arviz/stats/diagnostics.py``, 0.23): the rank normalisation is the same (Blom's ``(r - 3/8) / (S + 1/4)``,
ties averaged, ``ndtri`` / ``norm.ppf``), so are the split, the multi-chain autocorrelation
``rho_t = 1 - (W - mean_c acov_c(t)) / var_plus`` (Vehtari et al. 2021, eq. 10), the tail quantiles (linear
interpolation, R's type 7), and the cap ``tau >= 1 / log10(S)``. Hence

* **R-hat** agrees to rounding (``rel=1e-12``): both split the chains first (an odd chain's middle draw is
  left out), then rank and fold the halves.
* **ESS** sums the same autocorrelations to a different end. Ours is Geyer's (1992) initial monotone sequence:
  the pairs ``rho_2t + rho_2t+1`` up to the first non-positive one, over every lag. ArviZ's (Stan's) stops
  its loop at lag ``n - 4`` and adds the even autocorrelation of the first non-positive pair when it is
  positive (Geyer's "improved estimate", which reduces the variance for antithetic chains). That difference,
  computed here from ArviZ's own autocovariances (:func:`_stan_minus_geyer`), accounts for all of it: given
  it, the two agree to rounding (``rel=1e-10``). Without it they differed by up to 1.2 % on the long AR(1)
  chains below, 7 % on the short two-chain fit (ours higher where the pairs turn non-positive, lower where
  chains disagree and ArviZ stops at its lag bound) and 10 % on antithetic chains short of the cap.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import rankdata
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import NotFittedError
from sklearn.preprocessing import StandardScaler

import sampler_settings
from bayesnet import BayesianMLPClassifier
from bayesnet.diagnostics import (bulk_effective_sample_size, effective_sample_size, rank_normalized_split_rhat,
                                  tail_effective_sample_size)
from bayesnet.samplers import available_samplers

az = pytest.importorskip("arviz")

#: relative agreement once the difference of the truncation rules is accounted for: the same float64
#: arithmetic in another order (FFT lengths 2^k against scipy's next_fast_len), measured <= 3e-15
REL_ESS = 1e-10
#: R-hat: the same formula, measured <= 5e-16
REL_RHAT = 1e-12


# --------------------------------------------------------------------------------------------------------- #
# helpers
def ar1(seed: int, chains: int, draws: int, phi: float, shift=None) -> np.ndarray:
    """``(chains, draws)`` stationary Gaussian AR(1) chains ``x_t = phi x_{t-1} + e_t``, whose integrated
    autocorrelation time is ``(1 + phi) / (1 - phi)``; ``shift`` adds a mean per chain (chains that disagree)."""
    rng = np.random.default_rng(seed)
    x = np.empty((chains, draws))
    x[:, 0] = rng.normal(size=chains) / np.sqrt(1 - phi**2)
    noise = rng.normal(size=(chains, draws))
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x if shift is None else x + np.asarray(shift, dtype=float)[:, None]


def split_chains(x: np.ndarray) -> np.ndarray:
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, -half:]])


def blom_scores(x: np.ndarray) -> np.ndarray:
    """Rank-normalised values of the pooled draws (Vehtari et al. 2021, eq. 14)."""
    return ndtri((rankdata(x).reshape(x.shape) - 0.375) / (x.size + 0.25))


def _stan_minus_geyer(z: np.ndarray) -> float:
    """``tau_ArviZ - tau_ours`` before the cap, for the ``(chain, draw)`` series ``z`` whose ESS both compute.

    From ArviZ's autocovariances: the multi-chain autocorrelations ``rho``, their pairs ``P_t = rho_2t +
    rho_2t+1``, made monotone. Ours sums ``-1 + 2 sum_{t<k} P_t`` with ``k`` the first non-positive pair (or
    all pairs). ArviZ's loop computes pairs only while ``2t - 1 < n - 3``, so it stops at ``K = min(k, t_max)``
    and adds ``max(rho_2K, 0)``: the difference is ``max(rho_2K, 0) - 2 sum_{K<=t<k} P_t``.
    """
    m, n = z.shape
    acov = az.autocov(z, axis=1)
    within = acov[:, 0].mean() * n / (n - 1)
    var_plus = within * (n - 1) / n + (z.mean(axis=1).var(ddof=1) if m > 1 else 0.0)
    rho = 1.0 - (within - acov.mean(axis=0)) / var_plus
    pairs = rho[: 2 * (n // 2)].reshape(-1, 2).sum(axis=1)
    nonpositive = np.flatnonzero(pairs <= 0)
    k = int(nonpositive[0]) if nonpositive.size else len(pairs)
    assert k >= 1, "rho_1 <= -1: ArviZ's loop would not start"
    t_max = int(np.ceil((n - 2) / 2)) - 1  # the last pair ArviZ computes: 2 t - 1 < n - 3
    K = min(k, t_max)
    monotone = np.minimum.accumulate(pairs[:k])
    return max(float(rho[2 * K]), 0.0) - 2.0 * float(monotone[K:k].sum())


def assert_ess_agrees(ours: float, theirs: float, z: np.ndarray) -> None:
    """``theirs`` is ArviZ's ESS of the series ``z`` and ``ours`` ours: equal to rounding once the truncation
    rules' difference is accounted for (both ``tau`` capped at ``1 / log10(S)``)."""
    size = z.size
    cap = 1.0 / np.log10(size)
    tau_ours, tau_theirs = size / ours, size / theirs
    delta = _stan_minus_geyer(z)
    if tau_ours > cap * (1 + 1e-12):  # ours uncapped: ArviZ's tau is ours plus the difference, capped
        assert tau_theirs == pytest.approx(max(tau_ours + delta, cap), rel=REL_ESS)
    else:  # ours at the cap: Geyer's tau is somewhere below it, so ArviZ's lies in [cap, cap + delta]
        assert cap * (1 - REL_ESS) <= tau_theirs <= max(cap + delta, cap) * (1 + REL_ESS)


def indicator(x: np.ndarray, q: float) -> np.ndarray:
    """The split chains of ``x <= quantile_q(x)``: the series the tail ESS is the ESS of."""
    return (split_chains(x) <= np.quantile(x, q)).astype(np.float64)


def check_ess(x: np.ndarray) -> None:
    """Bulk ESS, the ESS of each tail indicator and the tail ESS of ``(chain, draw)`` ``x`` against ArviZ's."""
    z = blom_scores(split_chains(x))
    assert_ess_agrees(bulk_effective_sample_size(x), float(az.ess(x, method="bulk")), z)
    expected_tail = []
    for q in (0.05, 0.95):
        ind = indicator(x, q)
        ours, theirs = effective_sample_size(ind), float(az.ess(x, method="quantile", prob=q))
        assert_ess_agrees(ours, theirs, ind)
        expected_tail.append(theirs)
    assert float(az.ess(x, method="tail")) == pytest.approx(min(expected_tail), rel=REL_ESS)
    ours_tail = tail_effective_sample_size(x)
    assert ours_tail == pytest.approx(min(effective_sample_size(indicator(x, q)) for q in (0.05, 0.95)), rel=1e-12)


# --------------------------------------------------------------------------------------------------------- #
# (a) synthetic AR(1) chains
#: (chains, draws per chain, phi, per-chain shift): white noise, moderate and strong autocorrelation, one
#: chain, many short chains, antithetic chains (tau below 1: ours at the cap), and chains that disagree
AR1_CASES = [(4, 1000, 0.0, None), (4, 1000, 0.5, None), (4, 1000, 0.9, None), (1, 4000, 0.7, None),
             (8, 250, 0.95, None), (2, 2000, -0.7, None), (4, 400, 0.9, [0.0, 0.0, 1.5, -1.5])]


@pytest.mark.parametrize("chains,draws,phi,shift", AR1_CASES)
def test_ess_matches_arviz_on_ar1_chains(chains, draws, phi, shift):
    x = ar1(0, chains, draws, phi, shift)
    check_ess(x)
    if shift is None and 0.0 <= phi <= 0.5:
        # and both are right: the bulk ESS of Gaussian AR(1) chains is near S (1 - phi) / (1 + phi); over 200
        # seeds its relative sd was 4 % (phi = 0) and 8 % (phi = 0.5), so 30 % is more than 3.5 sd
        theory = chains * draws * (1 - phi) / (1 + phi)
        assert bulk_effective_sample_size(x) == pytest.approx(theory, rel=0.3)


@pytest.mark.parametrize("chains,draws,phi,shift", [c for c in AR1_CASES if c[0] > 1])
def test_rank_rhat_matches_arviz_on_ar1_chains(chains, draws, phi, shift):
    x = ar1(1, chains, draws, phi, shift)
    ours, theirs = rank_normalized_split_rhat(x), float(az.rhat(x, method="rank"))
    assert ours == pytest.approx(theirs, rel=REL_RHAT)
    if shift is not None:
        assert ours > 1.1  # both flag chains that disagree


def test_rank_rhat_matches_arviz_with_odd_draws():
    x = ar1(3, 2, 101, 0.99)
    assert rank_normalized_split_rhat(x) == pytest.approx(float(az.rhat(x, method="rank")), rel=REL_RHAT)


# --------------------------------------------------------------------------------------------------------- #
# (b) a fitted estimator
N_DRAWS = 100


@pytest.fixture(scope="module")
def cancer_xy():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X).astype(np.float32), y


@pytest.fixture(scope="module")
def fitted(cancer_xy):
    """Two sghmc chains of the 30-16-2 MLP; short, so not converged: the checks that warn are the point."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ConvergenceWarning of a short run
        return BayesianMLPClassifier((16,), n_chains=2, n_draws=N_DRAWS, burn_in=200, thinning=2,
                                     random_state=0).fit(*cancer_xy)


def test_convergence_and_summary_match_arviz_on_a_fit(fitted):
    from bayesnet.estimators.run import pointwise_log_likelihood

    # the training log-likelihood that convergence_ follows
    total = pointwise_log_likelihood(fitted).sum(axis=2)
    assert total.shape == (2, N_DRAWS)
    reported = fitted.convergence_["log_likelihood"]
    assert reported["rhat"] == pytest.approx(float(az.rhat(total, method="rank")), rel=REL_RHAT)
    assert_ess_agrees(reported["ess_bulk"], float(az.ess(total, method="bulk")), blom_scores(split_chains(total)))
    check_ess(total)
    assert reported["ess_tail"] == pytest.approx(tail_effective_sample_size(total), rel=1e-12)
    # the summary's potential row against ArviZ on the potential of the sample stats
    potential = fitted.get_sample_stats()["potential"].astype(np.float64)
    row = fitted.summary().loc["potential"]
    assert row["r_hat"] == pytest.approx(float(az.rhat(potential, method="rank")), rel=REL_RHAT)
    assert_ess_agrees(row["ess_bulk"], float(az.ess(potential, method="bulk")), blom_scores(split_chains(potential)))
    assert row["ess_tail"] == pytest.approx(tail_effective_sample_size(potential), rel=1e-12)
    check_ess(potential)


def test_every_weights_diagnostics_match_arviz(fitted):
    # in float64, as ours computes: ArviZ folds |x - median| in the data's dtype, and the float32 rounding of
    # the weights' folded values makes ties that move its tail R-hat (by up to 0.007 on 47 of these 530)
    posterior = fitted.to_arviz().posterior.astype(np.float64)
    rhat = az.rhat(posterior, method="rank")
    bulk = az.ess(posterior, method="bulk")
    checked = 0
    for name, draws in fitted.get_draws().items():
        key = name.replace(".", "_")
        flat = draws.reshape(draws.shape[0], draws.shape[1], -1)
        theirs_rhat = rhat[key].values.reshape(-1)
        theirs_bulk = bulk[key].values.reshape(-1)
        for j in range(flat.shape[2]):
            x = flat[:, :, j]
            assert rank_normalized_split_rhat(x) == pytest.approx(theirs_rhat[j], rel=REL_RHAT), (name, j)
            assert_ess_agrees(bulk_effective_sample_size(x), theirs_bulk[j], blom_scores(split_chains(x)))
            checked += 1
    assert checked == sum(p.numel() for p in fitted.module_.parameters()) == 30 * 16 + 16 + 16 * 2 + 2


# --------------------------------------------------------------------------------------------------------- #
# to_arviz
@pytest.mark.filterwarnings("ignore:Passing a dict or None as alias_mapping")  # ArviZ 0.23 on matplotlib 3.11
def test_to_arviz_works_with_arvizs_summary_and_plots(fitted):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idata = fitted.to_arviz()
    draws = fitted.get_draws()
    assert set(idata.groups()) >= {"posterior", "sample_stats"}
    post = idata.posterior
    assert dict(post.sizes)["chain"] == 2 and dict(post.sizes)["draw"] == N_DRAWS
    shapes = dict(fitted.module_.named_parameters())
    for name, values in draws.items():
        var = post[name.replace(".", "_")]
        assert var.dims[:2] == ("chain", "draw")
        assert var.shape == (2, N_DRAWS) + tuple(shapes[name].shape)
        np.testing.assert_array_equal(var.values, values)
    table = az.summary(idata, round_to="none")
    assert len(table) == sum(v[0, 0].size for v in draws.values())
    assert {"mean", "sd", "ess_bulk", "ess_tail", "r_hat"} <= set(table.columns)
    means = np.concatenate([v.reshape(2 * N_DRAWS, -1).astype(np.float64).mean(axis=0) for v in draws.values()])
    np.testing.assert_allclose(table["mean"].to_numpy(), means, rtol=1e-5, atol=1e-6)
    var_names = ["head_layers_1_bias", "lp"]  # two scalar weights and the log density (a sample stat)
    try:
        axes = az.plot_trace(idata, var_names=var_names[:1])
        assert axes.shape == (1, 2) and len(axes[0, 1].get_lines()) >= 2 * 2  # 2 weights x 2 chains
        axes = np.atleast_1d(az.plot_rank(idata, var_names=var_names[:1]))
        assert axes.size == 2
        axes = np.atleast_1d(az.plot_ess(idata, var_names=var_names[:1], kind="evolution"))
        assert axes.size == 2 and all(ax.get_lines() for ax in axes)
        axes = az.plot_trace(idata.sample_stats, var_names=var_names[1:])
        assert axes.shape == (1, 2)
    finally:
        plt.close("all")


@pytest.mark.parametrize("name", available_samplers())
def test_to_arviz_sample_stats_hold_what_each_sampler_reports(name, cancer_xy):
    """``sample_stats`` holds the per-draw statistics the issue names, where the sampler has them: ``lp``
    (minus the potential) always; ``energy`` (potential + kinetic energy) and the kinetic temperature for
    samplers with momenta; ``acceptance_rate`` and a boolean ``diverging`` for those with a Metropolis test;
    the replica ``temperature`` for pt-langevin. All shaped like the posterior's ``(chain, draw)``."""
    X, y = cancer_xy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs = {"burn_in": 30, **sampler_settings.ESTIMATOR.get(name, {})}
        est = BayesianMLPClassifier((8,), n_chains=2, n_draws=10, thinning=1, random_state=0, sampler=name,
                                    **kwargs).fit(X, y)
    idata = est.to_arviz()
    stats, post = idata.sample_stats, idata.posterior
    declared = set(type(est.sampler_).stats)
    own = est.get_sample_stats()
    assert (dict(stats.sizes)["chain"], dict(stats.sizes)["draw"]) == (dict(post.sizes)["chain"],
                                                                       dict(post.sizes)["draw"])
    assert dict(post.sizes)["chain"] == est.trace_.n_slots
    for var in stats.data_vars.values():
        assert var.dims == ("chain", "draw")
    np.testing.assert_array_equal(stats["lp"].values, -own["potential"])
    if "kinetic_energy" in declared:
        np.testing.assert_allclose(stats["energy"].values, own["potential"] + own["kinetic_energy"], rtol=1e-6)
        assert "kinetic_temperature" in stats
    if "accept_prob" in declared:
        rate = stats["acceptance_rate"].values
        assert np.all((rate >= 0) & (rate <= 1))
    if "divergent" in declared:
        assert stats["diverging"].dtype == bool
    if "temperature" in declared:
        np.testing.assert_array_equal(stats["temperature"].values, own["temperature"])
    if name in ("hmc", "pt-langevin"):  # the samplers with a Metropolis test declare both
        assert {"acceptance_rate", "diverging"} <= set(stats.data_vars)


def test_to_arviz_bad_input(monkeypatch):
    with pytest.raises(NotFittedError):
        BayesianMLPClassifier().to_arviz()
    monkeypatch.setitem(__import__("sys").modules, "arviz", None)  # as if ArviZ were not installed
    with pytest.raises(ImportError, match=r"bayesnet\[arviz\]"):
        BayesianMLPClassifier().to_arviz()


def test_a_diverged_chain_is_left_out_of_the_export_not_cutting_the_others():
    """A helper's user test: one of three chains diverged after 20 draws, and to_arviz, get_draws and summary cut
    the two healthy chains to its 20 draws (dropping 60 of their 100) while convergence_ judged only the chains
    that finished. Now the export holds the chains that finished, numbered as the trace's slots; the diverged
    chain's draws stay in the predictions and in get_draws(group_by_chain=False)."""
    from sklearn.datasets import load_iris

    from bayesnet.testing import PoisonChain

    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = BayesianMLPClassifier((4,), n_chains=3, n_draws=30, burn_in=100, thinning=5, random_state=0,
                                    callbacks=[("poison", PoisonChain(chain=1, at_step=200))]).fit(X, y)
    stored = list(net.trace_.stored_per_slot)
    assert stored[0] == stored[2] == 30 and 0 < stored[1] < 30
    idata = net.to_arviz()
    assert dict(idata.posterior.sizes)["chain"] == 2 and dict(idata.posterior.sizes)["draw"] == 30
    assert list(idata.posterior.coords["chain"].values) == [0, 2]
    draws = net.get_draws()
    assert all(v.shape[:2] == (2, 30) for v in draws.values())
    assert all(v.shape[:2] == (2, 30) for v in net.get_sample_stats().values())
    assert net.convergence_["log_likelihood"]["slots"] == [0, 2]
    flat = net.get_draws(group_by_chain=False)
    assert all(len(v) == 60 + stored[1] == net.n_draws_kept_ for v in flat.values())
    assert len(net.predict_draws(X[:2])) == net.n_draws_kept_
    summary = net.summary()
    assert np.isfinite(summary.loc["potential", "r_hat"])
