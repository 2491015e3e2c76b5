"""Ensemble quasi-Newton (eqn) on Gaussian models: Heber et al. 2020 (TATi) Fig. 13 at this machine's scale.

The model of Heber et al. 2020 (TATi) Sec. 5.3.2: a random symmetric matrix gives orthonormal
eigenvectors, and the covariance of the target has eigenvalues evenly spaced
in [1, 100] (endpoints included), so its "slow" directions have variance 100
and its fast ones variance 1. The potential is ``U(w) = w^T C^{-1} w / 2`` at
``T = 1``. (The paper writes the density as ``exp(-w^T C w)`` with ``C``'s
eigenvalues in [1, 100] but calls the large-eigenvalue directions the slow
ones, which holds when ``C`` is the covariance; that reading is used here.)

For each dimension and each number of walkers ``L`` the ``eqn`` sampler runs
with the paper's settings (step 0.125, friction 1, eta = 10; ``L = 1`` is plain
BAOAB) from exact draws of the target: ``covariance_interval`` steps with
``B = I`` (the walkers spread out independently), then ``--steps`` measured
steps. ``--series`` walker trajectories are run per ``L`` (``series / L``
chains of ``L`` walkers), so every row has the same amount of data. Printed
per ``L``: the integrated autocorrelation time (IAT, in steps; the
multi-chain estimate of ``bayesnet.diagnostics`` over all walkers' series) of
the projections on the four slowest and on the fastest eigenvector, its ratio
to ``L = 1``, the ratio of the mean IAT of the slow directions, and the
sample variance of the slowest projection over its true value (a bias check).
For BAOAB the slowest IAT is about ``2 gamma sigma^2 / eps = 1600`` steps: the
estimate needs ``--steps`` of several times that. A run whose walkers diverge is reported as such: the
preconditioner lowers the stable step to about
``1.5 / sqrt(lambda_max + eta D / (L - 1))`` (see ``EQN``), below 0.125 for
``D = 64`` and ``L = 4``.

Then the memory check: ``L = 8`` walkers of ``D = 1e5`` parameters on a
quadratic potential (float32), the bytes held by the sampler state (momenta,
cached gradients, snapshot, coefficients) against the positions' own bytes
and against one dense ``D x D`` matrix, and the time per step of ``eqn``
against ``baoab`` on the same packed positions.

    python benchmarks/eqn_gaussian.py                          # dims 4 and 64, ~2.5 minutes
    python benchmarks/eqn_gaussian.py --dims 4 --steps 4000    # quick look
    python benchmarks/eqn_gaussian.py --interval 100           # more frequent updates (biased in 64-D)
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

import bayesnet.samplers.eqn  # noqa: F401  (registers "eqn")
from bayesnet.diagnostics import integrated_autocorrelation_time
from bayesnet.posterior import FunctionPotential
from bayesnet.samplers import make_sampler


def random_covariance(dim: int, seed: int = 0):
    """Eigenvectors (columns, slowest first) and eigenvalues (descending) of the Sec. 5.3.2 covariance."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, dim))
    _, q = np.linalg.eigh(a + a.T)
    eig = np.linspace(100.0, 1.0, dim)
    return q, eig


