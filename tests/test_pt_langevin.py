"""Langevin-gradient parallel tempering (Chandra et al. 2019, Algorithm 1): its pieces, its exactness and its purpose.

The sampler is an exact Metropolis-Hastings scheme on full-data potentials, so
the Gaussian checks use the ESS-based tolerances of ``targets.moment_errors``
with no discretisation allowance (as HMC's do). Positions pack
``S = n_chains * n_replicas`` members, chain major.
"""

import math
import pickle

import numpy as np
import pytest
import torch

import bayesnet.samplers.pt_langevin  # noqa: F401  (registers "pt-langevin")
from bayesnet.diagnostics import effective_sample_size
from bayesnet.posterior import FunctionPotential
from bayesnet.samplers import make_sampler
from bayesnet.samplers.pt_langevin import PTLangevin, geometric_ladder, swap_log_acceptance
from targets import correlated_gaussian, four_modes_2d, linear_posterior, moment_errors, t2_line_moments


def _run(sampler, potential, n_chains, n_steps, seed=0, record=None, batch=None):
    """Step the packed chains on ``batch``; ``record(k, state, info)`` is called after every step."""
    gen = torch.Generator().manual_seed(seed)
    state = sampler.init(potential.parameters, gen, n_chains=n_chains)
    for k in range(1, n_steps + 1):
        state, info = sampler.step(state, potential, batch)
        if record is not None:
            record(k, state, info)
    return state


def _replica_draws(sampler, potential, n_chains, n_steps, burn_in, thinning=5, seed=0, batch=None):
    """Positions of every ladder slot (every position tensor side by side), shaped (replica, chain, draw, dim)."""
    R = sampler.n_replicas
    kept = []

    def record(k, state, info):
        if k > burn_in and k % thinning == 0:
            kept.append(torch.cat([p.detach().reshape(n_chains, R, -1) for p in state.position], 2).numpy().copy())

    state = _run(sampler, potential, n_chains, n_steps, seed, record, batch)
    return np.stack(kept, axis=2).transpose(1, 0, 2, 3), state


# --------------------------------------------------------------------------- #
# hyperparameters, ladder, state
# --------------------------------------------------------------------------- #
def test_ladder_and_defaults():
    s = make_sampler("pt-langevin")
    assert isinstance(s, PTLangevin)
    assert (s.n_replicas, s.max_temperature, s.swap_interval, s.langevin_prob, s.step_size) == (10, 5.0, 100, 0.5,
                                                                                               "auto")
    assert s.members_per_chain() == 10 and s.default_thinning == 10
    np.testing.assert_allclose(s.temperatures.numpy(), 5.0 ** (np.arange(10) / 9), rtol=1e-12)
    assert s.temperatures[0] == 1.0 and s.temperatures[-1] == pytest.approx(5.0)
    assert s.resolve_langevin_step_size() == pytest.approx(0.025**2 / 2)
    assert make_sampler("pt-langevin", langevin_step_size=0.1).resolve_langevin_step_size() == 0.1
    assert geometric_ladder(1, 5.0) == [1.0]
    assert geometric_ladder(3, 1.0) == [1.0, 1.0, 1.0]
    # the temperatures it samples at: one replica does not temper (before: (1, 5), so prior_scale="auto" took the
    # fan-in prior and "hierarchical" was refused for a sampler that "samples at temperatures 1 to 5")
    assert s.temperature_range() == pytest.approx((1.0, 5.0))
    assert make_sampler("pt-langevin", n_replicas=1).temperature_range() == (1.0, 1.0)
    assert make_sampler("pt-langevin", n_steps=1000).tempering_steps() == 600
    assert s.tempering_steps() is None
    hint = s.divergence_hint(None)
    assert "sampler__step_size" in hint and "langevin_step_size" in hint


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_replicas=0), "n_replicas"), (dict(n_replicas=2.0), "n_replicas"), (dict(max_temperature=0.5), "max_temp"),
    (dict(max_temperature=math.inf), "max_temp"), (dict(swap_interval=0), "swap_interval"),
    (dict(langevin_prob=1.5), "langevin_prob"), (dict(langevin_prob=-0.1), "langevin_prob"),
    (dict(step_size=0.0), "step_size"), (dict(langevin_step_size=0.0), "langevin_step_size"),
    (dict(langevin_step_size="mala"), "langevin_step_size"), (dict(tempering_fraction=1.2), "tempering_fraction"),
    (dict(n_steps=0), "n_steps"), (dict(n_steps=10.5), "n_steps"),
])
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_sampler("pt-langevin", **kwargs)


