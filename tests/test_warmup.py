"""The warm-up (bayesnet.samplers.warmup): adapted during burn-in, frozen after, exact and chain-independent.

Every registered sampler that takes ``step_size="auto"`` runs here with the warm-up on: it keeps the contract
(same seed, same chains; a pickled state continues exactly, mid-warm-up too; a chain never depends on the
chains beside it, even when the guard restarts one of them), freezes after ``adaptation_steps``, leaves an
explicit step size alone, and samples a Gaussian with the moment tolerances of the statistical suite. The
last test is the row of issue 13: what the diagonal mass matrix buys in effective draws per gradient.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

import sampler_settings
from bayesnet.diagnostics import effective_sample_size
from bayesnet.posterior import FunctionPotential
from bayesnet.samplers import ChainRandom, available_samplers, make_sampler
from bayesnet.samplers.warmup import mass_from_moments, windows
from bayesnet.plan import ChainLayout
from targets import assert_chain_alone_matches, gaussian_chains, correlated_gaussian, ill_conditioned_gaussian, moment_errors


def _warms_up(name: str) -> bool:
    try:
        make_sampler(name, step_size="auto")
    except (TypeError, ValueError):
        return False
    return True


WARM = [n for n in available_samplers() if _warms_up(n)]


def warm_settings(name: str, steps: int = 60) -> dict:
    """The contract suite's Gaussian settings with the step size left to a warm-up of ``steps`` steps."""
    return {**sampler_settings.GAUSSIAN[name], "step_size": "auto", "adaptation_steps": steps}


def _run(name, n_chains, steps, seed=0, start=None, stop_at=None, **over):
    """Run ``n_chains`` chains of ``name`` warmed up on the correlated Gaussian (one potential per member); the
    positions ``(member, step, 2)``, the sampler, its state and the potential."""
    sampler = make_sampler(name, **{**warm_settings(name), **over})
    target, state = gaussian_chains(sampler, n_chains, seed, start)
    pot = target.potential
    out = []
    for _ in range(steps):
        state, _ = sampler.step(state, pot, None)
        out.append(pot.parameters[0].detach().clone())
    return torch.stack(out, 1), sampler, state, pot


def test_every_gradient_sampler_warms_up():
    assert {"sgld", "sghmc", "sgnht", "tacthmc", "baoab", "hmc", "eqn", "pt-langevin"} <= set(WARM)


def test_windows_double_and_end_at_the_warm_up():
    assert windows(1000) == [150, 175, 225, 325, 900, 1000]
    assert windows(10) == [10] and windows(0) == []
    for n in (20, 57, 200, 4000):
        ends = windows(n)
        assert ends[-1] == n and ends == sorted(set(ends)) and ends[0] >= 5


def _weighted(self):
    """A curvature weight for the Gaussian targets, per member (a stand-in for a regressor's ``1 / sigma^2``)."""
    return torch.exp(self.parameters[0].detach()[:, 0].double())


@pytest.fixture(params=[False, True], ids=["unweighted", "weighted"])
def weighted(request, monkeypatch):
    """Run the test without and with a curvature weight on the targets (the warm-up then scales its curvature to
    the window's mean weight)."""
    if request.param:
        monkeypatch.setattr(FunctionPotential, "curvature_weight", _weighted, raising=False)
    return request.param


@pytest.mark.parametrize("name", WARM)
def test_a_warming_chain_does_not_depend_on_the_chains_beside_it(name, weighted):
    """Chain 1 starts 200 standard deviations out, so that the guard restarts it (its kinetic temperature
    explodes); chains 0 and 2 are bit for bit the chains run alone, through the warm-up and after it."""
    M = make_sampler(name, **warm_settings(name)).members_per_chain()
    start = torch.randn(3 * M, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    start[M:2 * M] *= 200.0
    together, _, state, _ = _run(name, 3, 80, seed=4, start=start)
    for k in (0, 2):
        assert_chain_alone_matches(name, warm_settings(name), start, together, k, M, seed=4, steps=80)


@pytest.mark.parametrize("name", ["sghmc", "sgnht", "baoab", "eqn", "hmc"])
def test_a_curvature_weight_changes_the_warm_up(name, monkeypatch):
    """The weighted runs of the tests above differ from the unweighted ones, so that they test the weighing (on
    this target sgld's, tacthmc's and pt-langevin's steps did not change)."""
    unweighted = _run(name, 3, 80, seed=4)[0]
    monkeypatch.setattr(FunctionPotential, "curvature_weight", _weighted, raising=False)
    assert not torch.equal(_run(name, 3, 80, seed=4)[0], unweighted)


@pytest.mark.parametrize("name", WARM)
def test_a_pickled_warming_state_continues_exactly(name, weighted):
    positions, sampler, state, pot = _run(name, 2, 25, seed=3)
    copy_sampler, copy_state = pickle.loads(pickle.dumps((sampler, state)))
    copy_pot = FunctionPotential(pot.fn, [pot.parameters[0].detach()])
    copy_state.replace_position(copy_pot.parameters)
    for _ in range(60):  # through the warm-up's last windows and its freeze
        state, _ = sampler.step(state, pot, None)
        copy_state, _ = copy_sampler.step(copy_state, copy_pot, None)
        assert torch.equal(pot.parameters[0], copy_pot.parameters[0])


@pytest.mark.parametrize("name", WARM)
def test_the_warm_up_freezes_and_reports(name):
    _, sampler, state, pot = _run(name, 2, 60, seed=1)
    assert state.warmup is None and state.warmup_report is not None
    assert state.warmup_report["n_steps"] == 60 and not state.warmup_report["settled"]  # (under 200 steps)
    step_size = state.precond.step_size.clone()
    mass = None if state.precond.inverse_mass is None else state.precond.inverse_mass.clone()
    for _ in range(30):
        state, _ = sampler.step(state, pot, None)
    assert torch.equal(state.precond.step_size, step_size)
    assert (mass is None and state.precond.inverse_mass is None) or torch.equal(state.precond.inverse_mass, mass)
    assert torch.isfinite(step_size).all() and (step_size > 0).all()


@pytest.mark.parametrize("name", WARM)
def test_an_explicit_step_size_is_not_adapted(name):
    """A step size the user sets is used as it is, with the identity mass (the papers' settings)."""
    _, sampler, state, _ = _run(name, 2, 40, seed=1, step_size=0.01)
    if name == "hmc":  # dual averaging starts from it, as documented; no mass is estimated
        assert state.precond.inverse_mass is None
        return
    assert state.precond.inverse_mass is None
    assert torch.all(state.precond.step_size == torch.tensor(0.01, dtype=state.precond.step_size.dtype))


def test_a_mass_never_divides_by_a_zero_or_non_finite_moment():
    layout = ChainLayout(2, 1)
    g1 = torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0]])
    g2 = torch.tensor([[0.0, 4.0, float("nan"), 9.0], [0.0, 0.0, 0.0, 0.0]])
    t1 = torch.zeros(2, 4)
    t2 = torch.tensor([[1.0, 1.0, 1.0, float("inf")], [1.0, 1.0, 1.0, 1.0]])
    m = mass_from_moments([g1, g2, t1, t2], 4, layout, False, torch.float32)
    assert torch.isfinite(m).all() and (m > 0).all()
    previous = torch.full((2, 4), 0.5)
    m = mass_from_moments([g1, g2, t1, t2], 4, layout, False, torch.float32, previous)
    assert torch.equal(m[1], previous[1])  # a member with no usable moment keeps its mass



def test_a_non_finite_gradient_in_a_window_keeps_that_coordinates_previous_mass():
    """The window's moments are plain sums (no per-step cleaning): a coordinate whose gradient was once NaN or
    infinite keeps its previous mass, while the others get the mass of their moments, ``sd(g) / sd(theta)``."""
    from bayesnet.samplers.warmup import WarmUp

    layout = ChainLayout(1, 1)
    warm = WarmUp(n_steps=100, ends=[100], adapt_mass=True, adapt_step=False)
    rng = np.random.default_rng(0)
    for step in range(40):
        theta = torch.tensor(rng.normal(size=(1, 3)), dtype=torch.float32)
        grad = theta * torch.tensor([1.0, 4.0, 9.0])  # curvatures 1, 4, 9: M = sd(g) / sd(theta)
        if step == 7:
            grad[0, 1] = float("nan")
        if step == 8:
            grad[0, 2] = float("inf")
        warm.record([grad], [theta])
    previous = torch.full((1, 3), 0.25)
    inverse_mass = mass_from_moments(warm.moments, warm.count, layout, False, torch.float32, previous)
    assert inverse_mass[0, 0].item() == pytest.approx(1.0, rel=1e-5)  # 1 / M for curvature 1
    assert inverse_mass[0, 1].item() == 0.25 and inverse_mass[0, 2].item() == 0.25

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_coordinate_far_from_zero_keeps_its_variance(dtype):
    """A coordinate at 1000 with a spread of 0.01 (a bias the data pin down): plain float32 sums of theta^2
    (about 4e7 over a window) cannot hold a variance of 1e-4, and its mass came out of rounding. The moments are
    sums about the window's first values, so the mass is the curvature, sd(g) / sd(theta), here 1 and 400."""
    from bayesnet.samplers.warmup import WarmUp

    layout = ChainLayout(1, 1)
    warm = WarmUp(n_steps=100, ends=[100], adapt_mass=True, adapt_step=False)
    rng = np.random.default_rng(0)
    centre, curvature = torch.tensor([0.0, 1000.0], dtype=dtype), torch.tensor([1.0, 400.0], dtype=dtype)
    for _ in range(40):
        theta = centre + torch.tensor(rng.normal(size=(1, 2)), dtype=dtype) * torch.tensor([1.0, 0.01], dtype=dtype)
        warm.record([(theta - centre) * curvature], [theta])
    inverse_mass = mass_from_moments(warm.moments, warm.count, layout, False, dtype)
    np.testing.assert_allclose(1.0 / inverse_mass[0].double().numpy(), [1.0, 400.0], rtol=1e-3)


