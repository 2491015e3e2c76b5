"""The chain axis: per-chain kernels, the per-slot trace, convergence diagnostics, n_chains and n_jobs in the
estimators (loky and dask)."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

from bayesnet import BayesianMLPClassifier, BayesianMLPRegressor
from bayesnet.diagnostics import bulk_effective_sample_size, chain_summaries, rank_normalized_split_rhat
from bayesnet.samplers import make_sampler
from bayesnet.synthetic import four_modes_2d
from bayesnet.trace import Trace

import sampler_settings
from targets import correlated_gaussian, moment_errors

# ---------------------------------------------------------------------- #
# kernels with a chain axis: one thermostat / one Metropolis test per chain
# ---------------------------------------------------------------------- #
CHAIN_CASES = [
    ("sgld", dict(step_size=2e-3)),
    ("sghmc", dict(step_size=2e-3, friction=0.02)),
    ("sgnht", dict(step_size=2e-3, noise=0.02)),
    ("baoab", dict(step_size=0.1, friction=1.0)),
    ("hmc", dict(step_size=0.5, n_leapfrog=5)),
]


@pytest.mark.parametrize("name,hyper", CHAIN_CASES, ids=[c[0] for c in CHAIN_CASES])
def test_every_kernel_samples_with_a_chain_axis(name, hyper):
    """``init(..., n_chains=C)`` with one potential per chain: per-chain kinetic temperatures (and thermostats,
    Metropolis tests) and the right moments; tolerances from the measured ESS (+ the suite's 0.03 allowance
    for the discretised kernels, none for hmc, which is exact)."""
    C = 512
    target = correlated_gaussian(C, per_chain=True)
    sampler = make_sampler(name, **hyper)
    gen = torch.Generator().manual_seed(0)
    state = sampler.init(target.potential.parameters, gen, n_chains=C)
    kept, kinetic = [], []
    steps = 800 if name == "hmc" else 3000
    for k in range(1, steps + 1):
        state, info = sampler.step(state, target.potential, None)
        if k > steps // 4 and k % (1 if name == "hmc" else 10) == 0:
            kept.append(state.position[0].detach().numpy().copy())
        if info.kinetic_temperature is not None:
            assert info.kinetic_temperature.shape == (C,)
            kinetic.append(info.kinetic_temperature.numpy().copy())
    assert info.potential.shape == (C,)
    err = moment_errors(np.stack(kept, axis=1), target.mean, target.cov)
    allowance = 0.0 if name == "hmc" else 0.03
    print(name, {k: round(float(v), 4) for k, v in err.items()})
    assert err["ess"] > 300
    assert err["mean_err"] <= err["mean_tol"] + allowance
    assert err["cov_err"] <= err["cov_tol"] + allowance
    if kinetic:  # each chain's own kinetic temperature averages to T = 1
        per_chain = np.mean(kinetic[len(kinetic) // 4:], axis=0)
        assert abs(per_chain.mean() - 1.0) < 0.05
    if name == "sgnht":
        assert state.thermostat.shape == (C,)
    if name == "hmc":
        assert state.accepted_total.shape == (C,) and float(info.extra["accept_prob"].mean()) > 0.5


def test_chain_axis_is_validated():
    target = correlated_gaussian(3, per_chain=True)
    with pytest.raises(ValueError, match="leading axis of 4"):
        make_sampler("sghmc").init(target.potential.parameters, None, n_chains=4)


MODE_CASES = [
    ("sgld", dict(step_size=0.01)),
    ("sghmc", dict(step_size=0.01, friction=0.1)),
    ("sgnht", dict(step_size=0.01, noise=0.1)),
    ("baoab", dict(step_size=0.2, friction=1.0)),
    ("hmc", dict(step_size=0.2, n_leapfrog=5)),
    ("tacthmc", dict(step_size=0.01, steps_per_sample=1, tempering=False)),
    ("eqn", dict(step_size=0.2, friction=1.0, n_walkers=4, covariance_interval=100)),
]


def _mode_of(points, centres):
    return np.argmin(((points[..., None, :] - centres) ** 2).sum(-1), axis=-1)


@pytest.mark.parametrize("name,hyper", MODE_CASES, ids=[c[0] for c in MODE_CASES])
def test_four_chains_cover_the_modes_and_rhat_flags_them(name, hyper):
    """Luo et al. 2018 Fig. 2's four-mode mixture (modes 5 sd apart): a single chain stays in the mode it starts in;
    four chains from overdispersed starts (one per quadrant, 1 nat above its mode) together visit all four modes, and split R-hat,
    far above 1.01, reports that they have not mixed (their weights are not the mixture's)."""
    sampler = make_sampler(name, **hyper)
    members = sampler.members_per_chain()  # eqn: 4 walkers per chain, all starting at their chain's start
    mix = four_modes_2d(4 * members, gradient_noise=0.0)
    centres, pot = mix.means, mix.potential
    starts = torch.tensor([[-3.0, -3.0], [3.0, -3.0], [-3.0, 3.0], [3.0, 3.0]])
    with torch.no_grad():
        pot.parameters[0].copy_(starts.repeat_interleave(members, 0))
    gen = torch.Generator().manual_seed(1)
    state = sampler.init(pot.parameters, gen, n_chains=4)
    draws = []
    for k in range(1000):
        state, _ = sampler.step(state, pot, None)
        if k >= 200:
            draws.append(state.position[0].detach().numpy().copy())
    draws = np.stack(draws, axis=1)  # (chain, draw, 2)
    modes = _mode_of(draws, centres)
    assert all(len(np.unique(m)) == 1 for m in modes)  # each chain stuck where it started
    assert len(np.unique(modes)) == 4  # together: every mode
    assert rank_normalized_split_rhat(draws[:, :, 0]) > 1.5


def test_pt_langevin_one_chain_visits_every_mode():
    """Where one chain of any of the above stays in one mode, the temperature-1 replica of one pt-langevin
    chain (5 replicas up to T = 16) visits all four."""
    R = 5
    mix = four_modes_2d(R, gradient_noise=0.0)  # every replica starts in the lightest mode
    centres, pot = mix.means, mix.potential
    sampler = make_sampler("pt-langevin", n_replicas=R, max_temperature=16.0, step_size=0.8, swap_interval=1)
    gen = torch.Generator().manual_seed(0)
    state = sampler.init(pot.parameters, gen)
    cold = []
    for k in range(3000):
        state, info = sampler.step(state, pot, None)
        if k >= 500:
            cold.append(state.position[0][0].detach().numpy().copy())
    assert len(np.unique(_mode_of(np.array(cold), centres))) == 4


# ---------------------------------------------------------------------- #
# the per-slot trace and the diagnostics
# ---------------------------------------------------------------------- #
def test_trace_keeps_each_slot_apart():
    trace = Trace(n_draws=3, burn_in=1, thinning=2, n_slots=2)
    for step in range(1, 12):
        pos = [torch.tensor([[step, 0.0], [step, 1.0]])]
        flags = torch.tensor([True, step % 2 == 0])
        trace.offer(step, pos, {"potential": torch.tensor([float(step), -float(step)])}, flags)
    per_slot = trace.draws(per_slot=True)
    # slot 0: candidates 2..11, every 2nd kept (2, 4, 6, 8, 10), ring of 3 -> 6, 8, 10
    assert per_slot[0][:, 0].tolist() == [6.0, 8.0, 10.0]
    # slot 1: candidates at even steps 2..10, every 2nd kept (2, 6, 10)
    assert per_slot[1][:, 0].tolist() == [2.0, 6.0, 10.0] and (per_slot[1][:, 1] == 1).all()
    assert len(trace) == 6 and trace.as_array().shape == (2, 3, 2)
    assert trace.as_array(potentials=True)[1].tolist() == [-2.0, -6.0, -10.0]
    both = Trace.concatenate([trace, trace])
    assert both.n_slots == 4 and len(both) == 12
    assert both.slot_of_draw().tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    with pytest.raises(ValueError, match="different"):
        Trace.concatenate([trace, Trace(n_draws=4)])


def test_a_draw_offered_without_statistics_has_no_potential():
    """A trace offered positions without statistics held potentials of 0.0, which its diagnostics read as values
    (a potential R-hat of a constant chain); they are NaN, which the diagnostics skip (stop 50's finding)."""
    trace = Trace(n_draws=10, n_slots=2)
    for step in range(1, 11):
        trace.offer(step, [torch.randn(2, 3)], None, True)
    assert np.isnan(trace.as_array(potentials=True)).all()
    assert "potential" not in chain_summaries(trace.as_array(), trace.as_array(potentials=True))
    assert "projection_0" in chain_summaries(trace.as_array(), trace.as_array(potentials=True))


def test_draws_in_order_are_views_and_wrapped_ones_are_gathered_in_order():
    """Prediction reads every draw at each call: a slot whose draws lie in order in the ring is handed out as a
    view of the buffer (no copy); one that wrapped around is gathered oldest first. Both equal the draws."""
    trace = Trace(n_draws=4, n_slots=2)
    for step in range(1, 7):  # slot 0 stores all 6 (wraps: ring holds 3, 4, 5, 6); slot 1 only steps 1-3
        flags = np.array([True, step <= 3])
        trace.offer(step, [torch.tensor([[float(step)], [10.0 + step]])], None, flags)
    first, second = trace.draws(per_slot=True)
    assert first[:, 0].tolist() == [3.0, 4.0, 5.0, 6.0] and second[:, 0].tolist() == [11.0, 12.0, 13.0]
    assert first.data_ptr() != trace._buffer.data_ptr()  # wrapped: a gathered copy
    assert second.data_ptr() == trace._buffer[1].data_ptr()  # in order: a view of slot 1's ring
    assert trace.draws()[:, 0].tolist() == [3.0, 4.0, 5.0, 6.0, 11.0, 12.0, 13.0]
    one = Trace(n_draws=4)
    for step in range(1, 9):  # exactly two turns of the ring: in order again, from position 0
        one.offer(step, [torch.tensor([[float(step)]])], None, True)
    assert one.draws()[:, 0].tolist() == [5.0, 6.0, 7.0, 8.0]
    assert one.draws().data_ptr() == one._buffer.data_ptr()  # the only slot's view: no copy at all
    full = Trace(n_draws=3, n_slots=2)
    for step in range(1, 7):  # both rings full, each in order from position 0: the whole buffer as one view
        full.offer(step, [torch.tensor([[float(step)], [10.0 + step]])], None, True)
    assert full.draws()[:, 0].tolist() == [4.0, 5.0, 6.0, 14.0, 15.0, 16.0]
    assert full.draws().data_ptr() == full._buffer.data_ptr()
    full.offer(7, [torch.tensor([[7.0], [17.0]])], None, True)  # wrapped again: gathered, in order
    assert full.draws()[:, 0].tolist() == [5.0, 6.0, 7.0, 15.0, 16.0, 17.0]


def test_a_trace_stores_the_same_draws_on_its_lockstep_path():
    """Offers with ``is_draw=True`` while every slot is active take a shortcut (one increment per step); it must
    store exactly what the per-slot path stores, through a retired slot and a change of thinning."""
    fast = Trace(n_draws=4, burn_in=2, thinning=3, n_slots=3)
    slow = Trace(n_draws=4, burn_in=2, thinning=3, n_slots=3)
    for step in range(1, 40):
        pos = [torch.arange(6.0).reshape(3, 2) + step]
        stats = {"potential": torch.tensor([1.0, 2.0, 3.0]) * step}
        kept_before = fast.kept_per_slot.copy(), slow.kept_per_slot.copy()
        fast.offer(step, pos, stats, True)
        slow.offer(step, pos, stats, np.ones(3, dtype=bool))  # an array: never the shortcut
        # last_due (what an estimator's step reads instead of counting the kept draws): the slots stored
        for t, before in zip((fast, slow), kept_before):
            assert t.last_due == int((t.kept_per_slot - before).sum()), step
        if step == 20:
            assert fast._lockstep and not slow._lockstep
            for t in (fast, slow):
                t.retire([1], after_step=14)
            assert not fast._lockstep
        if step == 30:
            for t in (fast, slow):
                t.reconfigure(thinning=2)
    for a, b in zip(fast.draws(per_slot=True), slow.draws(per_slot=True)):
        assert torch.equal(a, b)
    assert np.array_equal(fast.steps, slow.steps) and np.array_equal(fast.n_candidates, slow.n_candidates)
    # slot 0: candidates from step 3, every 3rd stored (3, 6, ..., 30), then every 2nd (31, 33, ..., 39); ring of 4
    assert fast.steps[:4].tolist() == [33, 35, 37, 39] and fast.kept_per_slot[0] == 10 + 5
    # slot 1: retired at step 20, its draws after step 14 discarded: 3, 6, 9, 12 kept
    assert np.array_equal(fast.kept_per_slot, slow.kept_per_slot) and fast.kept_per_slot[1] == 4


def test_a_thinned_out_trace_holds_what_twice_the_thinning_stores():
    """``thin_out`` keeps every other draw (candidates 1, 1 + 2t, ...) and doubles the thinning: offered on, the
    trace holds exactly what a trace at twice the thinning stores from the start, statistics included, in
    lockstep and per slot (an odd count of draws too). It refuses a ring that overwrote draws or a retired
    slot, where the stored draws no longer start at the first candidate."""
    for n_draws, flags in ((6, True), (5, np.ones(2, dtype=bool))):
        thinned = Trace(n_draws=n_draws, burn_in=3, thinning=2, n_slots=2)
        wide = Trace(n_draws=n_draws, burn_in=3, thinning=4, n_slots=2)

        def offer(t, step):
            t.offer(step, [torch.arange(4.0).reshape(2, 2) * step], {"potential": torch.tensor([1.0, -1.0]) * step},
                    flags)

        step = 0
        while thinned.stored_per_slot.min() < n_draws:
            step += 1
            offer(thinned, step)
            offer(wide, step)
        assert thinned.can_thin_out()
        thinned.thin_out()
        assert thinned.thinning == 4 and thinned.stored_per_slot.tolist() == [(n_draws + 1) // 2] * 2
        while thinned.stored_per_slot.min() < n_draws:
            step += 1
            offer(thinned, step)
            offer(wide, step)
        assert np.array_equal(thinned.steps, wide.steps) and thinned.steps[:3].tolist() == [4, 8, 12]
        assert torch.equal(thinned.draws(), wide.draws())
        assert np.array_equal(thinned.potentials, wide.potentials)
        assert np.array_equal(thinned.kept_per_slot, wide.kept_per_slot)
        while thinned.kept_per_slot.min() == n_draws:  # one more draw: the ring overwrites its oldest
            step += 1
            offer(thinned, step)
        assert not thinned.can_thin_out()
        with pytest.raises(ValueError, match="thin_out"):
            thinned.thin_out()
    retired = Trace(n_draws=2, thinning=1, n_slots=2)
    for step in (1, 2):
        retired.offer(step, [torch.zeros(2, 1)])
    retired.retire([1], after_step=5)
    assert not retired.can_thin_out()


def test_a_draws_statistics_copied_with_its_position_are_those_copied_one_by_one():
    """When every slot stores, the statistics of the position's dtype travel to the host with it (one copy per
    draw); what is stored equals what a statistic copied on its own stores (here given as NumPy arrays, or in
    another dtype), through a slot whose position is not finite."""
    together = Trace(n_draws=3, burn_in=1, thinning=1, n_slots=3)
    apart = Trace(n_draws=3, burn_in=1, thinning=1, n_slots=3)
    for step in range(1, 8):
        pos = [torch.arange(6.0).reshape(3, 2) / 7 + step]
        if step == 5:
            pos[0][2, 1] = float("nan")
        potential = torch.tensor([1.0, 2.0, 3.0]) / 3 * step
        kinetic = torch.tensor(0.1 * step)  # one value for every slot
        stats = {"potential": potential, "kinetic": kinetic, "wide": potential.double() / 11, "temperature": 1.5}
        other = {"potential": potential.numpy(), "kinetic": float(kinetic), "wide": (potential.double() / 11).numpy(),
                 "temperature": 1.5}
        bad = [together.offer(step, pos, stats, True), apart.offer(step, pos, other, True)]
        assert np.array_equal(*bad) and bad[0].tolist() == ([2] if step == 5 else [])
    assert together.kept_per_slot.tolist() == [6, 6, 5]
    for a, b in zip(together.draws(per_slot=True), apart.draws(per_slot=True)):
        assert torch.equal(a, b)
    for name in ("potential", "kinetic", "wide", "temperature"):
        assert np.array_equal(together._stats[name], apart._stats[name], equal_nan=True), name
    # slot 2 kept steps 2, 3, 4, 6, 7 (5 was not finite) in a ring of 3: 6, 7, 4, each its own step's value
    expected = (torch.tensor(3.0) / 3 * torch.tensor([6.0, 7.0, 4.0])).double().numpy()
    assert np.array_equal(together._stats["potential"][2], expected)


def test_a_draws_statistics_in_other_layouts_are_stored_or_refused_as_before():
    """The one-transfer path leaves alone what it cannot carry: one chain's position offered to several slots
    without a chain axis, a bfloat16 statistic (stored as float64), a statistic shaped (S, 1) (refused, as on a
    step where only some slots store)."""
    one = Trace(n_draws=2, n_slots=3, chain_axis=False)
    one.offer(1, [torch.ones(2)], {"potential": torch.tensor(2.0)})
    assert one.kept_per_slot.tolist() == [1, 1, 1] and one._stats["potential"][:, 0].tolist() == [2.0] * 3
    half = Trace(n_draws=2, n_slots=1, chain_axis=True)
    half.offer(1, [torch.ones(1, 2, dtype=torch.bfloat16)], {"potential": torch.full((1,), 1.5, dtype=torch.bfloat16)})
    assert half._stats["potential"][0, 0] == 1.5
    for flags in (True, np.array([True, True, False])):
        with pytest.raises(ValueError):
            Trace(n_draws=2, n_slots=3, chain_axis=True).offer(1, [torch.ones(3, 2)], {"potential": torch.ones(3, 1)},
                                                                  flags)


def test_rank_normalised_rhat_and_bulk_ess():
    rng = np.random.default_rng(0)
    iid = rng.standard_cauchy(size=(4, 1000))  # heavy tails: ranks make it well defined
    assert rank_normalized_split_rhat(iid) < 1.01
    assert 3000 < bulk_effective_sample_size(iid) < 5000
    shifted = iid + np.arange(4)[:, None] * 3.0
    assert rank_normalized_split_rhat(shifted) > 1.1
    ar = np.zeros((4, 2000))
    for t in range(1, 2000):  # AR(1) with rho = 0.9: ESS about n (1 - rho) / (1 + rho)
        ar[:, t] = 0.9 * ar[:, t - 1] + rng.normal(size=4)
    assert 200 < bulk_effective_sample_size(ar) < 800
    summary = chain_summaries(rng.normal(size=(3, 50, 7)), rng.normal(size=(3, 50)))
    assert set(summary) == {"potential", "projection_0", "projection_1", "projection_2"}


@pytest.mark.parametrize("chains", [1, 3])
def test_the_row_wise_diagnostics_equal_one_quantity_at_a_time(chains):
    """``*_many`` (the convergence checks' 64 rows at once) give, per column, what the scalar functions give,
    written out here as they were before the columns were vectorised (a loop of 2-D computations): iid, AR(1),
    shifted chains, ties, a constant column, and one whose folded values are constant."""
    from scipy.special import ndtri
    from scipy.stats import rankdata

    from bayesnet.diagnostics import autocorrelation, bulk_effective_sample_size_many, rank_normalized_split_rhat_many

    def ess(x):  # the 2-D effective sample size, as written before (Geyer's monotone sequence)
        m, n = x.shape
        w = x.var(axis=1, ddof=1).mean()
        if w == 0:
            return float(m * n)
        var_plus = (n - 1) / n * w + (x.mean(axis=1).var(ddof=1) if m > 1 else 0.0)
        rho = 1.0 - (w - (autocorrelation(x) * x.var(axis=1, ddof=0)[:, None]).mean(axis=0)) / var_plus
        rho[0] = 1.0
        gamma = rho[: 2 * (n // 2)].reshape(n // 2, 2).sum(axis=1)
        stop = np.nonzero(gamma <= 0)[0]
        gamma = np.minimum.accumulate(gamma[: stop[0] if stop.size else n // 2])
        return float(m * n / max(-1.0 + 2.0 * gamma.sum(), 1.0 / np.log10(m * n)))

    def rhat(x):
        n, w = x.shape[1], x.var(axis=1, ddof=1).mean()
        b = n * x.mean(axis=1).var(ddof=1)
        return (1.0 if b == 0 else np.inf) if w == 0 else float(np.sqrt(((n - 1) / n * w + b / n) / w))

    def normal_scores(x):
        return ndtri((rankdata(x, method="average").reshape(x.shape) - 0.375) / (x.size + 0.25))

    def split(x):
        half = x.shape[1] // 2
        return np.concatenate([x[:, :half], x[:, -half:]])

    rng = np.random.default_rng(3)
    n = 101  # odd: the split leaves the middle draw out
    cols = [rng.normal(size=(chains, n)), np.cumsum(rng.normal(size=(chains, n)), axis=1),
            rng.normal(size=(chains, n)) + np.arange(chains)[:, None], rng.integers(0, 3, size=(chains, n)) * 1.0,
            np.full((chains, n), 2.5), np.where(rng.random((chains, n)) < 0.5, -1.0, 1.0)]
    draws = np.stack(cols, axis=2)
    many_rhat, many_ess = rank_normalized_split_rhat_many(draws), bulk_effective_sample_size_many(draws)
    for j, x in enumerate(cols):
        s = split(x)
        folded = np.abs(s - np.median(s))
        tail = rhat(normal_scores(folded)) if np.ptp(folded) > 0 else 1.0
        want_rhat = 1.0 if np.ptp(s) == 0 else max(rhat(normal_scores(s)), tail)
        want_ess = float(x.size) if np.ptp(x) == 0 else ess(normal_scores(s))
        assert many_rhat[j] == pytest.approx(want_rhat, rel=1e-12), j
        assert many_ess[j] == pytest.approx(want_ess, rel=1e-12), j
        assert rank_normalized_split_rhat(x) == many_rhat[j] and bulk_effective_sample_size(x) == many_ess[j]


# ---------------------------------------------------------------------- #
# estimators
# ---------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y


def test_estimator_chains_are_vectorised_and_diagnosed(iris):
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), n_draws=20, burn_in=200, random_state=0, sampler__step_size=1e-3)
    clf = BayesianMLPClassifier(n_chains=3, **kw).fit(X, y)
    assert clf.posterior_.parameters[0].shape == (3, 8, 4)
    assert clf.trace_.n_slots == 3 and len(clf.trace_) == 60 and clf.predict_draws(X).shape == (60, 150, 3)
    assert set(clf.convergence_) == {"log_likelihood", "pointwise_log_likelihood", "potential"}
    assert clf.diagnostics_["max_rhat"] >= 1.0 and clf.diagnostics_["min_ess_bulk"] > 0
    assert clf.score(X, y) > 0.85
    # chains start apart and stay distinct; the same seed gives the same chains
    draws = clf.trace_.draws(per_slot=True)
    assert not torch.allclose(draws[0], draws[1])
    same = BayesianMLPClassifier(n_chains=3, **kw).fit(X, y)
    torch.testing.assert_close(same.trace_.draws(), clf.trace_.draws())
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_allclose(again.predict_proba(X), clf.predict_proba(X))
    again.partial_fit(X, y)  # a completed run continues with n_draws more draws per chain (200 steps)
    assert (again.trace_.kept_per_slot == 40).all() and (again.trace_.stored_per_slot == 20).all()


def test_regressor_with_chains(iris):
    X, _ = iris
    reg = BayesianMLPRegressor((8,), n_chains=2, n_draws=10, burn_in=100, random_state=0).fit(X[:, :3], X[:, 3])
    mean, std = reg.predict(X[:, :3], return_std=True)
    assert mean.shape == std.shape == (150,) and np.all(std > 0)
    assert reg.predict_draws(X[:, :3], return_noise_std=True)[1].shape == (20,)


def test_divergence_names_the_chain(iris):
    from bayesnet import DivergenceError

    X, y = iris
    clf = BayesianMLPClassifier((8,), n_chains=2, sampler="sgld", sampler__step_size=50.0, n_draws=5, burn_in=5,
                                random_state=0)
    with pytest.raises(DivergenceError, match=r"all 2 sgld chains \(0, 1\) diverged"):
        clf.fit(X, y)
    assert sorted(clf.fit_status_["diverged_chains"]) == [0, 1]


def test_chains_do_not_depend_on_how_they_are_run(iris):
    """Every chain has its own random stream and initialisation, derived from random_state and its index:
    the draws are bit for bit the same whatever n_jobs (loky processes or threads), and chain 0 of four is
    the chain of n_chains=1 (sampling uses the same batched product for one member as for many)."""
    import joblib

    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), n_chains=4, n_draws=5, burn_in=50, random_state=0)
    ref = BayesianMLPClassifier(**kw).fit(X, y).trace_.draws()
    for n_jobs in (1, 2, 4):
        assert torch.equal(BayesianMLPClassifier(**kw, n_jobs=n_jobs).fit(X, y).trace_.draws(), ref)
    with joblib.parallel_config(backend="threading"):
        assert torch.equal(BayesianMLPClassifier(**kw, n_jobs=2).fit(X, y).trace_.draws(), ref)
    one = BayesianMLPClassifier(**{**kw, "n_chains": 1}).fit(X, y).trace_.draws()
    assert torch.equal(one, ref[:5])
    # a regressor's one-output head too (a batched matrix-vector product rounded one member's sums otherwise)
    regressors = [BayesianMLPRegressor(**{**kw, "n_chains": n}).fit(X, X[:, 0]).trace_.draws() for n in (1, 3)]
    assert torch.equal(regressors[0], regressors[1][:5])
    other_seed = BayesianMLPClassifier(**{**kw, "random_state": 1}).fit(X, y).trace_.draws()
    assert not torch.equal(other_seed, ref)


@pytest.mark.parametrize("name", sorted(sampler_settings.ESTIMATOR))
def test_every_samplers_chain_in_a_fit_is_the_chain_alone(iris, name):
    """Chain 0 of two in a network fit is the fit of that chain alone, bit for bit, for every sampler (the contract
    suite checks it on an analytic potential, whose value with and without the gradient agree). Before:
    pt-langevin computed the gradient on a step only when some member of any chain proposed a Langevin move,
    and the potential's value alone rounds differently from its value with the gradient, so a chain's energies
    (and through the Robbins-Monro tuning, its draws) depended on the chains beside it, with n_chains and
    n_jobs (found by a helper's user test; a mix of proposals, langevin_prob 0.1, diverged from step 25)."""
    # (tacthmc's draw quota waits for every chain, so a run of two would outlast the run of one and keep chain 0's
    # later draws: runs of a fixed length, max_epochs, which the quota leaves alone)
    extra = {"pt-langevin": dict(sampler__langevin_prob=0.1), "tacthmc": dict(max_epochs=300)}.get(name, {})
    kw = {**dict(hidden_layer_sizes=(8,), n_draws=5, thinning=2, sampler=name, random_state=0),
          **sampler_settings.ESTIMATOR[name], "burn_in": 60, **extra}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = BayesianMLPClassifier(**kw).fit(*iris).trace_
        two = BayesianMLPClassifier(**kw, n_chains=2).fit(*iris).trace_
    slot0 = two.slot_of_draw() == 0
    common, at_one, at_two = np.intersect1d(one.steps, two.steps[slot0], return_indices=True)
    assert len(common) >= 3, (one.steps, two.steps)
    assert torch.equal(one.draws()[at_one], two.draws()[np.flatnonzero(slot0)[at_two]])


def test_a_changed_n_jobs_keeps_the_fits_process_layout(iris):
    """partial_fit continues chains where the fit started them: set ``n_jobs`` after a fit in this process and
    they continue here (before, they were silently dropped and new chains started in workers); unset it after a
    grouped fit and each group continues. Either way the draws are those of one uninterrupted layout."""
    import joblib

    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), n_chains=2, n_draws=5, burn_in=20, thinning=1, random_state=0)
    ref = BayesianMLPClassifier(**kw).fit(X, y).partial_fit(X, y)
    here = BayesianMLPClassifier(**kw).fit(X, y)
    here.set_params(n_jobs=2).partial_fit(X, y)
    steps = ref.sampler_state_.step  # (the warm-up, ten draws, and the steps before each)
    assert here.sampler_state_.step == steps > 25 and not getattr(here, "shards_", None)
    assert torch.equal(here.trace_.draws(), ref.trace_.draws())
    with joblib.parallel_config(backend="threading"):
        grouped = BayesianMLPClassifier(**kw, n_jobs=2).fit(X, y)
    grouped.set_params(n_jobs=None).partial_fit(X, y)
    assert [s.sampler_state_.step for s in grouped.shards_] == [steps, steps]
    assert torch.equal(grouped.trace_.draws(), ref.trace_.draws())