def test_chain_axis_is_checked_and_one_replica_needs_none():
    s = make_sampler("pt-langevin", n_replicas=3)
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="leading axis of 6"):
        s.init([torch.zeros(4, 2)], gen, n_chains=2)
    s.init([torch.zeros(3, 2)], gen)  # one chain: the leading axis holds its 3 replicas
    # one replica without n_chains: no leading axis, a 0-d potential, plain bool draws (float32 kept)
    s = make_sampler("pt-langevin", n_replicas=1, step_size=0.5)
    pot = FunctionPotential(lambda p, b: 0.5 * (p[0] ** 2).sum(), [torch.zeros(3)])
    state = s.init(pot.parameters, gen)
    for _ in range(20):
        state, info = s.step(state, pot, None)
    assert info.potential.shape == () and info.is_draw is True
    assert pot.parameters[0].dtype == torch.float32 and pot.parameters[0].shape == (3,)
    assert set(info.scalars()) >= {"potential", "accepted", "accept_prob", "langevin", "temperature"}
    assert s.acceptance_rates(state).shape == (1, 1) and s.swap_rates(state).shape == (1, 0)
    summary = s.state_summary(state)
    assert len(summary["replica_acceptance_rates"]) == 1 and summary["pair_swap_rates"] == []
    assert math.isnan(summary["swap_rate"]) and summary["in_tempering_phase"] and s.full_batch


def test_pickled_state_continues_identically():
    target = correlated_gaussian(2 * 3, per_chain=True)
    s = make_sampler("pt-langevin", n_replicas=3, swap_interval=4, step_size=0.5)
    gen = torch.Generator().manual_seed(5)
    state = s.init(target.potential.parameters, gen, n_chains=2)
    for _ in range(10):
        state, _ = s.step(state, target.potential, None)
    clone = pickle.loads(pickle.dumps(state))
    gen_state = gen.get_state()
    for _ in range(15):
        state, _ = s.step(state, target.potential, None)
    pot2 = FunctionPotential(target.potential.fn, clone.position)
    clone.position = pot2.parameters
    gen2 = torch.Generator()
    gen2.set_state(gen_state)
    for _ in range(15):
        clone, _ = s.step(clone, pot2, None)
    assert torch.equal(clone.position[0], state.position[0])
    assert torch.equal(clone.value, state.value)
    assert torch.equal(s.acceptance_rates(clone), s.acceptance_rates(state))
    assert torch.equal(s.swap_rates(clone), s.swap_rates(state)) and clone.swap_events == 6
    summary = s.state_summary(state)
    assert len(summary["replica_acceptance_rates"]) == 3 and len(summary["pair_swap_rates"]) == 2
    assert 0 <= summary["swap_rate"] <= 1


def test_cached_potential_and_gradient_stay_exact():
    """The cache that makes a step cost one potential evaluation: after every step (swaps included) the cached U
    equals U at the positions, and every gradient marked valid equals the true gradient; a step evaluates the
    potential once, with its gradient whenever Langevin proposals are possible, so that no member's rounding
    depends on what the others propose (before, a step took the gradient only when some replica proposed a
    Langevin move, random-walk moves left stale gradients, and one chain's draws depended on the chains beside
    it: tests/test_chains.py), and no gradient goes stale."""
    for n_replicas in (1, 3):
        target = correlated_gaussian(n_replicas, per_chain=True)  # one chain: steps without any gradient
        pot = target.potential
        calls = []
        vg, val = pot.value_and_grad, pot.value
        pot.value_and_grad = lambda b: (calls.append("grad"), vg(b))[1]
        pot.value = lambda b: (calls.append("value"), val(b))[1]
        s = make_sampler("pt-langevin", n_replicas=n_replicas, swap_interval=2, step_size=0.6)
        n_stale = []

        def record(k, state, info):
            u, g = vg(None)
            torch.testing.assert_close(state.value, u, rtol=0, atol=1e-12)
            ok = state.grad_valid
            if state.grad is None:  # no Langevin proposal yet
                assert not ok.any()
            else:
                torch.testing.assert_close(state.grad[0][ok], g[0][ok], rtol=0, atol=1e-12)
            n_stale.append(int((~ok).sum()))

        _run(s, pot, 1, 200, seed=n_replicas, record=record)
        assert sum(n_stale) == 0
        # one evaluation per step, and the first step's at the starting positions (and, with several replicas,
        # the first step's check that the potential gives one value per member)
        assert calls.count("grad") == 200 + 1 and calls.count("value") == (n_replicas > 1)
        pot.value_and_grad, pot.value = vg, val
    # langevin_prob=0 (PT-RW) never takes a gradient
    target = correlated_gaussian(3, per_chain=True)
    pot, calls = target.potential, []
    vg, val = pot.value_and_grad, pot.value
    pot.value_and_grad = lambda b: (calls.append("grad"), vg(b))[1]
    pot.value = lambda b: (calls.append("value"), val(b))[1]
    _run(make_sampler("pt-langevin", n_replicas=3, swap_interval=2, step_size=0.6, langevin_prob=0.0), pot, 1, 50,
         seed=0)
    assert set(calls) == {"value"}


