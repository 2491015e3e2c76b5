"""Cost of the recurrent network (``bayesnet.networks.RNN``): fused kernels, batched cells and ``nn.LSTM``.

What is measured
----------------
The default recurrent estimator's network (one LSTM or GRU layer of 128 units,
ReLU, dense 64, 2 outputs) on GunPoint-like data: 150 steps of one feature,
mini-batches of 128 rows of random float32 data, on the CPU.

step
    One ``sghmc`` step (the estimators' default sampler) of ``S`` members
    (chains) through :class:`bayesnet.posterior.ChainPosterior` with the
    estimators' categorical likelihood and Gaussian prior: network forward,
    potential, backward, prior gradient, update, noise. Timed for both
    implementations of ``RNN.forward_chains``:

    - ``fused``: PyTorch's fused LSTM/GRU op once per member, on the member's
      own weight tensors (slices of the packed ``(S, ...)`` leaves);
    - ``batched``: the cells written out as batched matrix products for all
      members at once.

    ``kernel="auto"`` runs the one that ``RNN.kernel_for`` names (printed).
nn.LSTM
    The peer: ``S`` separate ``nn.LSTM``/``nn.GRU`` modules plus the same dense
    head, each a forward, the same potential (cross-entropy sum scaled to the
    data set, Gaussian prior) and ``torch.autograd.grad``: no sampler update.
    The issue's target is a one-chain step of the default estimator at most
    1.5x this.
estimator
    ``BayesianRNNClassifier().fit`` with the defaults apart from a short run
    (``--estimator-steps`` steps, one chain): CPU seconds of the whole fit
    divided by its sampler steps, setup included.
predict
    ``--predict-draws`` posterior draws (default 200) on ``--predict-rows``
    rows (default 1000) without autograd, in the row and draw blocks the
    estimators use (``PosteriorPredictive.block_shape``: one draw per block at
    this size), by the fused kernel (a loop over draws) and by the batched
    cells.
grid (``--grid``)
    The measurement behind ``RNN.kernel_for``: batched / fused time of a
    forward (with and without autograd, the backward included with it) over
    hidden sizes, rows, steps and members.

Method
------
One intra-op thread (``--threads``), CPU time of this process
(``time.process_time``; ``--clock wall`` for wall time). Variants are run in
interleaved rounds (a round runs each once, in an order rotated from round to
round); printed are medians over rounds, and ratios are medians of the
ratios formed within each round, so that a slow stretch of a shared machine
affects both sides alike. Before timing, both kernels are checked against the
reference modules (outputs and gradients).

    python benchmarks/rnn_speed.py                     # LSTM and GRU, S = 1, 4, 16, prediction; ~15 minutes
    python benchmarks/rnn_speed.py --cells lstm --chains 1 --no-predict --no-estimator   # the target, ~1 minute
    python benchmarks/rnn_speed.py --grid               # the kernel rule's measurement
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.exceptions import ConvergenceWarning
from torch import nn

from bayesnet.likelihoods import CategoricalLikelihood
from bayesnet.networks import RNN
from bayesnet.posterior import ChainPosterior
from bayesnet.priors import GaussianPrior
from bayesnet.samplers import make_sampler

STEPS, FEATURES, HIDDEN, DENSE, CLASSES = 150, 1, 128, (64,), 2
BATCH, N_DATA = 128, 512


def clock_fn(name):
    return time.process_time if name == "process" else time.perf_counter


def interleaved(variants: dict, rounds: int, clock, inner: int = 1, warm_up: bool = True):
    """Seconds per call of every variant in each of ``rounds`` interleaved rounds (a list of dicts)."""
    for fn in variants.values() if warm_up else ():
        fn()
    names = list(variants)
    per_round = []
    for r in range(rounds):
        times = {}
        for name in names[r % len(names):] + names[: r % len(names)]:
            t0 = clock()
            for _ in range(inner):
                variants[name]()
            times[name] = (clock() - t0) / inner
        per_round.append(times)
    return per_round


def med(per_round, name):
    return statistics.median(t[name] for t in per_round)


def ratio(per_round, num, den):
    return statistics.median(t[num] / t[den] for t in per_round)


def reference_module(cell):
    rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(FEATURES, HIDDEN, batch_first=True)
    layers, width = [], HIDDEN
    for d in DENSE:
        layers += [nn.Linear(width, d), nn.ReLU()]
        width = d
    return rnn, nn.Sequential(*layers, nn.Linear(width, CLASSES))


def reference_potential(rnn, head, X, y):
    """``N/|B| * CE sum + 0.5 * |theta|^2``: the potential the estimators' ChainPosterior computes."""
    params = [*rnn.parameters(), *head.parameters()]
    logits = head(torch.relu(rnn(X)[0][:, -1]))
    u = (N_DATA / X.shape[0]) * F.cross_entropy(logits, y, reduction="sum") + 0.5 * sum((p * p).sum() for p in params)
    return u, params


