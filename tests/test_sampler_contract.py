"""One contract suite over the sampler registry: every registered sampler, including a ninth one registered
right here, is pickled, re-run, laid on the chain axis, fitted through an estimator and checked on a Gaussian.

Adding a sampler touches its module, the registry line (an import in bayesnet/samplers/__init__.py), its
rows in tests/sampler_settings.py and its docs entry; this file shows it with ``rwm`` below, whose only
additions outside this module are its rows in the settings tables (added here, at import).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from numbers import Real

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.utils._param_validation import Interval
from torch import Tensor

import sampler_settings
from bayesnet import BayesianMLPClassifier
from bayesnet.plan import ChainLayout
from bayesnet.posterior import FunctionPotential
from bayesnet.samplers import (ChainRandom, Sampler, SamplerState, Stat, StepInfo, available_samplers, make_sampler,
                               register_sampler, unregister_sampler)
from bayesnet.samplers.base import COMMON_STATS
from targets import assert_chain_alone_matches, gaussian_chains, correlated_gaussian, moment_errors


# ---------------------------------------------------------------------- #
# a ninth sampler, registered by this test: random-walk Metropolis
# ---------------------------------------------------------------------- #
@dataclass(kw_only=True)
class RWMState(SamplerState):
    value: Tensor | None = None  # U at the current positions


@register_sampler
class RandomWalkMetropolis(Sampler):
    """Random-walk Metropolis: propose ``theta + step_size * xi``, accept with ``min(1, exp(-(U' - U) / T))``,
    one test per packed member. Exact for a full-data potential."""

    name = "rwm"
    full_batch = True
    stats = {**COMMON_STATS, "accept_prob": Stat("mean", "acceptance_rate")}
    state_class = RWMState
    _parameter_constraints = {"step_size": [Interval(Real, 0, np.inf, closed="neither")],
                              "temperature": [Interval(Real, 0, np.inf, closed="neither")]}

    def __init__(self, step_size: float = 0.5, temperature: float = 1.0):
        self.step_size = step_size
        self.temperature = temperature

    def _init(self, position, rng, layout, precond):
        return RWMState(position=position, layout=layout, rng=rng, precond=precond)

    def reset_cache(self, state):
        state.value = None

    @torch.no_grad()
    def _step(self, state, potential, batch):
        from bayesnet.samplers.integrators import gaussian_like

        if state.value is None:
            state.value = potential.value(batch).detach()
        start = [p.clone() for p in state.position]
        torch._foreach_add_(state.position, gaussian_like(state.position, state.rng, state.layout),
                            alpha=self.step_size)
        new = potential.value(batch).detach()
        accept_prob = torch.exp((-(new - state.value) / self.temperature).clamp(max=0.0)).nan_to_num(0.0)
        accept = state.rng.uniform(1, accept_prob.dtype).reshape(-1)[: accept_prob.numel()].reshape(
            accept_prob.shape) < accept_prob
        for p, s in zip(state.position, start):
            p.copy_(torch.where(accept.reshape(accept.shape + (1,) * (p.ndim - accept.ndim)), p, s))
        state.value = torch.where(accept, new, state.value)
        state.step += 1
        return state, StepInfo(potential=state.value.clone(), extra={"accept_prob": accept_prob})


sampler_settings.GAUSSIAN["rwm"] = dict(step_size=1.0)
sampler_settings.ESTIMATOR["rwm"] = dict(batch_size=-1, sampler__step_size=0.05)
SAMPLERS = available_samplers()
# registered only while this module's tests run: test modules collected after this one must not see it
unregister_sampler("rwm")


@pytest.fixture(scope="module", autouse=True)
def _ninth_sampler_leaves_with_this_module():
    register_sampler(RandomWalkMetropolis)
    yield
    unregister_sampler("rwm")


def test_the_ninth_sampler_is_registered():
    assert len(SAMPLERS) == 9 and "rwm" in SAMPLERS and set(sampler_settings.GAUSSIAN) == set(SAMPLERS)


# ---------------------------------------------------------------------- #
def _gaussian_run(name, n_chains, steps, seed=0, start=None, compiled=False, **overrides):
    """Run ``name`` on independent correlated 2-D Gaussians, one per packed member; return the sampler, its
    state, the member draws (as ``(slot, step, 2)``, None where a member's step is not a draw) and the
    potential. ``compiled``: every step through the sampler's compiled transition
    (:class:`~bayesnet.samplers.compiled.CompiledTransition`, ``torch.compile``), the batch as the pair
    ``(None, None)``; ``overrides`` change the sampler's settings."""
    sampler = make_sampler(name, **{**sampler_settings.GAUSSIAN[name], **overrides})
    M = sampler.members_per_chain()
    target, state = gaussian_chains(sampler, n_chains, seed, start)
    pot = target.potential
    positions, flags = [], []
    if compiled:
        from bayesnet.samplers.compiled import CompiledTransition

        step = CompiledTransition(sampler, pot, state.layout)
    for _ in range(steps):
        state, info = step(state, pot, (None, None)) if compiled else sampler.step(state, pot, None)
        positions.append(pot.parameters[0].detach().clone())
        is_draw = info.is_draw
        flags.append(is_draw.cpu().numpy() if isinstance(is_draw, Tensor) else
                     np.broadcast_to(np.asarray(is_draw, dtype=bool), (n_chains * M,)).copy())
    return sampler, state, torch.stack(positions, 1), np.stack(flags, 1), target


@pytest.mark.parametrize("name", SAMPLERS)
def test_declared_stats_match_what_a_step_reports(name):
    sampler, state, positions, flags, target = _gaussian_run(name, 3, 5)
    info = sampler.step(state, target.potential, None)[1]
    S = 3 * sampler.members_per_chain()
    assert set(info.fields()) == set(sampler.stats), (set(info.fields()), set(sampler.stats))
    assert info.potential.shape == (S,) and positions.shape[0] == S
    for key, value in info.fields().items():
        assert not isinstance(value, Tensor) or value.numel() in (1, S, 3), key
    assert isinstance(state, sampler.state_class) and state.layout == ChainLayout(3, sampler.members_per_chain())


@pytest.mark.parametrize("name", SAMPLERS)
def test_same_seed_same_chains_and_pickled_states_continue_exactly(name):
    a = _gaussian_run(name, 2, 30, seed=5)[2]
    b = _gaussian_run(name, 2, 30, seed=5)[2]
    c = _gaussian_run(name, 2, 30, seed=6)[2]
    assert torch.equal(a, b) and not torch.equal(a, c)
    sampler = make_sampler(name, **sampler_settings.GAUSSIAN[name])
    target = correlated_gaussian(2 * sampler.members_per_chain(), per_chain=True)
    state = sampler.init(target.potential.parameters, ChainRandom(1, 2), n_chains=2)
    for _ in range(10):
        state, _ = sampler.step(state, target.potential, None)
    copy_sampler, copy_state = pickle.loads(pickle.dumps((sampler, state)))
    copy_pot = correlated_gaussian(2 * sampler.members_per_chain(), per_chain=True).potential
    with torch.no_grad():
        copy_pot.parameters[0].copy_(copy_state.position[0])
    copy_state.replace_position(copy_pot.parameters)
    for _ in range(10):
        state, _ = sampler.step(state, target.potential, None)
        copy_state, _ = copy_sampler.step(copy_state, copy_pot, None)
    assert torch.equal(target.potential.parameters[0], copy_pot.parameters[0])


@pytest.mark.parametrize("name", SAMPLERS)
def test_a_chain_does_not_depend_on_the_chains_beside_it(name):
    """Chain k of three is the chain started alone with chain k's stream (ChainRandom's first_chain)."""
    sampler = make_sampler(name, **sampler_settings.GAUSSIAN[name])
    M = sampler.members_per_chain()
    start = torch.randn(3 * M, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    together = _gaussian_run(name, 3, 25, seed=9, start=start)[2]
    for k in range(3):
        assert_chain_alone_matches(name, sampler_settings.GAUSSIAN[name], start, together, k, M, seed=9, steps=25)


@pytest.mark.parametrize("name", SAMPLERS)
def test_stationary_on_a_correlated_gaussian(name):
    """Started at exact draws, 512 chains keep the Gaussian's moments: ESS-derived tolerances (4 Monte Carlo
    standard errors) plus the statistical suite's 0.03 allowance for discretisation bias."""
    C = 512
    sampler = make_sampler(name, **sampler_settings.GAUSSIAN[name])
    M = sampler.members_per_chain()
    target = correlated_gaussian(1)
    start = torch.as_tensor(np.random.default_rng(3).multivariate_normal(target.mean, target.cov, size=C * M))
    _, _, positions, flags, target = _gaussian_run(name, C, 600, seed=2, start=start)
    keep = np.arange(9, 600, 10)
    slots = np.flatnonzero(flags[:, keep].all(axis=1))  # members whose every thinned step is a draw
    draws = positions[slots][:, keep].numpy()
    err = moment_errors(draws, target.mean, target.cov)
    print(name, {k: round(float(v), 4) for k, v in err.items()})
    assert err["ess"] > 300
    assert err["mean_err"] <= err["mean_tol"] + 0.03
    assert err["cov_err"] <= err["cov_tol"] + 0.03


def _compiled_moment_errors(name, **overrides):
    """``moment_errors`` of 512 chains of ``name`` (settings overridden by ``overrides``) run through its compiled
    step from exact draws (skips a kernel that writes no pure step)."""
    C = 512
    sampler = make_sampler(name, **{**sampler_settings.GAUSSIAN[name], **overrides})
    if not type(sampler).compiles:
        pytest.skip(f"{name} declares no pure transition")
    M = sampler.members_per_chain()
    target = correlated_gaussian(1)
    start = torch.as_tensor(np.random.default_rng(3).multivariate_normal(target.mean, target.cov, size=C * M))
    sampler, state, positions, flags, target = _gaussian_run(name, C, 600, seed=2, start=start, compiled=True,
                                                             **overrides)
    keep = np.arange(9, 600, 10)
    slots = np.flatnonzero(flags[:, keep].all(axis=1))
    draws = positions[slots][:, keep].numpy()
    err = moment_errors(draws, target.mean, target.cov)
    print(name, overrides, {k: round(float(v), 4) for k, v in err.items()})
    return err


@pytest.mark.parametrize("name", SAMPLERS)
def test_stationary_through_the_compiled_step(name):
    """The same check through the compiled path (issue 15: the statistical suite holds there too): 512 chains
    started at exact draws keep the Gaussian's moments, every step the sampler's ``torch.compile``-d transition
    (its whole step, hmc's leapfrog step, pt-langevin's gradient; about 20 s for all, a cold compiler cache)."""
    err = _compiled_moment_errors(name)
    assert err["ess"] > 300
    assert err["mean_err"] <= err["mean_tol"] + 0.03
    assert err["cov_err"] <= err["cov_tol"] + 0.03


def test_the_compiled_check_has_power():
    """The check above can fail: compiled SGHMC at temperature 1.5 samples a covariance 1.5 times the target's."""
    err = _compiled_moment_errors("sghmc", temperature=1.5)
    assert err["cov_err"] > err["cov_tol"] + 0.03


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return ((X - X.mean(0)) / X.std(0)).astype(np.float32), y


@pytest.mark.parametrize("name", SAMPLERS)
def test_every_sampler_fits_through_an_estimator(name, iris):
    X, y = iris
    kwargs = {**dict(hidden_layer_sizes=(4,), n_draws=5, burn_in=20, thinning=2, random_state=0, sampler=name),
              **sampler_settings.ESTIMATOR[name]}
    est = BayesianMLPClassifier(**kwargs).fit(X, y)
    assert est.n_draws_kept_ > 0 and np.isfinite(est.predict_proba(X)).all()
    assert est.sampler_.name == name and est.fit_status_["status"] in ("complete", "short")
    summaries = {stat.summary or key for key, stat in type(est.sampler_).stats.items()}
    assert summaries <= set(est.diagnostics_), summaries - set(est.diagnostics_)
    # the declared fields, and the configurational temperature the estimator measures for samplers that take
    # their gradients at their positions
    measured = {"configurational_temperature"} if est.sampler_.configurational_target() is not None else set()
    assert set(est.get_sample_stats()) <= set(type(est.sampler_).stats) | measured


@pytest.mark.parametrize("maker", available_samplers())
def test_a_state_made_by_another_sampler_is_refused(maker):
    """A state stepped by a sampler other than the one whose init made it is a TypeError naming both state
    classes (a low-level user's test: sghmc's state in sgnht and sgld's in hmc were AttributeErrors from inside
    the kernel, and baoab's state ran silently in sghmc, which reads its momentum in other units)."""
    def made_by(name):
        sampler = make_sampler(name, step_size=0.01)
        start = torch.zeros(sampler.members_per_chain(), 3, dtype=torch.float64)
        pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(-1), [start])
        return sampler, pot, sampler.init(pot.parameters, 0, n_chains=1)

    _, _, state = made_by(maker)
    for name in available_samplers():
        sampler, pot, own = made_by(name)
        if type(state) is type(own):
            continue
        with pytest.raises(TypeError, match=rf"{name}: the state is a {type(state).__name__}, made by another "
                                            rf"sampler's init; {name} steps the {type(own).__name__}"):
            sampler.step(state, pot, None)
        sampler.step(own, pot, None)  # (its own state steps)


@pytest.mark.parametrize("name", ["hmc", "pt-langevin", "tacthmc"])
def test_a_summed_potential_of_several_members_is_refused_where_each_members_is_read(name):
    """A FunctionPotential returning one summed value for packed chains: the samplers whose kernel reads each
    member's potential say so at the first step (before: a torch error, "shape '[2]' is invalid for input of
    size 1", found by a helper's user test)."""
    sampler = make_sampler(name, step_size=0.1)
    start = torch.zeros(2 * sampler.members_per_chain(), 3, dtype=torch.float64)
    pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(), [start])
    state = sampler.init(pot.parameters, 0, n_chains=2)
    with pytest.raises(ValueError, match=rf"{name}: the potential returned a value of shape \(\); .* one value per "
                                         "member"):
        sampler.step(state, pot, None)
    # one chain without a chain axis and a potential that forgot to sum its terms (before: torch's "shape '[5]' is
    # invalid for input of size 1" from hmc, "shape '[]' ..." from tacthmc); pt-langevin's replicas are an axis
    members = sampler.members_per_chain()
    start = torch.zeros((members, 5) if members > 1 else (5,), dtype=torch.float64)
    pot = FunctionPotential(lambda p, b: 0.5 * p[0] ** 2, [start])
    state = sampler.init(pot.parameters, 0)
    words = "one value per member" if members > 1 else "for one chain without a chain axis it must return a scalar"
    first = members if members > 1 else 5
    with pytest.raises(ValueError, match=rf"{name}: the potential returned a value of shape \({first}.*{words}"):
        sampler.step(state, pot, None)
    if members == 1:  # one value in a 1-element vector still serves (it did before the check)
        pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum().reshape(1), [torch.zeros(5, dtype=torch.float64)])
        sampler.step(sampler.init(pot.parameters, 0), pot, None)


def test_a_function_potential_refuses_parameters_it_cannot_move():
    """Integer or complex tensors, or plain lists, as a FunctionPotential's parameters: a TypeError that names the
    parameter and the conversion (before: torch's "only Tensors of floating point dtype can require gradients" for
    an integer tensor, "'list' object has no attribute 'detach'" for a list, and a complex tensor accepted)."""
    fn = lambda p, b: (p[0] ** 2).sum()  # noqa: E731
    for bad, words in ((torch.zeros(3, dtype=torch.int64), r"parameters\[1\] must be a real floating-point tensor .* "
                        r"dtype torch.int64; convert it with .float\(\)"),
                       (torch.zeros(3, dtype=torch.complex64), "real floating-point tensor .* torch.complex64; "
                        r"give its real and imaginary parts .* \(torch.view_as_real\)"),
                       ([0.0, 1.0], r"parameters\[1\] must be a torch.Tensor, got list")):
        with pytest.raises(TypeError, match=words):
            FunctionPotential(fn, [torch.zeros(2), bad])
    with pytest.raises(ValueError, match="at least one tensor"):
        FunctionPotential(fn, [])
    for one in (torch.zeros(3), torch.zeros(0)):  # (a reviewer's find: iterated into 0-d parameters, or "empty")
        with pytest.raises(TypeError, match=r"a list of tensors, got one tensor of shape .*; wrap it in a list"):
            FunctionPotential(fn, one)
    with pytest.raises(TypeError, match="fn must be a callable"):
        FunctionPotential("x ** 2", [torch.zeros(2)])
    ok = FunctionPotential(fn, (t for t in [torch.ones(2, dtype=torch.float64)]))  # any iterable of float tensors
    assert ok.value_and_grad()[1][0].tolist() == [2.0, 2.0]


# ---------------------------------------------------------------------- #
# settings changed after init()
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("how", ["set_params", "attribute"])
def test_a_step_size_set_after_init_is_the_one_the_next_step_takes(name, how):
    """An explicit step size set on the sampler after ``init`` (by ``set_params`` or directly) is the step the
    chains take from their next step on: a step of 1e-12 all but stops them. Before, the state kept the step
    init had made from the old setting, silently."""
    sampler, state, positions, _, target = _gaussian_run(name, 4, 20, seed=1)
    if how == "set_params":
        sampler.set_params(step_size=1e-12)
    else:
        sampler.step_size = 1e-12
    before = target.potential.parameters[0].detach().clone()
    for _ in range(5):
        state, _ = sampler.step(state, target.potential, None)
    moved = (target.potential.parameters[0] - before).abs().max().item()
    assert moved < 1e-4, (name, moved)
    assert torch.all(state.step_size == 1e-12)
    sampler.set_params(step_size=sampler_settings.GAUSSIAN[name].get("step_size", 0.1))
    for _ in range(5):
        state, _ = sampler.step(state, target.potential, None)
    assert (target.potential.parameters[0] - before).abs().max().item() > 1e-3  # (the power: it moves again)


@pytest.mark.parametrize("name", [n for n in SAMPLERS if n != "pt-langevin"])  # (its ladder is max_temperature)
def test_a_temperature_set_after_init_is_the_one_the_chains_sample_at(name):
    """Chains started at the tempered posterior's draws run 50 steps at temperature 1, then are set to 0.05: over
    the second half of the next 3,000 steps their variance is the tempered posterior's (0.05 of the Gaussian's).
    Before, the noise and momentum scales derived at the first step stayed: the chains went back to sampling at
    temperature 1 (a variance 12-21x the tempered one; 1.7x for sgnht and tacthmc, whose thermostats feel the
    new target). The thermostats take about a thousand steps to re-equilibrate from the old kinetic energy."""
    C, T, n = 64, 0.05, 3000
    sampler = make_sampler(name, **sampler_settings.GAUSSIAN[name])
    M = sampler.members_per_chain()
    mean, cov = correlated_gaussian(1).mean, correlated_gaussian(1).cov
    start = torch.as_tensor(np.random.default_rng(3).multivariate_normal(mean, T * cov, size=C * M))
    target, state = gaussian_chains(sampler, C, seed=4, start=start)
    for _ in range(50):
        state, _ = sampler.step(state, target.potential, None)
    sampler.set_params(temperature=T)
    tail = []
    for i in range(n):
        state, _ = sampler.step(state, target.potential, None)
        if i >= n // 2 and i % 10 == 0:
            tail.append(target.potential.parameters[0].detach().clone())
    ratio = torch.stack(tail).reshape(-1, 2).var(dim=0).numpy() / (T * np.diag(cov))
    print(name, ratio)
    assert np.all((ratio > 0.75) & (ratio < 1.35)), (name, ratio)


@pytest.mark.parametrize("name", SAMPLERS)
def test_a_setting_the_state_is_built_on_is_refused_after_init(name):
    """The mass matrix's form (and the warm-up's length) are built into the state by ``init``: a change after it
    is a ValueError naming the setting, and the state is left as it was (a step with the old settings runs)."""
    sampler, state, _, _, target = _gaussian_run(name, 2, 3)
    if "preconditioner" not in sampler.get_params():
        pytest.skip("no preconditioner setting")
    old = sampler.preconditioner
    sampler.set_params(preconditioner="layer" if sampler.preconditioner_mode() != "layer" else None)
    with pytest.raises(ValueError, match="preconditioner=.*call init"):
        sampler.step(state, target.potential, None)
    sampler.set_params(preconditioner=old)
    sampler.step(state, target.potential, None)


def test_a_compiled_transition_refuses_settings_changed_after_it_was_built():
    """The compiled transition closes over the settings it was built with: a call after a hyperparameter was set
    is a ValueError (before, it ran the old settings silently); the eager step takes the change up."""
    from bayesnet.samplers.compiled import CompiledTransition

    sampler = make_sampler("sghmc", **sampler_settings.GAUSSIAN["sghmc"])
    target, state = gaussian_chains(sampler, 2)
    step = CompiledTransition(sampler, target.potential, state.layout, compile=False)
    state, _ = step(state, target.potential, (None, None))
    sampler.set_params(friction=sampler.friction)  # the value it holds: nothing changed, the transition runs
    state, _ = step(state, target.potential, (None, None))
    sampler.set_params(temperature=0.5)
    with pytest.raises(ValueError, match="set after this compiled transition was built"):
        step(state, target.potential, (None, None))
    sampler.step(state, target.potential, None)
    CompiledTransition(sampler, target.potential, state.layout, compile=False)(state, target.potential, (None, None))


@pytest.mark.parametrize("name", ["sgld", "sghmc", "sgnht", "baoab", "eqn"])  # (member_potentials False)
def test_a_potential_of_unsummed_terms_is_refused_by_the_gradient_samplers(name):
    """The gradient samplers read the gradient of the value's sum, so a sum over the members (or one value per
    member) serves them; a vector of some other length (one chain's unsummed terms) is a ValueError at the first
    step, as for hmc. Before, it was accepted, and the warm-up's per-member tests were silently skipped."""
    sampler = make_sampler(name)
    assert not sampler.member_potentials
    M = sampler.members_per_chain()
    pot = FunctionPotential(lambda p, b: 0.5 * p[0].reshape(-1) ** 2, [torch.zeros(M * 5, dtype=torch.float64)]
                            if M == 1 else [torch.zeros(M, 5, dtype=torch.float64)])
    with pytest.raises(ValueError, match=rf"{name}: the potential returned a value of shape \({5 * M},\)"):
        sampler.step(sampler.init(pot.parameters, 0), pot, None)
    for fn in (lambda p, b: 0.5 * (p[0] ** 2).sum(-1), lambda p, b: 0.5 * (p[0] ** 2).sum(),
               lambda p, b: 0.5 * (p[0] ** 2).sum(-1, keepdim=True)):  # per member, summed, (S, 1): all serve
        pot = FunctionPotential(fn, [torch.zeros(2 * M, 3, dtype=torch.float64)])
        sampler.step(sampler.init(pot.parameters, 0, n_chains=2), pot, None)