def test_infinite_potential_is_rejected():
    """A proposal outside the support (U = inf) is rejected and flagged as divergent."""
    def fn(p, b):
        x = p[0]
        inside = (x.abs() < 1).all(1)
        return torch.where(inside, 0.0 * x.sum(1), torch.full_like(x[:, 0], math.inf))

    pot = FunctionPotential(fn, [torch.zeros(8, 2, dtype=torch.float64)])
    s = make_sampler("pt-langevin", n_replicas=2, swap_interval=3, step_size=0.7)
    divergent = []
    state = _run(s, pot, 4, 100, record=lambda k, st, info: divergent.append(float(info.extra["divergent"].sum())))
    assert float(pot.parameters[0].detach().abs().max()) < 1 and sum(divergent) > 0
    assert torch.isfinite(state.value).all()


# --------------------------------------------------------------------------- #
# replica exchange
# --------------------------------------------------------------------------- #
def test_swap_log_acceptance_formula():
    b = torch.tensor([1.0, 0.5], dtype=torch.float64)
    u = torch.tensor([3.0, 1.0], dtype=torch.float64)
    # exchanging: pi_0(theta_1) pi_1(theta_0) / (pi_0(theta_0) pi_1(theta_1)) = exp(-1*1 - .5*3 + 1*3 + .5*1)
    assert float(swap_log_acceptance(b[0], b[1], u[0], u[1])) == pytest.approx(-1.0 - 1.5 + 3.0 + 0.5)
    assert float(swap_log_acceptance(b[0], b[1], u[1], u[0])) == pytest.approx(-1.0)
    assert float(swap_log_acceptance(b[0], b[1], torch.tensor(math.inf), u[0])) == -math.inf


def _swap_state(values, n_replicas, max_temperature, seed=0):
    C = values.shape[0]
    s = make_sampler("pt-langevin", n_replicas=n_replicas, max_temperature=max_temperature)
    position = torch.arange(C * n_replicas, dtype=torch.float64).reshape(-1, 1)  # member id
    gen = torch.Generator().manual_seed(seed)
    state = s.init([position], gen, n_chains=C)
    state.value = values.reshape(-1).clone()
    state.grad = [position.clone() * 10]
    state.grad_valid = torch.arange(C * n_replicas) % 2 == 0
    return s, state, gen


def test_swaps_exchange_positions_and_caches_on_even_then_odd_pairs():
    # ladder 1, 2, 4, 8 (beta 1, .5, .25, .125)
    values = torch.tensor([[10.0, 0.0, 0.0, 0.0],  # pair (0,1): log a = .5 * 10 -> swap; (2,3): 0 -> swap
                           [0.0, 100.0, 0.0, 100.0]],  # both pairs: log a = -50, -12.5 -> keep
                          dtype=torch.float64)
    s, state, gen = _swap_state(values, 4, 8.0)
    s._swap(state)
    np.testing.assert_array_equal(state.position[0].reshape(-1).numpy(), [1, 0, 3, 2, 4, 5, 6, 7])
    np.testing.assert_array_equal(state.value.numpy(), [0, 10, 0, 0, 0, 100, 0, 100])
    np.testing.assert_array_equal(state.grad[0].reshape(-1).numpy(), [10, 0, 30, 20, 40, 50, 60, 70])
    np.testing.assert_array_equal(state.grad_valid.numpy(), [0, 1, 0, 1, 1, 0, 1, 0])
    np.testing.assert_array_equal(state.swap_attempts.numpy(), [[1, 0, 1], [1, 0, 1]])
    np.testing.assert_array_equal(state.swap_accepts.numpy(), [[1, 0, 1], [0, 0, 0]])
    # the next event offers the odd pair (1, 2): chain 0 now holds U = (0, 10, 0, 0): log a = .25 * 10 -> swap
    s._swap(state)
    np.testing.assert_array_equal(state.position[0].reshape(-1).numpy()[:4], [1, 3, 0, 2])
    np.testing.assert_array_equal(state.swap_attempts.numpy(), [[1, 1, 1], [1, 1, 1]])
    np.testing.assert_array_equal(state.position[0].reshape(-1).numpy()[4:], [4, 6, 5, 7])  # log a = .25 * 100
    np.testing.assert_array_equal(s.swap_rates(state).numpy(), [[1, 1, 1], [0, 1, 0]])


