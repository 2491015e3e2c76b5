"""Trustworthy fits (issue 14): what a diverging fit keeps, what a fault in a process group costs, and what
regression intervals cost at scale.

What is measured
----------------
divergence
    Breast cancer (sklearn's copy, 398 training / 171 test rows, standardised on the training rows), the
    default 30-100-2 MLP, four chains of sghmc or sgnht with an explicit step size (no warm-up adaptation)
    far too large, or inputs multiplied by 30 (the issue's cases). For each fit: the chains that diverged,
    the draws kept and discarded (the stretch where a chain was leaving its typical set), the median
    potential of the kept draws, the test log loss of the kept draws against a healthy fit on the same
    inputs (the same run length, ``step_size="auto"``), and the warnings raised.
process groups
    The same data, ``n_chains=4, n_jobs=2`` (chains 0-1 and 2-3 in two loky workers), 500 steps. A fault
    is injected inside one worker by a callback at step 400: SIGKILL (what the kernel's out-of-memory
    killer sends), a ``MemoryError``, a ``KeyboardInterrupt`` (Ctrl-C), one chain's weights set to NaN,
    SIGKILL in both workers. Printed: what ``fit`` did, the draws kept per chain, the lost chains, and
    the wall time against the healthy fit's (each timed with loky's pool already started: a killed worker
    breaks the pool, and the reruns it needs start new workers, which counts against the faulty fit).
prediction
    ``BayesianMLPRegressor`` (10-100-1, ``--draws`` draws; the draws' values do not matter) predicting
    ``--rows`` rows: ``predict(X)``, ``predict(X, return_std=True)`` and ``predict(X, return_std=True,
    return_interval=True)``, each in a fresh process (the model read from a bayesnet model file): the best
    of ``--repeats`` wall times, and the peak resident memory (``ru_maxrss``) the first call added to the
    process (torch's allocations included, which ``tracemalloc`` does not see). Target: intervals at most 3x
    the mean's time.

One thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``). Timings on a shared, loaded machine are
indicative only.

    python benchmarks/faults.py                          # everything, about 2 minutes on a loaded 2-core machine
    python benchmarks/faults.py --parts prediction --rows 50000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.metrics import log_loss  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from bayesnet import BayesianMLPClassifier, BayesianMLPRegressor, DivergenceError  # noqa: E402
from bayesnet.testing import PoisonChain, WorkerFault  # noqa: E402

torch.set_num_threads(1)


def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


def fit(est, X, y):
    """Fit; return (seconds, the error raised or None, short tags of the ConvergenceWarnings)."""
    tags = {"diverged and stopped": "chains diverged", "ran hot": "hot chain", "R-hat": "R-hat",
            "effective draws": "low ESS", "did not settle": "warm-up unsettled", "died": "lost chains",
            "stopped early": "group fault", "interrupted": "interrupted", "draws were kept": "short"}
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            est.fit(X, y)
            error = None
        except (DivergenceError, RuntimeError, MemoryError) as exc:
            error = exc
    seconds = time.perf_counter() - t0
    found = [tag for key, tag in tags.items()
             if any(key in str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning))]
    return seconds, error, found


# ---------------------------------------------------------------------- #
# divergence
# ---------------------------------------------------------------------- #
RUN = dict(n_chains=4, burn_in=200, n_draws=100, thinning=5, random_state=0)
DIVERGENCE_CASES = [
    # label, input scale, sampler, estimator keyword arguments
    ("healthy: sghmc, step auto", 1, "sghmc", RUN),
    ("sghmc, step 6e-4", 1, "sghmc", {**RUN, "sampler__step_size": 6e-4}),
    ("sghmc, step 1e-3", 1, "sghmc", {**RUN, "sampler__step_size": 1e-3}),
    ("sghmc, step 2e-3", 1, "sghmc", {**RUN, "sampler__step_size": 2e-3}),
    ("issue: sghmc, step 3e-3, 1 chain, defaults", 1, "sghmc", dict(sampler__step_size=3e-3, random_state=0)),
    ("healthy x30: sgnht, step auto", 30, "sgnht", RUN),
    ("inputs x30: sgnht, step 1e-4", 30, "sgnht", {**RUN, "sampler__step_size": 1e-4}),
]


def divergence(args):
    Xtr, Xte, ytr, yte = cancer()
    print("\n## A diverging fit: what is kept (breast cancer, 30-100-2 MLP)\n")
    print("| fit | chains diverged | draws kept | discarded | median U of kept | test log loss | vs healthy | "
          "warnings / error | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    healthy = {}
    for label, scale, sampler, kw in DIVERGENCE_CASES:
        est = BayesianMLPClassifier(sampler=sampler, **kw)
        seconds, error, tags = fit(est, Xtr * scale, ytr)
        status = est.fit_status_
        kept = len(est.trace_)
        loss = log_loss(yte, est.predict_proba(Xte * scale)) if kept else float("nan")
        if label.startswith("healthy"):
            healthy[scale] = loss
        potential = float(np.median(est.trace_.potentials)) if kept else float("nan")
        diverged = sorted(status["diverged_chains"])
        outcome = ", ".join(tags) + (f"; {type(error).__name__}" if error is not None else "")
        print(f"| {label} | {len(diverged)} of {est.n_chains} {diverged if diverged else ''} | {kept} | "
              f"{status['draws_discarded']} | {potential:.4g} | {loss:.3f} | {loss / healthy[scale]:.2f}x | "
              f"{outcome or '-'} | {seconds:.1f} |", flush=True)


# ---------------------------------------------------------------------- #
# process groups
# ---------------------------------------------------------------------- #
FAULT_STEP = 400  # of the 500 steps below
GROUP_CASES = [
    ("healthy", None),
    ("SIGKILL in chains 2-3's worker", WorkerFault((2,), FAULT_STEP, "kill")),
    ("MemoryError in chains 2-3's worker", WorkerFault((2,), FAULT_STEP, "memory")),
    ("Ctrl-C (KeyboardInterrupt) in chains 0-1's worker", WorkerFault((0,), FAULT_STEP, "interrupt")),
    ("chain 3's weights NaN", PoisonChain(3, FAULT_STEP)),
    ("SIGKILL in both workers", WorkerFault((0, 2), FAULT_STEP, "kill")),
]


def groups(args):
    Xtr, _, ytr, _ = cancer()
    kw = dict(hidden_layer_sizes=(50,), n_chains=4, n_jobs=2, burn_in=300, n_draws=100, thinning=2, random_state=0)
    print("\n## A fault in one process group (n_chains=4, n_jobs=2, 500 steps, fault at step 400)\n")
    print("| fault | fit | draws kept per chain | lost chains | s | vs healthy |")
    print("|---|---|---|---|---|---|")
    base = None
    for label, fault in GROUP_CASES:
        fit(BayesianMLPClassifier(**{**kw, "burn_in": 10, "n_draws": 5}), Xtr, ytr)  # loky's pool started (again)
        est = BayesianMLPClassifier(**kw, callbacks=None if fault is None else [("fault", fault)])
        seconds, error, tags = fit(est, Xtr, ytr)
        base = base or seconds
        trace = getattr(est, "trace_", None)
        if trace is not None:
            per_chain = [int(k) for k in trace.kept_per_slot]
            lost = est.fit_status_.get("lost_chains", [])
        else:
            per_chain, lost = "none", "all"
        outcome = f"raised {type(error).__name__}" if error is not None else "returned"
        outcome += f" ({', '.join(t for t in tags if t not in ('R-hat', 'low ESS'))})" if tags else ""
        print(f"| {label} | {outcome} | {per_chain} | {lost} | {seconds:.1f} | {seconds / base:.2f}x |", flush=True)


# ---------------------------------------------------------------------- #
# prediction
# ---------------------------------------------------------------------- #
CALLS = {
    "mean": dict(),
    "mean + std": dict(return_std=True),
    "mean + std + interval": dict(return_std=True, return_interval=True),
}


def child(path, mode, rows, repeats):
    """Run in a fresh process: best wall time of ``repeats`` calls, and the peak RSS the first call added (MiB)."""
    import resource

    import bayesnet

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    reg = bayesnet.load(path)
    X = np.random.default_rng(1).normal(size=(rows, reg.n_features_in_)).astype(np.float32)
    reg.predict(X[:2048], **CALLS[mode])  # first-call costs
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best, peak = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        reg.predict(X, **CALLS[mode])
        best = min(best, time.perf_counter() - t0)
        peak = peak or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": best, "peak_mib": (peak - before) / 1024}))


def prediction(args):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 10)).astype(np.float32)
    y = X @ rng.normal(size=10) + 0.1 * rng.normal(size=500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = BayesianMLPRegressor(n_draws=args.draws, burn_in=100, thinning=1, random_state=0).fit(X, y)
    whole = args.draws * args.rows * 8 / 2**20
    print(f"\n## Regression prediction on {args.rows} rows with {len(reg.trace_)} draws (10-100-1 MLP)\n")
    print(f"Each call in a fresh process, best of {args.repeats}; peak RSS added by the first call. "
          f"For scale: one (draws x rows) float64 array is {whole:.0f} MiB.\n")
    print("| call | s | vs mean | peak RSS added, MiB |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "reg.bayesnet")
        reg.save(path)
        base = None
        for mode in CALLS:
            out = subprocess.run([sys.executable, __file__, "--child", path, mode, str(args.rows), str(args.repeats)],
                                 capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            base = base or result["seconds"]
            print(f"| {mode} | {result['seconds']:.2f} | {result['seconds'] / base:.2f}x | {result['peak_mib']:.0f} |",
                  flush=True)
    print("\nTarget: mean + std + interval at most 3x the mean's time.")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        path, mode, rows, repeats = sys.argv[2:6]
        return child(path, mode, int(rows), int(repeats))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="*", default=["divergence", "groups", "prediction"],
                    choices=["divergence", "groups", "prediction"])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, cpu, {torch.get_num_threads()} thread; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the start (a loaded machine makes every time indicative only)")
    for part in args.parts:
        {"divergence": divergence, "groups": groups, "prediction": prediction}[part](args)


if __name__ == "__main__":
    main()