def test_the_sums_match_per_tensor_sums_and_an_older_pickle_continues():
    """The window's sums are one buffer; read as ``moments`` they are the per-tensor sums about the window's first
    values, bit for bit (the arithmetic of the per-tensor form, coordinate by coordinate). A state pickled
    mid-window by a version that kept one tensor per sum (``moments`` and ``origin`` as lists) continues into
    the same sums."""
    from bayesnet.samplers.warmup import WarmUp

    rng = torch.Generator().manual_seed(0)
    steps = [([torch.randn(2, 3, 4, generator=rng), torch.randn(2, 3, generator=rng) * 1e-3],
              [torch.randn(2, 3, 4, generator=rng) + 50.0, torch.randn(2, 3, generator=rng)]) for _ in range(12)]
    steps[5][0][1][1, 2] = float("nan")
    warm = WarmUp(n_steps=100, ends=[100], adapt_mass=True, adapt_step=False)
    origin = [x.clone() for x in steps[0][0] + steps[0][1]]
    sums = None
    for i, (g, t) in enumerate(steps):
        warm.record(g, t)
        d = [a - b for a, b in zip(g + t, origin)]
        parts = [*d[:2], *[x * x for x in d[:2]], *d[2:], *[x * x for x in d[2:]]]
        sums = parts if sums is None else [a + b for a, b in zip(sums, parts)]
        if i == 6:  # the older form's state, mid-window
            old = {k: v for k, v in pickle.loads(pickle.dumps(warm)).__dict__.items()
                   if k not in ("sums", "shapes", "n_grads", "scratch", "scratch_views")}
            old["moments"], old["origin"] = [x.clone() for x in sums], [x.clone() for x in origin]
            older = WarmUp.__new__(WarmUp)
            older.__setstate__(old)
            again = pickle.loads(pickle.dumps(warm))
        elif i > 6:
            older.record(g, t)
            again.record(g, t)
    for w in (warm, older, again):
        assert w.count == 12 and len(w.moments) == 8
        for a, b in zip(w.moments, sums):
            assert a.shape == b.shape and torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))
    assert torch.isnan(warm.moments[1][1, 2]) and torch.isnan(warm.moments[3][1, 2])


# ---------------------------------------------------------------------- #
# statistics: warmed-up kernels sample the target
# ---------------------------------------------------------------------- #
#: the allowance for discretisation bias at the warmed-up step sizes, in standard deviations (relative
#: covariance): the samplers' stability rules put the stiffest direction at step * lambda <= 0.1-0.3
#: (sgld's variance inflation 1 / (1 - 0.05), sghmc's 1 / (1 - 0.3 / 4)), twice the statistical suite's 0.03
WARM_ALLOWANCE = 0.06


@pytest.mark.parametrize("name", WARM)
def test_warmed_up_samplers_keep_the_gaussian(name):
    """512 chains started at exact draws of the correlated Gaussian warm up for 300 steps (step size and
    mass adapted) and then keep its mean and covariance: ESS-derived tolerances (4 Monte Carlo standard
    errors) plus ``WARM_ALLOWANCE``."""
    C, warm, steps = 512, 300, 1500
    sampler = make_sampler(name, **warm_settings(name, warm))
    M = sampler.members_per_chain()
    target = correlated_gaussian(C * M, per_chain=True)
    with torch.no_grad():
        target.potential.parameters[0].copy_(torch.as_tensor(
            np.random.default_rng(3).multivariate_normal(target.mean, target.cov, size=C * M)))
    state = sampler.init(target.potential.parameters, ChainRandom(2, C), n_chains=C)
    kept, flags = [], []
    for k in range(1, steps + 1):
        state, info = sampler.step(state, target.potential, None)
        if k > warm and k % 10 == 0:
            kept.append(target.potential.parameters[0].detach().numpy().copy())
            d = info.is_draw
            flags.append(d.numpy() if isinstance(d, torch.Tensor) else np.full(C * M, bool(d)))
    draws, flags = np.stack(kept, 1), np.stack(flags, 1)
    draws = draws[flags.all(axis=1)]  # the members whose every kept step is a draw (tacthmc, pt-langevin's cold)
    err = moment_errors(draws, target.mean, target.cov)
    print(name, {k: round(float(v), 4) for k, v in err.items()}, state.warmup_report["step_sizes"][-1].mean())
    assert err["ess"] > 300
    assert err["mean_err"] <= err["mean_tol"] + WARM_ALLOWANCE
    assert err["cov_err"] <= err["cov_tol"] + WARM_ALLOWANCE


def _ess_per_gradient(name, preconditioner, C=256, warm=1000, steps=6000):
    """Min ESS over the mean and variance statistics per gradient evaluation (warm-up included), and the
    moment errors, on the axis-aligned 10-D Gaussian of condition number 100 at step size 0.02 (in the
    preconditioned units: eta * lambda_max = 0.02 once the mass matches the target)."""
    target = ill_conditioned_gaussian(C, rotate=False)
    pot = target.potential
    calls = {"n": 0}
    inner = pot.value_and_grad

    def counted(batch=None):
        calls["n"] += 1
        return inner(batch)

    pot.value_and_grad = counted
    sampler = make_sampler(name, step_size=0.02, preconditioner=preconditioner,  # sghmc at its default friction
                           adaptation_steps=warm if preconditioner else 0)
    state = sampler.init(pot.parameters, ChainRandom(0, C), n_chains=C)
    kept = []
    for k in range(1, steps + 1):
        state, _ = sampler.step(state, pot, None)
        if k > warm and k % 10 == 0:
            kept.append(pot.parameters[0].detach().numpy().copy())
    draws = np.stack(kept, 1)
    err = moment_errors(draws, target.mean, target.cov)
    centred = draws - target.mean
    ess = min(min(effective_sample_size(draws[:, :, i]), effective_sample_size(centred[:, :, i] ** 2))
              for i in range(draws.shape[2]))
    return ess / calls["n"], err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgld", "sghmc"])
def test_the_diagonal_mass_buys_ten_times_the_ess_per_gradient(name):
    """Issue 13's row: on the axis-aligned 10-D Gaussian of condition number 100, the warmed-up diagonal mass
    gives at least 10x the smallest ESS per gradient of the identity mass at the same step size, both within
    the statistical suite's moment tolerances."""
    plain, err_plain = _ess_per_gradient(name, None)
    precond, err_precond = _ess_per_gradient(name, "diagonal")
    print(name, f"ESS/gradient identity {plain:.4f} diagonal {precond:.4f} ratio {precond / plain:.1f}",
          {k: round(float(v), 4) for k, v in err_precond.items()})
    for err in (err_plain, err_precond):
        assert err["mean_err"] <= err["mean_tol"] + 0.03 and err["cov_err"] <= err["cov_tol"] + 0.03, err
    assert precond >= 10 * plain


@pytest.mark.parametrize("halves", [[False, False, True, True], [False, True, False, True]])
def test_the_guard_reduces_an_interval_as_its_steps_would_one_by_one(halves, monkeypatch):
    """Between checks the guard only keeps each step's potential and kinetic temperature; the check reduces them
    at once. The flags and sums must be those of the per-step rules: a member is bad when any of its values is
    not finite; heat sums the kinetic temperatures with NaN as 0 and +inf as 1e300, over every step, and over
    the window's second half divided by the target; the potential sums per half, non-finite values replaced.
    Steps in order (as within a window) are split by slices, others by an index."""
    from bayesnet.samplers.warmup import WarmUp, _take_interval

    target = 2.0
    u = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), 6.0], [7.0, 8.0, float("inf")], [1.5, 2.5, 3.5]])
    t = torch.tensor([[1.0, 2.0, 3.0], [2.0, 2.0, float("inf")], [3.0, float("nan"), 1.0], [4.0, 1.0, 2.0]])
    late = torch.tensor(halves)
    if halves == sorted(halves):  # in order: slices, no index made (on a GPU its copy and the masks would wait)
        import bayesnet.samplers.warmup as warmup_module

        def no_index(*args, **kwargs):
            raise AssertionError("an in-order interval was split with an index")

        monkeypatch.setattr(warmup_module.torch, "as_tensor", no_index)
    warm = WarmUp(n_steps=100, ends=[100], adapt_mass=False, adapt_step=False,
                  pending=[(h, ui, ti) for h, ui, ti in zip(halves, u, t)])
    _take_interval(warm, target)
    assert warm.pending is None and warm.heat_count == 4 and warm.window_heat_count == 2
    assert warm.bad.tolist() == [False, True, True]
    heat = torch.nan_to_num(t.double(), nan=0.0, posinf=1e300)
    torch.testing.assert_close(warm.heat, heat.sum(0))
    torch.testing.assert_close(warm.window_heat, heat[late].sum(0) / target)
    clean = torch.nan_to_num(u.double(), nan=0.0, posinf=1e300, neginf=-1e300)
    torch.testing.assert_close(warm.window_potential[0], clean[~late].sum(0))
    torch.testing.assert_close(warm.window_potential[1], clean[late].sum(0))
    assert warm.window_potential_count == [2, 2]
    # the next interval adds to the window's sums; a sampler without a kinetic temperature leaves heat alone
    warm.pending = [(True, torch.tensor([1.0, 1.0, 1.0]), None)]
    warm.heat, warm.heat_count, warm.bad = None, 0, None
    _take_interval(warm, target)
    assert warm.heat is None and warm.bad.tolist() == [False, False, False]
    torch.testing.assert_close(warm.window_potential[1], clean[late].sum(0) + 1.0)
    assert warm.window_potential_count == [2, 3]