def test_swap_acceptance_probability_is_min_one_exp():
    """With (beta_0 - beta_1)(U_0 - U_1) = log 0.3 the exchange is accepted 30 % of the time."""
    C = 4000
    d_beta = 1.0 - 0.5  # ladder (1, 2)
    values = torch.tensor([[math.log(0.3) / d_beta, 0.0]], dtype=torch.float64).repeat(C, 1)
    s, state, gen = _swap_state(values, 2, 2.0, seed=1)
    frac = float(s._swap(state).mean())
    assert abs(frac - 0.3) < 4 * math.sqrt(0.21 / C)
    # with R = 2 the single pair is offered at every event
    s._swap(state)
    assert int(state.swap_attempts.min()) == 2


# --------------------------------------------------------------------------- #
# exactness
# --------------------------------------------------------------------------- #
def test_every_ladder_slot_samples_its_tempered_gaussian_exactly():
    """Temperature-1 draws match the correlated Gaussian, and slot m matches the Gaussian at temperature T_m
    (covariance T_m Sigma), within Monte Carlo error alone: no discretisation allowance."""
    C = 256
    s = make_sampler("pt-langevin", n_replicas=4, max_temperature=4.0, swap_interval=10, step_size=0.5)
    target = correlated_gaussian(C * 4, per_chain=True)
    draws, state = _replica_draws(s, target.potential, C, 2000, burn_in=500)
    for m, T in enumerate(s.temperatures.tolist()):
        err = moment_errors(draws[m], target.mean, T * target.cov)
        print("pt-langevin slot", m, "T", round(T, 3), {k: round(float(v), 4) for k, v in err.items()})
        assert err["ess"] > 2000
        assert err["mean_err"] <= err["mean_tol"]
        assert err["cov_err"] <= err["cov_tol"]
    hot, cold = draws[-1].reshape(-1, 2).var(0), draws[0].reshape(-1, 2).var(0)
    np.testing.assert_allclose(hot / cold, 4.0, rtol=0.1)
    acc, swap = s.acceptance_rates(state).mean(0), s.swap_rates(state).mean(0)
    print("acceptance per slot", acc.numpy().round(3), "swap per pair", swap.numpy().round(3))
    assert bool((acc > 0.3).all()) and bool((swap > 0.3).all())


def test_the_langevin_proposal_ratio_is_needed():
    """Power: without the log q(theta|theta') - log q(theta'|theta) term the Langevin-only chain is biased
    (the variance is off by about 50 %), while the correct one matches the Gaussian."""
    class WithoutCorrection(PTLangevin):
        def _log_proposal_ratio(self, start, proposal, noise, grad_new, drift, sigma, m):
            return torch.zeros(start[0].shape[0], dtype=start[0].dtype)

    C = 256
    for cls, biased in ((PTLangevin, False), (WithoutCorrection, True)):
        s = cls(n_replicas=1, langevin_prob=1.0, step_size=0.5)
        target = correlated_gaussian(C, per_chain=True)
        draws, _ = _replica_draws(s, target.potential, C, 1200, burn_in=200)
        err = moment_errors(draws[0], target.mean, target.cov)
        print(cls.__name__, {k: round(float(v), 4) for k, v in err.items()})
        if biased:
            assert err["cov_err"] > 5 * err["cov_tol"]
        else:
            assert err["mean_err"] <= err["mean_tol"] and err["cov_err"] <= err["cov_tol"]


