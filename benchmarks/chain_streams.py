"""What per-chain random streams cost per sampler step (issue 12 item 3).

Every chain draws its noise from a stream of its own (:class:`bayesnet.samplers.ChainRandom`), so that how
chains are run never changes a chain. This times one whole sampler step of C vectorised chains of the
30-16-2 MLP through :class:`bayesnet.posterior.ChainPosterior` (the estimators' potential, batched products)
with three sources of noise, all behind the same ``ChainRandom`` interface, so that the step's code is the
same for all three:

shared
    one ``torch.Generator`` for all chains: each request is one ``randn``/``rand`` of ``(C, n)`` numbers,
    contiguous (what the samplers did before per-chain streams; chain k then depends on the chains beside it);
per-chain
    :class:`ChainRandom` as the estimators run it: one generator per chain, each filling a pool of its own
    numbers (``pool_size=16384``), a step taking a strided view of all pools;
per-chain, no pool
    ``ChainRandom(pool_size=0)``: every request is C ``randn`` calls of n numbers, one per chain's generator
    (what per-chain streams would cost without the pools).

The variants are timed in alternating rounds (the order rotated each round), each round ``--steps`` steps
per variant (several pool refills: with D = 530 parameters per chain a pool lasts 30 steps), and the table
prints the median over rounds of µs per step and of the per-round ratio to *shared*. A second table times the
noise request alone (``normal_flat``, as the integrators call it). Run it with one thread on an idle core
(``OMP_NUM_THREADS=1``), or with ``--clock process`` (this process's CPU time) on a busy one; the figures in
``benchmarks/README.md`` say on what machine they were taken.

    OMP_NUM_THREADS=1 python benchmarks/chain_streams.py                  # sgld and sghmc, C = 1, 4, 16
    OMP_NUM_THREADS=1 python benchmarks/chain_streams.py --clock process --rounds 41   # a shared machine
    python benchmarks/chain_streams.py --device cuda                      # on a GPU machine
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bayesnet.estimators.mlp import MLP
from bayesnet.likelihoods import CategoricalLikelihood
from bayesnet.posterior import ChainPosterior
from bayesnet.priors import GaussianPrior
from bayesnet.samplers import ChainLayout, ChainRandom, make_sampler
from bayesnet.samplers.integrators import normal_flat

SIZES = (30, 16, 2)
BATCH = 64
N_DATA = 4096
SEED = 0


class SharedStream(ChainRandom):
    """One ``torch.Generator`` for every chain: each request is one ``(C, n)`` draw (the baseline)."""

    def __init__(self, seed: int, n_chains: int, device="cpu"):
        super().__init__(seed, n_chains, device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def _draw(self, kind: str, n: int, dtype: torch.dtype) -> torch.Tensor:
        draw = torch.randn if kind == "normal" else torch.rand
        return draw((self.n_chains, int(n)), generator=self.generator, dtype=dtype, device=self.device)


VARIANTS = {
    "shared": lambda C, device: SharedStream(SEED, C, device),
    "per-chain": lambda C, device: ChainRandom(SEED, C, device),
    "per-chain, no pool": lambda C, device: ChainRandom(SEED, C, device, pool_size=0),
}


def make_stepper(sampler_name: str, C: int, device: str, variant: str):
    """A closure running ``n`` steps of ``C`` chains (own modules and state per variant)."""
    torch.manual_seed(0)
    modules = [MLP(SIZES[0], SIZES[1:-1], SIZES[-1]).to(device) for _ in range(C)]
    posterior = ChainPosterior(modules[0], CategoricalLikelihood(), GaussianPrior(1.0), N_DATA,
                               [list(m.parameters()) for m in modules])
    gen = torch.Generator(device=device).manual_seed(1)
    X = torch.randn(BATCH, SIZES[0], generator=gen, device=device)
    y = torch.randint(0, SIZES[-1], (BATCH,), generator=gen, device=device)
    sampler = make_sampler(sampler_name, step_size=1e-5)
    state = sampler.init(posterior.parameters, VARIANTS[variant](C, device), n_chains=C)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def run(n: int) -> None:
        for _ in range(n):
            sampler.step(state, posterior, (X, y))
        sync()

    return run


def make_noise(C: int, device: str, variant: str):
    """A closure making ``n`` noise requests of D numbers per chain, as one step of sgld or sghmc does."""
    rng = VARIANTS[variant](C, device)
    layout = ChainLayout(C, 1)
    D = sum(p.numel() for p in MLP(SIZES[0], SIZES[1:-1], SIZES[-1]).parameters())
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def run(n: int) -> None:
        for _ in range(n):
            normal_flat(rng, layout, C * D, torch.float32)
        sync()

    return run


def alternate(runs: dict, rounds: int, steps: int, clock=time.perf_counter) -> tuple[dict, dict]:
    """Median µs per step of each variant and median per-round ratio to the first, over rotated rounds."""
    names = list(runs)
    for run in runs.values():
        run(steps)  # warm up (first pool fill, allocator)
    per = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t0 = clock()
            runs[name](steps)
            per[name].append(1e6 * (clock() - t0) / steps)
    base = per[names[0]]
    us = {name: statistics.median(v) for name, v in per.items()}
    ratio = {name: statistics.median(a / b for a, b in zip(v, base)) for name, v in per.items()}
    return us, ratio


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samplers", nargs="+", default=["sgld", "sghmc"])
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--steps", type=int, default=128, help="steps per variant per round")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=["wall", "process"], default="wall",
                    help="process: this process's CPU time (one thread, a busy machine); never with a GPU")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "process" else time.perf_counter
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device {args.device}; MLP "
          f"{'-'.join(map(str, SIZES))}, batch {BATCH}; {args.clock} clock, median over {args.rounds} alternating "
          f"rounds of {args.steps} steps")
    names = list(VARIANTS)
    head = " | ".join(f"{n + ' µs':>22}" for n in names) + " | " + " | ".join(f"{n + ' / shared':>27}"
                                                                             for n in names[1:])
    print(f"\nOne sampler step of C chains\n{'sampler':>7} | {'C':>3} | {head}")
    for name in args.samplers:
        for C in args.chains:
            runs = {v: make_stepper(name, C, args.device, v) for v in names}
            us, ratio = alternate(runs, args.rounds, args.steps, clock)
            print(f"{name:>7} | {C:>3} | " + " | ".join(f"{us[v]:22.1f}" for v in names) + " | "
                  + " | ".join(f"{ratio[v]:27.3f}" for v in names[1:]), flush=True)
    print(f"\nThe noise request alone (normal_flat of D = 530 per chain)\n{'':>7} | {'C':>3} | {head}")
    for C in args.chains:
        runs = {v: make_noise(C, args.device, v) for v in names}
        us, ratio = alternate(runs, args.rounds, args.steps, clock)
        print(f"{'noise':>7} | {C:>3} | " + " | ".join(f"{us[v]:22.1f}" for v in names) + " | "
              + " | ".join(f"{ratio[v]:27.3f}" for v in names[1:]), flush=True)


if __name__ == "__main__":
    main()
