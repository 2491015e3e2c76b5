"""Cost of one gradient evaluation for R chains: a loop over R networks vs two vectorised forms.

The measurement behind the chain axis of issue 5 ("choose by measurement"):
for R independent chains of the same MLP, each on its own mini-batch, one
potential-and-gradient evaluation (the part of a sampler step that depends on
how chains are laid out) is timed as

loop
    R separate ``nn.Module`` copies, ``autograd.grad`` one after the other;
vmap
    the R parameter sets stacked on a leading axis, ``torch.func.vmap`` over
    ``torch.func.grad_and_value`` of a ``functional_call`` of one module;
batched
    the stacked parameters as leaf tensors used directly by a batched MLP
    (``torch.baddbmm``), one ``autograd.grad`` of the summed potentials.

The potential is the estimators' ``N/|S| * cross-entropy sum + Gaussian prior``.
All three compute the same numbers (checked). Printed: microseconds per
evaluation of all R chains and the speed-up over the loop.

A second table times what the estimators run: one whole ``sghmc`` step of R
chains through :class:`bayesnet.posterior.ChainPosterior` (the estimators'
potential, MLP batched products) against R single-chain steps one after the
other (R estimators' worth of work), on the device given by ``--device``
(``cuda`` where a GPU is lent).

    python benchmarks/chains_vectorised.py                 # 784-100-10 and 30-16-2 MLPs, R = 1, 4, 16
    python benchmarks/chains_vectorised.py --threads 1
    python benchmarks/chains_vectorised.py --device cuda   # on a GPU machine
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

N_DATA = 4096
BATCH = 128
PRIOR_VAR = 1.0


def make_mlp(sizes, seed):
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def potential(logits, y, params):
    return (N_DATA / BATCH) * F.cross_entropy(logits, y, reduction="sum") \
        + 0.5 * sum((p * p).sum() for p in params) / PRIOR_VAR


class Loop:
    def __init__(self, sizes, R):
        self.nets = [make_mlp(sizes, seed) for seed in range(R)]

    def __call__(self, X, y):
        out = []
        for r, net in enumerate(self.nets):
            params = list(net.parameters())
            u = potential(net(X[r]), y[r], params)
            out.append((u.detach(), torch.autograd.grad(u, params)))
        return out


class VMap:
    def __init__(self, sizes, R):
        nets = [make_mlp(sizes, seed) for seed in range(R)]
        self.base = nets[0]
        self.names = [n for n, _ in self.base.named_parameters()]
        self.params = {n: torch.stack([dict(net.named_parameters())[n].detach() for net in nets])
                       for n in self.names}

        def u(p, X, y):
            return potential(functional_call(self.base, p, (X,)), y, list(p.values()))

        self.fn = vmap(grad_and_value(u), in_dims=(0, 0, 0))

    def __call__(self, X, y):
        grads, values = self.fn(self.params, X, y)
        return values, grads


class Batched:
    def __init__(self, sizes, R):
        nets = [make_mlp(sizes, seed) for seed in range(R)]
        linears = [[m for m in net if isinstance(m, nn.Linear)] for net in nets]
        self.weights = [torch.stack([ls[i].weight.detach().T for ls in linears]).requires_grad_()
                        for i in range(len(linears[0]))]  # (R, in, out)
        self.biases = [torch.stack([ls[i].bias.detach() for ls in linears]).unsqueeze(1).requires_grad_()
                       for i in range(len(linears[0]))]  # (R, 1, out)
        self.params = [t for pair in zip(self.weights, self.biases) for t in pair]

    def __call__(self, X, y):
        h = X
        for i, (W, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, W)
            if i < len(self.weights) - 1:
                h = torch.relu(h)
        R = X.shape[0]
        ce = F.cross_entropy(h.reshape(-1, h.shape[-1]), y.reshape(-1), reduction="none").reshape(R, -1).sum(1)
        prior = sum((p * p).reshape(R, -1).sum(1) for p in self.params) / (2 * PRIOR_VAR)
        u = (N_DATA / BATCH) * ce + prior
        return u.detach(), torch.autograd.grad(u.sum(), self.params)


def check(sizes, R):
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(R, BATCH, sizes[0], generator=gen)
    y = torch.randint(0, sizes[-1], (R, BATCH), generator=gen)
    loop = Loop(sizes, R)(X, y)
    values, grads = VMap(sizes, R)(X, y)
    u_b, _ = Batched(sizes, R)(X, y)
    u_loop = torch.stack([u for u, _ in loop])
    g_first = torch.stack([g[0] for _, g in loop])
    return max(float((u_loop - values).abs().max() / u_loop.abs().max()),
               float((u_loop - u_b).abs().max() / u_loop.abs().max()),
               float((g_first - grads[next(iter(grads))]).abs().max() / g_first.abs().max()))


def time_variant(variant, X, y, repeats, inner=20):
    for _ in range(3):
        variant(X, y)
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            variant(X, y)
        per.append(1e6 * (time.perf_counter() - t0) / inner)
    return statistics.median(per)


def sampler_steps(sizes, R, device):
    """(vectorised, sequential) microseconds for one sghmc step of R chains through ChainPosterior."""
    from bayesnet.estimators.mlp import MLP
    from bayesnet.likelihoods import CategoricalLikelihood
    from bayesnet.posterior import ChainPosterior
    from bayesnet.priors import GaussianPrior
    from bayesnet.samplers import make_sampler

    torch.manual_seed(0)
    modules = [MLP(sizes[0], sizes[1:-1], sizes[-1]).to(device) for _ in range(R)]
    lik = CategoricalLikelihood()
    members = [list(m.parameters()) for m in modules]
    X = torch.randn(BATCH, sizes[0], device=device)
    y = torch.randint(0, sizes[-1], (BATCH,), device=device)
    sampler = make_sampler("sghmc", step_size=1e-5)
    gen = torch.Generator(device=device).manual_seed(0)
    together = ChainPosterior(modules[0], lik, GaussianPrior(1.0), N_DATA, members)
    state = sampler.init(together.parameters, gen, n_chains=R)
    apart = [ChainPosterior(modules[0], lik, GaussianPrior(1.0), N_DATA, [m]) for m in members]
    states = [sampler.init(p.parameters, gen, n_chains=1) for p in apart]

    def vectorised():
        sampler.step(state, together, (X, y))

    def sequential():
        for st, post in zip(states, apart):
            sampler.step(st, post, (X, y))

    def timed(fn):
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        return time_variant(lambda a, b: (fn(), sync()), None, None, 5)

    return timed(vectorised), timed(sequential)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, batch {BATCH} per chain, CPU; "
          "µs per evaluation of all R chains (median of repeats)")
    for sizes in ((784, 100, 10), (30, 16, 2)):
        print(f"\nMLP {'-'.join(map(str, sizes))}")
        print(f"{'R':>3} | {'loop µs':>9} | {'vmap µs':>9} | {'batched µs':>10} | {'loop/vmap':>9} | "
              f"{'loop/batched':>12} | max rel. diff")
        for R in args.chains:
            gen = torch.Generator().manual_seed(1)
            X = torch.randn(R, BATCH, sizes[0], generator=gen)
            y = torch.randint(0, sizes[-1], (R, BATCH), generator=gen)
            t = {name: time_variant(cls(sizes, R), X, y, args.repeats)
                 for name, cls in (("loop", Loop), ("vmap", VMap), ("batched", Batched))}
            print(f"{R:>3} | {t['loop']:9.0f} | {t['vmap']:9.0f} | {t['batched']:10.0f} | "
                  f"{t['loop'] / t['vmap']:9.2f} | {t['loop'] / t['batched']:12.2f} | {check(sizes, R):.1e}")
    print(f"\nOne sghmc step of R chains on {args.device} (ChainPosterior, as the estimators run it): µs")
    for sizes in ((784, 100, 10), (30, 16, 2)):
        print(f"\nMLP {'-'.join(map(str, sizes))}")
        print(f"{'R':>3} | {'vectorised µs':>13} | {'sequential µs':>13} | {'sequential/vectorised':>21}")
        for R in args.chains:
            vec, seq = sampler_steps(sizes, R, args.device)
            print(f"{R:>3} | {vec:13.0f} | {seq:13.0f} | {seq / vec:21.2f}")


if __name__ == "__main__":
    main()