# --------------------------------------------------------------------------- #
# the two phases (Sec. 3.5, 4.1)
# --------------------------------------------------------------------------- #
def test_phase_switch_after_the_tempering_fraction():
    C, R = 2, 3
    s = make_sampler("pt-langevin", n_replicas=R, max_temperature=9.0, swap_interval=5, n_steps=100,
                     tempering_fraction=0.6)
    target = correlated_gaussian(C * R, per_chain=True)
    seen = []

    def record(k, state, info):
        seen.append((k, info.is_draw.clone(), info.extra["temperature"].clone(), s.in_tempering_phase(state),
                     int(state.swap_attempts.sum())))

    _run(s, target.potential, C, 100, record=record)
    ladder = torch.tensor([1.0, 3.0, 9.0], dtype=torch.float64).repeat(C)
    for k, is_draw, temperature, tempering_next, n_swaps in seen:
        if k <= 60:
            assert is_draw.tolist() == [True, False, False] * C
            torch.testing.assert_close(temperature, ladder)
            assert tempering_next == (k < 60)
        else:
            assert bool(is_draw.all()) and bool((temperature == 1).all()) and not tempering_next
            assert n_swaps == seen[59][4]  # no swaps once every replica is at T = 1
    assert seen[59][4] == 12 * C  # 12 events, one pair each (even then odd)


def test_after_the_switch_every_replica_samples_the_posterior():
    C, R = 128, 3
    s = make_sampler("pt-langevin", n_replicas=R, max_temperature=9.0, swap_interval=10, step_size=0.5,
                     n_steps=1600, tempering_fraction=0.25)
    target = correlated_gaussian(C * R, per_chain=True)
    draws, _ = _replica_draws(s, target.potential, C, 1600, burn_in=800)
    err = moment_errors(draws.reshape(R * C, -1, 2), target.mean, target.cov)
    print("second phase, all replicas", {k: round(float(v), 4) for k, v in err.items()})
    assert err["mean_err"] <= err["mean_tol"] and err["cov_err"] <= err["cov_tol"]


# --------------------------------------------------------------------------- #
# multimodality: the point of tempering
# --------------------------------------------------------------------------- #
def _cold_mode_labels(n_replicas, max_temperature, n_chains, n_steps, seed=0):
    mix = four_modes_2d(n_chains * n_replicas, gradient_noise=0.0)  # every member starts in the lightest mode
    s = make_sampler("pt-langevin", n_replicas=n_replicas, max_temperature=max_temperature, swap_interval=1,
                     step_size=0.8)
    kept = []

    def record(k, state, info):
        if k > n_steps // 10 and k % 5 == 0:
            kept.append(state.position[0].detach().view(n_chains, n_replicas, 2)[:, 0].numpy().copy())

    state = _run(s, mix.potential, n_chains, n_steps, seed, record)
    x = np.stack(kept, 1)  # (chain, draw, 2)
    labels = ((x[:, :, None, :] - mix.means[None, None]) ** 2).sum(-1).argmin(-1)
    return mix, s, state, labels