def test_the_step_is_measured_at_the_windows_typical_noise_level():
    """A regressor's data term curves as 1 / sigma^2 and sigma is sampled: the curvature measured where a chain
    let sigma grow is scaled to the window's mean of the curvature weight (never below the measurement), and
    left alone without a weight (categorical), before any check, or where the weight is not finite."""
    from bayesnet.samplers.warmup import WarmUp, _typical_curvature, _weigh

    class Weighted:
        def __init__(self):
            self.w = None

        def curvature_weight(self):
            return self.w

    pot, warm = Weighted(), WarmUp(n_steps=100, ends=[50, 100], adapt_mass=False, adapt_step=True)
    lam = torch.tensor([2.0, 2.0, 2.0], dtype=torch.float32)
    torch.testing.assert_close(_typical_curvature(warm, pot, lam), lam)  # nothing weighed yet
    for w in ([4.0, 1.0, 2.0], [4.0, 1.0, float("nan")], [4.0, 1.0, 2.0]):
        pot.w = torch.tensor(w)
        _weigh(warm, pot)
    assert warm.window_weight_count == 3
    pot.w = torch.tensor([0.5, 4.0, float("inf")])  # sigma grown 8-fold's square / shrunk / gone
    out = _typical_curvature(warm, pot, lam)
    assert out.dtype == lam.dtype
    torch.testing.assert_close(out, torch.tensor([2.0 * 4.0 / 0.5, 2.0, 2.0]))
    # at most MAX_GROWTH (16) times the previous window's curvature, or lam itself where that is larger
    warm.curvature = torch.tensor([0.25, 0.25, 0.25])
    torch.testing.assert_close(_typical_curvature(warm, pot, lam), torch.tensor([4.0, 2.0, 2.0]))
    pot.w = torch.tensor([0.01, 4.0, 2.0])  # a factor of 267: bounded by the first window's 16 x lam
    warm.curvature = None
    torch.testing.assert_close(_typical_curvature(warm, pot, lam), torch.tensor([32.0, 2.0, 2.0]))
    warm.curvature = torch.tensor([float("nan"), 0.25, 0.25])  # no finite bound: the measurement, unscaled
    torch.testing.assert_close(_typical_curvature(warm, pot, lam), torch.tensor([2.0, 2.0, 2.0]))
    # a categorical likelihood has no weight: nothing is weighed or scaled
    pot.w, cold = None, WarmUp(n_steps=100, ends=[50, 100], adapt_mass=False, adapt_step=True)
    _weigh(cold, pot)
    assert cold.window_weight is None
    torch.testing.assert_close(_typical_curvature(warm, pot, lam), lam)


def test_the_gaussian_likelihoods_curvature_weight_is_its_largest_precision():
    from bayesnet.likelihoods import GaussianLikelihood

    gamma = torch.log(torch.tensor([[0.5, 2.0], [4.0, 0.25]]))
    w = GaussianLikelihood(n_outputs=2).curvature_weight([gamma])
    torch.testing.assert_close(w, torch.tensor([2.0, 4.0], dtype=torch.float64))
    # float64: a float32 exp(-gamma) is 0 from gamma = 104 on, where the weight matters most
    far = GaussianLikelihood().curvature_weight([torch.tensor([[110.0]])])
    assert far.dtype == torch.float64 and far.item() > 0


