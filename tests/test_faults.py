"""Faults and bad inputs of issue 14 ("trustworthy fits") that the other test files do not cover.

* process groups (``n_jobs``): a worker killed by the operating system, a ``MemoryError`` or a Ctrl-C inside one
  group, a chain that diverges inside a group, every group lost; the faults are injected by picklable skorch
  callbacks that run inside the loky workers (``bayesnet.testing.WorkerFault`` and ``PoisonChain``);
* divergence: the issue's own cases (sghmc at step 3e-3 on breast cancer, inputs x30 with sgnht, the default
  classifier on unscaled inputs), a chain that runs hot, a non-finite draw at prediction time;
* partial fits: a real SIGINT mid-epoch, then ``partial_fit`` continuing exactly, for every registered sampler;
  ``max_epochs`` too short for the burn-in or for ``n_draws``;
* continuation with changed settings: refused with the advice to refit, or honoured;
* messages: ``level`` checked without ``return_interval``;
* prediction in blocks: regression mean, std and mixture interval do not depend on the blocking, and the interval
  is the mixture's quantile.

Tests marked ``xfail(strict=True)`` are defects found while writing this file; each names the place in the code.
"""

from __future__ import annotations

import copy
import math
import os
import pickle
import re
import signal
import tempfile
import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import norm
from skorch.callbacks import Callback
from sklearn.datasets import load_breast_cancer, load_iris, make_regression
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import bayesnet
import sampler_settings
from bayesnet import BayesianMLPClassifier, BayesianMLPRegressor, DivergenceError
from bayesnet.predictive import PosteriorPredictive, mixture_quantile
from bayesnet.samplers import available_samplers, get_sampler_class
from bayesnet.testing import PoisonChain, WorkerFault

# four chains in two loky workers (chains 0-1 and 2-3), 40 sampler steps, 10 draws per chain
GROUPS = dict(hidden_layer_sizes=(8,), n_chains=4, n_jobs=2, n_draws=10, burn_in=20, thinning=2, random_state=0)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return ((X - X.mean(0)) / X.std(0)).astype(np.float32), y


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte, Xtr, Xte


def fit_recording(est, X, y, method="fit"):
    """Run ``est.fit`` (or ``partial_fit``) and return the ConvergenceWarning messages it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(est, method)(X, y)
    return [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


@pytest.fixture(scope="module")
def reference(iris):
    """The same four chains fitted in this process: per chain, the draws every grouping must reproduce."""
    X, y = iris
    kw = {k: v for k, v in GROUPS.items() if k != "n_jobs"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return BayesianMLPClassifier(**kw).fit(X, y).trace_.draws(per_slot=True)


@pytest.fixture(scope="module")
def killed(iris):
    """Chains 2-3's worker is killed at step 30 (and again when their group is rerun alone)."""
    X, y = iris
    est = BayesianMLPClassifier(**GROUPS, callbacks=[("fault", WorkerFault((2,), 30, "kill"))])
    return est, fit_recording(est, X, y)


@pytest.fixture(scope="module")
def out_of_memory(iris):
    """Chains 2-3's worker raises MemoryError at step 30 of 40."""
    X, y = iris
    est = BayesianMLPClassifier(**GROUPS, callbacks=[("fault", WorkerFault((2,), 30, "memory"))])
    return est, fit_recording(est, X, y)


def test_a_killed_worker_costs_only_its_own_chains(killed, reference, iris, tmp_path):
    """Issue 14 item 6: a killed worker lost every group's draws (TerminatedWorkerError, then NotFittedError).
    Now the other group's chains are kept bit for bit, fit_status_ names the lost chains, a ConvergenceWarning
    says what was lost, and the estimator predicts, saves and loads."""
    est, messages = killed
    X, y = iris
    assert est.fit_status_["lost_chains"] == [2, 3]
    assert any(re.search(r"chains \[2, 3\] died .*their draws are lost; the other chains' draws are kept", m)
               for m in messages), messages
    kept = est.trace_.draws(per_slot=True)
    assert len(kept) == 2 and all(torch.equal(a, b) for a, b in zip(kept, reference[:2]))
    proba = est.predict_proba(X)
    assert np.isfinite(proba).all() and np.allclose(proba.sum(1), 1.0)
    assert est.score(X, y) > 0.6
    with pytest.raises(ValueError, match=r"not code\. Save a copy without them \(copy\.deepcopy\(model\)\.set_params"):
        est.save(tmp_path / "m.bayesnet")  # a callback object is code, not data; the message says what to do
    saved = copy.deepcopy(est).set_params(callbacks=None)
    saved.save(tmp_path / "m.bayesnet")
    loaded = bayesnet.load(tmp_path / "m.bayesnet")
    np.testing.assert_array_equal(loaded.predict_proba(X), proba)
    # (before: the loaded layout divided the two kept slots over the four chains, 0 members per chain)
    assert loaded.layout_ == est.layout_ and loaded.summary() is not None


def test_lost_chains_count_as_wanted_draws(killed):
    est, _ = killed
    status = est.fit_status_
    assert status["draws_wanted"] == GROUPS["n_chains"] * GROUPS["n_draws"]  # 40 asked for, 20 kept
    assert status["status"] != "complete"


def test_lost_chains_stay_recorded_after_partial_fit(killed, iris):
    """Recorded, and reported once: a later partial_fit whose workers all live does not warn about them again."""
    est, _ = killed
    est = copy.deepcopy(est)  # (the fault is in the lost group: the kept ones run on)
    messages = fit_recording(est, *iris, method="partial_fit")
    assert est.fit_status_["lost_chains"] == [2, 3]
    assert not any("died" in m for m in messages), messages
    with pytest.raises(ValueError, match=r"changed n_chains=2 \(was 4\)"):  # the lost chains still count
        est.set_params(n_chains=2).partial_fit(*iris)


def test_a_memory_error_in_one_worker_costs_only_its_group_and_continues_exactly(out_of_memory, reference, iris):
    """A MemoryError inside one group: the other group finishes, the faulty group keeps the draws it took before
    the error (the same as in a healthy run), a ConvergenceWarning says so, the estimator predicts, and
    partial_fit takes the faulty group to the end of its planned run with exactly the draws of a healthy run."""
    est, messages = out_of_memory
    X, y = iris
    assert list(est.trace_.kept_per_slot) == [10, 10, 5, 5]  # steps 22, 24, ..., 30 for chains 2-3
    draws = est.trace_.draws(per_slot=True)
    assert all(torch.equal(a, b[: len(a)]) for a, b in zip(draws, reference))
    assert any("stopped early with MemoryError" in m and "its draws so far are kept" in m for m in messages)
    status = est.fit_status_
    assert status["status"] != "complete" and status["draws_kept"] == 30 and status["draws_wanted"] == 40
    assert np.isfinite(est.predict_proba(X)).all()
    again = copy.deepcopy(est)
    fit_recording(again, X, y, method="partial_fit")
    # only the stopped group runs; the finished one waits (before: it took n_draws more, chains 0-1's 20 draws
    # against chains 2-3's 10, and the merged status said "complete" with 30 of 40 steps taken)
    assert list(again.trace_.kept_per_slot) == [10, 10, 10, 10]
    assert all(torch.equal(a, b) for a, b in zip(again.trace_.draws(per_slot=True), reference))
    status = again.fit_status_
    assert status["status"] == "complete" and status["steps_taken"] == status["steps_planned"]
    with pytest.raises(ValueError, match=r"resumes the groups of chains that stopped early \(chains \[2, 3\]\).*"
                                         r"n_draws=20 \(was 10\)"):
        copy.deepcopy(est).set_params(n_draws=20).partial_fit(X, y)


def test_the_memory_error_warning_names_the_chains(out_of_memory):
    est, messages = out_of_memory
    message = next(m for m in messages if "MemoryError" in m)
    assert re.search(r"chains?\D{0,20}2\D{1,5}3", message), message
    assert "MemoryError" in str(est.fit_status_)


def test_a_fault_in_one_group_reports_the_step_it_stopped_at(out_of_memory):
    _, messages = out_of_memory
    message = next(m for m in messages if "interrupted at step" in m)
    assert "at step 30 " in message, message


def test_every_group_lost_is_a_runtime_error(iris):
    X, y = iris
    est = BayesianMLPClassifier(**GROUPS, callbacks=[("fault", WorkerFault((0, 2), 3, "kill"))])
    with pytest.raises(RuntimeError, match="every group of chains was lost: their worker processes died"):
        fit_recording(est, X, y)
    with pytest.raises(NotFittedError):
        est.predict(X)


def test_a_memory_error_in_every_group_is_raised(iris):
    X, y = iris
    est = BayesianMLPClassifier(**GROUPS, callbacks=[("fault", WorkerFault((0, 2), 3, "memory"))])
    with pytest.raises((MemoryError, RuntimeError)):
        fit_recording(est, X, y)


def test_an_interrupted_group_is_reported_and_continues_exactly(iris, reference):
    """Issue 14 item 2: a KeyboardInterrupt in one worker left chains of unequal length without notice."""
    X, y = iris
    est = BayesianMLPClassifier(**GROUPS, callbacks=[("fault", WorkerFault((0,), 30, "interrupt"))])
    messages = fit_recording(est, X, y)
    assert list(est.trace_.kept_per_slot) == [5, 5, 10, 10]
    assert est.fit_status_["status"] == "interrupted"
    assert any("the fit was interrupted" in m and "partial_fit continues the planned run" in m for m in messages)
    fit_recording(est, X, y, method="partial_fit")
    assert list(est.trace_.kept_per_slot) == [10, 10, 10, 10]  # the finished group waited
    assert all(torch.equal(a, b) for a, b in zip(est.trace_.draws(per_slot=True), reference))


@pytest.mark.parametrize("n_jobs", [None, 2], ids=["one process", "two workers"])
def test_one_diverging_chain_leaves_the_others_running(iris, reference, n_jobs):
    """Issue 14 item 6: after one group diverged its healthy partner chain stopped too, and partial_fit diverged
    again at once. Now chain 3 (in the second group, beside chain 2) is retired with the draws it took before;
    chains 0-2 finish, and partial_fit continues them."""
    X, y = iris
    est = BayesianMLPClassifier(**{**GROUPS, "n_jobs": n_jobs}, callbacks=[("poison", PoisonChain(3, 30))])
    messages = fit_recording(est, X, y)
    assert list(est.trace_.kept_per_slot) == [10, 10, 10, 5]
    draws = est.trace_.draws(per_slot=True)
    assert all(torch.equal(a, b[: len(a)]) for a, b in zip(draws, reference))
    record = est.fit_status_["diverged_chains"]
    assert list(record) == [3] and record[3]["step"] == 31 and record[3]["draws_kept"] == 5
    assert any(m.startswith("1 of 4 chains diverged and stopped taking draws: chain 3 at step 31 (5 draws kept")
               for m in messages), messages
    assert np.isfinite(est.predict_proba(X)).all()
    fit_recording(est, X, y, method="partial_fit")  # no DivergenceError: the healthy chains go on
    assert list(est.trace_.kept_per_slot) == [20, 20, 20, 5]


# ---------------------------------------------------------------------- #
# divergence and poisoned draws (issue 14 item 1)
# ---------------------------------------------------------------------- #
def test_the_issues_diverging_sghmc_keeps_no_poisoned_draw(cancer):
    """Before: sghmc at step 3e-3 kept draws of median potential 1.2e17 (test log loss 0.39). Now the chain is
    stopped in its warm-up (before any draw) with an error that names the step size, and nothing is kept."""
    Xtr, _, ytr, *_ = cancer
    est = BayesianMLPClassifier(sampler="sghmc", sampler__step_size=3e-3, random_state=0)
    with pytest.raises(DivergenceError, match=r"the sghmc chain diverged at step \d+: .*Reduce the step size "
                                              r"\(now sampler__step_size=0.003\)") as info:
        est.fit(Xtr, ytr)
    assert "warm-up did not settle" not in str(info.value)  # (an explicit step size: no warm-up ran to blame)
    assert est.fit_status_["status"] == "diverged" and len(est.trace_) == 0
    with pytest.raises(NotFittedError):
        est.predict(Xtr)