def test_n_jobs_runs_chains_in_processes_and_on_dask(iris):
    """Chains split over two loky workers; the same fit through joblib's dask backend on a LocalCluster starts
    the same chains (same per-group seeds: equal draws over the first steps; later they differ by float
    reduction order, as thread counts differ between backends), and partial_fit continues every group."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), n_chains=4, n_jobs=2, n_draws=10, burn_in=100, thinning=10, random_state=0,
              sampler__step_size=1e-3)  # (a run of the planned length: no thinning="auto" extension)
    clf = BayesianMLPClassifier(**kw).fit(X, y)
    assert len(clf.shards_) == 2 and clf.trace_.n_slots == 4 and len(clf.trace_) == 40
    assert "max_rhat" in clf.diagnostics_ and clf.score(X, y) > 0.8
    clf.partial_fit(X, y)
    assert (clf.trace_.kept_per_slot == 20).all() and clf.shards_[0].sampler_state_.step == 300

    distributed = pytest.importorskip("distributed")
    import joblib

    short = dict(kw, n_draws=3, burn_in=0, thinning=1)  # a few steps: before float reduction order matters
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        with joblib.parallel_config(backend="dask"):
            on_dask = BayesianMLPClassifier(**short).fit(X, y)
            assert BayesianMLPClassifier(**kw).fit(X, y).trace_.n_slots == 4  # a whole fit on the cluster
    on_loky = BayesianMLPClassifier(**short).fit(X, y)
    torch.testing.assert_close(on_dask.trace_.draws(), on_loky.trace_.draws(), rtol=1e-4, atol=1e-5)
    with joblib.parallel_config(backend="threading"):  # groups in threads of this process: same chains
        in_threads = BayesianMLPClassifier(**short).fit(X, y)
    torch.testing.assert_close(in_threads.trace_.draws(), on_loky.trace_.draws(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("head", ["categorical", "gaussian"])
@pytest.mark.parametrize("path", ["batched", "autograd", "vmap"])
def test_chain_posterior_equals_each_member_posterior(head, path, monkeypatch):
    """ChainPosterior's S potentials and gradients are those of S single-member Posteriors, through the batched
    forms with the MLP's written-out backward (MLP.vjp_chains, the likelihoods' closed forms), through autograd
    over the batched forms (MLP.forward_chains, log_likelihood_chains, log_prob_chains) and through the generic
    vmap fallback."""
    from bayesnet.estimators.mlp import MLP
    from bayesnet.likelihoods import CategoricalLikelihood, GaussianLikelihood
    from bayesnet.posterior import ChainPosterior, Posterior
    from bayesnet.priors import GaussianPrior

    torch.manual_seed(0)
    if path != "batched":
        monkeypatch.delattr(MLP, "vjp_chains")
    if path == "vmap":
        monkeypatch.delattr(MLP, "forward_chains")
        monkeypatch.delattr(GaussianPrior, "log_prob_chains")
    make_lik = CategoricalLikelihood if head == "categorical" else (lambda: GaussianLikelihood(3))
    y = torch.randint(0, 3, (20,)) if head == "categorical" else torch.randn(20, 3)
    X = torch.randn(20, 5)
    modules, liks = [MLP(5, (7,), 3) for _ in range(4)], [make_lik() for _ in range(4)]
    for lik in liks:
        for p in lik.parameters():
            p.data.normal_()
    members = [list(m.parameters()) + list(lik.parameters()) for m, lik in zip(modules, liks)]
    chains = ChainPosterior(modules[0], liks[0], GaussianPrior(2.0), 100, members)
    u, grads = chains.value_and_grad((X, y))
    assert u.shape == (4,)
    for s in range(4):
        us, gs = Posterior(modules[s], liks[s], GaussianPrior(2.0), 100).value_and_grad((X, y))
        torch.testing.assert_close(u[s], us, rtol=1e-5, atol=1e-4)
        for a, b in zip(grads, gs):
            torch.testing.assert_close(a[s], b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
@pytest.mark.parametrize("activation", ["relu", "tanh", "logistic", "gelu", "gelu-tanh", "identity"])
@pytest.mark.parametrize("head", ["categorical", "gaussian", "gaussian-1"])
def test_the_written_out_backward_gives_autograds_gradient(head, activation, device, monkeypatch):
    """The MLP's backward without autograd (``vjp_chains``, with the likelihoods' closed forms) against autograd
    through ``forward_chains``: on the CPU potentials and gradients bit for bit (the same kernels in the same
    order); on a GPU, where cuBLAS may pick another kernel for a product autograd's engine runs with other
    strides, to float32 rounding. Two hidden layers, three members, the hierarchical prior."""
    from bayesnet.estimators.mlp import MLP
    from bayesnet.likelihoods import CategoricalLikelihood, GaussianLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import HierarchicalPrior

    torch.manual_seed(0)
    k = 1 if head == "gaussian-1" else 3  # (one output: linear_chains' elementwise form)
    net = MLP(6, (7, 5), k, activation.split("-")[0])
    if activation == "gelu-tanh":  # a module set by hand: its own approximation
        net.head.activation = torch.nn.GELU(approximate="tanh")
    lik = CategoricalLikelihood() if head == "categorical" else GaussianLikelihood(k)
    members = [[p.detach() + 0.3 * torch.randn_like(p) for p in [*net.parameters(), *lik.parameters()]]
               for _ in range(3)]
    X = torch.randn(20, 6)
    y = torch.randint(0, 3, (20,)) if head == "categorical" else torch.randn(20, k)
    net, lik = net.to(device), lik.to(device)
    members = [[p.to(device) for p in member] for member in members]
    X, y = X.to(device), y.to(device)
    posterior = ChainPosterior(net, lik, HierarchicalPrior(), 500, members)
    assert net.vjp_chains(posterior.network_parameters, X) is not None
    u, grads = posterior.value_and_grad((X, y))
    monkeypatch.delattr(MLP, "vjp_chains")
    u_auto, grads_auto = posterior.value_and_grad((X, y))

    def check(a, b):
        assert a.device.type == device
        if device == "cpu":
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b)

    check(u, u_auto)
    for g, g_auto in zip(grads, grads_auto, strict=True):
        check(g, g_auto)


def test_subclasses_with_their_own_forms_take_autograd():
    """An MLP subclass with its own ``forward_chains`` and a likelihood subclass with its own
    ``log_likelihood_chains`` are not sampled with the base classes' written-out gradients: ``vjp_chains`` and
    ``potential_and_grad_chains`` decline, and the potential is the subclasses' own."""
    from bayesnet.estimators.mlp import MLP
    from bayesnet.likelihoods import GaussianLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior

    class Doubled(MLP):
        def forward_chains(self, parameters, X):
            return 2.0 * super().forward_chains(parameters, X)

    class Laplace(GaussianLikelihood):
        def log_likelihood_chains(self, mean, y, parameters):
            return -(y - mean).abs().sum((1, 2))

    torch.manual_seed(0)
    net = Doubled(4, (6,), 2)
    X, y = torch.randn(10, 4), torch.randn(10, 2)
    members = [[*net.parameters(), *Laplace(2).parameters()] for _ in range(2)]
    assert net.vjp_chains(members[0][:4], X) is None
    assert Laplace(2).potential_and_grad_chains(torch.randn(2, 10, 2), y, [torch.zeros(2, 2)], 50) is None
    posterior = ChainPosterior(net, Laplace(2), GaussianPrior(1.0), 50, members)
    u, grads = posterior.value_and_grad((X, y))
    params = [p.detach().requires_grad_(True) for p in posterior.parameters]
    reference = posterior.likelihood.log_prior_chains(params[4:])
    reference = (0.5 * sum((p * p).sum((1, 2) if p.ndim == 3 else 1) for p in params[:4])
                 + (50 / 10) * (y - net.forward_chains(params[:4], X)).abs().sum((1, 2)) - reference)
    torch.testing.assert_close(u, reference.detach())
    for g, e in zip(grads, torch.autograd.grad(reference.sum(), params), strict=True):
        torch.testing.assert_close(g, e)


