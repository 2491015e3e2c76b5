"""The compiled transition (bayesnet.samplers.compiled): the same numbers as the eager kernel, compiled once,
an eager fallback with one warning, and the decision of ``compile="auto"``."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

import bayesnet.samplers.compiled as compiled_module
from bayesnet import BayesianMLPClassifier, BayesianMLPRegressor
from bayesnet.samplers.compiled import COMPILE_MIN_STEPS, COMPILE_MIN_STEPS_CUDA, CompiledTransition, compile_decision


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X)[:200], y[:200]


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y)


@pytest.mark.parametrize("sampler", ["sghmc", "sgld", "sgnht"])
def test_the_compiled_transition_gives_the_eager_draws(cancer, sampler):
    """Same seed, same streams: after the warm-up (eager in both) 400 compiled steps retrace the eager chains
    within float32 rounding; the hierarchical prior's Gibbs steps run in between. The rounding differences of
    the two step orders grow along a chain (measured, sgnht: 1e-8 at the first draw, 5e-4 at the 40th, steadily;
    a wrong step would differ at once): the first draws agree to 1e-5, all of them to 1e-3, relative."""
    X, y = cancer
    params = dict(hidden_layer_sizes=(8,), sampler=sampler, burn_in=100, n_draws=40, n_chains=2, batch_size=64,
                  random_state=0)
    eager = _fit(BayesianMLPClassifier(compile=False, **params), X, y)
    fast = _fit(BayesianMLPClassifier(compile=True, **params), X, y)
    if fast.compiled_step_.fallback is not None:
        pytest.skip(f"torch.compile is not available here: {fast.compiled_step_.fallback}")
    assert fast.fit_status_["compiled"] == "compiled" and eager.fit_status_["compiled"] == "compile=False"
    assert fast.compiled_step_.compile_seconds > 0
    a, b = eager.trace_.as_array(), fast.trace_.as_array()
    assert np.abs(a - b)[:, :5].max() <= 1e-5 * np.abs(a).max()
    assert np.abs(a - b).max() <= 1e-3 * np.abs(a).max()
    np.testing.assert_allclose(fast.predict_proba(X), eager.predict_proba(X), atol=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_the_compiled_transition_gives_the_eager_draws_on_cuda(cancer, mode):
    """On a GPU, in torch's default mode and with CUDA graphs (``reduce-overhead``, whose outputs the next replay
    overwrites: the kernel must copy them out, never keep them; and no graph may be skipped): the compiled fit
    retraces the eager one's draws, and its statistics (read from the graph's outputs: the trace's potentials
    at the draws, every compiled step's potential and kinetic temperature) are the eager fit's. The draws'
    tolerances are the CPU test's, ten times wider: the GPU's kernels differ between the two paths (cuBLAS
    against generated code), and the differences grow along a chain as on the CPU."""
    from torch._dynamo.utils import counters

    X, y = cancer
    params = dict(hidden_layer_sizes=(8,), sampler="sghmc", burn_in=100, n_draws=40, n_chains=2, batch_size=64,
                  random_state=0, device="cuda")
    eager = _fit(BayesianMLPClassifier(compile=False, **params), X, y)
    counters.clear()
    fast = _fit(BayesianMLPClassifier(compile=True, compile__mode=mode, **params), X, y)
    assert fast.compiled_step_.fallback is None, fast.compiled_step_.fallback
    # (power for the graphs: Inductor skips them silently for a CPU input or a mutated one, and counts the skip)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    assert fast.fit_status_["compiled"] == "compiled"
    a, b = eager.trace_.as_array(), fast.trace_.as_array()
    assert np.isfinite(b).all()
    assert np.abs(a - b)[:, :5].max() <= 1e-4 * np.abs(a).max()
    assert np.abs(a - b).max() <= 1e-2 * np.abs(a).max()
    ua, ub = (est.trace_.stat("potential") for est in (eager, fast))
    np.testing.assert_allclose(ub, ua, rtol=1e-3)
    # every compiled step's statistics, not only the stored draws' (the ring buffer holds the last steps)
    (steps_a, fa), (steps_b, fb) = (est.step_stats_.per_step() for est in (eager, fast))
    np.testing.assert_array_equal(steps_b, steps_a)
    after = steps_a > 100  # the compiled steps (the warm-up's are eager in both fits)
    assert after.sum() >= 100
    for name in ("potential", "kinetic_temperature"):
        np.testing.assert_allclose(fb[name][:, after], fa[name][:, after], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(fast.predict_proba(X), eager.predict_proba(X), atol=1e-2)


#: every compiling sampler, in a setting whose compiled path the tests below compare with the eager one under CUDA
#: graphs' contract (sghmc's GPU case is the test above)
GRAPH_CASES = [("sghmc", {}), ("sgld", {}), ("sgnht", {}), ("baoab", {}),
               ("eqn", {"sampler__covariance_interval": 50, "sampler__step_size": 0.01}),
               ("tacthmc", {"sampler__steps_per_sample": 10, "sampler__resample_momentum": True}),
               ("hmc", {"batch_size": -1, "thinning": 1}),
               ("pt-langevin", {"batch_size": -1, "sampler__n_replicas": 4})]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("sampler,extra", GRAPH_CASES[1:], ids=[c[0] for c in GRAPH_CASES[1:]])
def test_auto_on_a_gpu_compiles_with_cuda_graphs_and_gives_the_eager_draws(cancer, monkeypatch, sampler, extra):
    """``compile="auto"`` on a GPU, its threshold lowered to this short run: CUDA graphs for every compiling
    sampler (sghmc above), their outputs copied out before the next replay (hmc repeats its compiled leapfrog
    step within a transition, pt-langevin its compiled gradient), no graph skipped, and the first draws those
    of the eager fit, within the CUDA sghmc test's tolerance (eqn's ten times wider, as on the CPU)."""
    from torch._dynamo.utils import counters

    X, y = cancer
    params = {**dict(hidden_layer_sizes=(8,), sampler=sampler, burn_in=100, n_draws=5, n_chains=2, batch_size=64,
                     random_state=0, standardize_inputs=False, device="cuda"), **extra}
    eager = _fit(BayesianMLPClassifier(compile=False, **params), X, y)
    monkeypatch.setattr(compiled_module, "COMPILE_MIN_STEPS_CUDA", 1)
    counters.clear()
    fast = _fit(BayesianMLPClassifier(compile="auto", **params), X, y)
    assert fast.compiled_step_ is not None and fast.compiled_step_.fallback is None, fast.fit_status_
    assert fast.fit_status_["compiled"].startswith("compiled with CUDA graphs")
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    a, b = eager.trace_.as_array(), fast.trace_.as_array()
    assert np.isfinite(b).all()
    assert np.abs(a - b).max() <= (1e-3 if sampler == "eqn" else 1e-4) * np.abs(a).max()


@pytest.mark.parametrize("sampler,extra", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_no_kernel_reads_a_compiled_output_after_the_next_call(cancer, monkeypatch, sampler, extra):
    """CUDA graphs' contract, checked without a GPU: a graph's replay overwrites the previous call's outputs, so a
    kernel must copy them out (or be done with them) before its next call. Here "compiling" returns the pure
    function with that behaviour (its outputs live in buffers that the next call first fills with NaN), so that
    any output still read after the next call, or fed back as an input, poisons the chain. The draws must be the
    eager fit's. Power: hmc fed each leapfrog step's outputs into the next (found on an H200; without the clone in
    HMC._transition this test fails for hmc)."""
    from torch.utils._pytree import tree_flatten, tree_unflatten

    previous = []  # (one pool for every compiled function of the fit, as the graphs of one device share theirs)

    def replaying(fn, **kwargs):
        def call(*args):
            for t in previous:  # the last call's outputs, overwritten as a replay would
                t.fill_(float("nan"))
            leaves, spec = tree_flatten(fn(*args))
            # (every output a float tensor that the fill poisons: a container pytree does not open, or an integer
            # output that 0 would not poison, would escape this test)
            assert all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in leaves), leaves
            previous[:] = [t.clone() for t in leaves]
            return tree_unflatten(list(previous), spec)

        return call

    X, y = cancer
    params = {**dict(hidden_layer_sizes=(8,), sampler=sampler, burn_in=100, n_draws=5, n_chains=2, batch_size=64,
                     random_state=0, standardize_inputs=False), **extra}
    eager = _fit(BayesianMLPClassifier(compile=False, **params), X, y)
    monkeypatch.setattr(compiled_module.torch, "compile", replaying)
    replayed = _fit(BayesianMLPClassifier(compile=True, **params), X, y)
    assert replayed.compiled_step_ is not None and replayed.compiled_step_.fallback is None
    a, b = eager.trace_.as_array(), replayed.trace_.as_array()
    assert np.isfinite(b).all()
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * np.abs(a).max())


#: every sampler that declares a pure transition, with each of its step compositions
PURE = [("sghmc", {}), ("sgld", {}), ("sgnht", {}), ("baoab", {"sampler__scheme": "BAOAB"}),
        ("baoab", {"sampler__scheme": "GLA2"}), ("baoab", {"sampler__scheme": "GLA1"}),
        ("eqn", {"sampler__n_walkers": 4, "sampler__covariance_blending": 0.0}),
        ("eqn", {"sampler__n_walkers": 4, "sampler__covariance_interval": 7}),
        ("eqn", {"sampler__n_walkers": 4, "sampler__step_size": 0.01, "sampler__covariance_interval": 7}),
        ("tacthmc", {"sampler__steps_per_sample": 5}),
        ("tacthmc", {"sampler__steps_per_sample": 5, "sampler__tempered": "likelihood"}),
        ("tacthmc", {"sampler__biasing": "metadynamics", "sampler__resample_momentum": True,
                     "sampler__steps_per_sample": 4}),
        ("hmc", {}), ("pt-langevin", {"sampler__n_replicas": 4, "sampler__swap_interval": 5})]
#: eqn with B_i = I throughout (covariance_blending=0), with the B_i its warm-up set (at steps 15, 40, 90) and froze,
#: through steps 105, 112, 119, 126 where the paper's mode, at an explicit step (the third), updates them
#: tacthmc with ABF (a draw every 5th step; tempering the whole posterior, and the likelihood only under the
#: hierarchical prior, prior_scale="auto"), and with metadynamics and the momenta resampled eagerly between
#: compiled steps at every 4th (both with one chain on the plateau, drawing, and one off it, below)
PURE_IDS = ["sghmc", "sgld", "sgnht", "baoab-BAOAB", "baoab-GLA2", "baoab-GLA1", "eqn-identity", "eqn-frozen",
            "eqn-updates",
            "tacthmc", "tacthmc-likelihood", "tacthmc-metadynamics-resampled", "hmc", "pt-langevin"]


@pytest.mark.parametrize("sampler,extra", PURE, ids=PURE_IDS)
def test_the_pure_transition_is_the_eager_step(cancer, sampler, extra):
    """Step for step, without compiling: from the same warmed-up state, 25 steps of the pure transition (run
    eagerly, as the fallback runs it) and of the sampler's own step agree to float rounding, the hierarchical
    prior's Gibbs steps included (steps 110 and 120). Along a whole run the two drift apart once rounding
    differences flip a ReLU unit on a row (BAOAB's weak friction lets them grow), so this compares steps, not
    runs. Power: any misplaced sub-step (an O applied twice, a B with the new gradient) differs at once."""
    X, y = cancer
    est = _fit(BayesianMLPClassifier(hidden_layer_sizes=(8,), sampler=sampler, burn_in=100, n_draws=2, thinning=1,
                                     n_chains=2, batch_size=64, random_state=0, compile=False, **extra), X, y)
    assert type(est.sampler_).compiles
    batch = (torch.as_tensor(X[:64], dtype=torch.float32), torch.as_tensor(y[:64]))
    runs = []
    for _ in range(2):
        state, posterior = copy.deepcopy(est.sampler_state_), copy.deepcopy(est.posterior_)
        state.position = posterior.parameters  # the state moves the posterior's leaves
        runs.append((state, posterior))
    (eager_state, eager_post), (pure_state, pure_post) = runs
    if hasattr(eager_state, "grad"):  # a cached gradient: start without one (both take it on the first batch)
        for state in (eager_state, pure_state):
            est.sampler_.reset_cache(state)
    if sampler == "tacthmc":  # chain 1 off the plateau and moving, so that the coupling, the tempering momentum,
        for state in (eager_state, pure_state):  # the biasing force and table all take part (on it, lambda = 1,
            state.xi = torch.tensor([0.2, -0.9])  # 0); chain 0 on it, taking draws (and resampling)
            state.xi_momentum = torch.tensor([1e-3, 2e-3])
    if sampler == "eqn":  # the path each case is for: B_i = I throughout, or a snapshot (frozen, or refreshed)
        assert (pure_state.snapshot is None) == (extra.get("sampler__covariance_blending") == 0.0)
        assert pure_state.follows_warmup == ("sampler__step_size" not in extra)
        frozen = pure_state.coefficients
    pure = CompiledTransition(est.sampler_, pure_post, pure_state.layout, compile=False)
    draws = []
    for _ in range(25):
        _, want = est.sampler_.step(eager_state, eager_post, batch)
        _, got = pure(pure_state, pure_post, batch)
        draws.append(got.is_draw)
        for a, b in zip(eager_state.position, pure_state.position):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5 * float(a.abs().max()))
        for name in ("potential", "kinetic_energy", "kinetic_temperature"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-4, atol=1e-4)
        assert set(got.extra) == set(want.extra)
        for name in want.extra:
            torch.testing.assert_close(got.extra[name], want.extra[name], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(torch.as_tensor(got.is_draw), torch.as_tensor(want.is_draw))
        for name in ("xi", "xi_momentum", "bias", "bin_visits", "plateau_steps", "thermostat",
                     "tempering_thermostat"):  # tacthmc's own state
            if hasattr(eager_state, name):
                torch.testing.assert_close(getattr(pure_state, name), getattr(eager_state, name), rtol=1e-4,
                                           atol=1e-6)
    assert pure_state.step == eager_state.step and torch.isfinite(got.potential).all()
    if sampler == "tacthmc":  # chain 0 drew at the collection steps, chain 1 (hot) never
        drawn = torch.stack([torch.as_tensor(d) for d in draws])
        assert drawn[:, 0].any() and not drawn[:, 1].any()
    for a, b in zip(getattr(eager_state, "grad", None) or [], getattr(pure_state, "grad", None) or []):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * float(a.abs().max()))
    if hasattr(eager_state, "flat_momentum"):  # (sgld has none)
        torch.testing.assert_close(pure_state.flat_momentum, eager_state.flat_momentum, rtol=1e-4, atol=1e-5)
    if sampler == "eqn" and pure_state.follows_warmup:  # frozen past covariance_interval on both paths
        assert pure_state.coefficients is frozen and eager_state.snapshot_blending == pure_state.snapshot_blending
    if sampler == "eqn":  # the eager step continues from the pure one's state: B_i grad U recomputed, same step
        _, want = est.sampler_.step(eager_state, eager_post, batch)
        _, got = est.sampler_.step(pure_state, pure_post, batch)
        for a, b in zip(eager_state.position, pure_state.position):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5 * float(a.abs().max()))
        torch.testing.assert_close(got.potential, want.potential, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sampler,extra", [("baoab", {}), ("eqn", {"sampler__covariance_interval": 50,
                                                                    "sampler__step_size": 0.01}),
                                           ("tacthmc", {"sampler__steps_per_sample": 10,
                                                        "sampler__resample_momentum": True}),
                                           pytest.param("tacthmc", {"sampler__steps_per_sample": 10,
                                                                    "sampler__tempered": "likelihood"},
                                                        marks=pytest.mark.slow),  # (the pure step: above)
                                           ("hmc", {"batch_size": -1, "thinning": 1}),
                                           ("pt-langevin", {"batch_size": -1, "sampler__n_replicas": 4}),
                                           ("pt-langevin", {"batch_size": -1, "sampler__n_replicas": 4,
                                                            "sampler__tempered": "likelihood",
                                                            "sampler__tempering_fraction": 1.0,
                                                            "sampler__swap_interval": 5})],
                         ids=["baoab", "eqn", "tacthmc", "tacthmc-likelihood", "hmc", "pt-langevin",
                              "pt-langevin-likelihood"])
def test_the_compiled_transitions_give_the_eager_draws(cancer, sampler, extra):
    """BAOAB, eqn, TACT-HMC, HMC and pt-langevin compiled: the first draws of the eager chains, within float32
    rounding (the
    step-for-step check above covers BAOAB's other schemes; along a run its weakly damped chains part once a ReLU
    unit flips, and eqn's walkers, each preconditioned by the others' spread, amplify rounding the same way).
    eqn's preconditioner (at an explicit step, the paper's mode) is refreshed at steps 50 and 100 (the latter at the first compiled step), TACT-HMC's momenta resampled at every draw, both
    eagerly between compiled steps (TACT-HMC also tempering the likelihood only, under the hierarchical prior); HMC's compiled unit is its leapfrog step, its refresh and Metropolis test eager,
    pt-langevin's its potential's gradient, its step eager (both on the full batch, as their exact tests need;
    pt-langevin also tempering the likelihood only, the compiled potential weighting each replica's data term,
    swapping every 5 steps on a ladder kept throughout).
    eqn's walkers amplify rounding most: its draws are compared to 1e-4 of their scale (1.2e-5 reached on an AMD
    EPYC without AVX-512, under 1e-5 on the Intel machines; an error in the update moves them by about the step,
    1e-2). HMC's draws are its first five transitions after the warm-up (thinning 1): along a longer run the
    rounding of the two paths' energies can flip one Metropolis decision, after which the chains part for good
    (on the AMD machine at the fourth draw of thinning 10)."""
    X, y = cancer
    # (standardize_inputs=False: the chains measured when the tolerance was set; standardised, baoab's chains part
    # at 2.5 times it on this machine, its ReLU-flip amplification of rounding as above)
    params = {**dict(hidden_layer_sizes=(8,), sampler=sampler, burn_in=100, n_draws=5, n_chains=2, batch_size=64,
                     random_state=0, standardize_inputs=False), **extra}
    eager = _fit(BayesianMLPClassifier(compile=False, **params), X, y)
    fast = _fit(BayesianMLPClassifier(compile=True, **params), X, y)
    if fast.compiled_step_.fallback is not None:
        pytest.skip(f"torch.compile is not available here: {fast.compiled_step_.fallback}")
    assert fast.fit_status_["compiled"] == "compiled"
    a, b = eager.trace_.as_array(), fast.trace_.as_array()
    assert np.abs(a - b).max() <= (1e-4 if sampler == "eqn" else 1e-5) * np.abs(a).max()


@pytest.mark.parametrize("sampler,extra", [("sghmc", {}), ("hmc", {"batch_size": -1, "n_chains": 2, "thinning": 1})],
                         ids=["sghmc", "hmc"])
def test_a_failing_compiler_falls_back_to_eager_with_one_warning(cancer, monkeypatch, sampler, extra):
    """A compiler that fails (no C++ toolchain, say) costs one UserWarning; the run goes on eagerly with the
    same numbers, and the estimator pickles. hmc's compiled unit fails at its first leapfrog step, inside a
    transition: the same pure step then runs eagerly on the same inputs (its 20 transitions after the warm-up
    compared, thinning 1: the pure step and the in-place kernel round differently, and along a longer run one
    flipped Metropolis decision would part the chains)."""
    def broken(fn, **kwargs):
        def call(*args):
            raise RuntimeError("no working C++ compiler")
        return call

    monkeypatch.setattr(compiled_module.torch, "compile", broken)
    X, y = cancer
    # (thinning 10 given: a run that thinning="auto" extends would go on until the two paths' rounding parts it)
    params = {**dict(hidden_layer_sizes=(8,), burn_in=50, n_draws=20, thinning=10, batch_size=64, random_state=1,
                     sampler=sampler), **extra}
    with pytest.warns(UserWarning, match=f"could not compile the {sampler} transition") as record:
        fast = _fit(BayesianMLPRegressor(compile=True, **params), X, y.astype(float))
    assert sum("could not compile" in str(w.message) for w in record) == 1
    assert fast.compiled_step_.fallback.startswith("RuntimeError: no working C++ compiler")
    eager = _fit(BayesianMLPRegressor(compile=False, **params), X, y.astype(float))
    np.testing.assert_allclose(fast.trace_.as_array(), eager.trace_.as_array(), rtol=1e-5, atol=1e-6)
    clone = pickle.loads(pickle.dumps(fast))
    assert "compiled_step_" not in vars(clone)
    np.testing.assert_allclose(clone.predict(X), fast.predict(X))


def test_a_recurrent_network_is_never_compiled():
    """The RNN's fused kernels stop TorchDynamo, so compile=True is not tried (before: it warned "could not
    compile" on every fit and ran the pure step eagerly, which rounds differently from the eager kernel)."""
    from bayesnet import BayesianRNNRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 6))
    params = dict(hidden_size=6, dense_layer_sizes=(6,), n_draws=8, burn_in=60, thinning=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        fast = BayesianRNNRegressor(compile=True, **params).fit(X, X.sum(1))
        eager = BayesianRNNRegressor(compile=False, **params).fit(X, X.sum(1))
    assert fast.compiled_step_ is None and fast.fit_status_["compiled"].startswith("the RNN network does not compile")
    np.testing.assert_array_equal(fast.trace_.as_array(), eager.trace_.as_array())


def test_auto_compiles_only_runs_that_repay_it(cancer):
    X, y = cancer
    short = _fit(BayesianMLPClassifier(hidden_layer_sizes=(8,), burn_in=50, n_draws=10, random_state=0), X, y)
    assert short.compile == "auto" and short.compiled_step_ is None
    assert short.fit_status_["compiled"].startswith("compile='auto'") and str(COMPILE_MIN_STEPS) in \
        short.fit_status_["compiled"]
    from bayesnet.samplers import SGLD

    class EagerSGLD(SGLD):  # a kernel that writes no pure step (every built-in one compiles)
        compiles = False

    other = _fit(BayesianMLPClassifier(hidden_layer_sizes=(8,), sampler=EagerSGLD, burn_in=20, n_draws=5,
                                       compile=True, random_state=0), X, y)
    assert other.compiled_step_ is None and "no pure transition" in other.fit_status_["compiled"]


def test_auto_uses_cuda_graphs_on_a_gpu_from_its_own_threshold(cancer):
    """The decision alone (no GPU needed): on a GPU "auto" compiles from COMPILE_MIN_STEPS_CUDA steps on, with
    CUDA graphs; on the CPU from COMPILE_MIN_STEPS, in torch's default mode; True always, in the default mode."""
    X, y = cancer
    est = _fit(BayesianMLPClassifier(hidden_layer_sizes=(4,), burn_in=20, n_draws=5, random_state=0), X, y)
    args = est.sampler_, est.posterior_
    ok, why, options = compile_decision("auto", *args, COMPILE_MIN_STEPS_CUDA, torch.device("cuda", 1))
    assert ok and options == {"mode": "reduce-overhead"} and "CUDA graphs" in why
    ok, why, options = compile_decision("auto", *args, COMPILE_MIN_STEPS_CUDA - 1, "cuda")
    assert not ok and options == {} and str(COMPILE_MIN_STEPS_CUDA) in why
    ok, why, options = compile_decision("auto", *args, COMPILE_MIN_STEPS - 1, "cpu")
    assert not ok and options == {} and str(COMPILE_MIN_STEPS) in why
    assert compile_decision("auto", *args, COMPILE_MIN_STEPS, "cpu") == (True, "compiled", {})
    assert compile_decision(True, *args, 1, "cuda") == (True, "compiled", {})
    assert compile_decision(False, *args, 10**6, "cuda") == (False, "compile=False", {})
    # the user's own choice of how to compile stands, and the status does not claim graphs it did not ask for
    # (before: mode="reduce-overhead" was added beside compile__options, which torch.compile refuses, and the
    # status said "CUDA graphs" under compile__mode="default")
    for user in ({"mode": "default"}, {"options": {"max_autotune": False}}, {"backend": "eager"}):
        assert compile_decision("auto", *args, COMPILE_MIN_STEPS_CUDA, "cuda", user) == (True, "compiled", user)
    ok, _, options = compile_decision("auto", *args, COMPILE_MIN_STEPS_CUDA, "cuda", {"dynamic": True, "mode": None})
    assert options == {"dynamic": True, "mode": "reduce-overhead"}  # (None as unset: set_params cannot remove it)
    assert compile_decision("auto", *args, 10**6, "cuda", {"disable": True})[:2] == \
        (False, "compile__disable=True (torch.compile compiles nothing)")
    torch.compile(lambda x: x, **compiled_module.compile_options(options))  # (torch takes the merged options)


def test_compile_is_validated(cancer):
    X, y = cancer
    with pytest.raises(ValueError, match="compile"):
        BayesianMLPClassifier(compile="always").fit(X, y)


def test_a_refit_builds_its_own_transition(cancer):
    """A second fit (new data, another size, compile switched off) never reuses the first fit's compiled
    transition, whose potential was scaled to the old data."""
    X, y = cancer
    est = _fit(BayesianMLPClassifier(hidden_layer_sizes=(4,), sampler="sgld", burn_in=20, n_draws=5, compile=True,
                                     random_state=0), X[:100], y[:100])
    first = est.compiled_step_
    assert first is not None
    est.set_params(compile=False)
    _fit(est, X, y)
    assert est.compiled_step_ is None and est.fit_status_["compiled"] == "compile=False"
    est.set_params(compile=True)
    _fit(est, X, y)
    assert est.compiled_step_ is not None and est.compiled_step_ is not first


def test_compile_parameters_reach_torch_compile(cancer, monkeypatch):
    """Before: ``compile__mode`` and the other ``compile__*`` parameters were accepted and silently ignored.
    They go to ``torch.compile`` over the defaults; one it does not take is a TypeError before any step."""
    seen = []
    real = compiled_module.torch.compile

    def spy(fn, **kwargs):
        seen.append(kwargs)
        return real(fn, **kwargs)

    monkeypatch.setattr(compiled_module.torch, "compile", spy)
    X, y = cancer
    params = dict(hidden_layer_sizes=(4,), sampler="sgld", burn_in=20, n_draws=5, compile=True, random_state=0)
    est = _fit(BayesianMLPClassifier(compile__backend="eager", compile__dynamic=True, **params), X, y)
    # (fit's checks call it once on a stand-in to have torch refuse bad options before anything is reset)
    assert seen == [{"fullgraph": True, "dynamic": True, "backend": "eager"}] * 2
    assert est.fit_status_["compiled"] == "compiled" and est.compiled_step_.fallback is None
    eager = _fit(BayesianMLPClassifier(**{**params, "compile": False}), X, y)
    np.testing.assert_allclose(est.trace_.as_array(), eager.trace_.as_array(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="no_such_option"):
        _fit(BayesianMLPClassifier(compile__no_such_option=1, **params), X, y)
    # also under the default "auto", before anything is reset (before: a refit that would compile on a GPU lost its
    # draws when torch refused the options at the run's start; on the CPU the options went unchecked)
    fitted = _fit(BayesianMLPClassifier(**{**params, "compile": "auto"}), X, y)
    fitted.set_params(compile__no_such_option=1)
    with pytest.raises(TypeError, match="no_such_option"):
        _fit(fitted, X, y)
    assert len(fitted.trace_) > 0
    # a value torch refuses (an unknown backend or mode: torch's own exception classes before) is a ValueError
    for bad in ({"compile__backend": "no_such_backend"}, {"compile__mode": "no_such_mode"}):
        with pytest.raises(ValueError, match=r"torch.compile failed on a stand-in with the compile__\* options"):
            _fit(BayesianMLPClassifier(**params, **bad), X, y)


def _iris_extended_twice(monkeypatch, **params):
    """iris, 2 chains of an (8,) MLP, 200 steps after a 200-step warm-up; every convergence check fails, so
    thinning="auto" doubles twice (to 400 and 800 steps after the warm-up), and compile="auto" pays from 300 steps
    on: eager for the planned run and the first extension (200 steps to go), compiled for the second (400)."""
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    monkeypatch.setattr(compiled_module, "COMPILE_MIN_STEPS", 300)
    monkeypatch.setattr("bayesnet.estimators.run.unmixed", lambda net, conv: True)  # (every check fails: it extends)
    kw = dict(hidden_layer_sizes=(8,), n_chains=2, burn_in=200, n_draws=20, random_state=0)
    return _fit(BayesianMLPClassifier(**kw, **params), X, y), (kw, X, y)


def test_auto_decides_again_for_the_longer_run_of_auto_thinning(monkeypatch):
    """compile="auto" decided eager for the planned run; thinning="auto" runs on where the draws have not mixed,
    and the longer run may repay compiling: the record then says from which step the transition ran compiled."""
    est, (kw, X, y) = _iris_extended_twice(monkeypatch, compile__backend="eager")
    assert [e["thinning"] for e in est.fit_status_["thinning_extended"]] == [[10, 20], [20, 40]]
    assert est.compiled_step_ is not None
    assert est.fit_status_["compiled"] == "compiled from step 600 (thinning='auto' ran on; the steps before, eagerly)"
    planned = _fit(BayesianMLPClassifier(**kw, thinning=40), X, y)
    assert planned.fit_status_["compiled"] == "compiled"  # (800 steps after its warm-up)
    np.testing.assert_allclose(est.trace_.as_array(), planned.trace_.as_array(), rtol=1e-4, atol=1e-5)


def test_auto_decides_again_in_each_group_of_chains(monkeypatch):
    """The same with n_jobs: each group's longer run is resumed by its worker's partial_fit, which decides again
    and records from which step it compiled (a reviewer found the groups' record read "compiled")."""
    import joblib

    with joblib.parallel_config(backend="threading"):
        est, _ = _iris_extended_twice(monkeypatch, n_jobs=2, compile__backend="eager")
    assert [e["thinning"] for e in est.fit_status_["thinning_extended"]] == [[10, 20], [20, 40]]
    record = "compiled from step 600 (thinning='auto' ran on; the steps before, eagerly)"
    assert est.fit_status_["compiled"] == record
    assert all(shard.fit_status_["compiled"] == record for shard in est.shards_)