@pytest.mark.parametrize("kw", [dict(), dict(n_chains=2), dict(n_chains=2, n_jobs=2)], ids=["one", "two", "workers"])
def test_continuing_chains_that_all_diverged_is_refused_and_fit_starts_anew(iris, kw):
    """Before: partial_fit (or fit with warm_start=True) after every chain had diverged ran hundreds of steps on
    non-finite positions, kept nothing and said nothing. Now it raises the DivergenceError partial_fit documents,
    and fit starts new chains."""
    X, y = iris
    est = BayesianMLPClassifier((8,), sampler__step_size=10.0, burn_in=40, n_draws=5, random_state=0, **kw)
    with pytest.raises(DivergenceError):
        est.fit(X, y)
    steps = est.fit_status_["steps_taken"]
    with pytest.raises(DivergenceError, match=r"diverged in an earlier call .* Call fit\(\) \(with warm_start=False\) "
                                              r"to start new chains"):
        est.partial_fit(X, y)
    with pytest.raises(DivergenceError, match="earlier call"):
        est.set_params(warm_start=True).fit(X, y)
    assert est.fit_status_["steps_taken"] == steps  # nothing ran
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.set_params(warm_start=False, sampler__step_size="auto").fit(X, y)
    assert est.fit_status_["status"] == "complete" and len(est.trace_) > 0


def test_inputs_times_30_with_sgnht_sample_finite_draws(cancer):
    """Before: inputs x30 with sgnht gave weights up to 4.8e32, NaN probabilities and class 0 for every row.
    Now the warm-up adapts the step to the scale: finite draws, both classes predicted, no divergence."""
    Xtr, Xte, ytr, yte, *_ = cancer
    est = BayesianMLPClassifier(sampler="sgnht", random_state=0)
    fit_recording(est, Xtr * 30, ytr)
    assert est.fit_status_["status"] == "complete" and not est.fit_status_["diverged_chains"]
    assert np.isfinite(est.trace_.draws().numpy()).all()
    proba = est.predict_proba(Xte * 30)
    assert np.isfinite(proba).all() and set(est.predict(Xte * 30)) == {0, 1}
    assert est.score(Xte * 30, yte) > 0.9


def test_the_default_classifier_on_unscaled_inputs_is_not_silently_hot(cancer):
    """Before: the default classifier on unscaled breast cancer ran at kinetic temperature 1097 for the whole run,
    with no warning. Now its warm-up brings it to its target (within the hot-chain warning's tolerance), or the
    run says it is hot."""
    *_, ytr, yte, Xtr, Xte = cancer
    est = BayesianMLPClassifier(random_state=0)
    messages = fit_recording(est, Xtr, ytr)
    temperature = est.diagnostics_["kinetic_temperature"]
    hot = any("ran hot" in m for m in messages)
    assert 0.8 < temperature < 1.25 or hot, (temperature, messages)
    assert est.score(Xte, yte) > 0.85


def test_a_chain_that_runs_hot_warns(iris):
    """A step size too large for the posterior, not large enough to diverge: the chains' kinetic temperatures
    average a few times their target after the burn-in; a ConvergenceWarning says so, quoting the hottest
    chain's figure, and names the fix. Four chains, because one short hot chain's mean depends on the CPU's
    rounding of its path (this seed's first chain: about 5 on the Intel machines, 1.9 on an AMD EPYC, against
    the warning's threshold of 1.67); the hottest of four was 2.3-5.7 on seeds 0-3 there. Since an epoch's rows
    are spread evenly over its batches (iris' 150 rows: two of 75, not 128 and 22, whose gradient was scaled up
    6.8-fold) the step that does this is larger, 0.007 (hottest of four 1.9-11.6 on seeds 0-3, none diverged),
    and the test takes the first seed whose hottest chain is above 2 with every chain kept."""
    X, y = iris
    for seed in range(4):
        est = BayesianMLPClassifier((8,), n_draws=20, burn_in=50, thinning=2, random_state=seed, sampler="sghmc",
                                    sampler__step_size=0.007, n_chains=4)
        messages = fit_recording(est, X, y)
        hottest = float(est.step_stats_.member_means("kinetic_temperature").max())
        if hottest > 2.0 and not est.fit_status_["diverged_chains"]:
            break
    else:
        raise AssertionError("no seed ran a chain hot without a divergence")
    hot = [m for m in messages if m.startswith("a chain ran hot: its kinetic temperature")]
    assert hot and "against a target of 1" in hot[0] and "a smaller step size (now sampler__step_size=0.007)" in hot[0]
    assert f"averaged {hottest:.3g} after burn-in" in hot[0]


def test_the_hot_chain_warning_is_about_a_kept_chain(cancer):
    """Four chains at a step size where most diverge: the hot-chain warning's figure is the hottest *kept* chain's
    mean kinetic temperature (a few times the target), not the hottest diverged chain's (hundreds). Which chains diverge
    depends on the CPU's floating-point rounding (on one machine chains 1-3 of seed 0, on another 0, 2 and 3), so
    the test takes the first seed whose fit keeps some chains and loses others. The step is 1.5e-3 since an
    epoch's 398 rows are four batches of 99-100 rows, not three of 128 and one of 14 (whose gradient was scaled
    up 28-fold: 1e-3 did it then; seeds 0, 1 and 3 keep some chains here)."""
    Xtr, _, ytr, *_ = cancer
    mixed = 0
    for seed in range(4):
        est = BayesianMLPClassifier(n_chains=4, burn_in=200, n_draws=100, thinning=5, random_state=seed,
                                    sampler="sghmc", sampler__step_size=1.5e-3)
        try:
            messages = fit_recording(est, Xtr, ytr)
        except DivergenceError:  # every chain diverged
            continue
        diverged = sorted(est.fit_status_["diverged_chains"])
        kept = [c for c in range(4) if c not in diverged]
        if not diverged:
            continue
        mixed += 1
        means = est.step_stats_.member_means("kinetic_temperature")
        hot = next((m for m in messages if m.startswith("a chain ran hot")), None)
        assert hot is not None, (messages, means, diverged)
        figure = float(re.search(r"averaged ([0-9.e+-]+)", hot).group(1))
        assert figure == pytest.approx(float(np.max(means[kept])), rel=1e-2), (hot, means, diverged)
        # a diverged chain (whose mean, if finite, includes its way out) ran hotter than the figure
        hottest_lost = float(np.max(np.where(np.isfinite(means[diverged]), means[diverged], np.inf)))
        assert figure < 50 and hottest_lost > figure, (hot, means)
        break
    assert mixed, "no seed kept some chains and lost others"


def test_a_wide_layer_growing_to_its_posterior_scale_is_not_a_divergence(monkeypatch):
    """Before: a 1000-unit layer on digits (a user's plausible network), default sampler and hierarchical prior,
    stopped as "diverged" at step 761 (5 draws kept): the layers' precisions fall for thousands of steps while the
    weights grow to the scale the data ask for, and the joint potential rises by (n/2) log(1/tau) with them,
    beyond 30 warm-up standard deviations, with the chain in good health. Now the monitor watches the potential
    given the precisions: the run completes. The power check reads both potentials of that fit step by step,
    each against its own reference as the monitor builds it (the last quarter of the burn-in, its spread floored
    at sqrt(D / 2)): the joint potential climbs far above its reference, the conditional one does not. (Whether
    the joint's climb crosses the monitor's 30 standard deviations within this run depends on the CPU's
    rounding of a long chain: on the Intel machines where this was measured it did, and a monitor watching it
    stopped the run; on an AMD EPYC it reached 11 on this seed, 29-60 on seeds 1-2, with the conditional's at
    0.1, 2.6 and 6.5.) The warm-up's scale moves, which now take the layers most of the way to their posterior
    scale before the draws, are off here: the test is about a chain whose scales still move (as a short burn-in
    or a deeper network leaves them)."""
    from sklearn.datasets import load_digits

    import bayesnet.samplers.warmup as warmup_module
    from bayesnet.estimators import callbacks as callbacks_module

    monkeypatch.setattr(warmup_module, "scale_moves", lambda *args: False)

    from bayesnet.priors import HierarchicalPrior

    record = {"steps": [], "joint": [], "given": []}
    read = callbacks_module.DivergenceMonitor._read

    def recording_read(self, net, state, step):  # the steps the monitor is about to read, both ways
        steps, fields = net.step_stats_.since(state["processed"])
        if len(steps):
            joint = fields["potential"].astype(np.float64)  # (S, k): the sampler's potential, precisions' terms in
            terms = callbacks_module._terms_at(state.get("hyper"), steps, joint.shape[0])
            record["steps"].append(steps)
            record["joint"].append(joint[0])
            record["given"].append((joint + terms)[0])
        return read(self, net, state, step)

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    # one precision for the input layer, as when this was measured; the default (one per input) is fitted too, and
    # completes (watching the joint potential, a monitor stopped it at step 1000 on the AMD machine)
    # (the inputs are scaled already: standardize_inputs=False keeps the chain measured, which the map's float32
    # rounding alone would change)
    settings = dict(hidden_layer_sizes=(1000,), burn_in=200, n_draws=50, thinning=20, random_state=0,
                    prior_scale=HierarchicalPrior(input_relevance=False), standardize_inputs=False)
    for prior in (settings["prior_scale"], "auto"):
        est = BayesianMLPClassifier(**{**settings, "prior_scale": prior})
        with monkeypatch.context() as m:
            if prior is settings["prior_scale"]:
                m.setattr(callbacks_module.DivergenceMonitor, "_read", recording_read)
                first = est
            fit_recording(est, X, y)
        assert est.fit_status_["status"] == "complete" and not est.fit_status_["diverged_chains"]
        assert est.trace_.n_kept == 50 and est.score(X, y) > 0.95
    steps = np.concatenate(record["steps"])
    window, after = (steps > 150) & (steps <= 200), steps > 200
    floor = np.sqrt(est.posterior_.n_parameters_per_member / 2.0)  # (the same network under both priors)
    excess, reference = {}, {}
    for name in ("joint", "given"):
        u = np.concatenate(record[name])
        mean, sd = u[window].mean(), max(u[window].std(), floor)
        reference[name] = (mean, sd)
        excess[name] = float((u[after] - mean).max() / sd)
    assert window.sum() == 50 and after.sum() == 1000
    # the monitor's own reference is the conditional potential's (a monitor watching the joint one again, whose
    # climb stays under its 30 sds on some CPUs, would fail here)
    _, ref_mean, ref_sd = first.divergence_state_["reference"]
    np.testing.assert_allclose([ref_mean[0], ref_sd[0]], [reference["given"][0], reference["given"][1]], rtol=1e-6)
    assert not np.isclose(reference["joint"][0], ref_mean[0], rtol=1e-2)  # (the terms: 15 % of it here)
    assert excess["given"] < 30.0  # below the monitor's limit at every step (it needs 10 steps above it in a row)
    assert excess["joint"] > 5.0 and excess["joint"] > 3.0 * excess["given"], excess


def test_the_divergence_reference_counts_each_members_finite_potentials_only(iris):
    """Before: a member's non-finite potentials in the reference window (the last quarter of the burn-in, where
    the warm-up's guard may put a chain back) entered its sums as 0 while every step counted, so its mean fell
    and its limit with it, towards a false divergence. Now each member averages its own finite values, and a
    member with fewer than two has no potential limit."""
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianMLPClassifier((8,), n_chains=3, burn_in=40, n_draws=5, random_state=0).fit(X, y)
    monitor = dict(est.callbacks_)["divergence"]
    state = {"bad": np.zeros((3, 3), dtype=bool), "ref_sum": np.zeros(3), "ref_sq": np.zeros(3), "ref_n": np.zeros(3)}
    rng = np.random.default_rng(0)
    values = np.stack([1000.0 + 30 * rng.standard_normal(20), 2000.0 + 30 * rng.standard_normal(20),
                       np.full(20, np.nan)], axis=1)
    values[[3, 7, 11], 1] = [np.nan, np.inf, -np.inf]  # member 1: three steps put back by the guard
    values[5, 2] = 3000.0  # member 2: a single finite value
    monitor._accumulate(state, values[:12].T)  # two blocks of steps, (members, steps)
    monitor._accumulate(state, values[12:].T)
    limit, mean, sd = monitor._reference(est, state)
    for m in (0, 1):
        finite = values[np.isfinite(values[:, m]), m]
        assert mean[m] == pytest.approx(finite.mean(), rel=1e-12)
        assert sd[m] == pytest.approx(max(finite.std(), monitor._floor(est)), rel=1e-9)
        assert np.isfinite(limit[m]) and limit[m] > finite.max()
    naive = np.nan_to_num(values[:, 1], nan=0.0, posinf=0.0, neginf=0.0).mean()  # the old count
    assert mean[1] - naive > 250  # three values in 20 lowered the old mean by 15 %
    assert np.isinf(limit[2]) and np.isinf(mean[2])


