"""Prediction over posterior draws: one vectorised pass vs a loop that loads each draw into the network.

What is measured
----------------
A fitted ``BayesianMLPClassifier`` holds ``--draws`` (200) posterior draws
(a short SGLD run fills the trace; the draws' values do not matter for the
timing). ``predict_proba`` on ``--rows`` (10,000) rows is timed two ways on
``--device``:

vectorised
    the estimators' own path: the draws stacked on a leading axis and the
    network evaluated for all of them at once with ``torch.func.vmap`` over
    ``functional_call``, in row chunks that bound the activations held at once;
loop
    what a user without it writes: for each draw, ``load_state_dict`` of that
    draw into the module, a forward pass over all rows, softmax, running sum.

Both give the same probabilities (checked). Printed: milliseconds per call
(median of ``--repeats``) and the speed-up of the vectorised path, for two
networks: a 784-100-10 MLP and a 64-256-256-10 MLP.

    python benchmarks/predict_throughput.py
    python benchmarks/predict_throughput.py --device cuda     # on a GPU machine
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from bayesnet import BayesianMLPClassifier


def fitted(n_features, hidden, n_classes, n_draws, device, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(256, n_features)).astype(np.float32)
    y = rng.integers(0, n_classes, size=256)
    y[:n_classes] = np.arange(n_classes)
    return BayesianMLPClassifier(hidden, sampler="sgld", sampler__step_size=1e-6, n_draws=n_draws, burn_in=0,
                                 thinning=1, batch_size=256, device=device, random_state=seed).fit(X, y)


def loop_predict_proba(est, X):
    """One ``load_state_dict`` per draw, then a forward pass over all rows."""
    module = est.module_
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    draws = est._draw_parameters()
    Xt = torch.as_tensor(X, device=est.device_)
    total = None
    module.eval()
    with torch.no_grad():
        for d in range(len(est.trace_)):
            module.load_state_dict({n: p[d] for n, p in zip(names, draws)}, strict=False)
            proba = torch.softmax(module(Xt).double(), dim=-1)
            total = proba if total is None else total + proba
    est._sync_module()  # put the chain's current position back
    return (total / len(est.trace_)).cpu().numpy()


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
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={args.device}; predict_proba on "
          f"{args.rows} rows over {args.draws} draws, ms per call (median of {args.repeats})")
    print(f"{'network':>16} | {'vectorised ms':>13} | {'loop ms':>9} | {'loop/vectorised':>15} | max |diff|")
    for n_features, hidden, n_classes in ((784, (100,), 10), (64, (256, 256), 10)):
        est = fitted(n_features, hidden, n_classes, args.draws, args.device)
        X = np.random.default_rng(1).normal(size=(args.rows, n_features)).astype(np.float32)
        diff = np.abs(est.predict_proba(X) - loop_predict_proba(est, X)).max()
        vec = timed(lambda: est.predict_proba(X), args.repeats, sync)
        loop = timed(lambda: loop_predict_proba(est, X), args.repeats, sync)
        name = "-".join(map(str, (n_features, *hidden, n_classes)))
        print(f"{name:>16} | {vec:13.1f} | {loop:9.1f} | {loop / vec:15.2f} | {diff:.1e}")


if __name__ == "__main__":
    main()