def test_each_tempered_chain_visits_all_modes_in_proportion():
    """four_modes_2d (barriers of 12.5 nats, weights .1/.2/.3/.4, every member starts in the lightest mode):
    every single PT chain's temperature-1 replica visits all four modes, with fractions within 4 Monte Carlo
    standard errors of the weights (from the ESS of each mode's indicator), per chain and pooled; chains of one
    replica at T = 1 (same proposals) stay where they started."""
    C = 16
    mix, s, state, labels = _cold_mode_labels(5, 16.0, C, 3000)
    w = mix.weights
    frac = np.stack([(labels == k).mean(1) for k in range(4)], 1)  # (chain, mode)
    print("per-chain mode fractions\n", frac.round(3))
    print("acceptance", s.acceptance_rates(state).mean(0).numpy().round(3),
          "swap", s.swap_rates(state).mean(0).numpy().round(3))
    assert (frac > 0).all()
    for c in range(C):
        ess = np.array([effective_sample_size((labels[c] == k).astype(float)) for k in range(4)])
        assert (np.abs(frac[c] - w) <= 4 * np.sqrt(w * (1 - w) / ess)).all(), (c, frac[c], ess)
    ess = np.array([effective_sample_size((labels == k).astype(float)) for k in range(4)])
    tol = 4 * np.sqrt(w * (1 - w) / ess)
    print("pooled", frac.mean(0).round(3), "tolerance", tol.round(3))
    assert (np.abs(frac.mean(0) - w) <= tol).all() and tol.max() < 0.1

    mix, s, state, labels = _cold_mode_labels(1, 1.0, C, 1500)
    frac = np.stack([(labels == k).mean(1) for k in range(4)], 1)
    visited = (frac > 0).sum(1)
    print("single temperature: modes visited per chain", visited, "pooled fractions", frac.mean(0).round(3))
    assert visited.max() < 4 and np.median(visited) == 1
    assert frac[:, 0].mean() > 0.5  # mostly stuck in the lightest (weight 0.1) mode


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_runs_on_cuda_in_float32():
    mean = torch.tensor([1.0, -1.0], device="cuda")
    pot = FunctionPotential(lambda p, b: 0.5 * ((p[0] - mean) ** 2).sum(1), [torch.zeros(8 * 4, 2, device="cuda")])
    s = make_sampler("pt-langevin", n_replicas=4, swap_interval=2, step_size=0.5)
    gen = torch.Generator(device="cuda").manual_seed(0)
    state = s.init(pot.parameters, gen, n_chains=8)
    for _ in range(50):
        state, info = s.step(state, pot, None)
    assert info.potential.device.type == "cuda" and info.is_draw.device.type == "cuda"
    assert pot.parameters[0].dtype == torch.float32 and torch.isfinite(pot.parameters[0]).all()
    assert s.swap_rates(state).shape == (8, 3) and int(state.swap_attempts.sum()) > 0


def test_step_size_adaptation_per_ladder_slot_then_frozen():
    """adaptation_steps tunes each slot's proposal sd towards target_accept (hot slots get larger steps), then
    freezes them; the temperature-1 draws after adaptation keep the exact moments."""
    C, R = 128, 3
    target = correlated_gaussian(C * R, per_chain=True)
    sampler = make_sampler("pt-langevin", n_replicas=R, max_temperature=9.0, step_size=0.01, swap_interval=10,
                           adaptation_steps=500, target_accept=0.3)
    gen = torch.Generator().manual_seed(0)
    state = sampler.init(target.potential.parameters, gen, n_chains=C)
    kept, accepted = [], []
    for k in range(1, 2501):
        state, info = sampler.step(state, target.potential, None)
        if k == 500:
            frozen = state.log_step.clone()
        if k > 1000:
            accepted.append(info.extra["accepted"].view(C, R).float().mean(0))
            if k % 5 == 0:
                kept.append(state.position[0].detach()[info.is_draw].numpy().copy())
    torch.testing.assert_close(state.log_step, frozen)  # no change after adaptation
    steps = state.log_step.exp().view(C, R).mean(0)
    assert steps[0] > 0.3 and steps[0] < steps[1] < steps[2]  # from 0.01 to the target's scale, hotter = larger
    rates = torch.stack(accepted).mean(0)
    assert torch.all((rates - 0.3).abs() < 0.08), rates
    err = moment_errors(np.stack(kept, axis=1), target.mean, target.cov)
    assert err["mean_err"] <= err["mean_tol"] and err["cov_err"] <= err["cov_tol"], err
    assert sampler.state_summary(state)["replica_step_sizes"][0] == pytest.approx(float(steps[0]))


def test_replicas_above_temperature_one_do_not_make_a_fit_short():
    """The hot replicas collect only after the tempering phase, by design: the fit is complete when the
    temperature-1 replicas have their n_draws, and no 'fewer draws' warning is raised."""
    import warnings

    from sklearn.datasets import load_iris
    from sklearn.exceptions import ConvergenceWarning

    from bayesnet import BayesianMLPClassifier

    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = BayesianMLPClassifier(hidden_layer_sizes=(4,), sampler="pt-langevin", sampler__n_replicas=3,
                                    burn_in=100, n_draws=20, random_state=0).fit(X, y)
    kept = est.trace_.stored_per_slot
    assert kept[0] == 20 and kept[1:].max() < 20 and est.fit_status_["status"] == "complete"
    # what was asked for: n_draws of the temperature-1 replica; the others' draws come on top (draws_wanted counted
    # every replica, so that a complete fit read as "kept fewer than wanted")
    assert est.fit_status_["draws_wanted"] == 20 and est.fit_status_["draws_kept"] == kept.sum() > 20
    assert not any("draws were kept per chain" in str(w.message) for w in caught
                   if issubclass(w.category, ConvergenceWarning))