def test_an_activation_without_a_written_out_backward_takes_autograd():
    """An activation the MLP has no backward for: ``vjp_chains`` declines (None) and the gradient comes from
    autograd, the same as through the batched forward."""
    from bayesnet.estimators.mlp import MLP
    from bayesnet.likelihoods import CategoricalLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior

    torch.manual_seed(0)
    net = MLP(4, (6,), 3)
    net.head.activation = torch.nn.SiLU()
    members = [list(net.parameters()) for _ in range(2)]
    X, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    assert net.vjp_chains(members[0], X) is None
    posterior = ChainPosterior(net, CategoricalLikelihood(), GaussianPrior(1.0), 50, members)
    u, grads = posterior.value_and_grad((X, y))
    params = [p.detach().requires_grad_(True) for p in posterior.parameters]
    reference = 0.5 * sum((p * p).sum((1, 2) if p.ndim == 3 else 1) for p in params) - (50 / 10) * (
        torch.log_softmax(net.forward_chains(params, X), -1).gather(2, y.view(1, -1, 1).expand(2, -1, 1)).sum((1, 2)))
    expected = torch.autograd.grad(reference.sum(), params)
    torch.testing.assert_close(u, reference.detach())
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e)


def test_continuing_with_another_number_of_chains_is_refused(iris):
    X, y = iris
    clf = BayesianMLPClassifier((8,), n_chains=2, n_draws=5, burn_in=20, thinning=1, random_state=0).fit(X, y)
    clf.set_params(n_chains=3)
    with pytest.raises(ValueError, match="call fit"):
        clf.partial_fit(X, y)
    assert clf.fit(X, y).trace_.n_slots == 3  # fit starts new chains


