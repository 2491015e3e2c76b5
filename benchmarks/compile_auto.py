"""What ``compile="auto"`` does to a whole fit long enough for it to compile (issue 15): eager against "auto".

A ``BayesianMLPClassifier`` (784-100-10, sghmc, batch 128, one chain) on a synthetic ten-class problem (rows from
a standard normal, labels from a random linear teacher with Gumbel noise), with a burn-in of 2,000 steps and 100
draws spread over enough steps that the run after the warm-up reaches ``compile="auto"``'s threshold on the device
(:data:`~bayesnet.samplers.compiled.COMPILE_MIN_STEPS_CUDA` on a GPU, where it compiles with CUDA graphs;
:data:`~bayesnet.samplers.compiled.COMPILE_MIN_STEPS` on a CPU). Fitted with ``compile=False`` and
``compile="auto"`` in two alternating rounds, in one process, so that the second round's compiled fit finds its
compilation cached (as the fits of a grid search do). Printed per fit: the wall time, the steps, the decision
(``fit_status_["compiled"]``), the compilation's seconds and the training accuracy on 5,000 rows; then how far the
two fits' draws part (the first five draws, all draws; relative to the draws' largest magnitude).

    python benchmarks/compile_auto.py --device cuda      # about 3 minutes on an H200 (estimated from 18,095 steps)
    python benchmarks/compile_auto.py --quick            # a short smoke run (below the threshold: both eager)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch


def main(argv=None) -> int:
    from bayesnet import BayesianMLPClassifier
    from bayesnet.samplers.compiled import COMPILE_MIN_STEPS, COMPILE_MIN_STEPS_CUDA

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--steps", type=int, default=None,
                        help="steps of the draw phase (default: just above the device's threshold)")
    parser.add_argument("--quick", action="store_true", help="2,000 rows, 200 draw steps, one round")
    args = parser.parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    steps = args.steps or (200 if args.quick else (COMPILE_MIN_STEPS_CUDA if cuda else COMPILE_MIN_STEPS) + 1_000)
    rows = 2_000 if args.quick else args.rows
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, 784)).astype(np.float32)
    y = (X @ (rng.standard_normal((784, 10)) / 28) + rng.gumbel(size=(rows, 10))).argmax(1)
    params = dict(hidden_layer_sizes=(100,), sampler="sghmc", device=args.device, random_state=0,
                  burn_in=200 if args.quick else 2_000, n_draws=100, thinning=max(steps // 100, 1))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    draws = {}
    for rnd, order in enumerate([(False, "auto"), ("auto", False)][:1 if args.quick else 2]):
        for setting in order:
            sync()
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = BayesianMLPClassifier(compile=setting, **params).fit(X, y)
            sync()
            wall = time.perf_counter() - start
            accuracy = float((est.predict(X[:5000]) == y[:5000]).mean())
            seconds = getattr(est.compiled_step_, "compile_seconds", 0.0)
            print(f"round {rnd + 1} compile={setting!r}: {wall:.1f} s, {int(est.sampler_state_.step)} steps, "
                  f"{est.fit_status_['compiled']!r}, compiling {seconds:.1f} s, training accuracy {accuracy:.4f}",
                  flush=True)
            draws[rnd, setting] = est.trace_.as_array()
    for rnd in sorted({r for r, _ in draws}):
        a, b = draws[rnd, False], draws[rnd, "auto"]
        scale = np.abs(a).max()
        print(f"round {rnd + 1}: draws part by {np.abs(a - b)[:, :5].max() / scale:.2g} (first five), "
              f"{np.abs(a - b).max() / scale:.2g} (all), relative")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