def pinned(module, kernel):
    """``module`` whose forward_chains always runs ``kernel`` (an instance attribute shadows the method)."""
    module.forward_chains = functools.partial(RNN.forward_chains, module, kernel=kernel)
    return module


def check_kernels(cell):
    """Largest difference of either kernel from nn.LSTM/nn.GRU: outputs and gradients, two members."""
    torch.manual_seed(0)
    net = RNN(FEATURES, CLASSES, HIDDEN, dense_layer_sizes=DENSE, cell=cell)
    X = torch.randn(16, STEPS, FEATURES)
    refs = [reference_module(cell) for _ in range(2)]
    names = [n for n, _ in net.named_parameters()]
    ref_params = [[*r.parameters(), *h.parameters()] for r, h in refs]
    packed = [torch.stack([ps[k].detach() for ps in ref_params]) for k in range(len(names))]
    worst = 0.0
    for kernel in ("fused", "batched"):
        leaves = [p.clone().requires_grad_(True) for p in packed]
        out = net.forward_chains(leaves, X, kernel=kernel)
        grads = torch.autograd.grad(out.sum(), leaves)
        for s, (rnn, head) in enumerate(refs):
            ref = head(torch.relu(rnn(X)[0][:, -1]))
            ref_grads = torch.autograd.grad(ref.sum(), ref_params[s])
            worst = max(worst, float((out[s] - ref).detach().abs().max()),
                        *(float((g[s] - r).abs().max()) for g, r in zip(grads, ref_grads)))
    return worst


def step_table(cell, chains, rounds, clock):
    torch.manual_seed(0)
    gen_data = torch.Generator().manual_seed(1)
    X = torch.randn(BATCH, STEPS, FEATURES, generator=gen_data)
    y = torch.randint(0, CLASSES, (BATCH,), generator=gen_data)
    rows = []
    for S in chains:
        template = RNN(FEATURES, CLASSES, HIDDEN, dense_layer_sizes=DENSE, cell=cell)
        members = [list(RNN(FEATURES, CLASSES, HIDDEN, dense_layer_sizes=DENSE, cell=cell).parameters())
                   for _ in range(S)]
        sampler = make_sampler("sghmc", step_size=1e-6)
        variants = {}
        for kernel in ("fused", "batched"):
            posterior = ChainPosterior(pinned(RNN(FEATURES, CLASSES, HIDDEN, dense_layer_sizes=DENSE, cell=cell),
                                              kernel), CategoricalLikelihood(), GaussianPrior(1.0), N_DATA, members)
            gen = torch.Generator().manual_seed(0)
            state = sampler.init(posterior.parameters, gen, n_chains=S)
            variants[kernel] = functools.partial(sampler.step, state, posterior, (X, y))
        refs = [reference_module(cell) for _ in range(S)]

        def peer():
            for rnn, head in refs:
                u, params = reference_potential(rnn, head, X, y)
                torch.autograd.grad(u, params)

        variants["nn"] = peer
        per_round = interleaved(variants, rounds, clock)
        auto = template.kernel_for(S, BATCH, grad=True)
        rows.append((S, auto, {k: med(per_round, k) for k in variants},
                     {k: ratio(per_round, k, "nn") for k in ("fused", "batched")}))
    return rows