def test_pt_langevin_groups_merge_per_replica_rates_and_continue_untempered(iris):
    """n_jobs groups of pt-langevin chains: per-replica rates averaged over the groups (one entry per ladder
    slot), and partial_fit keeps the planned run length, so the tempering phase does not restart."""
    X, _ = iris
    reg = BayesianMLPRegressor((4,), sampler="pt-langevin", sampler__n_replicas=3, n_chains=2, n_jobs=2,
                               n_draws=5, burn_in=20, thinning=2, random_state=0).fit(X[:, :3], X[:, 3])
    d = reg.diagnostics_
    assert len(d["replica_acceptance_rates"]) == 3 and len(d["pair_swap_rates"]) == 2
    assert d["in_tempering_phase"] is False
    reg.partial_fit(X[:, :3], X[:, 3])
    shard = reg.shards_[0]
    assert shard.sampler_.planned_steps == 30 and not shard.sampler_.in_tempering_phase(shard.sampler_state_)


def test_a_diverging_group_keeps_every_groups_draws(iris):
    from bayesnet import DivergenceError

    X, y = iris
    clf = BayesianMLPClassifier((8,), n_chains=2, n_jobs=2, sampler="sgld", sampler__step_size=0.5, n_draws=50,
                                burn_in=0, thinning=1, random_state=0)
    with pytest.raises(DivergenceError, match="diverged"):
        clf.fit(X, y)
    assert clf.trace_ is not None and len(clf.shards_) == 2