# --------------------------------------------------------------------------- #
# tempered="likelihood": the data term tempered, the prior not
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("mode, langevin_prob", [("likelihood", 0.5), ("posterior", 0.5), ("likelihood", 0.0)])
def test_tempering_the_likelihood_only_samples_each_slots_own_target_exactly(mode, langevin_prob):
    """With ``tempered="likelihood"`` slot m targets ``p(y|theta)^beta_m p(theta)``: for a line with known noise and
    a Gaussian prior of sd 0.5, a Gaussian of precision ``beta_m A'A + 4 I`` and mean ``beta_m cov A'y``. Every slot
    matches it within Monte Carlo error (the swaps compare the data terms). Power: the hot slots are far from the
    whole posterior tempered (the paper's mode, covariance ``T_m`` times the posterior's), which the same test
    refuses; and the paper's mode on the same data matches that one. With random-walk proposals only
    (``langevin_prob=0``) no gradient is taken, so the cached potentials alone carry a swap's change of weight (a
    reviewer's mutation: without that change every slot was off by 5-14x the tolerance)."""
    from bayesnet.priors import GaussianPrior

    C, R = 128, 4
    s = make_sampler("pt-langevin", n_replicas=R, max_temperature=4.0, swap_interval=5, step_size=0.25,
                     tempered=mode, n_steps=None, langevin_prob=langevin_prob)
    post, batch, A = linear_posterior(GaussianPrior(0.5), 20, C * R)
    draws, state = _replica_draws(s, post, C, 2500, burn_in=500, seed=1, batch=batch)
    for m, T in enumerate(s.temperatures.tolist()):
        beta = 1.0 / T
        prior_precision = 4.0 * torch.eye(2, dtype=torch.float64)
        untempered = torch.linalg.inv(A.T @ A + prior_precision)
        own = torch.linalg.inv(beta * A.T @ A + prior_precision)
        targets = {"likelihood": (own @ (beta * A.T @ batch[1]), own),
                   "posterior": (untempered @ (A.T @ batch[1]), T * untempered)}
        mean, cov = targets[mode]
        err = moment_errors(draws[m], mean.numpy(), cov.numpy())
        print(mode, "slot", m, "T", round(T, 3), {k: round(float(v), 4) for k, v in err.items()})
        assert err["ess"] > 1000
        assert err["mean_err"] <= err["mean_tol"] and err["cov_err"] <= err["cov_tol"]
        if m > 0:  # power: the other mode's target is refused for every hot slot
            other_mean, other_cov = targets["posterior" if mode == "likelihood" else "likelihood"]
            wrong = moment_errors(draws[m], other_mean.numpy(), other_cov.numpy())
            assert wrong["mean_err"] > wrong["mean_tol"] or wrong["cov_err"] > wrong["cov_tol"]
    swap = s.swap_rates(state).mean(0)
    assert bool((swap > 0.2).all()), swap


@pytest.mark.parametrize("exchange", [True, False])
def test_tempering_the_likelihood_exchanges_the_hierarchical_precisions_with_the_positions(exchange, monkeypatch):
    """The hierarchical prior with ``tempered="likelihood"``: slot m targets ``p(y|w)^beta_m p(w|tau) p(tau)``, whose
    marginal in ``w`` is known by quadrature (a line through the origin, five points). The Gibbs steps of ``tau``
    are the same at every rung; a swap must move each member's ``tau`` with its position. Every slot matches its
    marginal; power: with the precisions left behind on a swap (``permute_members`` a no-op) the slots do not."""
    from bayesnet.priors import HierarchicalPrior

    if not exchange:
        monkeypatch.setattr(HierarchicalPrior, "permute_members", lambda self, index: None)
    C, R = 128, 4
    s = make_sampler("pt-langevin", n_replicas=R, max_temperature=8.0, swap_interval=1, step_size=0.6,
                     tempered="likelihood", n_steps=None)
    post, batch, _ = linear_posterior(HierarchicalPrior(gibbs_interval=25), 5, C * R, bias=False, seed=3)
    draws, state = _replica_draws(s, post, C, 3000, burn_in=500, seed=1, batch=batch)
    failed = []
    for m, T in enumerate(s.temperatures.tolist()):
        mean, var = t2_line_moments(*batch, 1.0 / T)
        err = moment_errors(draws[m], np.array([mean]), np.array([[var]]))
        print("exchange", exchange, "slot", m, "T", round(T, 3), {k: round(float(v), 4) for k, v in err.items()})
        assert err["ess"] > 1000
        failed.append(err["mean_err"] > err["mean_tol"] or err["cov_err"] > err["cov_tol"])
    assert bool((s.swap_rates(state).mean(0) > 0.2).all())
    assert not any(failed) if exchange else any(failed)


