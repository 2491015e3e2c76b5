"""Where ``compile="auto"``'s thresholds come from (issue 15): a whole fit, eager against compiled as "auto" compiles.

A ``BayesianMLPClassifier`` (784-100-10, sghmc, batch 128, one chain) on a synthetic ten-class problem (rows from
a standard normal, labels from a random linear teacher with Gumbel noise), with a burn-in of 2,000 steps and 100
draws spread over ``--steps`` steps (default 25,000). Fitted with ``compile=False`` and compiled the way
``compile="auto"`` compiles on the device (on a GPU with CUDA graphs, ``compile__mode="reduce-overhead"``; on a CPU
in torch's default mode), in two alternating rounds in one process: the first round's compiled fit compiles from a
cold cache, as a fit in a fresh process (a script, a grid search's worker) does, and the second finds its
compilation cached. Printed per fit: the wall time, the steps, the compilation's seconds and the training accuracy
on 5,000 rows; then how far the two fits' draws part (the first five draws, all draws; relative to the draws'
largest magnitude); last, what the compiled step saves per step (the eager fits' mean less the cached one, over the
steps after the warm-up), what a cold compilation costs (the cold fit less the cached one) and after how many steps
after the warm-up the cold one repays itself: :data:`~bayesnet.samplers.compiled.COMPILE_MIN_STEPS_CUDA` is that
figure on a GPU, from the slowest machine measured, rounded up (the CPU's
:data:`~bayesnet.samplers.compiled.COMPILE_MIN_STEPS` came from ``compile_step.py`` and lies above any default fit).

    python benchmarks/compile_auto.py --device cuda      # about 3.7 minutes on an H100
    python benchmarks/compile_auto.py --quick            # a short smoke run (one round, 200 steps)
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
    parser.add_argument("--steps", type=int, default=25_000, help="steps of the draw phase (default 25,000)")
    parser.add_argument("--quick", action="store_true", help="2,000 rows, 200 draw steps, one round")
    args = parser.parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    steps = 200 if args.quick else args.steps
    rows = 2_000 if args.quick else args.rows
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, 784)).astype(np.float32)
    y = (X @ (rng.standard_normal((784, 10)) / 28) + rng.gumbel(size=(rows, 10))).argmax(1)
    params = dict(hidden_layer_sizes=(100,), sampler="sghmc", device=args.device, random_state=0,
                  burn_in=200 if args.quick else 2_000, n_draws=100, thinning=max(steps // 100, 1))
    # what "auto" compiles with past its threshold (compile_decision): CUDA graphs on a GPU, the default mode on a CPU
    compiled = dict(compile=True, **({"compile__mode": "reduce-overhead"} if cuda else {}))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    draws, walls, after = {}, {}, 0
    for rnd, order in enumerate([("eager", "compiled"), ("compiled", "eager")][:1 if args.quick else 2]):
        for setting in order:
            sync()
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = BayesianMLPClassifier(**(compiled if setting == "compiled" else {"compile": False}),
                                            **params).fit(X, y)
            sync()
            walls[rnd, setting] = wall = time.perf_counter() - start
            accuracy = float((est.predict(X[:5000]) == y[:5000]).mean())
            seconds = getattr(est.compiled_step_, "compile_seconds", 0.0)
            total = int(est.sampler_state_.step)
            after = total - int(est.sampler_.adaptation_length())  # the steps the compiled step ran
            print(f"round {rnd + 1} {setting}: {wall:.1f} s, {total} steps, {est.fit_status_['compiled']!r}, "
                  f"compiling {seconds:.1f} s, training accuracy {accuracy:.4f}", flush=True)
            draws[rnd, setting] = est.trace_.as_array()
    for rnd in sorted({r for r, _ in draws}):
        a, b = draws[rnd, "eager"], draws[rnd, "compiled"]
        scale = np.abs(a).max()
        print(f"round {rnd + 1}: draws part by {np.abs(a - b)[:, :5].max() / scale:.2g} (first five), "
              f"{np.abs(a - b).max() / scale:.2g} (all), relative")
    if len(walls) == 4:
        eager = (walls[0, "eager"] + walls[1, "eager"]) / 2
        saving = (eager - walls[1, "compiled"]) / after  # seconds a compiled step saves
        cold = walls[0, "compiled"] - walls[1, "compiled"]  # the cold compilation and the graphs' setup
        repaid = f"after about {cold / saving:,.0f} steps after the warm-up" if saving > 0 else "never: no saving"
        print(f"saving {saving * 1e3:.3f} ms a step ({after} steps after the warm-up), cold compilation {cold:.1f} s: "
              f"repaid {repaid}; the threshold on this device: "
              f"{COMPILE_MIN_STEPS_CUDA if cuda else COMPILE_MIN_STEPS:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