def test_a_tiny_regression_at_a_larger_stability_margin_does_not_diverge(monkeypatch):
    """10 rows, 200 warm-up steps, SGHMC at ``eta lambda = 0.3`` (the default since 2026-11-27; set here so
    that the test keeps its meaning): before the curvature was taken at the window's typical noise level this
    chain let sigma^2 grow 40-fold in its last window, was given a step for that flat data term, and diverged
    20 steps after the freeze."""
    import warnings
    from bayesnet import BayesianMLPRegressor
    from bayesnet.samplers.sghmc import SGHMC

    monkeypatch.setattr(SGHMC, "stability", 0.3)
    rnd = np.random.RandomState(0)
    X, y = rnd.uniform(size=(10, 3)), np.r_[np.zeros(5), np.ones(5)]
    est = BayesianMLPRegressor(hidden_layer_sizes=(16,), n_draws=10, burn_in=200, thinning=2, batch_size=64,
                               random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    assert est.fit_status_["status"] == "complete"
    assert np.isfinite(est.predict(X)).all()


def test_a_tiny_regression_does_not_freeze_at_a_vanishing_step():
    """10 diabetes rows, the defaults: the chain let sigma grow so far that the prior dominated the curvature
    measured at the final window's start, and the unbounded noise-level factor (1.8e7) froze the step at 4e-9,
    1e-6 of the warm-up's (reported settled, the draws a point). Bounded, it freezes within the warm-up's
    range."""
    import warnings
    from sklearn.datasets import load_diabetes
    from bayesnet import BayesianMLPRegressor

    X, y = load_diabetes(return_X_y=True)
    rows = np.random.RandomState(3).choice(len(X), 10, replace=False)
    est = BayesianMLPRegressor(random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X[rows], y[rows])
    steps = [float(h.reshape(-1)[0]) for h in est.sampler_state_.warmup_report["step_sizes"]]
    assert steps[-1] > 1e-3 * max(steps[:-1]), steps  # (0.026 here; 1e-6 unbounded)


def _banana(p, b):
    x = p[0]
    return 0.5 * x[..., 0] ** 2 + 0.5 * (x[..., 1] - (x[..., 0] ** 2 - 1)) ** 2


def _banana_run(name, after=0):
    """128 chains of ``name`` on a banana target (x1 ~ N(0, 1), x2 | x1 ~ N(x1^2 - 1, 1)), started at exact draws,
    a 400-step warm-up and ``after`` more steps: the warm-up's report, the chains lost (non-finite or beyond 50,
    where the target has no mass) and the smallest frozen step over the median."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(128, generator=g, dtype=torch.float64)
    x2 = x1 ** 2 - 1 + torch.randn(128, generator=g, dtype=torch.float64)
    sampler = make_sampler(name, adaptation_steps=400)
    pot = FunctionPotential(_banana, [torch.stack([x1, x2], 1)])
    state = sampler.init(pot.parameters, 0, n_chains=128)
    for _ in range(400):
        state, _ = sampler.step(state, pot, None)
    report = state.warmup_report
    for _ in range(after):
        state, _ = sampler.step(state, pot, None)
    x = state.position[0].detach()
    lost = int((~torch.isfinite(x).all(-1) | (x.abs().amax(-1) > 50)).sum())
    sizes = state.precond.step_size
    return report, lost, float(sizes.min() / sizes.median())


@pytest.mark.parametrize("name", ["sgld", "sgnht", "baoab", "sghmc"])
def test_no_chain_is_lost_on_a_banana(name):
    """A helper's user test: on the banana, chains whose step was set from the curvature at one point near its centre
    blew up in its arms after the warm-up (baoab 27 of 128, sghmc 3) while the report said settled; SGLD chains ran
    out to 1e145 through finite potentials in their first ten steps and, that position their fallback, froze at
    steps of 1e-13 (4 of 128); SGNHT chains' fallback became a position one step into a divergence (2). Now the
    frozen step allows for half the largest curvature over the last window's positions, a potential risen a
    hundredfold is a divergence, and a fallback is confirmed by the next step's potential: no member's step
    vanishes, and baoab loses 2 chains, the others none (a fixed step cannot be stable on a target whose curvature
    grows without bound, only over the region the warm-up saw). Power: test_banana_guards_have_power."""
    _, lost, ratio = _banana_run(name, after=1000)
    assert lost <= (2 if name == "baoab" else 0) and ratio > 1e-2, (lost, ratio)


def test_banana_guards_have_power(monkeypatch):
    """Without the curvature over the window, baoab loses chains on the banana; without the potential's rise, SGLD
    members freeze at vanishing steps."""
    import bayesnet.samplers.warmup as warmup_module

    monkeypatch.setattr(warmup_module, "N_SPOTS", 0)
    assert _banana_run("baoab", after=1000)[1] > 6
    monkeypatch.setattr(warmup_module, "N_SPOTS", 12)
    monkeypatch.setattr(warmup_module, "RISE", math.inf)
    assert _banana_run("sgld")[2] < 1e-6


def test_a_hot_sgld_is_not_taken_for_a_divergence(monkeypatch):
    """The reviewer's catch: the potential's rise was measured against the kinetic temperature's target, 1 for SGLD
    whatever its own temperature, so chains of an SGLD at temperature 3000 on a 2-d Gaussian, in equilibrium at
    the mode, were restarted (34 times) and froze at a quarter of their step. Power: at the target temperature,
    the restarts come back."""
    def run():
        sampler = make_sampler("sgld", adaptation_steps=400, temperature=3000.0)
        pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(-1), [torch.zeros(8, 2, dtype=torch.float64)])
        state = sampler.init(pot.parameters, 0, n_chains=8)
        for _ in range(400):
            state, _ = sampler.step(state, pot, None)
        return state.warmup_report["restarts"]

    assert run() == 0
    import bayesnet.samplers.base as base_module
    original = base_module.Sampler._initial_warmup

    def at_target(self):
        warm = original(self)
        warm.temperature = 1.0
        return warm

    monkeypatch.setattr(base_module.Sampler, "_initial_warmup", at_target)
    assert run() > 5


def test_members_frozen_at_a_vanishing_step_have_not_settled(monkeypatch):
    """Members frozen at a vanishing step have not settled: SGLD on the banana without the potential's rise check
    (the fallback of two chains is a position far out in the tail; every restart there halves the step, to about
    1e-17 against the others' 0.3, never to move again) reported settled (a helper's user test); now the report
    says which members froze. Power: without the criterion the reason is another one."""
    import bayesnet.samplers.warmup as warmup_module

    monkeypatch.setattr(warmup_module, "RISE", math.inf)
    caught = _banana_run("sgld")[0]
    assert not caught["settled"] and caught["reason"].startswith("2 of 128 members froze at a step below 0.001")
    monkeypatch.setattr(warmup_module, "STUCK_STEP_RATIO", 0.0)
    assert "froze at a step below" not in (_banana_run("sgld")[0]["reason"] or "")


def _far_start(name, C=8, warm=1000, steps=1500):
    """``C`` chains of ``name`` at its defaults (``adaptation_steps=warm``) on a 4-D Gaussian N(1, 0.02^2 I),
    started at 0: 50 posterior sd from the mode, the potential 5,000 above its minimum. The warm-up's report and
    the moment errors of the draws kept every 5th step after it (per member, the steps that are draws)."""
    sd, mu = 0.02, 1.0
    sampler = make_sampler(name, adaptation_steps=warm)
    M = sampler.members_per_chain()
    pot = FunctionPotential(lambda p, b: 0.5 * (((p[0] - mu) / sd) ** 2).sum(-1),
                            [torch.zeros(C * M, 4, dtype=torch.float64)])
    state = sampler.init(pot.parameters, 0, n_chains=C)
    kept, flags, report = [], [], None
    for k in range(1, warm + steps + 1):
        state, info = sampler.step(state, pot, None)
        if k == warm:
            report = state.warmup_report
        if k > warm and k % 5 == 0:
            kept.append(pot.parameters[0].detach().numpy().copy())
            d = info.is_draw
            flags.append(d.numpy() if isinstance(d, torch.Tensor) else np.full(C * M, bool(d)))
    draws, flags = np.stack(kept, 1), np.stack(flags, 1)
    per = [x[f] for x, f in zip(draws, flags) if f.any()]  # (tacthmc's and pt-langevin's draws: the cold steps)
    n = min(len(p) for p in per)
    return report, moment_errors(np.stack([p[:n] for p in per]), np.full(4, mu), np.eye(4) * sd ** 2)


@pytest.mark.parametrize("name", WARM)
def test_chains_started_far_from_the_mode_reach_it(name):
    """A low-level user's test: chains started 50 sd from the mode, at full batch. The descent turns the potential
    energy it loses into heat (kinetic temperatures in the hundreds), which the guard took for a divergence: baoab's,
    sgnht's, sghmc's and hmc's chains were put back at their start at every check (61-320 restarts), their steps
    halved each time, and after the warm-up their means were 0.015-0.19 against 1.0, reported settled. Now a chain
    whose energy, potential plus kinetic, is below its fallback's potential is descending, not diverging: every
    sampler's draws keep the target's moments (ESS-based tolerances plus ``WARM_ALLOWANCE``). Power: the next
    test."""
    # (tacthmc keeps draws only on its plateau, about a fifth of its tempering variable's range, every 50th step:
    # 8,000 steps give its chains the draws the others have in 1,500)
    report, err = _far_start(name, steps=8000 if name == "tacthmc" else 1500)
    print(name, report["restarts"], {k: round(float(v), 4) for k, v in err.items()})
    assert report["settled"] and err["ess"] > 100
    assert err["mean_err"] <= err["mean_tol"] + WARM_ALLOWANCE
    assert err["cov_err"] <= err["cov_tol"] + WARM_ALLOWANCE


@pytest.mark.parametrize("name", ["baoab", "hmc"])
def test_far_start_has_power(name, monkeypatch):
    """Without the descent's exemption the heat restarts the chains at their start, and the test above fails."""
    import bayesnet.samplers.warmup as warmup_module

    monkeypatch.setattr(warmup_module, "_descending", lambda *args: None)
    report, err = _far_start(name)
    assert err["mean_err"] > 10 * (err["mean_tol"] + WARM_ALLOWANCE)


def _far_minibatch(name, warm=2000, steps=4000, C=4):
    """A linear regression (500 rows, 3 features and an intercept, known noise sd 0.5, N(0, 1) prior: a Gaussian
    posterior of sd about 0.02) by :class:`~bayesnet.posterior.ChainPosterior` on mini-batches of 50, ``C`` chains of
    ``name`` at its defaults started at N(0, 1) draws, 40-100 posterior sd from the mode. The warm-up's report and
    the moment errors of the draws kept every 5th step after the warm-up."""
    from torch import nn
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior

    dt, N, D, sig, B = torch.float64, 500, 3, 0.5, 50
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=g, dtype=dt) @ torch.tensor([[1.0, 0.5, 0], [0, 1, 0.3], [0, 0, 1]], dtype=dt)
    y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=dt) + 0.3 + sig * torch.randn(N, generator=g, dtype=dt)
    Xa = torch.cat([X, torch.ones(N, 1, dtype=dt)], 1)
    cov = torch.linalg.inv(Xa.T @ Xa / sig ** 2 + torch.eye(D + 1, dtype=dt))
    mean = cov @ (Xa.T @ y) / sig ** 2

    class KnownNoise(nn.Module):
        def forward(self, out, target):
            return (-0.5 * ((out.squeeze(-1) - target) / sig) ** 2).sum()

        def log_prior(self):
            return torch.zeros(())

    sampler = make_sampler(name, adaptation_steps=warm)
    S = C * sampler.members_per_chain()
    members = [[torch.randn(1, D, generator=g, dtype=dt), torch.randn(1, generator=g, dtype=dt)] for _ in range(S)]
    post = ChainPosterior(nn.Linear(D, 1).to(dt), KnownNoise(), GaussianPrior(1.0), N, members)
    state = sampler.init(post.parameters, 0, n_chains=C)
    order, at, kept = torch.randperm(N, generator=g), 0, []
    for k in range(1, warm + steps + 1):
        if at + B > N:
            order, at = torch.randperm(N, generator=g), 0
        rows = order[at:at + B]
        at += B
        state, info = sampler.step(state, post, (X[rows], y[rows]))
        if k == warm:
            report = state.warmup_report
        if k > warm and k % 5 == 0:
            kept.append(torch.cat([p.detach().reshape(S, -1) for p in post.parameters], 1).numpy().copy())
    return report, moment_errors(np.stack(kept, 1), mean.numpy(), cov.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgld", "sghmc", "baoab"])
def test_mini_batch_chains_started_far_from_the_mode_reach_it(name):
    """The same user's second test: on mini-batches, far from the mode the gradients' noise is hundreds of times
    its size at the mode (the residuals are), and a step kept cool there crawled: after a 2,000-step warm-up the
    chains had barely moved, the mass estimated from their crawl was off by up to 500x, R-hat 7-27 (means 40-120
    sd off), reported settled. Now the initial window, and any later one whose chain was still descending, runs at
    the stable step whatever the noise (the final window's step, which the kept draws use, keeps the full rule):
    sgld's, sghmc's and baoab's draws keep the posterior's moments (sgnht and tacthmc: the next test). baoab runs
    twice as long: its noise-capped step was halved with its noise budget (2026-11-29), and its ESS over 4,000
    steps fell to 8.5."""
    report, err = _far_minibatch(name, steps=8000 if name == "baoab" else 4000)
    print(name, report["restarts"], {k: round(float(v), 4) for k, v in err.items()})
    assert err["ess"] > 10
    assert err["mean_err"] <= err["mean_tol"] + WARM_ALLOWANCE
    assert err["cov_err"] <= err["cov_tol"] + WARM_ALLOWANCE


@pytest.mark.slow
def test_thermostat_chains_started_far_on_mini_batches_reach_the_mode():
    """The same for sgnht, whose friction (the Euler step ``(1 - z) r`` until 2026-11-29, which reverses and
    amplifies the momenta; now the exact flow ``e^-z r``, which stops them) fails once the descent's heat has pumped
    ``z`` above 1 (with the Euler step ``z`` was 61 after one step, 1e15 three steps later;
    the guard's restarts then halved the steps to 1e-6 and the chains froze 55 posterior sd out, R-hat in the
    thousands). While the warm-up has not seen a member cool, and while its last check found it hot but
    descending, its ``z`` is capped at ``WARMUP_MAX_FRICTION`` (1): the means now come within their ESS tolerance.
    The covariance is not asserted: the scalar thermostat leaves this problem's anisotropic mini-batch noise in the
    covariance from a start at the mode as well (off by 0.42 there and from 0, against a tolerance of 0.19), which is
    the kernel's, not the start's. (tacthmc's kernel shares the cap; on this 4-D problem a frozen chain of its
    diverged now and then with the paper's Euler friction step; with the exact flow, its default since 2026-11-29,
    its means came within the tolerance at seed 0.)"""
    report, err = _far_minibatch("sgnht")
    print(report["restarts"], {k: round(float(v), 4) for k, v in err.items()})
    assert err["ess"] > 10
    assert err["mean_err"] <= err["mean_tol"] + WARM_ALLOWANCE


def test_the_thermostat_cap_has_power(monkeypatch):
    """Without the cap, sgnht's chains from the far start do not reach the mode."""
    import bayesnet.samplers.warmup as warmup_module

    monkeypatch.setattr(warmup_module, "WARMUP_MAX_FRICTION", math.inf)
    _, err = _far_minibatch("sgnht", warm=300, steps=200)
    assert not err["mean_err"] <= err["mean_tol"] + WARM_ALLOWANCE


def _unstable(name, factor=10.0, warm=400, after=200, C=8, start=0.0, seed=(1, 0)):
    """``C`` chains of ``name`` on a 4-D standard Gaussian, started at exact draws (plus ``start``), whose warm-up's
    every step is ``factor`` times the one its rule gives (unstable for every kernel): the report and the positions
    at the end. ``seed``: the start's and the chains' seeds."""
    sampler = make_sampler(name, adaptation_steps=warm)
    rule = sampler.warmup_step_size
    sampler.warmup_step_size = lambda lam, rho: factor * rule(lam, rho)
    g = torch.Generator().manual_seed(seed[0])
    pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(-1),
                            [start + torch.randn(C * sampler.members_per_chain(), 4, generator=g, dtype=torch.float64)])
    state = sampler.init(pot.parameters, seed[1], n_chains=C)
    for k in range(1, warm + after + 1):
        state, _ = sampler.step(state, pot, None)
        if k == warm:
            report = state.warmup_report
    return report, pot.parameters[0].detach()