def test_tempering_the_likelihood_reports_the_untempered_potential_and_needs_a_chain_posterior():
    """The step reports every member's untempered potential ``U_D + U_P`` (the divergence monitor and the warm-up
    compare it across members), whatever slot it sits in; the weights hold for the kernel's own evaluations only
    (after a step the posterior is unweighted again); a potential without per-member weights is a clear error."""
    from bayesnet.priors import GaussianPrior

    C, R = 3, 4
    s = make_sampler("pt-langevin", n_replicas=R, max_temperature=4.0, swap_interval=2, step_size=0.25,
                     tempered="likelihood", n_steps=None)
    post, batch, _ = linear_posterior(GaussianPrior(0.5), 20, C * R)
    state = s.init(post.parameters, torch.Generator().manual_seed(0), n_chains=C)
    for _ in range(7):
        state, info = s.step(state, post, batch)
        assert post.data_weight is None
        torch.testing.assert_close(info.potential, post.value(batch).detach())
    assert int(state.swap_attempts.sum()) > 0
    with pytest.raises(ValueError, match="set_data_weight"):
        s.step(s.init(correlated_gaussian(R, per_chain=True).potential.parameters, 0, n_chains=1),
               correlated_gaussian(R, per_chain=True).potential, None)
    with pytest.raises(ValueError, match="one weight per member"):
        post.set_data_weight(torch.ones(5))


def test_tempering_the_likelihood_keeps_its_caches_exact_through_swaps_gibbs_steps_and_the_ladders_end():
    """After every step (swaps every 2 steps, a Gibbs step of the hierarchical prior every step, the ladder ending at
    step 10), with Langevin proposals always, sometimes and never: the reported potential is the untempered ``U``,
    and the cached potential, data term and valid gradients equal fresh evaluations at the weights they were taken
    under (a reviewer's check)."""
    from bayesnet.priors import HierarchicalPrior

    C, R = 3, 4
    for langevin_prob in (0.0, 0.5, 1.0):
        s = make_sampler("pt-langevin", n_replicas=R, max_temperature=4.0, swap_interval=2, step_size=0.25,
                         tempered="likelihood", n_steps=20, tempering_fraction=0.5, langevin_prob=langevin_prob)
        post, batch, _ = linear_posterior(HierarchicalPrior(gibbs_interval=1), 20, C * R)
        state = s.init(post.parameters, torch.Generator().manual_seed(0), n_chains=C)
        for k in range(20):
            state, info = s.step(state, post, batch)
            assert post.data_weight is None
            torch.testing.assert_close(info.potential, post.value(batch).detach())
            post.set_data_weight(state.cache_beta)
            value, grads = post.value_and_grad(batch)
            data = post.data_value
            post.set_data_weight(None)
            torch.testing.assert_close(state.value, value)
            torch.testing.assert_close(state.data_value, data)
            if state.grad is not None:
                valid = state.grad_valid
                for cached, fresh in zip(state.grad, grads):
                    torch.testing.assert_close(cached[valid], fresh.reshape(cached.shape)[valid])
        assert int(state.swap_attempts.sum()) > 0 and not s.in_tempering_phase(state)
        assert bool((state.cache_beta == 1).all())


def test_a_sampler_pickled_before_tempered_existed_tempers_the_posterior():
    """A reviewer's: unpickling a PTLangevin from before the setting broke get_params and a continued fit."""
    s = make_sampler("pt-langevin")
    del s.__dict__["tempered"]
    old = pickle.loads(pickle.dumps(s))
    assert old.tempered == "posterior" and old.get_params()["tempered"] == "posterior"
    assert not old.changed_state_settings(make_sampler("pt-langevin"))
    assert make_sampler("pt-langevin", n_replicas=1, tempered="likelihood").exchanges_members is False