def run(dim: int, L: int, n_series: int, steps: int, interval: int, eta: float, eps: float, friction: float,
        seed: int):
    q, eig = random_covariance(dim)
    cov = (q * eig) @ q.T
    prec = torch.tensor(np.linalg.inv(cov))
    C = max(1, n_series // L)
    rng = np.random.default_rng(seed + 1)
    start = torch.tensor(rng.multivariate_normal(np.zeros(dim), cov, size=C * L))
    pot = FunctionPotential(lambda p, b: 0.5 * torch.einsum("si,ij,sj->s", p[0], prec, p[0]), [start])
    sampler = make_sampler("eqn", step_size=eps, friction=friction, n_walkers=L, covariance_blending=eta,
                           covariance_interval=interval)
    gen = torch.Generator().manual_seed(seed)
    state = sampler.init(pot.parameters, gen, n_chains=C)
    cols = list(range(min(4, dim - 1))) + [dim - 1]
    basis = torch.tensor(q[:, cols])
    burn = interval if L > 2 else 0
    kept = []
    t0 = time.perf_counter()
    for k in range(burn + steps):
        state, _ = sampler.step(state, pot, None)
        if k >= burn:
            kept.append((pot.parameters[0].detach() @ basis).numpy())
    seconds = time.perf_counter() - t0
    proj = np.stack(kept, axis=1)  # (walkers, steps, directions)
    if not np.isfinite(proj).all():
        return None, None, seconds / (burn + steps)
    taus = [integrated_autocorrelation_time(proj[:, :, j]) for j in range(len(cols))]
    var_ratio = proj[:, :, 0].var() / eig[0]
    return taus, var_ratio, seconds / (burn + steps)


def memory_check(dim: int, L: int, steps: int = 5):
    gen = torch.Generator().manual_seed(0)
    scale = torch.linspace(0.01, 1.0, dim)

    def fn(p, b):
        return 0.5 * (scale * p[0] ** 2).sum(1)

    out = {}
    for name, params in (("baoab", {}), ("eqn", dict(n_walkers=L, covariance_interval=2))):
        pot = FunctionPotential(fn, [torch.randn(L, dim, generator=gen)])
        sampler = make_sampler(name, step_size=0.1, **params)
        state = sampler.init(pot.parameters, gen, n_chains=L if name == "baoab" else None)
        state, _ = sampler.step(state, pot, None)
        state, _ = sampler.step(state, pot, None)  # the preconditioner is built at step 2
        t0 = time.perf_counter()
        for _ in range(steps):
            state, _ = sampler.step(state, pot, None)
        ms = 1e3 * (time.perf_counter() - t0) / steps
        tensors = [v for v in vars(state).values() if isinstance(v, torch.Tensor)]
        for v in vars(state).values():
            if isinstance(v, list):
                tensors += [t for t in v if isinstance(t, torch.Tensor)]
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        largest = max(t.numel() for t in tensors)
        out[name] = (ms, nbytes, largest)
    pos_bytes = L * dim * 4
    print(f"\nmemory/time, L={L} walkers x D={dim} parameters "
          f"(float32; positions {pos_bytes / 2**20:.1f} MiB):")
    for name, (ms, nbytes, largest) in out.items():
        print(f"  {name:5s}: {ms:7.2f} ms/step, state {nbytes / 2**20:6.1f} MiB = {nbytes / pos_bytes:.2f} x "
              f"positions, largest tensor {largest} elements ({largest / (L * dim):.2f} L*D)")
    print(f"  one dense D x D matrix would take {dim * dim * 4 / 2**30:.1f} GiB; "
          f"peak RSS of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", type=int, nargs="+", default=[4, 64])
    ap.add_argument("--walkers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--steps", type=int, default=20000, help="measured steps per run (paper: 50,000)")
    ap.add_argument("--series", type=int, default=16, help="walker trajectories per L")
    ap.add_argument("--interval", type=int, default=1000, help="covariance_interval (paper: 1000)")
    ap.add_argument("--eta", type=float, default=10.0)
    ap.add_argument("--step-size", type=float, default=0.125)
    ap.add_argument("--friction", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (1: the tensors are small)")
    ap.add_argument("--memory-dim", type=int, default=100_000, help="D of the memory check (0 skips it)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"eps={args.step_size} gamma={args.friction} eta={args.eta} interval={args.interval} "
          f"steps={args.steps} series={args.series}")
    for dim in args.dims:
        print(f"\ndimension {dim}: IAT in steps (ratio to the first L); "
              "var = sample variance of the slowest projection / 100")
        n_slow = min(4, dim - 1)
        print(f"  {'L':>3s} " + " ".join(f"{'slow' + str(j + 1):>13s}" for j in range(n_slow))
              + f" {'fastest':>13s} {'slow mean':>9s} {'var':>6s} {'ms/step':>8s}")
        ref = None
        for L in args.walkers:
            taus, var_ratio, sec = run(dim, L, args.series, args.steps, args.interval, args.eta, args.step_size,
                                       args.friction, args.seed)
            if taus is None:
                print(f"  {L:3d} diverged: eps * sqrt(eta * D / (L - 1)) = "
                      f"{args.step_size * (args.eta * dim / max(L - 1, 1)) ** 0.5:.2f} (see EQN's step_size)")
                continue
            ref = taus if ref is None else ref
            cells = " ".join(f"{t:7.1f} ({t / r:4.2f})" for t, r in zip(taus, ref))
            slow = np.mean(taus[:n_slow]) / np.mean(ref[:n_slow])
            print(f"  {L:3d} {cells} {slow:9.2f} {var_ratio:6.3f} {1e3 * sec:8.3f}", flush=True)
    if args.memory_dim:
        memory_check(args.memory_dim, 8)


if __name__ == "__main__":
    main()