@pytest.fixture(scope="module")
def scaled_cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_a_chain_that_blows_up_keeps_its_earlier_draws(scaled_cancer):
    """A healthy chain whose weights become NaN at step 260 (60 steps after a burn-in of 200, with an explicit
    step size): the 30 draws it took before are kept, the error says so, and they predict."""
    X, y = scaled_cancer
    est = BayesianMLPClassifier((16,), burn_in=200, n_draws=50, thinning=2, random_state=0,
                                sampler__step_size=1e-4, callbacks=[("poison", PoisonChain(0, 260))])
    with pytest.raises(DivergenceError, match="30 draws from before the divergence are kept"):
        est.fit(X, y)
    record = est.fit_status_["diverged_chains"][0]
    assert (record["draws_kept"], record["draws_discarded"], record["step"]) == (30, 0, 261)
    assert np.isfinite(est.predict_proba(X)).all()


def test_a_chain_that_blows_up_after_the_warm_up_keeps_its_earlier_draws(scaled_cancer):
    X, y = scaled_cancer
    est = BayesianMLPClassifier((16,), burn_in=200, n_draws=50, thinning=2, random_state=0,
                                callbacks=[("poison", PoisonChain(0, 260))])
    with pytest.raises(DivergenceError):
        est.fit(X, y)
    record = est.fit_status_["diverged_chains"][0]
    assert (record["draws_kept"], record["draws_discarded"]) == (30, 0)


@pytest.fixture(scope="module")
def small_fits(iris):
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), n_draws=10, burn_in=50, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = BayesianMLPClassifier(**kw).fit(X, y)
        reg = BayesianMLPRegressor(**kw).fit(X[:, :3], X[:, 3])
    return clf, reg


def _poison_first_draw(est, part):
    """Set part of chain 0's oldest stored draw to NaN: ``"network"`` (its weights) or ``"noise"`` (the
    regressor's log noise variance, stored after the weights)."""
    n_net = sum(p.numel() for p in est.module_.parameters() if p.requires_grad)
    columns = slice(0, n_net) if part == "network" else slice(n_net, None)
    est.trace_._buffer[0, est.trace_._order(0)[0], columns] = float("nan")


def test_a_nonfinite_draw_is_left_out_of_every_prediction(small_fits, iris):
    """Before: one non-finite draw turned the probabilities of all 150 rows into NaN, and predict returned class 0
    for them. Now the draw is left out of each average, with a RuntimeWarning that counts it (the trace never
    stores a non-finite draw; a file or a pickle could hold one)."""
    X, _ = iris
    for est, x in zip(small_fits, (X, X[:, :3])):
        est = copy.deepcopy(est)
        healthy = est.predict_draws(x)[1:]  # the draws but the first
        _poison_first_draw(est, "network")
        if isinstance(est, BayesianMLPClassifier):
            with pytest.warns(RuntimeWarning, match=r"150 \(draw, row\) network outputs were not finite"):
                proba = est.predict_proba(x)
            np.testing.assert_allclose(proba, healthy.mean(0), rtol=1e-6)
            assert np.array_equal(est.predict(x), est.classes_[np.argmax(healthy.mean(0), axis=1)])
        else:
            with pytest.warns(RuntimeWarning, match="left out of the averages"):
                mean, std, lower, upper = est.predict(x, return_std=True, return_interval=True)
            np.testing.assert_allclose(mean, healthy.mean(0), rtol=1e-6)
            assert np.isfinite(std).all() and np.all(lower < mean) and np.all(mean < upper)