@pytest.mark.parametrize("name", WARM)
def test_an_unstable_step_loses_no_chain_that_the_report_calls_settled(name):
    """A reviewer's check of the descent's exemption (a chain whose energy falls is not diverging): with every
    window's step 10x the stable one, no chain escapes the guard into a divergence while the warm-up reports
    settled: either the chains end finite and within 10 sd, or the report says the warm-up did not settle
    (tacthmc's and eqn's). Power: without the guard's restarts, chains are lost under a settled report."""
    report, x = _unstable(name)
    kept = bool(torch.isfinite(x).all()) and float(x.abs().max()) < 10.0
    assert kept or not report["settled"], (report["settled"], float(x.abs().nan_to_num(1e308).max()))


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_tacthmc_tries_its_frozen_step_untempered(seed):
    """tacthmc's final window runs the untempered kernel (``lambda = 1``, where its kick, noise and friction are
    strongest), so that the step it freezes has been tried where the kept chain is least stable. Before, a chain
    that spent the final window hot passed a step 10x the rule's, froze at 2.5x it under a settled report and left
    the typical set after the freeze (6 of 12 seeds, these among them; 2 of 12 now: a thermostat instability that
    grows over more steps than a 40-step final window shows, as for sgnht)."""
    report, x = _unstable("tacthmc", seed=(seed, seed))
    kept = bool(torch.isfinite(x).all()) and float(x.abs().max()) < 10.0
    assert kept or not report["settled"], (report["settled"], float(x.abs().nan_to_num(1e308).max()))


def test_tacthmc_final_window_holds_the_tempering_and_the_freeze_resumes_it():
    """Through the warm-up's final window every chain's tempering variable sits at the plateau's centre (effective
    temperature 1 at every step), before it the chains temper, and after the freeze they temper again (the
    tempering momentum drawn afresh: at the centre nothing else would move it)."""
    sampler = make_sampler("tacthmc", adaptation_steps=200)
    g = torch.Generator().manual_seed(0)
    pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(-1), [torch.randn(4, 6, generator=g, dtype=torch.float64)])
    state = sampler.init(pot.parameters, 0, n_chains=4)
    final = state.warmup.ends[-2]
    heat = []
    for _ in range(600):
        state, info = sampler.step(state, pot, None)
        heat.append(info.extra["effective_temperature"].clone())
    heat = torch.stack(heat)  # (step, chain); row k is step k + 1, whose xi is the one it started from
    assert final == 180 and state.warmup is None
    assert (heat[:final] > 1.0 + 1e-9).any()  # tempering before the final window
    assert torch.allclose(heat[final:200], torch.ones_like(heat[final:200]))
    assert (heat[200:] > 1.0 + 1e-9).any(dim=0).all()  # every chain tempers again after the freeze


@pytest.mark.parametrize("biasing", ["metadynamics", "abf"])
def test_tacthmc_final_window_leaves_the_biasing_table_as_it_was(biasing):
    """A reviewer's finding: the held final window ran the whole update at ``xi = 0``, so metadynamics deposited a
    hill on the centre's bin at every held step (20 times the table's largest value elsewhere), and the chains
    stayed off the plateau after the freeze; ABF averaged the held steps' zero force into a bin straddling the
    plateau's edge. The table and its visits are the same at the freeze as at the final window's start."""
    sampler = make_sampler("tacthmc", adaptation_steps=200, biasing=biasing, n_bins=3 if biasing == "abf" else 50)
    g = torch.Generator().manual_seed(0)
    pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(-1),
                            [torch.randn(4, 6, generator=g, dtype=torch.float64)])
    state = sampler.init(pot.parameters, 0, n_chains=4)
    final = state.warmup.ends[-2]
    for k in range(1, 201):
        state, _ = sampler.step(state, pot, None)
        if k == final:
            table = state.bias.clone(), state.bin_visits.clone()
    assert torch.equal(state.bias, table[0]) and torch.equal(state.bin_visits, table[1])
    assert table[1].sum() == 4 * final  # (it learnt before the window: one visit per chain and step)
    for _ in range(100):  # and learns again after the freeze
        state, _ = sampler.step(state, pot, None)
    assert state.bin_visits.sum() == 4 * (final + 100)


def test_the_noise_variance_draw_is_its_conjugate_conditional():
    """A regressor's noise variance given the outputs: sigma^2 ~ IG(a + N/2, b + (N/n) |y - mu|^2 / 2), each chain
    from its own stream; checked against the inverse-gamma's mean and variance over 4,000 members."""
    from bayesnet.likelihoods import GaussianLikelihood

    S, n, N = 4000, 50, 200
    lik = GaussianLikelihood(1, noise_shape=1.0, noise_scale=0.1)
    g = torch.Generator().manual_seed(0)
    y = torch.randn(n, 1, generator=g, dtype=torch.float64)
    mean = y.unsqueeze(0) + 0.3 * torch.randn(1, n, 1, generator=g, dtype=torch.float64).expand(S, n, 1)
    (gamma,) = lik.conditional_draw(mean, y, [torch.zeros(S, 1)], N, ChainRandom(0, n_chains=S))
    a, b = 1.0 + N / 2, 0.1 + (N / n) * float(((y - mean[0]) ** 2).sum()) / 2
    var = torch.exp(gamma).reshape(-1)
    want_mean, want_sd = b / (a - 1), b / ((a - 1) * math.sqrt(a - 2))
    assert abs(float(var.mean()) - want_mean) < 4 * want_sd / math.sqrt(S)
    assert abs(float(var.std()) / want_sd - 1) < 0.1
    first = lik.conditional_draw(mean[:2], y, [torch.zeros(2, 1)], N, ChainRandom(0, n_chains=2))[0]
    assert torch.equal(first[0], gamma[0]) and torch.equal(first[1], gamma[1])  # chain k's draw is chain k's alone
    # rows given more than once (the warm-up's last four batches of a full-batch fit are four copies of the data)
    # stand for the same N rows: the same conditional (a reviewer's finding: counted as 4N rows, it was half as wide)
    four = lik.conditional_draw(mean[:2].repeat(1, 4, 1), y.repeat(4, 1), [torch.zeros(2, 1)], N,
                                ChainRandom(0, n_chains=2))[0]
    assert torch.allclose(four, first, rtol=1e-12, atol=0)


