"""Prediction over posterior draws: one vectorised pass vs a loop that loads each draw into the network.

What is measured
----------------
For each network below, an estimator holds ``--draws`` (200) posterior
draws (a short SGLD run fills the trace; the draws' values do not matter for
the timing), and its prediction on ``--rows`` (10,000) rows is timed two ways
on ``--device``:

vectorised
    the estimators' own path (``predict_proba``, or ``predict`` for a
    regressor): the draws copied to the device once, stacked on a leading
    axis, and the network evaluated for all of them at once by its
    ``forward_chains`` (batched matrix products, grouped convolutions, the
    recurrence as batched products), in row chunks that bound the
    activations held at once, reduced to the Monte Carlo average chunk by
    chunk;
loop
    what a user without it writes: for each draw, ``load_state_dict`` of that
    draw into the module, a forward pass over all rows, softmax, running sum.

Both give the same predictions (checked, max |diff| printed). Printed:
milliseconds per call (median of ``--repeats``) and loop/vectorised, for
``--rows`` rows (bulk scoring) and for ``--small-rows`` (100) rows (a
request served online), where the loop's per-draw cost (``load_state_dict``
and one small call per layer per draw) is not hidden behind arithmetic.

Networks: the estimators' default architectures on the shapes this project
uses them for (MNIST-sized and tabular MLPs, the CNN on MNIST-1D signals and
on 8x8 digits, the RNN on Takens windows and on MNIST-1D sequences). The
LSTM-128 over 40 steps costs about 1.3 GFLOP per row and draw, so it runs on
``--rows // 10`` rows.

    python benchmarks/predict_throughput.py
    python benchmarks/predict_throughput.py --device cuda     # on a GPU machine
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from bayesnet import BayesianCNNClassifier, BayesianMLPClassifier, BayesianRNNClassifier, BayesianRNNRegressor

NETWORKS = [
    # name, estimator class, architecture, sample shape, classes (None: regression), row fraction
    ("mlp 784-100-10", BayesianMLPClassifier, dict(hidden_layer_sizes=(100,)), (784,), 10, 1),
    ("mlp 30-100-2", BayesianMLPClassifier, dict(hidden_layer_sizes=(100,)), (30,), 2, 1),
    ("cnn 1x40 (mnist1d)", BayesianCNNClassifier, dict(), (1, 40), 10, 1),
    ("cnn 1x8x8 (digits)", BayesianCNNClassifier, dict(), (1, 8, 8), 10, 1),
    ("gru-32 T=4 (takens)", BayesianRNNRegressor, dict(hidden_size=32, dense_layer_sizes=(16,), cell="gru"), (4, 1),
     None, 1),
    ("lstm-128 T=40", BayesianRNNClassifier, dict(), (40, 1), 10, 10),
]


def fitted(cls, arch, shape, n_classes, n_draws, device, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(256, *shape)).astype(np.float32)
    if n_classes is None:
        y = rng.normal(size=256)
    else:
        y = rng.integers(0, n_classes, size=256)
        y[:n_classes] = np.arange(n_classes)
    est = cls(**arch, sampler="sgld", sampler__step_size=1e-6, n_draws=n_draws, burn_in=0, thinning=1,
              batch_size=256, device=device, random_state=seed)
    with warnings.catch_warnings():  # a chain of burn_in=0 has not converged, and is not meant to: only timed
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y)


def loop_predict(est, X):
    """One ``load_state_dict`` per draw, then a forward pass over all rows; Monte Carlo average."""
    module = est.module_
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    draws = est._draw_parameters()
    Xt = torch.as_tensor(est._validate_X(X, reset=False), device=est.device_)  # shaped and standardised
    total = None
    regression = not hasattr(est, "classes_")
    module.eval()
    with torch.no_grad():
        for d in range(len(est.trace_)):
            module.load_state_dict({n: p[d] for n, p in zip(names, draws)}, strict=False)
            out = module(Xt)
            out = out.double() if regression else torch.softmax(out.double(), dim=-1)
            total = out if total is None else total + out
    est._sync_module()  # put the chain's current position back
    mean = (total / len(est.trace_)).cpu().numpy()
    if regression:
        return (mean * est.y_scale_ + est.y_mean_)[:, 0]
    return mean


def vectorised_predict(est, X):
    return est.predict(X) if not hasattr(est, "classes_") else est.predict_proba(X)


def timed(fn, repeats, sync):
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--small-rows", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", nargs="*", help="substrings of network names to run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {name}; prediction over {args.draws} draws, ms per call "
          f"(median of {args.repeats})")
    print(f"{'network':>20} | {'rows':>6} | {'vectorised ms':>13} | {'loop ms':>9} | {'loop/vectorised':>15} | max |diff|")
    for label, cls, arch, shape, n_classes, fraction in NETWORKS:
        if args.only and not any(s in label for s in args.only):
            continue
        est = fitted(cls, arch, shape, n_classes, args.draws, args.device)
        for rows in (args.rows // fraction, args.small_rows):
            X = np.random.default_rng(1).normal(size=(rows, *shape)).astype(np.float32)
            diff = np.abs(vectorised_predict(est, X) - loop_predict(est, X)).max()
            repeats = args.repeats if rows > args.small_rows else 3 * args.repeats
            vec = timed(lambda: vectorised_predict(est, X), repeats, sync)
            loop = timed(lambda: loop_predict(est, X), repeats, sync)
            print(f"{label:>20} | {rows:6d} | {vec:13.1f} | {loop:9.1f} | {loop / vec:15.2f} | {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
