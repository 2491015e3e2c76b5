"""What compiling the whole sampler transition buys on the CPU (issue 15 item 1): the measurement behind the route.

One SGHMC transition of a batched MLP potential (Chen et al. 2014 eq. 15, the update our ``sghmc`` kernel makes
with a frozen diagonal mass), written once as a pure function of (positions, momenta, noise, batch): the gradient
by ``torch.func.grad_and_value``, the friction, kick, noise and drift. It runs

* eagerly (``torch.autograd.grad`` and in-place updates, as our kernels do), and
* compiled whole by ``torch.compile(fullgraph=True)`` (TorchInductor's C++ backend on the CPU),

with the same noise tensors, so the two must agree within float tolerance (checked after 10 steps, printed).
Also timed: ``torch.compile`` of the data term alone, the narrower route (the forward and backward compiled,
``autograd.grad`` and the update eager). Printed per shape: the eager and compiled step times (medians of
alternating repeats), their ratio, and the compile time, from which the steps a run needs to repay it follow.

    python benchmarks/compile_step.py            # the issue's shapes
    python benchmarks/compile_step.py --quick    # one shape, fewer steps
    python benchmarks/compile_step.py --estimator sghmc baoab eqn   # the library's own compiled path

``--estimator`` times, instead, a whole fit's step of ``BayesianMLPClassifier`` (breast cancer, 16 hidden units,
batch 64, the hierarchical prior, 200 warm-up steps and 1,500 sampling steps) with ``compile=False`` and
``compile=True``, for each named sampler with 1 and 16 chains (pt-langevin: full batch, 10 replicas a
chain): medians over the sampling phase's steps (its first
300 left out), two alternating fits each, and the first fit's compile time (tacthmc: 30 draws, one every 50 steps
on the plateau, about 1,500 sampling steps; its prior is the fan-in one, as for every sampler that tempers; hmc:
600 transitions of about 20 leapfrog steps on the full batch, its compiled unit the leapfrog step).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def make_potential(n_in: int, hidden: int, n_out: int, batch: int, members: int, n_data: int = 1000):
    """A batched MLP potential ``U(theta) = -(N / B) sum log p(y | x, theta) + |theta|^2 / 2`` of ``members``
    members, as a pure function of the parameter list, and a batch."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(batch, n_in, generator=gen)
    y = torch.randint(0, n_out, (batch,), generator=gen)
    params = [torch.randn(members, hidden, n_in, generator=gen) / n_in ** 0.5, torch.zeros(members, hidden),
              torch.randn(members, n_out, hidden, generator=gen) / hidden ** 0.5, torch.zeros(members, n_out)]

    def potential(ps, X, y):
        W1, b1, W2, b2 = ps
        h = torch.relu(torch.baddbmm(b1.unsqueeze(1), X.expand(members, *X.shape), W1.transpose(1, 2)))
        out = torch.baddbmm(b2.unsqueeze(1), h, W2.transpose(1, 2))
        nll = torch.nn.functional.cross_entropy(out.reshape(-1, n_out), y.repeat(members), reduction="sum")
        prior = 0.5 * sum((p * p).sum() for p in ps)
        return (n_data / batch) * nll + prior

    return potential, params, (X, y)


def transitions(potential, step_size: float = 1e-4, friction: float = 0.05):
    """The SGHMC transition, eager and functional (to compile)."""
    grad_and_value = torch.func.grad_and_value(potential)

    def functional(ps, ms, noise, X, y):
        g, u = grad_and_value(ps, X, y)
        ms = [(1.0 - friction) * m - step_size * gi + n for m, gi, n in zip(ms, g, noise)]
        return [p + m for p, m in zip(ps, ms)], ms, u

    def eager(ps, ms, noise, X, y):
        ps = [p.detach().requires_grad_(True) for p in ps]
        u = potential(ps, X, y)
        g = torch.autograd.grad(u, ps)
        with torch.no_grad():
            ms = [m.clone() for m in ms]
            for m, gi, n in zip(ms, g, noise):
                m.mul_(1.0 - friction).add_(gi, alpha=-step_size).add_(n)
            ps = [p.detach() + m for p, m in zip(ps, ms)]
        return ps, ms, u.detach()

    return eager, functional


def timed(fn, state, noise, batch, steps: int) -> float:
    ps, ms = state
    start = time.perf_counter()
    for _ in range(steps):
        ps, ms, _ = fn(ps, ms, noise, *batch)
    return (time.perf_counter() - start) / steps * 1e3