def test_the_warm_up_lowers_only_a_lagging_noise_variance():
    """``likelihood_update(lag=3)`` (the warm-up's) replaces a member's log noise variance by its conditional draw
    only where it lies more than 3 conditional sds above it: a noise variance that lags behind a network still
    fitting is pulled down, one near its conditional, or below it, is the sampler's to move (raised, the noise
    would absorb the misfit of a network not yet fitted: raw inputs of 1e9 then ran to a useless fit instead of a
    DivergenceError that names them)."""
    from torch import nn
    from bayesnet.likelihoods import GaussianLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior

    dt, N = torch.float64, 300
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, 3, generator=g, dtype=dt)
    y = (X @ torch.tensor([1.0, -0.5, 0.5], dtype=dt) + 0.1 * torch.randn(N, generator=g, dtype=dt)).reshape(N, 1)
    truth = math.log(0.01)
    members = [[torch.tensor([[1.0, -0.5, 0.5]], dtype=dt), torch.zeros(1, dtype=dt), torch.full((1,), gamma, dtype=dt)]
               for gamma in (truth + 4.0, truth, truth - 4.0)]
    post = ChainPosterior(nn.Linear(3, 1).to(dt), GaussianLikelihood(1), GaussianPrior(1.0), N, members)
    assert post.likelihood.conditional_spread(N) == pytest.approx(math.sqrt(2 / N), rel=0.02)
    assert post.likelihood_update([(X[:100], y[:100]), (X[100:], y[100:])], ChainRandom(0, n_chains=3), lag=3.0)
    gamma = post.parameters[-1].detach().reshape(-1)
    assert abs(float(gamma[0]) - truth) < 0.3  # the lagging one: drawn
    assert float(gamma[1]) == truth and float(gamma[2]) == truth - 4.0  # within the lag, and below: kept


def test_scale_moves_count_repeated_rows_once():
    """The warm-up's scale moves on its last four batches: on the full data those are four copies of it, which stand
    for the N rows (before: counted as 4N, the likelihood's change four times its value and the noise penalty,
    (N^2/B)(1 - B/N) var, negative, a bonus; a reviewer's finding). Four copies now make the moves one copy makes."""
    from torch import nn
    from bayesnet.likelihoods import CategoricalLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import HierarchicalPrior

    g = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=g)
    y = (X[:, 0] > 0).long()

    def moved(batches):
        torch.manual_seed(0)
        module = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
        members = [[p.detach().clone() for p in module.parameters()] for _ in range(4)]
        post = ChainPosterior(module, CategoricalLikelihood(), HierarchicalPrior(), 60, members)
        rates = post.scale_move(batches, ChainRandom(0, n_chains=4))
        return rates, [p.detach().clone() for p in post.parameters]

    one, four = moved([(X, y)]), moved([(X, y)] * 4)
    assert torch.allclose(one[0], four[0])
    assert all(torch.allclose(a, b, rtol=1e-5) for a, b in zip(one[1], four[1]))