def test_a_draw_with_a_nonfinite_noise_scale_is_left_out_of_std_and_intervals(small_fits, iris):
    est = copy.deepcopy(small_fits[1])
    _poison_first_draw(est, "noise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std, lower, upper = est.predict(iris[0][:, :3], return_std=True, return_interval=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all() and np.isfinite(lower).all()


def test_a_target_near_float64s_limit_is_standardised_without_overflow(iris):
    """Before: finite targets of 1e300 overflowed y.std() (its squares), the scale became inf and every prediction
    inf. The target map now takes the moments over y's largest magnitude there: the same fit, on y's scale."""
    X, _ = iris
    kw = dict(hidden_layer_sizes=(4,), n_draws=5, burn_in=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        huge = BayesianMLPRegressor(**kw).fit(X[:, :3], X[:, 3].astype(np.float64) * 1e300)
        ordinary = BayesianMLPRegressor(**kw).fit(X[:, :3], X[:, 3])
    mean, lower, upper = huge.predict(X[:, :3], return_interval=True)
    assert np.isfinite(huge.y_scale_).all() and np.isfinite(lower).all() and np.isfinite(upper).all()
    np.testing.assert_allclose(mean / 1e300, ordinary.predict(X[:, :3]), rtol=1e-4)
    # both signs near the limit: the differences from the mean overflow too (the reviewer's -inf target); at 1e308,
    # not 1.7e308, so that a prediction 6 % beyond the training targets is not beyond float64 (a fit whose draws
    # overshoot by that much, as one of the warm-up's did, predicted inf for those rows: a fit, not a moment, out)
    y = np.where(X[:, 3] > 0, 1e308, -1e308)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        extreme = BayesianMLPRegressor(**kw).fit(X[:, :3], y)
    assert np.isfinite(extreme.predict(X[:, :3])).all()


def test_inputs_near_float64s_limit_are_standardised_and_beyond_float32_refused(iris):
    """Before: inputs of 1e300 overflowed X.std() (its squares): input_scale_ inf, every prediction one constant,
    and save wrote a file that load refused. Now the same fit as on the ordinary inputs, and it saves and loads.
    Inputs beyond float32's range that the network would see as inf (standardize_inputs=False at fit; at predict,
    rows 1e39 training sds out) are a ValueError naming the range, not a divergence or a NaN prediction."""
    import bayesnet

    X, _ = iris
    X, y = X[:, :3].astype(np.float64), X[:, 3]
    kw = dict(hidden_layer_sizes=(4,), n_draws=5, burn_in=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ordinary = BayesianMLPRegressor(**kw).fit(X, y)
        huge = BayesianMLPRegressor(**kw).fit(X * 1e300, y)
    assert np.isfinite(huge.input_scale_).all()
    np.testing.assert_allclose(huge.input_scale_ / 1e300, ordinary.input_scale_, rtol=1e-12)
    np.testing.assert_allclose(huge.predict(X * 1e300), ordinary.predict(X), rtol=1e-5, atol=1e-6)
    with tempfile.TemporaryDirectory() as tmp:
        bayesnet.save(huge, f"{tmp}/huge.bayesnet")
        np.testing.assert_array_equal(bayesnet.load(f"{tmp}/huge.bayesnet").predict(X * 1e300), huge.predict(X * 1e300))
    with pytest.raises(ValueError, match="beyond float32's range.*standardize_inputs=False"):
        BayesianMLPRegressor(**kw, standardize_inputs=False).fit(X * 1e39, y)
    with pytest.raises(ValueError, match="beyond float32's range.*standardised by the training mean"):
        ordinary.predict(X * 1e39)


def test_rows_with_no_finite_draw_raise_instead_of_becoming_a_class(small_fits, iris):
    """Before: inputs far outside the training range gave NaN probabilities (and classes argmax'd from them), and
    NaN regression means and standard deviations, silently."""
    X, _ = iris
    clf, reg = small_fits
    huge = X * 1e38  # the classifier's outputs overflow for some rows under every draw
    for method in (clf.predict, clf.predict_proba, clf.predict_draws):  # (predict_draws returned NaN silently)
        with pytest.raises(ValueError, match="not finite under any posterior draw for some rows"):
            method(huge)
    reg = copy.deepcopy(reg)  # (the regressor's may not: a row whose hidden units all read -inf is finite)
    n_net = sum(p.numel() for p in reg.module_.parameters() if p.requires_grad)
    reg.trace_._buffer[:, :, :n_net] = float("nan")  # every draw's network non-finite, as a bad file could hold
    for method in (lambda Z: reg.predict(Z, return_std=True), reg.predict_draws):
        with pytest.raises(ValueError, match="not finite under any posterior draw"):
            method(X[:, :3])
    reg.trace_._buffer[:, 3:, :n_net] = small_fits[1].trace_._buffer[:, 3:, :n_net]  # three draws poisoned
    with pytest.warns(RuntimeWarning, match="not finite") as record:  # some draws: returned as they are, warned
        draws = reg.predict_draws(X[:, :3])
    assert record[0].filename == __file__  # (at the caller's line, through the regressor's extra frame)
    assert np.isnan(draws).all(axis=1).sum() == 3 and np.isfinite(draws).all(axis=1).sum() == 7


# ---------------------------------------------------------------------- #
# partial fits (issue 14 item 2)
# ---------------------------------------------------------------------- #
class SigintAt(Callback):
    """Sends this process a real SIGINT (what Ctrl-C sends) during sampler step ``at``."""

    def __init__(self, at=23):
        self.at = at

    def on_batch_end(self, net, training=False, step=None, **kwargs):
        if training and step == self.at:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_stops_the_fit_says_how_far_it_got_and_restores_the_handler(iris):
    """Before: a Ctrl-C during fit returned as if the fit were complete."""
    X, y = iris
    handler = signal.getsignal(signal.SIGINT)
    est = BayesianMLPClassifier((8,), n_draws=10, burn_in=10, thinning=2, batch_size=32, random_state=0,
                                callbacks=[("sigint", SigintAt(23))])
    messages = fit_recording(est, X, y)
    assert signal.getsignal(signal.SIGINT) is handler
    assert any(m.startswith("the fit was interrupted at step 23 of 30 planned, with 7 draws kept") for m in messages)
    status = est.fit_status_
    assert (status["status"], status["stopped_by"], status["steps_taken"]) == ("interrupted", "interrupt", 23)


def test_an_error_that_stops_the_fit_is_recorded_as_its_cause(iris):
    """An exception raised inside the run (here by a callback) propagates; the draws so far are kept and
    fit_status_ names the error (before: stopped_by "interrupt", as for Ctrl-C, while groups in workers named their
    MemoryError), and partial_fit continues the plan."""

    class Fails(Callback):
        def __init__(self, at=23):
            self.at = at

        def on_batch_end(self, net, training=False, step=None, **kwargs):
            if training and step == self.at:
                raise RuntimeError("disk full")

    X, y = iris
    est = BayesianMLPClassifier((8,), n_draws=10, burn_in=10, thinning=2, batch_size=32, random_state=0,
                                callbacks=[("fails", Fails(23))])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="disk full"):
            est.fit(X, y)
    status = est.fit_status_
    assert (status["status"], status["stopped_by"], status["steps_taken"]) == ("interrupted", "RuntimeError: disk full",
                                                                               23)
    assert any(str(w.message).startswith("the fit was interrupted at step 23 of 30 planned (RuntimeError: disk full), "
                                         "with 7 draws kept") for w in caught)
    fit_recording(est.set_params(callbacks__fails__at=-1), X, y, method="partial_fit")
    assert est.fit_status_["status"] == "complete" and est.fit_status_["stopped_by"] is None


def test_ctrl_c_in_the_burn_in_says_no_draw_was_kept(iris):
    """Before: interrupted in hmc's burn-in, fit returned with 0 draws and the next predict raised NotFittedError,
    with nothing said in between."""
    X, y = iris
    est = BayesianMLPClassifier((8,), sampler="hmc", n_draws=10, burn_in=50, batch_size=-1, random_state=0,
                                callbacks=[("sigint", SigintAt(20))])
    messages = fit_recording(est, X, y)
    assert any(m.startswith("the fit was interrupted at step 20 of") and "with 0 draws kept" in m for m in messages)
    with pytest.raises(NotFittedError):
        est.predict(X)


@pytest.mark.parametrize("where", ["sampling", "warm-up"])
@pytest.mark.parametrize("name", [n for n in available_samplers()  # the library's (a test may register its own)
                                  if get_sampler_class(n).__module__.startswith("bayesnet.")])
def test_partial_fit_after_ctrl_c_gives_the_uninterrupted_draws(iris, name, where):
    """Before: partial_fit after an interruption ran a whole new plan. Now it continues the interrupted one, from
    the middle of its epoch (5 mini-batches of 32 rows per epoch), bit for bit, for every registered sampler:
    interrupted while it keeps draws, and inside its warm-up (between two window ends, with the step size and
    the mass still adapting). (Before, a pt-langevin warm-up continued so failed at its next window end: the
    replicas' dimension it sizes its proposals with was set only when the chains started.)"""
    X, y = iris
    kw = {**dict(hidden_layer_sizes=(4,), n_draws=5, burn_in=20, thinning=2, batch_size=32, random_state=0,
                 sampler=name), **sampler_settings.ESTIMATOR[name]}
    if where == "warm-up":
        kw["burn_in"] = 60  # window ends at steps 9, 54 and 60: interrupted at 27
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = BayesianMLPClassifier(**kw).fit(X, y)
        total = int(ref.sampler_state_.step)
        at = max(kw["burn_in"] + 1, (3 * total) // 4) if where == "sampling" else 27
        at += 1 if at % 5 == 0 else 0  # mid-epoch where the batches are mini-batches
        est = BayesianMLPClassifier(**kw, callbacks=[("sigint", SigintAt(at))]).fit(X, y)
        assert est.fit_status_["status"] == "interrupted" and int(est.sampler_state_.step) == at
        est.partial_fit(X, y)
    assert int(est.sampler_state_.step) == total
    assert np.array_equal(est.trace_.steps, ref.trace_.steps)
    assert torch.equal(est.trace_.draws(), ref.trace_.draws())


@pytest.mark.parametrize("change", [{"n_draws": 15}, {"thinning": 3}, {"n_draws": 3}],
                         ids=["more draws", "another thinning", "fewer draws"])
def test_an_interrupted_run_resumes_under_new_n_draws_or_thinning(iris, change):
    """Before: an interrupted run resumed to its old length whatever n_draws or thinning had become, so a larger
    n_draws ended "short" (with a warning that blamed max_epochs=None). Now the plan's end moves to where its draws
    are in: the draws are those of an uninterrupted fit whose thinning changed at the same step (the same steps,
    the same positions), and the plan ends thinning - 1 steps after its last draw, as a fresh plan does."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(4,), n_draws=5, burn_in=20, thinning=2, batch_size=32, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianMLPClassifier(**kw, callbacks=[("sigint", SigintAt(26))]).fit(X, y)  # 3 draws: 21, 23, 25
        assert est.fit_status_["status"] == "interrupted"
        messages = fit_recording(est.set_params(**change), X, y, method="partial_fit")
        ref = BayesianMLPClassifier(**{**kw, **change}).fit(X, y) if "thinning" not in change else None
    thinning, n_draws = change.get("thinning", 2), change.get("n_draws", 5)
    status = est.fit_status_
    assert status["status"] == "complete" and status["draws_kept"] == n_draws, (status, messages)
    steps = est.trace_.steps
    if "thinning" in change:  # 21, 23, 25 at the old thinning; then candidates 7, 10 (1 + a multiple of 3)
        assert list(steps) == [21, 23, 25, 27, 30] and int(est.sampler_state_.step) == 30 + thinning - 1
    elif n_draws > 3:  # the same as a fit planned with n_draws=15 from the start (50 steps: whole epochs)
        assert int(est.sampler_state_.step) == 20 + n_draws * thinning == int(ref.sampler_state_.step)
        assert np.array_equal(steps, ref.trace_.steps) and torch.equal(est.trace_.draws(), ref.trace_.draws())
    else:  # the 3 draws are in: the run ends where it stopped
        assert list(steps) == [21, 23, 25] and int(est.sampler_state_.step) == 26


def test_an_interrupted_pt_langevin_run_resumes_to_its_cold_replicas_draws(iris):
    """The resumed plan counts the draws of the members that keep n_draws (pt-langevin's temperature-1 replica;
    the hot ones keep fewer by design): the reviewer's case planned 49 steps where a fresh plan has 45, and the
    cold replica's surplus pushed its first draws after the burn-in out."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(4,), sampler="pt-langevin", n_draws=20, burn_in=20, thinning=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianMLPClassifier(**kw, callbacks=[("sigint", SigintAt(35))]).fit(X, y)
        fit_recording(est.set_params(n_draws=25), X, y, method="partial_fit")
    assert int(est.sampler_state_.step) == 20 + 25 and est.fit_status_["status"] == "complete"
    assert est.trace_.steps[0] == 21  # the cold replica's first draw after the burn-in is still there


def test_non_finite_draws_with_the_divergence_monitor_off_are_named(iris):
    """With the monitor off (callbacks__divergence=None) a chain gone non-finite runs on and its due draws are
    refused by the trace: the shortfall says so, with the count per chain. Before, the warning blamed
    max_epochs=None."""
    X, y = iris
    est = BayesianMLPClassifier((8,), n_draws=10, burn_in=200, thinning=2, random_state=0,
                                callbacks=[("p", PoisonChain(chain=0, at_step=210))], callbacks__divergence=None)
    messages = fit_recording(est, X, y)
    assert est.fit_status_["status"] == "short" and est.fit_status_["draws_kept"] == 5
    message = next(m for m in messages if "5 of n_draws=10 draws were kept" in m)
    assert "not finite were not kept (chain 0: 5)" in message and "callbacks__divergence=None" in message
    assert "max_epochs" not in message
    # with the monitor on, the diverged chain is reported as such and a short run keeps its own reason (the
    # reviewer's: the first version said the monitor was off, and hid max_epochs)
    est = BayesianMLPClassifier((8,), n_chains=2, n_draws=50, burn_in=50, thinning=1, max_epochs=40, random_state=0,
                                callbacks=[("p", PoisonChain(chain=0, at_step=60))])
    messages = fit_recording(est, X, y)
    assert list(est.fit_status_["diverged_chains"]) == [0]
    message = next(m for m in messages if "draws were kept per chain" in m)
    assert "max_epochs=40 is shorter" in message and "not finite" not in message


def test_max_epochs_shorter_than_the_burn_in_warns(iris):
    """Before: 0 draws and no warning."""
    X, y = iris
    est = BayesianMLPClassifier((8,), n_draws=10, burn_in=50, max_epochs=5, batch_size=30, random_state=0)
    messages = fit_recording(est, X, y)
    assert any(m.startswith("0 of n_draws=10 draws were kept per chain in 25 steps. max_epochs=5 is shorter than "
                            "burn_in (50 steps) + n_draws * thinning")
               and m.endswith("No draw was kept, so the estimator is not fitted.") for m in messages), messages
    assert est.fit_status_["status"] == "short"


def test_a_run_max_epochs_cut_inside_its_burn_in_continues_to_its_draws(iris):
    """A helper's user test: a fit that max_epochs cut inside its burn-in (25 of 50 steps, no draw), continued by
    partial_fit with max_epochs=None, took its n_draws * thinning steps from where it stood, most of them burn-in,
    and ended short again (8 of 20 draws in the helper's case). It now runs past the burn-in to its n_draws draws,
    as a fresh plan does; with max_epochs set, a call runs that many epochs more."""
    X, y = iris
    est = BayesianMLPClassifier((8,), n_draws=10, burn_in=50, max_epochs=5, batch_size=30, random_state=0)
    fit_recording(est, X, y)
    assert est.fit_status_["steps_taken"] == 25 and est.fit_status_["draws_kept"] == 0
    est.set_params(max_epochs=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.partial_fit(X, y)
    status = est.fit_status_
    assert status["status"] == "complete" and status["draws_kept"] == 10, status
    taken = status["steps_taken"]
    assert taken == 50 + 10 * est.trace_.thinning
    est.set_params(max_epochs=2)
    est.partial_fit(X, y)
    assert est.fit_status_["steps_taken"] == taken + 2 * 5


def test_max_epochs_too_short_for_n_draws_warns(iris):
    """Before: 20 of 100 draws, and no warning."""
    X, y = iris
    est = BayesianMLPClassifier((8,), n_draws=100, burn_in=0, thinning=1, max_epochs=4, batch_size=30, random_state=0)
    messages = fit_recording(est, X, y)
    assert any(m.startswith("20 of n_draws=100 draws were kept per chain in 20 steps.") for m in messages)
    assert est.fit_status_["draws_kept"] == 20 and est.fit_status_["draws_wanted"] == 100


# ---------------------------------------------------------------------- #
# continuation with changed settings (issue 14 item 3)
# ---------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def fitted_once(iris):
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return BayesianMLPClassifier((8,), n_draws=10, burn_in=50, thinning=1, prior_scale=1.0,
                                     random_state=0).fit(X, y)


@pytest.mark.parametrize("change", [dict(hidden_layer_sizes=(4,)), dict(activation="tanh"), dict(burn_in=500),
                                    dict(random_state=1), dict(n_chains=2)], ids=lambda c: next(iter(c)))
def test_a_change_continuation_cannot_honour_says_to_refit(fitted_once, iris, change):
    """Before: partial_fit silently ignored a new hidden_layer_sizes or burn_in."""
    (key, value), = change.items()
    est = copy.deepcopy(fitted_once).set_params(**change)
    with pytest.raises(ValueError, match=rf"partial_fit cannot continue the chains with changed {key}=.* \(was .*\): "
                                         r".*call fit\(\) to start new chains"):
        est.partial_fit(*iris)


def test_a_refused_continuation_names_the_call_the_user_made(fitted_once, iris):
    """Before: fit() with warm_start=True was refused as "partial_fit cannot continue ...", naming a method the
    user had not called (skorch's fit continues through partial_fit)."""
    est = copy.deepcopy(fitted_once).set_params(burn_in=500, warm_start=True)
    with pytest.raises(ValueError, match=r"^fit\(warm_start=True\) cannot continue the chains with changed burn_in"):
        est.fit(*iris)
    with pytest.raises(ValueError, match=r"^partial_fit cannot continue the chains with changed burn_in"):
        est.partial_fit(*iris)  # (and the name does not outlive the fit call)
    est.set_params(burn_in=50, sampler="sgld")
    with pytest.raises(ValueError, match=r"^fit\(warm_start=True\) cannot continue a sghmc chain with sampler 'sgld'"):
        est.fit(*iris)


def test_a_change_continuation_can_honour_takes_effect(fitted_once, iris):
    """Before: after set_params(prior_scale=0.01) the prior still had scale 1.0, and a new n_draws or thinning
    was ignored."""
    X, y = iris
    est = copy.deepcopy(fitted_once).set_params(prior_scale=0.5, n_draws=25, thinning=3)
    step = int(est.sampler_state_.step)
    fit_recording(est, X, y, method="partial_fit")
    assert est.prior_.scale == 0.5 and est.posterior_.prior is est.prior_
    assert int(est.sampler_state_.step) - step == 25 * 3  # 25 more draws, 3 steps apart
    assert len(est.trace_) == 25 and np.all(np.diff(est.trace_.steps[-25:]) == 3)


def test_a_new_prior_or_temperature_in_a_continued_fit_is_no_divergence(iris):
    """The divergence monitor's reference is the warm-up's potential: a continued fit under another prior or at
    another temperature starts it afresh (and forgets the old hierarchical prior's terms). Before: both stopped
    a healthy chain as diverged ("a potential far above what the warm-up saw"), and the estimator could then
    never be continued (found by a helper's user test)."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), burn_in=200, n_draws=20, thinning=2, random_state=0)
    est = BayesianMLPClassifier(**kw)
    fit_recording(est, X, y)
    assert est.divergence_state_.get("hyper")  # the hierarchical prior's terms
    start = int(est.sampler_state_.step)
    fit_recording(est.set_params(prior_scale=0.3, n_draws=60), X, y, method="partial_fit")
    assert est.fit_status_["status"] == "complete" and est.score(X, y) > 0.9
    assert not est.divergence_state_.get("hyper")  # a fixed prior has none
    # a new reference, gathered over the 50 steps after the first 50 of the continued run, is checked from there
    # (the reviewer's catch: a reset left the potential unchecked for good)
    assert est.divergence_state_["ref_window"] == (start + 50, start + 100)
    assert int(est.sampler_state_.step) > start + 100 and np.isfinite(est.divergence_state_["reference"][0]).all()
    Xc, yc = load_breast_cancer(return_X_y=True)
    hot = BayesianMLPClassifier(prior_scale="fan_in", burn_in=400, n_draws=20, random_state=0)
    fit_recording(hot, Xc, yc)
    fit_recording(hot.set_params(sampler__temperature=3.0), Xc, yc, method="partial_fit")  # 3,302 weights: the
    assert hot.fit_status_["status"] == "complete"  # potential rises by about D/2 (T - 1), far above 30 sd


def test_a_continuation_on_new_data_that_diverges_keeps_the_earlier_draws(iris):
    """A helper's user test: a first partial_fit on one class of iris (stored sorted), then a continuation on the
    next class diverged at once (the step frozen on the first data is unstable on the new: kinetic temperature 247),
    and every draw of the first, healthy call was discarded (the monitor's reference reset for the new data, and
    its fallback judged the first call's steps against the lowest potential since step 1): NotFittedError after,
    contrary to the docs. The earlier call's draws stay, and the message names the data change."""
    X, y = iris
    est = BayesianMLPClassifier(random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.partial_fit(X[:50], y[:50], classes=[0, 1, 2])
    assert est.fit_status_["status"] == "complete" and est.n_draws_kept_ == 100
    end = int(est.sampler_state_.step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=rf"The chains continued on other data than the earlier call's "
                                                  rf"\(from step {end}\) with the step size and mass the warm-up froze"):
            est.partial_fit(X[50:100], y[50:100])
    record = est.fit_status_["diverged_chains"][0]
    assert record["last_good_step"] >= end  # (was 10)
    # at most the draws the diverging call stored are discarded (and those they pushed out of the trace's n_draws)
    assert est.n_draws_kept_ == record["draws_kept"] >= 95
    assert (np.asarray(est.trace_.steps) <= end).sum() >= 95
    assert np.isfinite(est.predict_proba(X)).all()


@pytest.mark.parametrize("classes", [[[0, 1, 2]], 1])
def test_partial_fit_names_classes_given_in_the_wrong_shape(iris, classes):
    """A helper's user test: classes=[[0, 1, 2]] was refused as "y should be a 1d array", naming y."""
    with pytest.raises(ValueError, match=r"classes must be a 1-D list of the class labels, got an array of shape"):
        BayesianMLPClassifier((4,), burn_in=20, n_draws=5).partial_fit(*iris, classes=classes)


def test_the_auto_prior_follows_the_temperature_of_a_continued_fit(iris):
    """prior_scale="auto" resolves as a fresh fit would when the sampler's temperature changes: the fan-in prior
    at a temperature other than 1, the hierarchical prior back at 1. An explicit hierarchical prior at another
    temperature is refused, and the refused call leaves the fit as it was. Before: the continued fit at 2 raised
    "Use prior_scale='auto'" (which it was) after swapping in the new sampler."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), burn_in=200, n_draws=10, thinning=2, random_state=0)
    est = BayesianMLPClassifier(**kw)
    fit_recording(est, X, y)
    fit_recording(est.set_params(sampler__temperature=2.0), X, y, method="partial_fit")
    assert type(est.prior_).__name__ == "FanInPrior" and est.posterior_.prior is est.prior_
    assert est.prior_.gain == 2.0  # (a classifier's: its likelihood's fan_in_gain, as a fresh fit's)
    fit_recording(est.set_params(sampler__temperature=1.0), X, y, method="partial_fit")
    assert type(est.prior_).__name__ == "HierarchicalPrior" and est.fit_status_["status"] == "complete"
    fixed = BayesianMLPClassifier(**kw, prior_scale="hierarchical")
    fit_recording(fixed, X, y)
    draws, sampler, step = fixed.trace_.draws().clone(), fixed.sampler_, int(fixed.sampler_state_.step)
    with pytest.raises(ValueError, match="a hierarchical prior needs the sampler at temperature 1"):
        fixed.set_params(sampler__temperature=2.0).partial_fit(X, y)
    assert fixed.sampler_ is sampler and fixed.sampler_.temperature == 1.0
    assert int(fixed.sampler_state_.step) == step and torch.equal(fixed.trace_.draws(), draws)


def test_a_continued_fit_on_mini_batches_warns_a_metropolis_sampler(iris):
    """hmc moved onto mini-batches by a continued fit warns as a fit on them does (before: silent)."""
    X, y = iris
    est = BayesianMLPClassifier((8,), sampler="hmc", sampler__n_leapfrog=3, burn_in=20, n_draws=5, random_state=0)
    fit_recording(est, X, y)
    with pytest.warns(UserWarning, match="hmc with mini-batches .* no longer exact"):
        est.set_params(batch_size=32).partial_fit(X, y)


def test_a_tacthmc_run_max_epochs_cut_short_says_so(iris):
    """Before: the warning blamed the tempering variable (its "100 % of the steps at unit temperature" over a run
    that max_epochs ended inside the burn-in)."""
    X, y = iris
    est = BayesianMLPClassifier((8,), sampler="tacthmc", sampler__steps_per_sample=5, burn_in=200, n_draws=20,
                                thinning=1, max_epochs=3, random_state=0)
    messages = fit_recording(est, X, y)
    short = [m for m in messages if "draws were kept per chain" in m]
    assert short and "max_epochs=3 is shorter than burn_in" in short[0] and "tempering" not in short[0]


def test_a_fit_without_warm_up_says_what_set_its_step(iris):
    """burn_in=0 with the adapted step size: the chains ran at the fallback step, and a warning says so (before:
    silent, against the docs' "below 200 steps ... the fit warns"); an explicit step size is no such case."""
    X, y = iris
    messages = fit_recording(BayesianMLPClassifier((8,), burn_in=0, n_draws=10, random_state=0), X, y)
    assert any(m.startswith("no warm-up ran, so nothing set the step size: the chains ran at the fallback step "
                            "0.0001") for m in messages), messages
    messages = fit_recording(BayesianMLPClassifier((8,), burn_in=0, n_draws=10, random_state=0,
                                                   sampler__step_size=1e-3), X, y)
    assert not any("no warm-up ran" in m for m in messages)


def test_partial_fit_refuses_other_classes(iris):
    """As scikit-learn's partial_fit estimators do; the same set in another order is accepted. Before: ignored."""
    X, y = iris
    est = BayesianMLPClassifier((8,), burn_in=20, n_draws=5, random_state=0)
    fit_recording(est, X, y)
    est.partial_fit(X, y, classes=[2, 1, 0])
    draws = est.trace_.draws().clone()
    with pytest.raises(ValueError, match=r"classes=\[0, 1, 2, 3\] is not the set of classes of the running chains"):
        est.partial_fit(X, y, classes=[0, 1, 2, 3])
    assert torch.equal(est.trace_.draws(), draws) and est.classes_.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"classes=\[0\] holds 1 class\(es\)"):  # (before: "the data contains
        BayesianMLPClassifier((8,)).partial_fit(X, y, classes=[0])  # only one class")


@pytest.mark.parametrize("option", [dict(lr=100.0), dict(optimizer=torch.optim.Adam), dict(criterion=torch.nn.MSELoss),
                                    dict(module=torch.nn.Linear), dict(predict_nonlinearity=None),
                                    dict(train_split=0.2), dict(optimizer__momentum=0.9)],
                         ids=lambda o: next(iter(o)))
def test_skorch_options_the_estimator_does_not_use_are_refused(iris, option):
    """Before: lr, optimizer, criterion, module and predict_nonlinearity were accepted and did nothing (a grid over
    lr searched nothing); train_split failed inside the mini-batch iterator."""
    with pytest.raises(ValueError, match="does not use skorch's"):
        BayesianMLPClassifier((8,), burn_in=20, n_draws=5, **option).fit(*iris)


def test_set_params_on_a_fitted_estimator_refuses_skorch_parts_and_loses_nothing(iris):
    """A helper's user test: set_params(module__hidden=3) on a fitted estimator re-initialised skorch's module (None
    here), after which predict and every later set_params failed with AttributeError; callbacks__print_log=None
    (skorch's idiom for a quiet net) failed with "not enough values to unpack". Now the first is refused before
    anything changes, the second is accepted (nothing prints anyway), an unknown callback is named."""
    from sklearn.base import clone

    X, y = iris
    est = BayesianMLPClassifier((8,), burn_in=20, n_draws=5, random_state=0)
    fit_recording(est, X, y)
    proba = est.predict_proba(X[:5])
    with pytest.raises(ValueError, match="does not use skorch's module__hidden"):
        est.set_params(module__hidden=3)
    with pytest.raises(ValueError, match="has no callback named 'nonexistent'"):
        est.set_params(callbacks__nonexistent=None)
    est.set_params(callbacks__print_log=None, sampler__step_size=0.01)
    np.testing.assert_array_equal(est.predict_proba(X[:5]), proba)
    quiet = BayesianMLPClassifier((8,), burn_in=20, n_draws=5, random_state=0, callbacks__print_log=None)
    fit_recording(clone(quiet), X, y)
    # the reviewer's: set_params(**get_params(deep=True)) listed skorch's dropped callbacks and, on a fitted
    # estimator, passed module=None back, which re-initialised the module; callbacks="disable" failed to unpack
    est.set_params(**est.get_params(deep=True))
    np.testing.assert_array_equal(est.predict_proba(X[:5]), proba)
    with pytest.raises(ValueError, match="does not use skorch's lr"):
        est.set_params(lr=0.5)
    np.testing.assert_array_equal(est.predict_proba(X[:5]), proba)
    BayesianMLPClassifier((8,), callbacks="disable").set_params(callbacks__print_log=None)
    # with callbacks="disable": get_params(deep=True) round-trips, and a new list replaces it (before: "no callback
    # named 'epoch_timer'", and skorch's "not enough values to unpack"); the new list's callbacks then run
    off = BayesianMLPClassifier((8,), burn_in=20, n_draws=5, random_state=0, callbacks="disable")
    off.set_params(**off.get_params(deep=True))
    with pytest.raises(ValueError, match="has no callback named 'nonexistent'"):
        off.set_params(callbacks__nonexistent__x=1)

    class Counts(Callback):
        def __init__(self, steps=0):
            self.steps = steps

        def on_batch_end(self, net, training=False, **kwargs):
            self.steps += 1

    counter = Counts()
    fit_recording(off.set_params(callbacks=[("count", counter)], callbacks__count__steps=3), X, y)
    # callbacks__count__steps applied, then one count a step
    assert counter.steps == 3 + 20 + 5 * 10 and len(off.trace_) == 5


def test_skorch_callbacks_around_an_optimiser_are_refused(iris, tmp_path):
    from skorch.callbacks import Checkpoint, EarlyStopping, EpochTimer, LRScheduler, ProgressBar, TrainEndCheckpoint

    for callback in (LRScheduler(), ("stop", EarlyStopping(monitor="train_loss"))):
        with pytest.raises(ValueError, match="callbacks: skorch's (LRScheduler|EarlyStopping) works on an optimiser"):
            BayesianMLPClassifier((8,), burn_in=20, n_draws=5, callbacks=[callback]).fit(*iris)
    # skorch's progress bar counts the batches of recorded epochs, its checkpoints save one network at the best
    # validation loss: before, they failed inside the run (a TypeError, an IndexError, "valid_loss_best")
    for callback, words in ((ProgressBar(), "verbose=1 shows a progress bar"),
                            (Checkpoint(dirname=str(tmp_path)), "save it with est.save"),
                            (TrainEndCheckpoint(dirname=str(tmp_path)), "save it with est.save")):
        with pytest.raises(ValueError, match=words):
            BayesianMLPClassifier((8,), burn_in=20, n_draws=5, callbacks=[callback]).fit(*iris)
    assert not any(tmp_path.iterdir())
    est = BayesianMLPClassifier((8,), burn_in=20, n_draws=5, callbacks=[EpochTimer()])
    fit_recording(est, *iris)  # a callback that needs no optimiser runs
    assert len(est.trace_) == 5


def test_groups_of_chains_name_the_call_and_save_the_fits_settings(iris, tmp_path):
    """The reviewer's: with n_jobs, fit(warm_start=True)'s refusals (raised in the workers, which a context variable
    does not reach) still said "partial_fit cannot continue"; and a pickle from before an n_jobs fit recorded its own
    settings held its first group's (n_chains=2 of 4), which save then wrote, with a warning about a set_params
    the user never made."""
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianMLPClassifier(**GROUPS).fit(X, y)
    assert est.fit_params_["n_chains"] == 4
    with pytest.raises(ValueError, match=r"^fit\(warm_start=True\) cannot continue the chains with changed burn_in"):
        copy.deepcopy(est).set_params(burn_in=30, warm_start=True).fit(X, y)
    old = copy.deepcopy(est)
    old.fit_params_ = dict(old.shards_[0].fit_params_)  # as merge recorded it before
    assert old.fit_params_["n_chains"] == 2
    old = pickle.loads(pickle.dumps(old))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        old.save(tmp_path / "m.bayesnet")
    loaded = bayesnet.load(tmp_path / "m.bayesnet")
    assert loaded.n_chains == 4 and loaded.layout_.chains == 4
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))


def test_the_data_change_is_named_by_its_own_call_only(iris):
    """The reviewer's: the DivergenceError's sentence on a data change outlived the call that changed the data."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), burn_in=50, n_draws=10, thinning=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = BayesianMLPClassifier(**kw).fit(X[::2], y[::2])
        assert est._new_data_at is None
        est.partial_fit(X, y)
        assert est._new_data_at == 70
        est.partial_fit(X, y)
        assert est._new_data_at is None


def test_a_divergence_on_new_data_and_smaller_batches_asks_for_a_fit_anew_once(iris):
    """Stop 58's note: with both the data and the batch size changed before a continued run, the DivergenceError
    asked twice to fit anew, once for each. It asks once, and says the fit anew answers the batch size too."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), burn_in=50, n_draws=10, thinning=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = BayesianMLPClassifier(**kw).fit(X[::2], y[::2])
        est.set_params(batch_size=4).partial_fit(X, y)
    assert est._new_data_at == 70
    est.fit_status_["diverged_chains"] = {0: {"reason": "a non-finite potential", "step": 80}}
    message = est.divergence_message(80, [0])
    assert message.count("warm_start=False") == 1 and message.lower().count("fit anew") == 1, message
    assert "other data than the earlier call's" in message, message
    assert "mini-batches of 4 rows (batch_size=4)" in message, message
    assert "The fit anew warms up at this batch size too; or set batch_size back; or: reduce" in message, message
    est._new_data_at = None  # the same call on the same data: the batch size's own fix
    message = est.divergence_message(80, [0])
    assert "Fit anew (warm_start=False) to warm up at this batch size, or set batch_size back" in message, message


def test_groups_of_chains_refuse_a_changed_number_of_chains(iris):
    """Before: with n_jobs the groups kept their chains and partial_fit continued them silently under the new
    n_chains (the shards were never told), so n_chains and the chains fitted disagreed."""
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianMLPClassifier(**GROUPS).fit(X, y)
    draws = est.trace_.draws().clone()
    est.set_params(n_chains=2)
    with pytest.raises(ValueError, match=r"partial_fit cannot continue the chains with changed n_chains=2 \(was 4\): "
                                         r".*call fit\(\) to start new chains"):
        est.partial_fit(X, y)
    assert torch.equal(est.trace_.draws(), draws) and sum(s.n_chains for s in est.shards_) == 4  # nothing lost
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.set_params(n_chains=4).partial_fit(X, y)  # the old count continues
    assert est.trace_.n_slots == 4 and (est.trace_.kept_per_slot == 20).all()


def test_warm_start_with_another_number_of_chains_says_how_to_refit(iris):
    """Before: the message said "call fit()", which is what the user had done (with warm_start=True)."""
    X, y = iris
    est = BayesianMLPClassifier((8,), n_draws=5, burn_in=20, random_state=0, warm_start=True)
    fit_recording(est, X, y)
    with pytest.raises(ValueError, match=r"changed n_chains=2 \(was 1\).*\(with warm_start=False\)"):
        est.set_params(n_chains=2).fit(X, y)


# ---------------------------------------------------------------------- #
# messages (issue 14 item 8)
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("level", [1.5, 0.0, float("nan"), True])
def test_level_is_checked_without_return_interval(small_fits, iris, level):
    """Before: level=1.5 without return_interval was silently ignored."""
    X, _ = iris
    clf, reg = small_fits
    with pytest.raises(ValueError, match="level must be a probability in"):
        clf.predict_proba(X, level=level)
    with pytest.raises(ValueError, match="level must be a probability in"):
        reg.predict(X[:, :3], level=level)


def _y_with(value, dtype=float):
    def make(X, y):
        y = y.astype(dtype)
        y[3] = value
        return X, y
    return make


BAD_FITS = [
    # id, estimator, keyword arguments, data transform, exception, message
    ("NaN in a class label", BayesianMLPClassifier, {}, _y_with(np.nan), ValueError, "Input y contains NaN"),
    ("NaN in a regression target", BayesianMLPRegressor, {}, _y_with(np.nan), ValueError, "Input y contains NaN"),
    ("inf in a regression target", BayesianMLPRegressor, {}, _y_with(np.inf), ValueError, "Input y contains infinity"),
    ("2-D classification target", BayesianMLPClassifier, {}, lambda X, y: (X, np.c_[y, y]), ValueError,
     r"y should be a 1d array, got an array of shape \(150, 2\)"),
    ("a single row", BayesianMLPClassifier, {}, lambda X, y: (X[:1], y[:1]), ValueError,
     r"Found array with 1 sample\(s\) .* while a minimum of 2 is required"),
    ("no feature", BayesianMLPClassifier, {}, lambda X, y: (X[:, :0], y), ValueError,
     r"Found array with 0 feature\(s\)"),
    ("step size inf", BayesianMLPClassifier, dict(sampler__step_size=np.inf), None, ValueError,
     r"'step_size' parameter of SGHMC must be a float in the range \(0.0, inf\) .* Got inf"),
    ("step size NaN", BayesianMLPClassifier, dict(sampler__step_size=np.nan), None, ValueError,
     r"'step_size' parameter of SGHMC must be a float in the range .* Got nan"),
    ("prior scale NaN", BayesianMLPClassifier, dict(prior_scale=np.nan), None, ValueError,
     "prior scale must be a finite number > 0, got nan"),
    ("negative noise scale", BayesianMLPRegressor, dict(noise_scale=-1.0), None, ValueError,
     r"'noise_scale' parameter of BayesianMLPRegressor must be a float in the range \(0.0, inf\). Got -1.0"),
    ("fractional n_draws", BayesianMLPClassifier, dict(n_draws=2.5), None, ValueError,
     r"'n_draws' parameter of BayesianMLPClassifier must be an int in the range \[1, inf\)"),
    ("random_state a string", BayesianMLPClassifier, dict(random_state="abc"), None, ValueError,
     "'random_state' parameter of BayesianMLPClassifier must be an int"),
    ("device cuda without CUDA", BayesianMLPClassifier, dict(device="cuda"), None, ValueError,
     "device='cuda' was requested but CUDA is not available; use 'cpu' or 'auto'"),
]


@pytest.mark.parametrize("cls, kwargs, transform, error, message", [c[1:] for c in BAD_FITS],
                         ids=[c[0] for c in BAD_FITS])
def test_bad_input_is_refused_before_sampling(iris, monkeypatch, cls, kwargs, transform, error, message):
    """Bad data or settings get a message that names them, before any sampler step (the step counter stays
    at zero: nothing is lost, nothing half-fitted)."""
    if kwargs.get("device") == "cuda":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    X, y = iris
    X, y = transform(X, y) if transform is not None else (X, y)
    if cls is BayesianMLPRegressor and transform is None:
        X, y = X[:, :3], X[:, 3]
    est = cls((4,), **{"n_draws": 5, "burn_in": 10, "random_state": 0, **kwargs})
    with pytest.raises(error, match=message):
        est.fit(X, y)
    assert getattr(est, "sampler_state_", None) is None


def test_bad_calls_on_a_fitted_estimator(small_fits, iris, tmp_path):
    """Fit parameters, labels never seen, reordered columns, a bad summary level, a model file from a newer
    version, and partial_fit on a loaded model: each refused with a message that says what to do."""
    import pandas as pd
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    X, y = iris
    clf = copy.deepcopy(small_fits[0])
    with pytest.raises(TypeError, match=r"unexpected fit parameter\(s\) \['sample_weight'\]; sample weights .* "
                                        "are not supported"):
        clf.partial_fit(X, y, sample_weight=np.ones(len(y)))
    with pytest.raises(ValueError, match=r"y contains labels not seen in the first fit: \[7\]"):
        clf.partial_fit(X, np.where(y == 2, 7, y))
    with pytest.raises(ValueError, match=r"y contains labels not in classes=\[0, 1\]: \[2\]"):  # a first call
        BayesianMLPClassifier((4,), n_draws=2, burn_in=10).partial_fit(X, y, classes=[0, 1])
    for prob in (1.5, None, "0.9", True):  # (None was a TypeError comparing it with 0)
        with pytest.raises(ValueError, match=rf"prob must be in \(0, 1\), got {re.escape(repr(prob))}"):
            clf.summary(prob=prob)
    frame = pd.DataFrame(X, columns=list("abcd"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        named = BayesianMLPClassifier((4,), n_draws=5, burn_in=10, random_state=0).fit(frame, y)
    with pytest.raises(ValueError, match="The feature names should match those that were passed during fit"):
        named.predict(frame[list("dcba")])
    path, newer = tmp_path / "m.bayesnet", tmp_path / "newer.bayesnet"
    small_fits[0].save(path)
    with safe_open(str(path), "pt") as f:
        header = dict(f.metadata())
    save_file(load_file(str(path)), str(newer), metadata={**header, "version": "99"})  # (checked before the sum)
    with pytest.raises(ValueError, match=r"written by a newer bayesnet \(format version 99\); upgrade bayesnet"):
        bayesnet.load(newer)


@pytest.mark.parametrize("bad", ["NaN in X", "a fit parameter", "n_draws=0", "activation", "hidden_layer_sizes",
                                 "compile__mode"])
def test_a_refused_refit_keeps_the_fitted_draws(small_fits, iris, bad):
    """Before (for the network's settings and compile__*): the new network was first built after skorch had
    re-initialised the estimator, so a refused fit lost the draws (NotFittedError after it); and set_params of
    compile__* alone re-initialised it."""
    X, y = iris
    est = copy.deepcopy(small_fits[0])
    expected = est.predict_proba(X)
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    call = {"NaN in X": lambda: est.fit(X_nan, y), "a fit parameter": lambda: est.fit(X, y, sample_weight=y),
            "n_draws=0": lambda: est.set_params(n_draws=0).fit(X, y),
            "activation": lambda: est.set_params(activation="Relu").fit(X, y),
            "hidden_layer_sizes": lambda: est.set_params(hidden_layer_sizes=(0,)).fit(X, y),
            "compile__mode": lambda: est.set_params(compile=True, compile__mode="nonsense").fit(X, y)}[bad]
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        call()
    np.testing.assert_array_equal(est.predict_proba(X), expected)


def test_fit_leaves_the_callers_global_generator_alone(iris):
    """fit's checks build the network on a copy (the refused-refit test above); that build draws initial weights,
    and drew them from torch's global generator: a caller's seeded stream moved, and fits in threads could take
    each other's numbers (found by review: 4 of 24 threaded fits differed from the same fit alone)."""
    X, y = iris
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        BayesianMLPClassifier((4,), n_draws=2, burn_in=10, random_state=0).fit(X, y)
    assert torch.equal(torch.rand(3), expected)


def test_compile_settings_changed_between_calls_are_taken_up(iris):
    """set_params(compile__mode=...) on a fitted net keeps its draws and the next partial_fit continues the chains
    with it (was refused as a setting the chains cannot honour, though a new compile__* key was accepted)."""
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianMLPClassifier((4,), n_draws=3, burn_in=10, compile=False, compile__mode="default",
                                    random_state=0).fit(X, y)
        est.set_params(compile__mode="max-autotune").partial_fit(X, y)
    assert len(est.trace_) == 3 and est.n_draws_kept_ == 3 and int(est.sampler_state_.step) > 16


@pytest.mark.parametrize("bad", [dict(noise_scale=-1.0), dict(noise_shape=-1.0)], ids=lambda b: next(iter(b)))
def test_a_refused_refit_keeps_a_regressors_draws(bad):
    X, y = make_regression(n_samples=60, n_features=3, random_state=0)
    est = BayesianMLPRegressor((4,), n_draws=5, burn_in=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        expected = est.fit(X, y).predict(X)
    with pytest.raises(ValueError):
        est.set_params(**bad).fit(X, y)
    np.testing.assert_array_equal(est.predict(X), expected)


@pytest.mark.parametrize("name", ["noise_scale", "noise_shape"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), "nan", None, 0.0])
def test_a_bad_noise_setting_is_refused_by_name(name, value):
    """Validated with the other parameters (before: a string or None was a bare TypeError naming nothing, "must be
    real number, not str", also through the command line's --set noise_shape=inf)."""
    X, y = make_regression(n_samples=100, n_features=3, random_state=0)
    with pytest.raises(ValueError, match=rf"'{name}' parameter of BayesianMLPRegressor must be a float"):
        BayesianMLPRegressor((4,), n_draws=5, burn_in=20, random_state=0, **{name: value}).fit(X, y)


def test_a_string_target_for_a_regressor_names_y():
    X, _ = make_regression(n_samples=20, n_features=3, random_state=0)
    with pytest.raises(ValueError, match=r"\by\b|target"):
        BayesianMLPRegressor((4,), n_draws=5, burn_in=20).fit(X, np.array(["a"] * 20))


def test_a_sampler_parameter_without_its_prefix_hints_at_it(iris):
    with pytest.raises((TypeError, ValueError), match="sampler__step_size"):
        BayesianMLPClassifier(step_size=1e-3).fit(*iris)


# ---------------------------------------------------------------------- #
# regression prediction in blocks (issue 14 item 7)
# ---------------------------------------------------------------------- #
def test_regression_std_and_interval_do_not_depend_on_the_blocks(small_fits, iris, monkeypatch):
    """Mean, sd and mixture interval are reduced block by block (draws x rows): uneven blocks and one draw by
    one row give the one-block result; the interval's ends are the mixture's quantiles (Brent's method on the
    mixture's CDF for a few rows)."""
    _, reg = small_fits
    X = iris[0][:40, :3]
    whole = reg.predict(X, return_std=True, return_interval=True, level=0.9)
    for shape in ((3, 7), (1, 1)):
        monkeypatch.setattr(PosteriorPredictive, "block_shape", lambda self, n, a, shape=shape: shape)
        for a, b in zip(reg.predict(X, return_std=True, return_interval=True, level=0.9), whole):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # float32 products, summed in other orders
    means, noise = reg.predict_draws(X, return_noise_std=True)
    for row in (0, 17, 39):
        for q, bound in ((0.05, whole[2]), (0.95, whole[3])):
            exact = brentq(lambda t: norm.cdf((t - means[:, row]) / noise).mean() - q, -1e3, 1e3, xtol=1e-12)
            assert bound[row] == pytest.approx(exact, rel=1e-6, abs=1e-6)
    sd = np.sqrt((noise ** 2).mean() + means.var(axis=0))
    np.testing.assert_allclose(whole[1], sd, rtol=1e-6)


def _mixture(seed=0, draws=100, rows=200):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(rows, generator=g, dtype=torch.float64)[None, :, None] \
        + 0.1 * torch.randn(draws, rows, 1, generator=g, dtype=torch.float64)
    stds = (0.08 + 0.22 * torch.rand(draws, 1, 1, generator=g, dtype=torch.float64)).expand_as(means)
    return means, stds


def test_mixture_quantile_is_the_quantile():
    means, stds = _mixture()
    for q in (0.025, 0.5, 0.975):
        x = mixture_quantile(means, stds, q)
        for row in (0, 99, 199):
            m, s = means[:, row, 0].numpy(), stds[:, row, 0].numpy()
            exact = brentq(lambda t: norm.cdf((t - m) / s).mean() - q, -20, 20, xtol=1e-14)
            assert float(x[row, 0]) == pytest.approx(exact, abs=1e-9)


def test_mixture_quantile_converges_in_a_few_newton_steps():
    means, stds = _mixture()
    for q in (0.025, 0.975):
        ref = mixture_quantile(means, stds, q, iterations=200, tol=0.0)
        assert float((mixture_quantile(means, stds, q, iterations=8) - ref).abs().max()) < 1e-8


def test_the_divergence_monitor_counts_runs_across_blocks_as_step_by_step():
    """The monitor reads the steps in blocks; its run lengths (of high potentials, of hot steps) must be those of
    the per-step rule ``run = (run + 1) * flag``, carried from one block to the next."""
    from bayesnet.estimators.callbacks import _runs

    rng = np.random.default_rng(0)
    flags = rng.random((4, 300)) < 0.8
    run, expected = np.zeros(4, dtype=np.int64), []
    for t in range(flags.shape[1]):
        run = (run + 1) * flags[:, t]
        expected.append(run)
    carry, got = np.zeros(4, dtype=np.int64), []
    for lo, hi in ((0, 1), (1, 50), (50, 51), (51, 170), (170, 300)):
        runs, carry = _runs(flags[:, lo:hi], carry)
        got.append(runs)
    assert np.array_equal(np.concatenate(got, axis=1), np.stack(expected, axis=1))
    # runs of 10 and more occur, some across a block boundary: the carry is exercised
    assert np.array_equal(carry, run) and np.stack(expected).max() >= 10 and got[2].max() > 1


def test_a_fit_pickled_with_the_monitors_device_flags_continues(iris):
    """Estimators pickled before the divergence monitor read the statistics in blocks kept its flags and sums
    as device tensors and no read position; continuing one converts them and watches on from where it stands."""
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianMLPClassifier((8,), n_chains=2, burn_in=60, n_draws=10, thinning=2, random_state=0).fit(X, y)
        old = pickle.loads(pickle.dumps(est))
        state = old.divergence_state_
        for key in ("bad", "hot_run", "high_run", "ref_sum", "ref_sq", "ref_n"):
            state[key] = torch.as_tensor(state[key])
        state["reference"] = tuple(torch.as_tensor(t) for t in state["reference"])
        del state["processed"]
        old.set_params(n_draws=15).partial_fit(X, y)
    state = old.divergence_state_
    assert isinstance(state["bad"], np.ndarray) and isinstance(state["reference"][0], np.ndarray)
    assert state["processed"] == old.sampler_state_.step == 60 + 2 * 10 + 2 * 15  # a completed run: 15 more draws
    assert old.fit_status_["status"] == "complete" and not old.fit_status_["diverged_chains"]
    assert np.isfinite(state["reference"][1]).all()  # the warm-up's reference survived the conversion


def test_a_registered_sampler_without_the_state_argument_still_fits(iris, monkeypatch):
    """``steps_per_draw`` and ``temperature_range`` take the chains' state (tacthmc resolves ``wall="auto"`` at init,
    and the estimators ask for the chains' own answers); a registered sampler written to the stateless form still
    fits, its answers taken as they are (before the shim: a TypeError from the first call with a state)."""
    from bayesnet.samplers.tacthmc import TACTHMC

    asked = []
    monkeypatch.setattr(TACTHMC, "steps_per_draw", lambda self: asked.append("draw") or 10.0)
    monkeypatch.setattr(TACTHMC, "temperature_range", lambda self: asked.append("range") or (1.0, 2.0))
    X, y = iris
    est = BayesianMLPClassifier(hidden_layer_sizes=(4,), sampler="tacthmc", n_draws=10, burn_in=100,
                                sampler__steps_per_sample=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert est.plan_.steps_per_draw == 10.0  # (the stateless answer, kept after init)
    assert est.fit_status_["status"] in ("complete", "short") and {"draw", "range"} <= set(asked)


@pytest.mark.parametrize("old_hint", [False, True])
def test_the_draw_quota_waits_for_every_chain(iris, monkeypatch, old_hint):
    """tacthmc's draw quota (samplers that collect some steps) ends a run once every chain has its draws in, not
    once their average has (before: a chain off the plateau stayed short while a fast chain's surplus overwrote
    its own draws, and the run reported "draws collected" beside a shortfall). Shown with chain 0 put off the
    plateau after 10 draws: at step 130 chain 1 has its 30 draws and the two average 20; at step 150, 10 and 50
    average the quota's 30, where the old rule stopped. The run goes on to its budget (3x the planned 205 steps: the
    burn-in, then 30 draws at 3.48 steps each, the plateau being 1/3.48 of the well of 35 weights at wall="auto")
    and warns about the chain it waited for."""

    class OffThePlateau(Callback):
        def on_batch_end(self, net, training=False, **kwargs):
            if training and net.sampler_state_.step == 110:  # |xi| > 1/3: no more draws for chain 0
                state = net.sampler_state_
                state.xi = torch.tensor([0.9, 0.0], dtype=state.xi.dtype)
                state.xi_momentum = torch.zeros_like(state.xi_momentum)

    if old_hint:  # a registered sampler written to the one-argument shortfall_hint(state) still runs (review)
        from bayesnet.samplers.tacthmc import TACTHMC

        monkeypatch.setattr(TACTHMC, "shortfall_hint", lambda self, state: "its own one-argument hint.")
    X, y = iris
    est = BayesianMLPClassifier(hidden_layer_sizes=(4,), sampler="tacthmc", n_chains=2, burn_in=100, n_draws=30,
                                thinning=1, sampler__steps_per_sample=1, random_state=0,
                                callbacks=[("off", OffThePlateau())])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    kept = est.trace_.kept_per_slot
    assert kept[0] < 30 and kept[1] > 50, kept
    assert est.sampler_state_.step == 3 * math.ceil(100 + 30 * 3 * est.sampler_state_.wall) == 3 * 205
    assert est.fit_status_["stopped_by"] is None
    assert est.fit_status_["status"] == "short"
    assert list(est.trace_.stored_per_slot) == [kept[0], 30]  # chain 1 keeps its newest 30
    message = next(str(w.message) for w in caught if f"{kept[0]} of n_draws=30 draws were kept" in str(w.message))
    assert ("its own one-argument hint." if old_hint else "chain 0's") in message


def test_the_draw_quota_counts_judged_draws_only(iris):
    """Before the quota stops a run, the divergence monitor judges the steps it has not read yet, so that a chain
    found diverging there is retired (its draws from the bad steps discarded) before the draws are counted: the
    quota then counts the chains left. Shown with a monitor that retires chain 1 when first asked."""
    from bayesnet.estimators.callbacks import DivergenceMonitor

    class RetiresChainOne(DivergenceMonitor):
        def judge_unread(self, net):
            self.calls = getattr(self, "calls", []) + [(int(net.sampler_state_.step), net.fit_status_["stopped_by"])]
            if net.trace_.active[1]:
                net.trace_.retire([1], int(net.sampler_state_.step))

    X, y = iris
    monitor = RetiresChainOne()
    est = BayesianMLPClassifier(hidden_layer_sizes=(4,), sampler="tacthmc", n_chains=2, burn_in=100, n_draws=30,
                                thinning=1, sampler__steps_per_sample=1, random_state=0,
                                callbacks__divergence=monitor)
    est.fit(X, y)
    # asked by the quota before it stopped the run (then again at the run's end, the stop recorded)
    assert monitor.calls[0] == (int(est.sampler_state_.step), None)
    assert monitor.calls[-1] == (int(est.sampler_state_.step), "draws collected")
    assert not est.trace_.active[1]
    assert est.fit_status_["stopped_by"] == "draws collected" and est.trace_.stored_per_slot[0] == 30


def test_a_failing_judgement_never_replaces_the_runs_own_error(iris, monkeypatch):
    """A run ended by an error has its unread steps judged (run.judge_unread_steps); should that judgement fail
    too (the statistics unreadable after a device error, say), the caller still sees the run's own error, and a
    ConvergenceWarning says the last steps went unchecked."""
    from bayesnet.estimators.callbacks import DivergenceMonitor

    def unreadable(self, net):
        raise RuntimeError("statistics unreadable")

    class FailAt20(Callback):
        def on_batch_end(self, net, training=False, **kwargs):
            if training and net.sampler_state_.step == 20:
                raise MemoryError("out of memory at step 20")

    monkeypatch.setattr(DivergenceMonitor, "judge_unread", unreadable)
    X, y = iris
    est = BayesianMLPClassifier(hidden_layer_sizes=(4,), burn_in=10, n_draws=30, thinning=1, random_state=0,
                                callbacks=[("fail", FailAt20())])
    with pytest.warns(ConvergenceWarning, match="could not judge the steps after its last read.*statistics "
                                                "unreadable"):
        with pytest.raises(MemoryError, match="out of memory at step 20"):
            est.fit(X, y)


@pytest.mark.parametrize("sampler", [n for n in available_samplers()
                                     if get_sampler_class(n).__module__.startswith("bayesnet.")])
def test_a_divergence_after_a_warm_up_too_short_to_settle_says_so_first(sampler):
    """A warm-up shorter than its windows keeps the step it guessed at the start (on iris with burn_in=10, 1 seed
    in 60 diverged at it, in CI): the error names the burn-in first, then the sampler's setting, without nested
    parentheses. Before: "Reduce the step size (now sampler__step_size (the warm-up set 0.0193; pass a smaller
    value, or a longer burn_in))", no word of the warm-up. The chain is poisoned after the warm-up, so that
    every sampler diverges there whatever its arithmetic."""
    from sklearn.datasets import load_iris

    from bayesnet.cli.models import _cli_words

    X, y = load_iris(return_X_y=True)
    est = BayesianMLPClassifier((4,), n_draws=5, burn_in=10, random_state=0, sampler=sampler,
                                callbacks=[("poison", PoisonChain(0, 13))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.raises(DivergenceError, match=r"The warm-up did not settle: it is too short .*; increase burn_in "
                                                  r"\(now 10 steps\) first\. Reduce the step size \(now "
                                                  r"sampler__step_size='auto', which the warm-up set to [0-9.e-]+[,;)]"
                                                  ) as info:
            est.fit(X, y)
    assert not est.sampler_state_.warmup_report["settled"]
    message = str(info.value)
    assert "((" not in message and "))" not in message
    # the command line's words: its options, the burn-in's among them
    cli = _cli_words(message)
    assert "increase --burn-in (now 10 steps) first" in cli and "now --step-size 'auto', which the warm-up" in cli


@pytest.mark.slow  # (a killed worker and its group's rerun: 25 s here)
def test_after_a_lost_first_group_the_exports_keep_the_chains_numbers(iris, tmp_path):
    """With chains 0-1's worker killed, the surviving chains are 2 and 3; ArviZ's chain coordinate numbered them
    0 and 1 (the merged trace's slots), contrary to fit_status_ and the warnings."""
    pytest.importorskip("arviz")
    X, y = iris
    est = BayesianMLPClassifier(**GROUPS, callbacks=[("fault", WorkerFault((0,), 30, "kill"))])
    messages = fit_recording(est, X, y)
    assert est.fit_status_["lost_chains"] == [0, 1], messages
    assert est.to_arviz().posterior.chain.values.tolist() == [2, 3]
    # and after a model file: the loaded fit numbered them 0 and 1 (its groups are not saved; fit_status_ is)
    path = tmp_path / "m.bayesnet"
    copy.deepcopy(est).set_params(callbacks=None).save(path)
    assert bayesnet.load(path).to_arviz().posterior.chain.values.tolist() == [2, 3]


@pytest.mark.parametrize("kwargs, message", [
    (dict(callbacks__nonexistent=None), "has no callback named 'nonexistent'"),
    (dict(callbacks__nonexistent__x=1), "has no callback named 'nonexistent'"),
    (dict(callbacks="disable", callbacks__nonexistent=1), r"has no callback named 'nonexistent' \(callbacks='disable'"),
    (dict(iterator_train__num_workers=0), "does not take iterator_train__num_workers: .* takes iterator_train__shuffle"),
    (dict(iterator_train__drop_last=True), "does not take iterator_train__drop_last"),
])
def test_the_constructors_callback_and_iterator_settings_are_checked(iris, kwargs, message):
    """A helper's user test: skorch ignored a constructor's callbacks__<name> for a callback the estimator does
    not have (set_params refused it), and a DataLoader option (iterator_train__num_workers, drop_last) reached the
    batches' iterator, which failed at step 0 with a TypeError and left an 'interrupted' fit. Both are refused by
    fit now, before anything runs; the documented ones still fit."""
    X, y = iris
    with pytest.raises(ValueError, match=message):
        BayesianMLPClassifier((8,), burn_in=20, n_draws=5, **kwargs).fit(X, y)
    for fine in (dict(callbacks__print_log=None), dict(callbacks__divergence=None), dict(iterator_train__shuffle=False),
                 dict(callbacks="disable", callbacks__print_log=None)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = BayesianMLPClassifier((8,), burn_in=20, n_draws=5, random_state=0, **fine).fit(X, y)
        assert est.fit_status_["status"] == "complete", fine


def test_warm_up_warnings_name_an_explicit_adaptation_steps(iris):
    """A helper's user test: with sampler__adaptation_steps=40 in a burn-in of 400, the warning said 'the warm-up
    (40 steps, the burn-in) did not settle ... Increase burn_in (now 400 steps)', which changes nothing; with 0, 'no
    warm-up ran ... Increase burn_in'. They name the setting that sets the warm-up's length now."""
    X, y = iris
    kw = dict(hidden_layer_sizes=(8,), burn_in=400, n_draws=5, random_state=0)
    said = " ".join(fit_recording(BayesianMLPClassifier(**kw, sampler__adaptation_steps=40), X, y))
    assert "the warm-up (40 steps, sampler__adaptation_steps) did not settle" in said
    assert "Increase sampler__adaptation_steps (now 40; at most the burn-in, 400 steps)" in said
    said = " ".join(fit_recording(BayesianMLPClassifier(**kw, sampler__adaptation_steps=0), X, y))
    assert "Set sampler__adaptation_steps (now 0) to 'auto' or at least 200" in said
    said = " ".join(fit_recording(BayesianMLPClassifier(**{**kw, "burn_in": 100}), X, y))
    assert "the warm-up (100 steps, the burn-in) did not settle" in said and "Increase burn_in (now 100 steps)" in said


def test_the_progress_bar_ends_on_the_draws_kept(iris, capsys):
    """A helper's user test: verbose=1's bar refreshed its postfix every 20 steps only and ended showing draws=10
    (those of step 60 of 66) when 13 were kept. Its last line shows the draws kept."""
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = BayesianMLPClassifier((8,), burn_in=40, n_draws=13, thinning=2, verbose=1, random_state=0).fit(X, y)
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert len(est.trace_) == 13 and "draws=13" in last, last
    # and its potential is the last step's (before: of the last refresh, step 40 of 53 here)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = BayesianMLPClassifier((8,), burn_in=40, n_draws=13, thinning=1, verbose=1, random_state=0).fit(X, y)
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    final = est.trace_.as_array(potentials=True).reshape(-1)[-1]
    assert int(est.sampler_state_.step) == 53 and f"potential={final:.4g}" in last, (final, last)


def test_a_sampler_instance_overridden_by_sampler_settings_is_reported_and_warned(iris):
    """A helper's user test: with sampler=SGHMC(friction=0.5) beside sampler__friction=0.2, the fit used 0.2 while
    get_params reported 0.5, so a grid over instances showed settings it had not fitted. get_params reports what is
    fitted, and fit says the instance's value was overridden."""
    from bayesnet.samplers.sghmc import SGHMC

    X, y = iris
    est = BayesianMLPClassifier((8,), burn_in=200, n_draws=10, random_state=0, sampler__friction=0.2)
    est.set_params(sampler=SGHMC(friction=0.5))
    assert est.get_params()["sampler__friction"] == 0.2
    with pytest.warns(UserWarning, match=r"overridden by sampler__friction=0.2 \(the instance's friction=0.5\)"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert est.sampler_.friction == 0.2
    plain = BayesianMLPClassifier((8,), burn_in=200, n_draws=10, random_state=0, sampler=SGHMC(friction=0.5))
    assert plain.get_params()["sampler__friction"] == 0.5


def test_with_n_jobs_the_warnings_and_errors_read_every_group(iris):
    """A helper's user test: with n_jobs the warm-up warning read group 0's state only (another group's unsettled
    warm-up went unreported), and a DivergenceError of every chain was group 0's ('all 2 sgld chains (0, 1)' of
    4)."""
    from sklearn.datasets import make_moons

    from bayesnet import DivergenceError

    X, y = make_moons(300, noise=0.2, random_state=0)  # (200 rows settled both groups' warm-ups once the rows were
    # spread evenly over the batches: 100 and 100, not 128 and 72; seed 0 settled both once the warm-up's scale moves
    # counted the rows its last batches give twice once: seed 10 left group 1 unsettled, and seed 28 does since eqn's
    # noise budget was halved, its steps with it)
    kw = dict(hidden_layer_sizes=(8,), burn_in=200, n_draws=10, random_state=28, sampler="eqn", sampler__n_walkers=4,
              n_chains=2)
    alone = " ".join(fit_recording(BayesianMLPClassifier(**kw), X, y))
    groups = BayesianMLPClassifier(**kw, n_jobs=2)
    together = " ".join(fit_recording(groups, X, y))
    assert [shard.sampler_state_.warmup_report["settled"] for shard in groups.shards_] == [True, False]
    assert "did not settle" in alone and "did not settle" in together
    with pytest.raises(DivergenceError, match=r"all 4 sgld chains \(0, 1, 2, 3\) diverged"):
        BayesianMLPClassifier((8,), burn_in=200, n_draws=20, random_state=0, sampler="sgld", sampler__step_size=10.0,
                              n_chains=4, n_jobs=2).fit(X, y)


def test_sampler_settings_set_on_a_sampler_instance_set_the_instance(iris):
    """Stop 53's user test: a grid search over ``sampler__friction`` from ``sampler=SGHMC(...)`` warned "overridden"
    at every candidate it moved off the instance's value. ``set_params(sampler__<name>=...)`` with an instance sets
    the instance's own setting (scikit-learn's nested parameters), in either order beside a new instance; only a
    value set beside the instance in the constructor (or before a new instance) overrides it, with the warning."""
    from sklearn.model_selection import GridSearchCV

    from bayesnet.samplers.sghmc import SGHMC

    X, y = iris
    est = BayesianMLPClassifier((8,), burn_in=200, n_draws=10, random_state=0, sampler=SGHMC(friction=0.5))
    est.set_params(sampler__friction=0.2)
    assert est.sampler.friction == 0.2 and est.get_params()["sampler__friction"] == 0.2
    assert "sampler__friction" not in est.get_params(deep=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
        assert est.sampler_.friction == 0.2
        # the record of the fit does not follow the instance: save writes what the draws were fitted with, and
        # warns of the later setting (before this record, it would have written friction=0.3)
        est.set_params(sampler__friction=0.3)
        path = os.path.join(tempfile.mkdtemp(), "m.bayesnet")
        with pytest.warns(UserWarning, match=r"changed by set_params since it was fitted: sampler=SGHMC\(friction=0.3"):
            bayesnet.save(est, path)
        assert bayesnet.load(path).get_params()["sampler__friction"] == 0.2
        est.set_params(sampler__friction=0.2)
        bayesnet.save(est, path)  # (unchanged again: no warning, the copy and the instance compared by settings)
        search = GridSearchCV(BayesianMLPClassifier((8,), burn_in=200, n_draws=10, random_state=0,
                                                    sampler=SGHMC(friction=0.5)),
                              {"sampler__friction": [0.05, 0.5]}, cv=2, refit=False).fit(X, y)
    assert [p["sampler__friction"] for p in search.cv_results_["params"]] == [0.05, 0.5]
    for keys in (("sampler", "sampler__friction"), ("sampler__friction", "sampler")):  # (one call, either order)
        values = {"sampler": SGHMC(friction=0.5), "sampler__friction": 0.3}
        est = BayesianMLPClassifier((8,)).set_params(**{k: values[k] for k in keys})
        assert est.sampler.friction == 0.3 and est.get_params()["sampler__friction"] == 0.3
    # a value set beside the instance in the constructor still overrides it, and is what set_params then moves
    est = BayesianMLPClassifier((8,), sampler=SGHMC(friction=0.5), sampler__friction=0.2)
    assert est.get_params()["sampler__friction"] == 0.2
    est.set_params(sampler__friction=0.1)
    assert est.get_params()["sampler__friction"] == 0.1 and "sampler__friction" not in vars(est)
    # a name the instance does not have stays a setting beside it, refused at fit with the valid names
    est = BayesianMLPClassifier((8,), burn_in=200, n_draws=10, sampler=SGHMC()).set_params(sampler__bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        est.fit(X, y)


def test_a_hot_chain_on_smaller_batches_than_the_warm_up_names_the_batch_size():
    """Stop 53's user test: ``set_params(batch_size=4)`` before ``partial_fit`` ran the step the warm-up froze on
    batches of 128 at kinetic temperature 1.4, and the warning asked for a smaller step size only. It names the
    batch-size change first; a continued run at the warm-up's batch size says nothing of it. Whether the chain runs
    hot or diverges on batches of 4 depends on the CPU's rounding (on an Intel CPU with AVX-512 it diverged at step
    2450): the DivergenceError names the change too."""
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = BayesianMLPClassifier(random_state=0, warm_start=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est.fit(X, y)
    named = "mini-batches of 4 rows (batch_size=4), smaller than the 128 the warm-up measured the step size with"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", ConvergenceWarning)
        try:
            est.set_params(batch_size=4).partial_fit(X, y)
        except DivergenceError as exc:
            assert named in str(exc) and "Fit anew (warm_start=False)" in str(exc), str(exc)
            assert "set batch_size back; or: reduce the step size" in str(exc), str(exc)
        else:
            hot = next(str(w.message) for w in record if "ran hot" in str(w.message))
            assert named in hot and "Fit anew (warm_start=False)" in hot and "set a smaller step size" in hot, hot
    from bayesnet.estimators.run import smaller_batches

    assert named in smaller_batches(est)
    assert smaller_batches(est.set_params(batch_size=128)) is None
    assert smaller_batches(est.set_params(batch_size=-1)) is None