def run_shape(n_in, hidden, n_out, batch, members, steps, repeats):
    potential, params, data = make_potential(n_in, hidden, n_out, batch, members)
    eager, functional = transitions(potential)
    gen = torch.Generator().manual_seed(1)
    noise = [1e-3 * torch.randn(p.shape, generator=gen) for p in params]
    momenta = [torch.zeros_like(p) for p in params]
    t0 = time.perf_counter()
    compiled = torch.compile(functional, fullgraph=True, dynamic=False)
    compiled(params, momenta, noise, *data)
    compile_s = time.perf_counter() - t0
    # equality: 10 steps from the same start with the same noise (over many more, a chain's sensitivity to its
    # start amplifies float32's rounding differences, in either path alike)
    a = b = (params, momenta)
    for _ in range(10):
        a = eager(*a, noise, *data)[:2]
        b = compiled(*b, noise, *data)[:2]
    err = max(float((x - y).abs().max() / (x.abs().max() + 1e-12)) for x, y in zip(a[0], b[0]))
    assert all(torch.isfinite(x).all() for x in a[0]), "the eager chain left the finite numbers: lower step_size"
    e_times, c_times = [], []
    for _ in range(repeats):  # alternating, so that a busy machine slows both alike
        e_times.append(timed(eager, (params, momenta), noise, data, steps))
        c_times.append(timed(compiled, (params, momenta), noise, data, steps))
    e, c = statistics.median(e_times), statistics.median(c_times)
    gain = (e - c) / 1e3
    repay = f"{compile_s / gain:,.0f}" if gain > 0 else "never"
    return (f"| {n_in}-{hidden}-{n_out} | {batch} | {members} | {e:.3f} | {c:.3f} | {e / c:.2f}x | {compile_s:.1f} | "
            f"{repay} | {err:.1e} |")


def estimator_step(sampler: str, chains: int) -> str:
    """A whole fit's step, eager and compiled, for one of the library's samplers (``--estimator``)."""
    import warnings

    import numpy as np
    from sklearn.datasets import load_breast_cancer
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.preprocessing import StandardScaler

    import bayesnet.estimators.base as base
    from bayesnet import BayesianMLPClassifier

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X).astype("float32")
    stamps: list[float] = []
    original = base.BayesianNeuralNet.train_step

    def stamped(self, *args, **kwargs):
        stamps.append(time.perf_counter())
        return original(self, *args, **kwargs)

    base.BayesianNeuralNet.train_step = stamped
    times = {False: [], True: []}
    compile_s = []
    # tacthmc collects a draw every 50 steps on the plateau (about 1,500 steps for 30 draws); the others every 10th
    # hmc's steps are transitions of about 20 leapfrog steps each, on the full batch (its exact test)
    draws = {"tacthmc": dict(n_draws=30, thinning=1), "hmc": dict(n_draws=60, thinning=10, batch_size=-1),
             "pt-langevin": dict(n_draws=150, thinning=10, batch_size=-1)}.get(
        sampler, dict(n_draws=150, thinning=10))
    try:
        for compiled in (False, True, False, True):
            stamps.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est = BayesianMLPClassifier(**{**dict(hidden_layer_sizes=(16,), sampler=sampler, burn_in=200,
                                                      n_chains=chains, batch_size=64, random_state=0,
                                                      compile=compiled), **draws}).fit(X, y)
            times[compiled].append(float(np.median(np.diff(stamps)[500:])) * 1e3)
            if compiled:
                compile_s.append(est.compiled_step_.compile_seconds)
                assert est.fit_status_["compiled"] == "compiled", est.fit_status_["compiled"]
    finally:
        base.BayesianNeuralNet.train_step = original
    e, c = statistics.mean(times[False]), statistics.mean(times[True])
    return f"| {sampler} | {chains} | {e:.3f} | {c:.3f} | {e / c:.2f}x | {compile_s[0]:.1f} |"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one shape, fewer steps")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--estimator", nargs="+", metavar="SAMPLER",
                        help="time a whole fit's step, eager and compiled, for these samplers instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.estimator:
        print("| sampler | chains | eager ms/step | compiled ms/step | speed-up | first compile s |")
        print("|---|---|---|---|---|---|")
        for sampler in args.estimator:
            for chains in (1, 16):
                print(estimator_step(sampler, chains), flush=True)
        return
    shapes = [(30, 16, 2, 64, 1)] if args.quick else [(784, 100, 10, 128, 1), (30, 16, 2, 64, 1), (30, 16, 2, 64, 16),
                                                      (30, 16, 2, 64, 64)]
    steps, repeats = (100, 3) if args.quick else (300, 5)
    print("| MLP | batch | chains | eager ms/step | compiled ms/step | speed-up | compile s | steps to repay | "
          "max rel. diff after 10 steps |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        print(run_shape(*shape, steps=steps, repeats=repeats), flush=True)


if __name__ == "__main__":
    main()
