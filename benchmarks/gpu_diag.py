"""Where an estimator's step spends its time on a device: the reads that wait for it and a profile of the fit.

    python benchmarks/gpu_diag.py --device cuda     # on a GPU machine (gpu_check.sh diag)
    python benchmarks/gpu_diag.py --device cpu      # the same fits on the CPU, for comparison (no sync count)

Two fits: the README's default classifier on breast cancer (all 569 rows, standardised) and a 784-100-10 MLP of
1,024 sghmc steps at a fixed step size on random data (16,384 rows, batch 128); on CUDA also the second with its
transition compiled with CUDA graphs (``compile=True, compile__mode="reduce-overhead"``), with the compiler's
counters at the end of the report (torch's own messages about CUDA graphs, skipped or recorded again, and
recompilations go to stderr). Each is fitted once to warm up, then timed (µs per sampler step over the whole
fit, setup included, and over the second half of its steps, after any warm-up and compilation), then, on CUDA,
fitted again under CUDA's sync debug mode (``torch.cuda.set_sync_debug_mode("warn")``), which warns at every
call that waits for the GPU: the report counts them by source line. Last, a ``cProfile`` of one more fit, sorted
by the time spent in each function itself: on a GPU that shows the host time each torch call costs (launch-bound
when it is most of a step) and any wait for the device (in the method that reads). The report is printed and
written to ``$OUT/diag_<device>.txt`` (or the current folder). The figures of the last GPU run are in
benchmarks/README.md, "The second lease".
"""
from __future__ import annotations

import argparse
import cProfile
import collections
import io
import os
import pstats
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler
from skorch.callbacks import Callback

from bayesnet import BayesianMLPClassifier


class SecondHalfClock(Callback):
    """Times the second half of a fit's steps: from the first epoch that starts at or after half the planned
    steps to the end (the device synchronised at both ends). That leaves out the warm-up of a default fit, and a
    compiled transition's compilation and CUDA-graph recordings in its first calls."""

    def __init__(self, sync):
        self.sync = sync

    def initialize(self):
        self.start_ = self.end_ = None
        return self

    def on_epoch_begin(self, net, **kwargs):
        if self.start_ is None and net.sampler_state_.step >= net.steps_planned_total_ // 2:
            self.sync()
            self.start_ = (time.perf_counter(), net.sampler_state_.step)

    def on_train_end(self, net, **kwargs):
        self.sync()
        self.end_ = (time.perf_counter(), net.sampler_state_.step)

    def us_per_step(self) -> float:
        return 1e6 * (self.end_[0] - self.start_[0]) / max(self.end_[1] - self.start_[1], 1)


def fits(device: str, clock: SecondHalfClock) -> dict:
    rng = np.random.default_rng(0)
    Xc, yc = load_breast_cancer(return_X_y=True)
    Xc = StandardScaler().fit_transform(Xc).astype(np.float32)
    X784 = rng.random((16384, 784), dtype=np.float32)
    y784 = rng.integers(0, 10, 16384)
    common = dict(device=device, random_state=0, callbacks=[("second_half_clock", clock)])
    mlp784 = dict(hidden_layer_sizes=(100,), batch_size=128, max_epochs=8, burn_in=524, n_draws=50, thinning=10,
                  sampler__step_size=1e-6, **common)
    jobs = {
        "cancer-default": lambda: BayesianMLPClassifier(**common).fit(Xc, yc),
        "784-100-10": lambda: BayesianMLPClassifier(**mlp784).fit(X784, y784),
    }
    if device.startswith("cuda"):  # the transition compiled with CUDA graphs, inside the estimator
        jobs["784-100-10 cuda graphs"] = lambda: BayesianMLPClassifier(
            **mlp784, compile=True, compile__mode="reduce-overhead").fit(X784, y784)
    return jobs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--top", type=int, default=30, help="functions listed from the profile")
    args = parser.parse_args(argv)
    device = args.device
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    cuda = device.startswith("cuda")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    path = os.path.join(os.environ.get("OUT", "."), f"diag_{device.split(':')[0]}.txt")
    open(path, "w").close()

    def report(lines):  # printed and written job by job: a run cut short keeps what it measured
        text = "\n".join(lines)
        print(text, flush=True)
        with open(path, "a") as fh:
            fh.write(text + "\n")

    if cuda:  # torch's own messages, on stderr: CUDA graphs skipped or recorded again, recompilations
        torch._logging.set_logs(cudagraphs=True, perf_hints=True, recompiles=True)
    clock = SecondHalfClock(sync)
    for name, fit in fits(device, clock).items():
        fit()  # warm: the first fit pays for the allocator, cuBLAS's handles, the kernels' first loads
        sync()
        t0 = time.perf_counter()
        est = fit()
        sync()
        seconds = time.perf_counter() - t0
        steps = est.sampler_state_.step
        lines = [f"== {name}: {seconds:.2f} s, {steps} steps, {1e6 * seconds / steps:.0f} us/step over the fit, "
                 f"{clock.us_per_step():.0f} us/step over its second half; compiled: "
                 f"{est.fit_status_.get('compiled')}, {est.diagnostics_.get('compile_seconds', 0.0):.1f} s"]
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    fit()
            finally:
                torch.cuda.set_sync_debug_mode(0)
            # (this script's own synchronisations, the clock's, are not the fit's)
            sites = collections.Counter(f"{os.path.relpath(w.filename)}:{w.lineno}" for w in caught
                                        if "synchroniz" in str(w.message)
                                        and os.path.abspath(w.filename) != os.path.abspath(__file__))
            total = sum(sites.values())
            lines.append(f"   synchronising calls: {total} ({total / steps:.3f} per step)")
            lines += [f"   sync {count:6d} {site}" for site, count in sites.most_common(25)]
        profile = cProfile.Profile()
        profile.enable()
        fit()
        sync()
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
        report(lines + [text.getvalue()])
    if cuda:
        from torch._dynamo.utils import counters

        report([f"== compiler counters: inductor {dict(counters['inductor'])}, stats {dict(counters['stats'])}",
                cuda_graph_trees()])


def cuda_graph_trees() -> str:
    """What torch's CUDA graph trees did (private state, read defensively): graphs recorded, warm-up (eager) runs,
    re-recordings per node, whether a function mutates inputs the trees do not manage (which runs it without
    graphs), and whether forwards wait on pending backwards (which stops new generations)."""
    try:
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
        if manager is None:
            return "== CUDA graph trees: none created"
        mutation = {str(node): dict(hints) for node, hints in manager.non_cudagraph_managed_mutation_hint.items()}
        rerecords = {str(node): dict(counts) for node, counts in manager.num_rerecord.items()}
        return (f"== CUDA graph trees: graph ids {manager.graph_counter!r}, warm-up ids "
                f"{manager.warmup_node_counter!r}, re-recordings {rerecords}, unmanaged input mutation {mutation}, "
                f"pending backwards {manager.running_forwards_with_pending_backwards}")
    except Exception as exc:  # private API: report, never fail the run
        return f"== CUDA graph trees: not read ({type(exc).__name__}: {exc})"


if __name__ == "__main__":
    main()