def estimator_step(cell, steps, clock):
    from bayesnet import BayesianRNNClassifier

    rng = np.random.default_rng(0)
    X = rng.standard_normal((N_DATA, STEPS)).astype(np.float32)
    y = rng.integers(0, CLASSES, N_DATA)
    est = BayesianRNNClassifier(cell=cell, batch_size=BATCH, n_draws=max(1, steps // 2), burn_in=steps // 2,
                                thinning=1, random_state=0)
    t0 = clock()
    with warnings.catch_warnings():  # a run this short cannot settle its warm-up: it is only timed
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    return (clock() - t0) / est.diagnostics_["n_steps"]


def predict_table(cell, n_draws, n_rows, rounds, clock):
    from bayesnet.predictive import PosteriorPredictive

    torch.manual_seed(0)
    net = RNN(FEATURES, CLASSES, HIDDEN, dense_layer_sizes=DENSE, cell=cell)
    draws = [torch.stack([p.detach() + 0.01 * torch.randn_like(p) for _ in range(n_draws)]) for p in net.parameters()]
    X = torch.randn(n_rows, STEPS, FEATURES)
    predictive = PosteriorPredictive(net, [n for n, _ in net.named_parameters()], draws, "cpu")
    block_draws, block_rows = predictive.block_shape(n_rows, predictive.activations_per_row((STEPS, FEATURES)))

    def predict(kernel, n_draws=n_draws):
        with torch.no_grad():
            for lo in range(0, n_rows, block_rows):
                for d in range(0, n_draws, block_draws):
                    net.forward_chains([p[d: d + block_draws] for p in draws], X[lo: lo + block_rows], kernel=kernel)

    for kernel in ("fused", "batched"):  # warm-up: one block
        predict(kernel, n_draws=block_draws)
    per_round = interleaved({k: functools.partial(predict, k) for k in ("fused", "batched")}, rounds, clock,
                            warm_up=False)
    return (block_draws, block_rows), {k: med(per_round, k) for k in ("fused", "batched")}, \
        ratio(per_round, "batched", "fused")


def grid(cells, rounds, clock):
    print("\nbatched / fused time of forward_chains (x < 1: batched faster); members S, rows n, hidden H, steps T")
    print(f"{'cell':>4} {'autograd':>8} {'H':>4} {'n':>5} {'T':>4} {'n*H':>6} |"
          + "".join(f" {'S=' + str(S):>7}" for S in (1, 4, 16, 64)) + " | fused ms at S=1")
    for cell in cells:
        for grad in (True, False):
            for H, n, T in ((8, 64, 10), (8, 64, 150), (8, 256, 30), (32, 64, 30), (32, 128, 150),
                            (64, 128, 150), (128, 16, 150), (128, 128, 30), (128, 128, 150)):
                net = RNN(1, 2, hidden_size=H, cell=cell)
                X = torch.randn(n, T, 1)
                cells, base = [], None
                for S in (1, 4, 16, 64):
                    ps = [(0.1 * torch.randn(S, *p.shape)).requires_grad_(grad) for p in net.parameters()]

                    def run(kernel, ps=ps):
                        with torch.set_grad_enabled(grad):
                            out = net.forward_chains(ps, X, kernel=kernel)
                            if grad:
                                torch.autograd.grad(out.sum(), ps)

                    per_round = interleaved({k: functools.partial(run, k) for k in ("fused", "batched")}, rounds,
                                            clock)
                    cells.append(ratio(per_round, "batched", "fused"))
                    base = base if base is not None else 1e3 * med(per_round, "fused")
                print(f"{cell:>4} {str(grad):>8} {H:4d} {n:5d} {T:4d} {n * H:6d} |"
                      + "".join(f" {c:7.2f}" for c in cells) + f" | {base:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("process", "wall"), default="process")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cells", nargs="+", default=["lstm", "gru"], choices=["lstm", "gru"])
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--no-estimator", dest="estimator", action="store_false")
    ap.add_argument("--estimator-steps", type=int, default=40)
    ap.add_argument("--no-predict", dest="predict", action="store_false")
    ap.add_argument("--predict-draws", type=int, default=200)
    ap.add_argument("--predict-rows", type=int, default=1000)
    ap.add_argument("--predict-rounds", type=int, default=1)
    ap.add_argument("--grid", action="store_true", help="only the kernel rule's grid")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    clock = clock_fn(args.clock)
    unit = "CPU-s" if args.clock == "process" else "s"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.clock} time, medians of "
          f"{args.rounds} interleaved rounds; hidden {HIDDEN}, dense {DENSE}, T={STEPS}, batch {BATCH}")
    if args.grid:
        grid(args.cells, args.rounds, clock)
        return
    for cell in args.cells:
        print(f"\n{cell.upper()}: both kernels against nn.{cell.upper()}: max |difference| {check_kernels(cell):.1e}")
        print(f"one sghmc step of S chains ({unit}) against S nn.{cell.upper()} forward+backward")
        print(f"{'S':>3} | {'fused':>7} | {'batched':>7} | {'nn':>7} | {'fused/nn':>8} | {'batched/nn':>10} | auto")
        for S, auto, t, r in step_table(cell, args.chains, args.rounds, clock):
            print(f"{S:3d} | {t['fused']:7.3f} | {t['batched']:7.3f} | {t['nn']:7.3f} | {r['fused']:8.2f} | "
                  f"{r['batched']:10.2f} | {auto}", flush=True)
        if args.estimator:
            per_step = estimator_step(cell, args.estimator_steps, clock)
            print(f"BayesianRNNClassifier(cell={cell!r}).fit, one chain: {per_step:.3f} {unit} per sampler step "
                  f"({args.estimator_steps} steps, setup included)", flush=True)
        if args.predict:
            block, t, r = predict_table(cell, args.predict_draws, args.predict_rows, args.predict_rounds, clock)
            print(f"predict {args.predict_draws} draws x {args.predict_rows} rows (blocks of {block[0]} draw(s) x "
                  f"{block[1]} rows): fused {t['fused']:.2f} {unit}, batched {t['batched']:.2f} {unit}, "
                  f"batched/fused {r:.2f}", flush=True)


if __name__ == "__main__":
    main()