def test_step_stats_summaries_equal_the_per_step_reductions_across_ring_wraps():
    """StepStats writes each step into its ring and sums the post-burn-in steps a block at a time (before the ring
    would overwrite one, when summarised, when pickled): means, sums, maxima and last values equal those of every
    step reduced one by one, through several wraps of a small ring and a pickle taken mid-block; NaN stays NaN."""
    import pickle

    from bayesnet.samplers import Stat
    from bayesnet.trace import StepStats

    fields = {"potential": Stat("mean"), "n": Stat("sum", summary="n_total"), "heat": Stat("max", summary="heat_max"),
              "level": Stat("last")}
    stats = StepStats(fields, n_members=2, burn_in=7, device="cpu", capacity=16)
    rng = np.random.default_rng(0)
    kept = []
    for step in range(1, 61):
        row = {name: torch.tensor(rng.normal(size=2), dtype=torch.float32) for name in fields}
        row["n"] = torch.ones(2)
        stats.record(step, row)
        if step > 7:
            kept.append(np.stack([row[name].double().numpy() for name in fields]))
        if step == 37:  # mid-block: the copy carries on as the original does
            stats = pickle.loads(pickle.dumps(stats))
    kept = np.array(kept)  # (53, F, S)
    summary = stats.summaries()
    assert summary["potential"] == pytest.approx(kept[:, 0].mean(), rel=1e-12)
    assert summary["n_total"] == 2 * 53
    assert summary["heat_max"] == pytest.approx(kept[:, 2].max(), rel=1e-6)
    assert summary["level"] == pytest.approx(kept[-1, 3].mean(), rel=1e-6)
    np.testing.assert_allclose(stats.member_means("potential"), kept[:, 0].mean(0), rtol=1e-6)
    steps, per_step = stats.per_step()  # the ring: the last 16 steps as recorded
    assert steps.tolist() == list(range(45, 61))
    np.testing.assert_allclose(per_step["potential"].T, kept[-16:, 0].astype(np.float32))
    stats.record(61, {"potential": torch.tensor([float("nan"), 0.0]), "n": 1.0, "heat": 0.0, "level": 0.0})
    assert np.isnan(stats.member_means("potential")[0]) and np.isfinite(stats.member_means("potential")[1])