def _noisy_regression(sampler_name, gamma0=math.log(100.0), warm=200, steps=30, C=4):
    """A linear regression (300 rows, noise sd 0.1) by ChainPosterior with a sampled noise variance started at
    ``exp(gamma0)``, batches of 50: after ``steps`` steps of a ``warm``-step warm-up, every member's log noise
    variance and the log of its mean squared residual on all the rows."""
    from torch import nn
    from bayesnet.likelihoods import GaussianLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior

    dt, N, B = torch.float64, 300, 50
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, 3, generator=g, dtype=dt)
    y = (X @ torch.tensor([1.0, -0.5, 0.5], dtype=dt) + 0.1 * torch.randn(N, generator=g, dtype=dt)).reshape(N, 1)
    sampler = (make_sampler(sampler_name, adaptation_steps=warm) if isinstance(sampler_name, str) else
               sampler_name)  # (or a sampler with other settings)
    members = [[torch.tensor([[1.0, -0.5, 0.5]], dtype=dt), torch.zeros(1, dtype=dt), torch.full((1,), gamma0, dtype=dt)]
               for _ in range(C * sampler.members_per_chain())]
    post = ChainPosterior(nn.Linear(3, 1).to(dt), GaussianLikelihood(1), GaussianPrior(1.0), N, members)
    state = sampler.init(post.parameters, 0, n_chains=C)
    for k in range(steps):
        rows = slice((k % (N // B)) * B, (k % (N // B) + 1) * B)
        state, _ = sampler.step(state, post, (X[rows], y[rows]))
    with torch.no_grad():
        resid = ((post.outputs(X) - y) ** 2).mean((1, 2))
    return post.parameters[-1].detach().reshape(-1), torch.log(resid), state


@pytest.mark.parametrize("name", ["sgld", "sghmc", "sgnht", "baoab", "hmc", "eqn"])
def test_the_warm_up_draws_the_noise_variance_at_a_window_end(name, monkeypatch):
    """At the first window's end (step 30 of a 200-step warm-up) every member's noise variance is drawn from its
    conditional given the network's outputs on the last mini-batches: a noise sd started 1,000 times the residuals'
    is then within a factor of about 1.3 of them, for every sampler at temperature 1. Without the draw the
    gradient samplers' are still far off (power; hmc's leapfrog trajectories get there on their own).
    pt-langevin and tacthmc temper: theirs stays as the kernel left it (the next test)."""
    import bayesnet.samplers.warmup as warmup_module

    assert warmup_module.windows(200)[0] == 30
    gamma, log_resid, state = _noisy_regression(name)
    assert (gamma - log_resid).abs().max() < 0.5, (gamma, log_resid)
    if name != "hmc":  # (hmc's trajectories had brought the noise near its conditional already: no draw taken)
        # the guard's fallback took the drawn values too (a restart would otherwise put the lagging noise back)
        assert torch.equal(state.warmup.backup[-1].reshape(-1), gamma.to(state.warmup.backup[-1].dtype))
        monkeypatch.setattr(warmup_module, "settle_likelihood", lambda *args: False)
        gamma, log_resid, _ = _noisy_regression(name)
        assert (gamma - log_resid).abs().min() > 2.0, (gamma, log_resid)


@pytest.mark.parametrize("name", ["pt-langevin", "tacthmc"])
def test_tempering_samplers_keep_their_noise_variance(name, monkeypatch):
    """The draw is the untempered conditional: a sampler that tempers makes none."""
    import bayesnet.samplers.warmup as warmup_module

    from bayesnet.posterior import ChainPosterior

    calls = []
    monkeypatch.setattr(ChainPosterior, "likelihood_update", lambda self, batches, rng, lag=None: calls.append(1) or {})
    _noisy_regression(name)
    assert not calls
    monkeypatch.setattr(warmup_module, "settle_likelihood", warmup_module.settle_likelihood)  # (the check's power:)
    _noisy_regression("sghmc")
    assert calls


def test_the_gaussian_likelihoods_own_curvature_and_noise():
    """What the warm-up's mass for a regressor's log noise variance reads from the residuals: at its conditional's
    mode the curvature is ``a + N/2`` and, for Gaussian residuals, one row's gradient ``(z - 1)/2`` (``z`` a
    chi-square on one degree) has variance 1/2; a member above its mode is read at the mode (where it is going), one
    below it where it is (its curvature and noise are larger there, by ``e`` and ``e^2`` one unit below); heavier
    tails, a larger variance (Laplace residuals: 5/4). The posterior scales the row variance to a mini-batch of
    ``n`` rows drawn without replacement, ``N^2 (N - n) / (n (N - 1))`` times it, 0 on the full data."""
    from torch import nn
    from bayesnet.likelihoods import GaussianLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior

    dt, n, N = torch.float64, 40000, 80000
    lik = GaussianLikelihood(1, noise_shape=1.0, noise_scale=0.1)
    g = torch.Generator().manual_seed(0)
    y = torch.zeros(n, 1, dtype=dt)

    def read(resid):
        mean = (y - resid).unsqueeze(0).expand(3, n, 1)
        rate = 0.1 + 0.5 * (N / n) * float((resid ** 2).sum())
        mode = math.log(rate / (1.0 + N / 2))
        gamma = torch.tensor([[mode + 2.0], [mode], [mode - 1.0]], dtype=dt)
        ((curv, var),) = lik.parameter_curvature_and_noise(mean, y, [gamma], N)
        return curv.reshape(-1), var.reshape(-1)

    curv, var = read(0.3 * torch.randn(n, 1, generator=g, dtype=dt))
    assert curv[0] == pytest.approx(1.0 + N / 2, rel=1e-9) and curv[1] == pytest.approx(1.0 + N / 2, rel=1e-9)
    assert curv[2] == pytest.approx(math.e * (1.0 + N / 2), rel=1e-9)
    assert var[0] == pytest.approx(0.5, rel=0.06) and var[1] == var[0]
    assert var[2] == pytest.approx(math.e ** 2 * float(var[0]), rel=1e-9)
    laplace = 0.3 * (torch.rand(n, 1, generator=g, dtype=dt) - 0.5).sign() * torch.empty(n, 1, dtype=dt).exponential_(
        generator=g)
    assert read(laplace)[1][1] == pytest.approx(1.25, rel=0.12)

    X = torch.randn(300, 3, generator=g, dtype=dt)
    Y = X @ torch.ones(3, 1, dtype=dt) + 0.1 * torch.randn(300, 1, generator=g, dtype=dt)
    members = [[torch.ones(1, 3, dtype=dt), torch.zeros(1, dtype=dt), torch.full((1,), math.log(0.01), dtype=dt)]]
    post = ChainPosterior(nn.Linear(3, 1).to(dt), lik, GaussianPrior(1.0), 300, members)
    ((index, (curv, noise)),) = post.likelihood_curvature_and_noise([(X, Y)], 50).items()
    ((_, row_var),) = lik.parameter_curvature_and_noise(post.outputs(X), Y, post.parameters[2:], 300)
    assert index == 2 and torch.allclose(noise, 300 ** 2 * 250 / (50 * 299) * row_var, rtol=1e-12)
    assert torch.all(post.likelihood_curvature_and_noise([(X, Y)], 300)[2][1] == 0)


def _linear_regression(sampler_name, warm, steps, C=4, batch=50, seed=0):
    """A linear regression (300 rows, 3 features, noise sd 0.1, weights and bias ~ N(0, 1), noise variance ~
    IG(1, 0.1)) sampled by ChainPosterior in shuffled mini-batches of ``batch`` rows, started at the truth: the
    kept draws of every member's log noise variance (C, steps), the final state, and the data."""
    from torch import nn
    from bayesnet.likelihoods import GaussianLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior

    dt, N = torch.float64, 300
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, 3, generator=g, dtype=dt)
    y = (X @ torch.tensor([1.0, -0.5, 0.5], dtype=dt) + 0.1 * torch.randn(N, generator=g, dtype=dt)).reshape(N, 1)
    sampler = (make_sampler(sampler_name, adaptation_steps=warm) if isinstance(sampler_name, str) else
               sampler_name)  # (or a sampler with other settings)
    members = [[torch.tensor([[1.0, -0.5, 0.5]], dtype=dt), torch.zeros(1, dtype=dt),
                torch.full((1,), math.log(0.01), dtype=dt)] for _ in range(C * sampler.members_per_chain())]
    post = ChainPosterior(nn.Linear(3, 1).to(dt), GaussianLikelihood(1, noise_shape=1.0, noise_scale=0.1),
                          GaussianPrior(1.0), N, members)
    state = sampler.init(post.parameters, seed, n_chains=C)
    kept = []
    for k in range(warm + steps):
        if k % (N // batch) == 0:
            order = torch.randperm(N, generator=g)
        rows = order[(k % (N // batch)) * batch:(k % (N // batch) + 1) * batch]
        state, _ = sampler.step(state, post, (X[rows], y[rows]))
        if k >= warm:
            kept.append(post.parameters[-1].detach().reshape(-1).clone())
    return torch.stack(kept, 1), state, X, y


def _log_noise_marginal(X, y, noise_shape, noise_scale):
    """Mean and sd of the linear regression's log noise variance under its exact marginal posterior (the weights
    and bias, N(0, 1) a priori, integrated out: ``y ~ N(0, A A^T + sigma^2 I)``), on a grid."""
    A = torch.cat([X, torch.ones(X.shape[0], 1, dtype=X.dtype)], 1)
    d, U = torch.linalg.eigh(A @ A.T)
    r2 = (U.T @ y.reshape(-1)) ** 2
    grid = torch.linspace(-8.0, 2.0, 20001, dtype=torch.float64)
    v = d.clamp_min(0) + torch.exp(grid)[:, None]
    log_p = -0.5 * (torch.log(v) + r2 / v).sum(1) - noise_shape * grid - noise_scale * torch.exp(-grid)
    w = torch.exp(log_p - log_p.max())
    w = w / w.sum()
    mean = float((w * grid).sum())
    return mean, float((w * (grid - mean) ** 2).sum().sqrt())


@pytest.mark.parametrize("name, settings, step", [("sgld", {}, 0.01), ("sghmc", dict(friction=0.05), 0.01),
                                                   ("baoab", dict(friction=1.0), 0.3), ("eqn", dict(n_walkers=1), 0.3)])
def test_the_coordinate_noise_budget_is_the_heat_the_kernel_adds(name, settings, step):
    """``coordinate_noise_budget()`` is what the mini-batch noise may reach, as ``step m V``, for a 5 % heat: with
    gradient noise of 10 times that (``step V = 10 budget``) on a unit Gaussian, the position's variance runs 50 %
    above 1 (2,000 chains, 1,500 steps after 500; within 0.1). Power: baoab's and eqn's budget was twice this
    (``4 friction HEAT``), and their variance then ran 100 % above (their cached gradient's noise enters as one full
    kick a step). The thermostats' budgets are bounds, not the heat (their own friction absorbs the noise)."""
    from bayesnet.samplers.warmup import HEAT

    sampler = make_sampler(name, step_size=step, **settings)
    noise = math.sqrt(10 * sampler.coordinate_noise_budget() / step)
    C = 2000
    g = torch.Generator().manual_seed(1)
    pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(-1), [torch.zeros(C, 1, dtype=torch.float64)],
                            gradient_noise=noise, generator=g)
    state = sampler.init(pot.parameters, 0, n_chains=C)
    total, count = 0.0, 0
    for k in range(2000):
        state, _ = sampler.step(state, pot, None)
        if k >= 500:
            total, count = total + float(pot.parameters[0].detach().square().mean()), count + 1
    assert abs(total / count - 1 - 10 * HEAT) < 0.1, total / count


@pytest.mark.parametrize("name, batch, seed", [("sgld", 50, 0), ("sghmc", 50, 0), ("baoab", 50, 0), ("hmc", 50, 0),
                                               ("eqn", 50, 0), ("sgnht", 50, 0), ("tacthmc", 50, 0), ("sghmc", 300, 0),
                                               ("sghmc", 50, 2)])
def test_the_warm_up_gives_the_noise_variance_the_lightest_mass_its_noise_allows(name, batch, seed, monkeypatch):
    """At every step size it sets, the warm-up raises the log noise variance's inverse mass to its heat bound
    (``coordinate_noise_budget() / (eta V)``, from the mini-batch noise ``V`` the posterior reads off the residuals)
    where that bound lies below its stability bound (``lambda / k``, ``k`` its curvature), lowers it to that bound
    at the final window's start (the step the kept draws use), and leaves every network coordinate as the window's
    moments set it (sgnht and tacthmc, whose thermostat's budget is small: lowered only). The frozen kernel keeps
    the last mass set. On
    the full batch (no noise), for hmc (a step tuned on acceptance, no noise budget) and for eqn (several walkers
    per chain share a mass: a raised one re-averaged every chain's, not bit-exact in float32) the mass is the
    moments' alone."""
    import bayesnet.samplers.warmup as warmup_module

    calls, original = [], warmup_module.likelihood_mass

    def spy(sampler, state, potential, batch, transform=None):
        before = state.precond.inverse_mass.clone()
        seen = {}
        read = potential.likelihood_curvature_and_noise
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(type(potential), "likelihood_curvature_and_noise",
                          lambda self, *a: seen.update(read(*a)) or dict(seen))
            changed = original(sampler, state, potential, batch, transform)
        budget = sampler.coordinate_noise_budget() if sampler.members_per_chain() == 1 else None
        calls.append((before, state.precond.inverse_mass.clone(), state.precond.step_size.clone(),
                      state.warmup.curvature.clone(), seen, budget, changed, state.step))
        return changed

    monkeypatch.setattr(warmup_module, "likelihood_mass", spy)
    _, state, _, _ = _linear_regression(name, warm=400, steps=1, batch=batch, seed=seed)
    assert calls
    raised = lowered = 0
    final_start = windows(400)[-2]
    for before, after, eta, lam, seen, budget, changed, step in calls:
        assert torch.equal(after[:, :-1], before[:, :-1])  # the network's coordinates: the moments' masses
        if budget is None:
            assert torch.equal(after, before) and not changed
            continue
        ((_, (curv, noise)),) = seen.items()
        heat = budget / (eta.double() * noise.reshape(-1))
        stable = lam.double() / curv.reshape(-1)
        m = before[:, -1].double()
        want = torch.where((heat < stable) & ((heat > m) | (step == final_start)), heat, m)
        assert torch.allclose(after[:, -1].double(), want, rtol=1e-6)
        assert changed == bool((after != before).any())
        raised += int((after[:, -1] > before[:, -1]).sum())
        lowered += int((after[:, -1] < before[:, -1]).sum())
    assert (raised > 0) == (name in ("sgld", "sghmc", "baoab") and batch < 300)
    if name in ("sgnht", "tacthmc"):  # (their budget, 2 noise HEAT = 0.005, lies below the moments' mass here: the
        assert lowered == 4  # rule raises none, and makes every chain's heavier at the final window's start)
    if name in ("hmc", "eqn") or batch == 300:
        assert raised == lowered == 0
    if seed == 2:  # (a reviewer's: at seed 0 no member needs lowering at the final window's start, at seed 2 some do)
        assert lowered > 0
    assert torch.equal(state.precond.inverse_mass, calls[-1][1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgld", "sghmc", "baoab"])
def test_the_noise_variance_mixes_on_its_exact_marginal(name, monkeypatch):
    """The log noise variance of a linear regression, with the weights integrated out, has a marginal posterior
    known on a grid: the kept draws match its mean within 4 standard errors (from their measured ESS) and its sd
    within 15 %, with the likelihood's mass rule. Power: the same draws are far from the marginal under another
    noise prior (``b`` = 1 against 0.1). The rule's point, for sghmc (the default): the ESS of the noise variance is
    at least twice what the window's moments alone give it (measured at seed 0: 83 against 28.5)."""
    import bayesnet.samplers.warmup as warmup_module

    kept, _, X, y = _linear_regression(name, warm=1000, steps=4000)
    ess = effective_sample_size(kept.numpy())
    draws_mean, draws_sd = float(kept.mean()), float(kept.std())
    mean, sd = _log_noise_marginal(X, y, 1.0, 0.1)
    assert abs(draws_mean - mean) < 4 * sd / math.sqrt(ess), (draws_mean, mean, sd, ess)
    assert abs(draws_sd / sd - 1) < 0.15, (draws_sd, sd)
    wrong, _ = _log_noise_marginal(X, y, 1.0, 1.0)
    assert abs(draws_mean - wrong) > 4 * sd / math.sqrt(ess)
    if name == "sghmc":
        monkeypatch.setattr(warmup_module, "likelihood_mass", lambda *args, **kwargs: False)
        without, _, _, _ = _linear_regression(name, warm=1000, steps=4000)
        assert ess > 2 * effective_sample_size(without.numpy()), ess


def test_unstable_steps_have_power(monkeypatch):
    import bayesnet.samplers.warmup as warmup_module

    monkeypatch.setattr(warmup_module, "GUARD_HEAT", math.inf)
    monkeypatch.setattr(warmup_module, "RISE", math.inf)
    monkeypatch.setattr(warmup_module, "_per_member_reduce", lambda values, layout, fn: torch.zeros(8, dtype=bool))
    monkeypatch.setattr(warmup_module, "FINAL_DESCENT", math.inf)  # (the guard's power alone: a final window whose
    report, x = _unstable("baoab")  # exploded chains' potential falls back is unsettled by that criterion too)
    assert report["settled"] and not (torch.isfinite(x).all() and x.abs().max() < 10.0)


def test_chains_all_frozen_far_out_have_not_settled():
    """The reviewer's second case: sghmc chains started 50 sd out whose every window's step is 3x the rule's are
    restarted until all of them freeze at steps near 0, 39 sd out; judged only against the members' median, none
    was stuck and the report said settled. Now a member frozen below ``STUCK_STEP_RATIO`` of the step its curvature
    gives has not settled either (this test fails on the old code)."""
    report, x = _unstable("sghmc", factor=3.0, start=50.0)
    assert float(x.abs().max()) > 10.0  # (the case: still far out)
    assert not report["settled"] and "the step their curvature gives" in report["reason"], report["reason"]


def test_thermostats_run_uncapped_once_checked_without_per_member_potentials():
    """A potential summed over the chains (which the gradient samplers take) shows no member's descent: the guard's
    first check then lifts the warm-up's cap on the thermostats for good. Before, the cap stayed on for the whole
    warm-up, so the guard saw no thermostat instability and froze steps the kernel could not keep (a reviewer's
    test: two of 12 seeds lost a chain under a settled report)."""
    sampler = make_sampler("sgnht", adaptation_steps=100)
    pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(),  # (one value for all 4 chains)
                            [torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)])
    state = sampler.init(pot.parameters, 0, n_chains=4)
    for _ in range(9):
        state, _ = sampler.step(state, pot, None)
    assert state.warmup.hot_descent is None  # (no verdict before the first check: capped)
    for _ in range(11):
        state, _ = sampler.step(state, pot, None)
    assert state.warmup.hot_descent is not None and not state.warmup.hot_descent.any()


@pytest.mark.parametrize("euler", [False, True], ids=["exact-flow", "euler-power"])
def test_sgnht_keeps_a_low_dimensional_regression_after_the_freeze(euler, monkeypatch):
    """A 5-parameter posterior (linear regression with its noise variance) on mini-batches: the thermostat
    fluctuates by about ``eta sqrt(2 / D) / gamma`` a step, and with the papers' Euler friction step ``(1 - z) r``
    a swing above ``z = 2`` reversed and amplified the momenta until the chain ran off to infinity, 667 steps after
    the freeze at this seed (3 of 6 seeds within 4,000 steps). With the friction's exact flow ``e^-z r``
    (``bayesnet.samplers.integrators.friction_flow``, as sgnht imports it) every draw is finite and the log noise
    variance stays near its posterior (about log 0.01). Power: the Euler step at the same seed diverges."""
    import bayesnet.samplers.sgnht as sgnht_module

    if euler:
        monkeypatch.setattr(sgnht_module, "friction_flow", lambda z: 1.0 - z)
    kept, _, _, _ = _linear_regression("sgnht", warm=1000, steps=1000, seed=4)
    healthy = bool(torch.isfinite(kept).all()) and float((kept - math.log(0.01)).abs().max()) < 1.0
    assert healthy != euler


@pytest.mark.parametrize("friction_step", ["exact", "euler"], ids=["exact-flow", "euler-power"])
def test_tacthmc_keeps_a_low_dimensional_regression_after_the_freeze(friction_step):
    """The same for tacthmc, whose ``friction_step="exact"`` (the default) applies the thermostats' friction as its
    exact flow; the paper's Euler step (``"euler"``, from_specification's) diverged 249 steps after the freeze at
    this seed (2 of 6 seeds within 4,000 steps), none of 6 with the exact flow. Power: "euler" diverges here."""
    sampler = make_sampler("tacthmc", adaptation_steps=1000, friction_step=friction_step)
    kept, _, _, _ = _linear_regression(sampler, warm=1000, steps=1000, seed=3)
    healthy = bool(torch.isfinite(kept).all()) and float((kept - math.log(0.01)).abs().max()) < 1.0
    assert healthy == (friction_step == "exact")


def _slow_descent(name="sgld", warm=200, C=4, summed=False):
    """``C`` chains of ``name`` (no preconditioner) on ``0.5 (x0^2 + 1e-4 x1^2)``, the first half started with
    ``x1 = 4e4``: the slow coordinate's potential (8e4) falls by about a tenth over the warm-up, which ends long
    before those chains reach their typical set; the others start at exact draws. The warm-up's report, the step
    tried in the final window and the frozen one (per chain), and the positions."""
    sampler = make_sampler(name, adaptation_steps=warm, preconditioner=None)
    g = torch.Generator().manual_seed(0)
    start = torch.randn(C, 2, generator=g, dtype=torch.float64) * torch.tensor([1.0, 100.0], dtype=torch.float64)
    start[: C // 2, 1] = 4e4
    per_member = (lambda p, b: 0.5 * (p[0][..., 0] ** 2 + 1e-4 * p[0][..., 1] ** 2))
    pot = FunctionPotential((lambda p, b: per_member(p, b).sum()) if summed else per_member, [start])
    state = sampler.init(pot.parameters, 0, n_chains=C)
    tried = None
    for k in range(1, warm + 1):
        state, _ = sampler.step(state, pot, None)
        if state.warmup is not None and k == state.warmup.ends[-2]:
            tried = state.precond.step_size.clone()
    return state.warmup_report, tried, state.precond.step_size, pot.parameters[0].detach()


def test_a_warm_up_that_ends_still_descending_has_not_settled_and_halves_its_step(monkeypatch):
    """A chain whose potential still falls through the final window by more than ``FINAL_DESCENT`` of its
    equilibrium spreads had not reached its typical set when the kernel froze: the report says the warm-up did not
    settle and why (the estimators' ConvergenceWarning names the burn-in), and that chain's step froze at half the
    one tried in the final window (chains at equilibrium beside it keep theirs). (Default regressors of y = sin(2x) on 200 rows froze while their fit still improved,
    and 5 of 24 diverged after the freeze, 1 of 24 with the halved step.) Power: without the criterion the same
    warm-up reports settled, at the step it tried."""
    import bayesnet.samplers.warmup as warmup_module

    report, tried, frozen, x = _slow_descent()
    assert float(x[:2, 1].min()) > 1e3 and float(x[2:, 1].abs().max()) < 500  # (the case: two still far out)
    assert not report["settled"] and "still descending" in report["reason"], report["reason"]
    torch.testing.assert_close(frozen[:2], tried[:2] / 2)  # per chain: the two at equilibrium keep their step
    assert torch.equal(frozen[2:], tried[2:])
    # a potential summed over the chains is no member's: its sum varies sqrt(S) times a member's spread, and the
    # criterion does not read it (a reviewer's healthy sghmc chains on a summed Gaussian were called descending)
    report, tried, frozen, _ = _slow_descent(summed=True)
    assert "still descending" not in (report["reason"] or "") and torch.equal(frozen, tried)
    monkeypatch.setattr(warmup_module, "FINAL_DESCENT", math.inf)
    report, tried, frozen, _ = _slow_descent()
    assert report["settled"] and torch.equal(frozen, tried)