@pytest.mark.parametrize("n_chains", [2.5, True, 0, -1])
def test_init_refuses_a_number_of_chains_that_is_not_a_positive_integer(n_chains):
    """Before: 2.5 was taken as 2, True as 1, and 0 or -1 gave "needs a leading axis of -1" (a helper's test)."""
    with pytest.raises(ValueError, match=r"n_chains must be a positive integer or None, got"):
        make_sampler("sgld", step_size=0.1).init([torch.zeros(2, 3)], rng=0, n_chains=n_chains)


def test_a_trace_and_a_mixture_refuse_what_they_cannot_hold():
    """Before: Trace(5.5) kept 5 draws and Trace(True) one; gaussian_mixture took negative weights or sds (a NaN
    potential), 1-D means (IndexError) and a start of another dimension (a torch error). (A helper's test.)"""
    from bayesnet.synthetic import gaussian_mixture

    for bad in (5.5, True, 0):
        with pytest.raises(ValueError, match="n_draws must be an integer >= 1"):
            Trace(bad)
    ok = dict(name="m", means=[[0.0], [1.0]], sds=[1.0, 1.0], weights=[0.5, 0.5], n_chains=2, start=[0.0])
    assert gaussian_mixture(**ok).potential.value(None).shape == (2,)
    for change, words in ((dict(weights=[1.5, -0.5]), "non-negative"), (dict(sds=[1.0, -1.0]), "sds positive"),
                          (dict(means=[0.0, 1.0]), r"means must be \(n_modes, n_dimensions\)"),
                          (dict(start=[0.0, 0.0]), "start must be one point of 1 coordinates")):
        with pytest.raises(ValueError, match=words):
            gaussian_mixture(**{**ok, **change})
