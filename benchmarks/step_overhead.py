"""Per-step overhead of the SG-MCMC samplers, against hand-written torch loops.

What is measured
----------------
For each sampler (SGLD, SGHMC, SGNHT, BAOAB, HMC, TACT-HMC) and one network, a 784-100-10 ReLU MLP trained
with mini-batches of 128 rows of random data (4096 rows, 784 features in
[0, 1), 10 classes, float32) on the CPU, the time of one step (wall clock by
default) of:

kernel
    The bare sampling kernel: ``sampler = make_sampler(name, ...)``,
    ``state = sampler.init(posterior.parameters, gen)`` and a loop of
    ``sampler.step(state, posterior, batch)`` with
    ``posterior = Posterior(module, CategoricalLikelihood(), GaussianPrior(1.0),
    n_data=N)``. This includes the potential's forward/backward and whatever
    the kernel adds (diagnostics in :class:`~bayesnet.samplers.StepInfo`,
    e.g. SGHMC's kinetic energy).
estimator
    ``BayesianMLPClassifier(...).fit(X, y)``: total wall time of a fresh fit
    divided by the number of sampler steps it ran (read from the skorch
    history). Nothing is subtracted, so this includes the one-off setup
    (input validation, building the network, skorch initialisation) and the
    per-step bookkeeping of the estimator (skorch callbacks and history,
    ``float()`` of the diagnostics, the trace). The number of steps is chosen
    large enough that the setup is a small fraction.
hand-written
    The same update on the same batches written directly with torch:
    ``cross_entropy(sum) * N/|B| + 0.5 * sum(p**2) / s**2``,
    ``torch.autograd.grad`` and the update with ``torch._foreach_*`` ops, the
    noise drawn as one flat ``randn`` split into views, exactly as the kernel
    does, but without any diagnostics. This is the floor the kernel should
    get close to.
SGD
    A plain ``torch.optim.SGD`` step (``zero_grad``, mean cross-entropy,
    ``backward``, ``step``) on the same network and batches: what a user would
    compare a Bayesian fit against.

Every variant draws its batches from its own
``ShuffledBatches(X, y, batch_size=128, generator=torch.Generator().manual_seed(0))``
(a fresh permutation per epoch, batches by ``index_select``, as the
estimators' ``PlannedBatches`` makes them), cycled over epochs, so batch
creation is part of every step. The estimator draws its own permutations
from ``random_state``.

Why
---
The samplers are meant to cost no more than the optimisation step they
replace. The targets checked are: kernel <= 1.10x hand-written, estimator
loop <= 1.25x hand-written. The ratio to SGD is printed for context (a
sampler does a little more arithmetic: noise draws and, for SGHMC, momentum).

Method
------
All variants are warmed up, then timed in ``--repeats`` interleaved rounds:
a round runs every variant of every sampler once, back to back (``--steps``
steps each; the estimator a fresh fit of ``--estimator-steps`` steps), in an
order rotated from round to round. The table gives the median microseconds
per step over the rounds and, for the ratios, the median over rounds of the
ratio formed *within* each round, so that a slow stretch of the machine
affects numerator and denominator alike. Chains continue across rounds. Before
timing, the kernel and the hand-written loop are run from the same start on
the same batches and noise for a few steps to check that they compute the
same update (the difference printed should be 0 or a rounding error):
sgld, sghmc and sgnht, whose loops draw every number from the kernels' own
per-chain streams (``ChainRandom``); the loops of baoab, hmc and tacthmc
draw their decisions from a plain generator and are timed, not compared.

HMC's step is a whole trajectory (on average LEAPFROG leapfrog steps plus the
gradient at its start, all on one batch), so its ratio to one SGD step is about
LEAPFROG + 1 by construction; its kernel/hand-written ratio is the overhead.
The estimator warns that HMC on mini-batches is not exact; the benchmark
silences that warning (it times cost, not correctness).

SGHMC follows Chen et al. (2014) eq. (15):
``v <- (1 - alpha) * v - eta * g + sqrt(2 alpha eta T) * xi`` (friction and
noise, the O step, then the gradient kick B), and so does the hand-written loop.

Usage
-----
From the repository root::

    python benchmarks/step_overhead.py                # under 2 minutes on 2 idle cores
    python benchmarks/step_overhead.py --threads 1 --steps 256 --repeats 25
    python benchmarks/step_overhead.py --samplers sghmc --profile
    python benchmarks/step_overhead.py --threads 1 --clock process   # busy machine

On a machine shared with other work the wall-clock medians are unreliable
(with as many OpenMP threads as cores, a competing process can stall a step
by two orders of magnitude); the script warns when the load average is high
and prints the min-max spread over rounds, and ``--threads 1 --clock
process`` gives CPU-time figures that are less sensitive to other processes.

``--profile`` runs ``cProfile`` on one estimator fit of the first sampler and
prints the top entries by cumulative and by own time, to explain a miss.
"""

from __future__ import annotations

import argparse
import warnings
import cProfile
import gc
import io
import math
import os
import pstats
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import bayesnet
from bayesnet.likelihoods import CategoricalLikelihood
from bayesnet.posterior import Posterior
from bayesnet.priors import GaussianPrior
from bayesnet.samplers import ChainRandom, make_sampler

N_ROWS, N_FEATURES, N_HIDDEN, N_CLASSES = 4096, 784, 100, 10
BATCH_SIZE = 128
PRIOR_SCALE = 1.0
TEMPERATURE = 1.0
# Small enough that the chains stay finite for tens of thousands of steps on
# this data (the largest curvature of U is of order N * 784 / 4).
STEP_SIZE = 1e-6
FRICTION = 0.05  # SGHMC default
NOISE = 0.05  # SGNHT default injected-noise level (and initial thermostat)
TIME_STEP = 1e-3  # BAOAB / HMC time step (their step_size is a time, SGHMC's its square)
LEAPFROG = 4  # HMC: mean trajectory length (randomised in [2, 6] as the kernel does; jitter 0, no adaptation)
SAMPLERS = ("sgld", "sghmc", "sgnht", "baoab", "hmc", "tacthmc")
SGD_LR = 0.01

# time.perf_counter (wall) by default; --clock process switches to the process's CPU time
clock = time.perf_counter

KERNEL_TARGET = 1.10
ESTIMATOR_TARGET = 1.25


# --------------------------------------------------------------------------- #
# data and shared pieces
# --------------------------------------------------------------------------- #
def make_data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N_ROWS, N_FEATURES, generator=g, dtype=torch.float32)
    y = torch.randint(0, N_CLASSES, (N_ROWS,), generator=g)
    return X, y


def make_network() -> nn.Sequential:
    """The 784-100-10 ReLU MLP, always with the same initial weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(N_FEATURES, N_HIDDEN), nn.ReLU(), nn.Linear(N_HIDDEN, N_CLASSES))


class ShuffledBatches:
    """Mini-batches of ``(X, y)``: a fresh permutation from ``generator`` every epoch, batches by
    ``index_select``, the last one short when ``batch_size`` does not divide the rows (as the estimators'
    :class:`~bayesnet.estimators.run.PlannedBatches` makes them)."""

    def __init__(self, X, y, batch_size: int, generator: torch.Generator):
        self.X, self.y, self.batch_size, self.generator = X, y, batch_size, generator

    def __iter__(self):
        order = torch.randperm(len(self.X), generator=self.generator)
        for lo in range(0, len(order), self.batch_size):
            idx = order[lo:lo + self.batch_size]
            yield self.X.index_select(0, idx), self.y.index_select(0, idx)


def make_iterator(X, y) -> ShuffledBatches:
    return ShuffledBatches(X, y, BATCH_SIZE, torch.Generator().manual_seed(0))


def cycle(iterator):
    """Batches of ``iterator`` forever, a fresh shuffle each epoch."""
    while True:
        yield from iterator


def sampler_params(name: str) -> dict:
    params = {"step_size": STEP_SIZE, "temperature": TEMPERATURE}
    if name == "sghmc":
        params["friction"] = FRICTION
    elif name in ("sgnht", "tacthmc"):
        params["noise"] = NOISE
    elif name == "baoab":
        params.update(step_size=TIME_STEP, friction=1.0)
    elif name == "hmc":
        params.update(step_size=TIME_STEP, n_leapfrog=LEAPFROG, jitter=0.0)
    return params


# --------------------------------------------------------------------------- #
# the four variants; each is an object with run(n_steps) -> seconds
# --------------------------------------------------------------------------- #
class KernelLoop:
    """(a) ``sampler.step`` on a ``Posterior``."""

    def __init__(self, name, X, y):
        self.module = make_network()
        self.posterior = Posterior(self.module, CategoricalLikelihood(), GaussianPrior(PRIOR_SCALE), n_data=len(X))
        self.sampler = make_sampler(name, **sampler_params(name))
        self.gen = stream(name)
        self.state = self.sampler.init(self.posterior.parameters, self.gen)
        self.batches = cycle(make_iterator(X, y))

    def run(self, n_steps: int) -> float:
        sampler, state, posterior, batches = self.sampler, self.state, self.posterior, self.batches
        t0 = clock()
        for _ in range(n_steps):
            state, info = sampler.step(state, posterior, next(batches))
        elapsed = clock() - t0
        self.state = state
        return elapsed


class HandWrittenLoop:
    """(c) The same update as the kernel, written inline, no diagnostics.

    ``HandWrittenLoop(name, X, y)`` is the 784-100-10 network of this script.
    :meth:`from_parts` builds the same loop for another model (used by
    ``benchmarks/peers.py``).
    """

    def __init__(self, name, X, y):
        self.module = make_network()
        module, scale = self.module, len(X) / BATCH_SIZE  # N / |B|; every batch is full since 4096 = 32 * 128

        def value_grad(Xb, yb):
            params = self.params
            loss = F.cross_entropy(module(Xb), yb, reduction="sum") * scale \
                + 0.5 * sum((p * p).sum() for p in params) / PRIOR_SCALE**2
            return loss.detach(), torch.autograd.grad(loss, params)

        self._setup(name, list(module.parameters()), value_grad, cycle(make_iterator(X, y)),
                    stream(name))

    @classmethod
    def from_parts(cls, name, params, value_grad, batches, generator, *, step_size, temperature=1.0,
                   friction=FRICTION, noise=NOISE):
        """The sgld, sghmc or sgnht loop on any model.

        Parameters
        ----------
        name : {"sgld", "sghmc", "sgnht"}
        params : list of Tensor
            Leaf tensors with ``requires_grad``, moved in place (any leading
            chain axis is the caller's business: the noise is one flat draw
            over all of them, as the kernels draw it; sgnht has one scalar
            thermostat, so it is one chain).
        value_grad : callable
            ``value_grad(X, y) -> (U, grads)``, ``U`` summed over chains.
        batches : iterator of (X, y)
        generator : torch.Generator or bayesnet.samplers.ChainRandom
            On the parameters' device. A ``ChainRandom`` (one stream per chain, ``n_chains`` the leading axis
            of ``params`` when above 1) gives every draw, the initial momenta included, exactly as our kernels
            take it from the same streams, so that the loop and the kernel can be compared step for step.
        step_size, temperature, friction, noise : float
            As :func:`bayesnet.samplers.make_sampler` takes them.

        Raises
        ------
        ValueError
            For another sampler name.
        """
        if name not in ("sgld", "sghmc", "sgnht"):
            raise ValueError(f"from_parts supports sgld, sghmc and sgnht, got {name!r}")
        self = cls.__new__(cls)
        self._setup(name, list(params), value_grad, batches, generator, step_size=step_size,
                    temperature=temperature, friction=friction, noise=noise)
        return self

    def _setup(self, name, params, value_grad, batches, generator, step_size=STEP_SIZE, temperature=TEMPERATURE,
               friction=FRICTION, noise=NOISE):
        self.name = name
        self.params = params
        self.value_grad = value_grad
        self.sizes = [p.numel() for p in self.params]
        self.n_params = sum(self.sizes)
        self.gen = generator
        self.batches = batches
        self.eta, self.temperature, self.friction, self.noise = step_size, temperature, friction, noise
        like = {"device": params[0].device, "dtype": params[0].dtype}
        if name == "sgld":
            self.noise_std = math.sqrt(2.0 * step_size * temperature)
            self.momentum = None
        elif name == "sghmc":
            # same initial momentum draw as SGHMC.init: one standard normal per coordinate, scaled
            self.noise_std = math.sqrt(2.0 * friction * step_size * temperature)
            self.decay = 1.0 - friction
            std0 = math.sqrt(step_size * temperature)
            self.momentum = [m.mul_(std0) for m in self._noise()]
        elif name in ("sgnht", "baoab", "hmc"):
            std0 = math.sqrt(step_size * temperature) if name == "sgnht" else math.sqrt(TEMPERATURE)
            self.flat = self._flat_noise(**like).mul_(std0)
            self.momentum = [c.view_as(p) for c, p in zip(self.flat.split(self.sizes), self.params)]
            self.thermostat = noise
            self.grad = None
            self.noise_std = None  # set per scheme in run()
        elif name == "tacthmc":  # as TACTHMC.init: theta momenta, then r_xi; every state variable float32 0-d
            self.flat = torch.randn(self.n_params, generator=self.gen).mul_(math.sqrt(STEP_SIZE * TEMPERATURE))
            self.momentum = [c.view_as(p) for c, p in zip(self.flat.split(self.sizes), self.params)]
            self.eta_xi = 1.5e-3 * min(1.0, 2.0 / self.n_params) ** 2
            self.r_xi = torch.randn((), generator=self.gen) * math.sqrt(self.eta_xi * TEMPERATURE)
            self.xi = torch.zeros(())
            self.thermostat, self.xi_thermostat = torch.tensor(NOISE), torch.tensor(NOISE)
            self.abf, self.visits = torch.zeros(50), torch.zeros(50)
            self.noise_std = None
        else:
            raise ValueError(f"no hand-written loop for sampler {name!r}")

    def _flat_noise(self, device=None, dtype=None):
        """``n_params`` standard normal numbers: one ``randn``, or a ``ChainRandom``'s block (one chain, flat)."""
        if isinstance(self.gen, ChainRandom):
            if self.gen.n_chains != 1:
                raise ValueError("a flat buffer of noise is one chain's")
            return self.gen.normal(self.n_params, dtype or torch.float32).reshape(-1).clone()
        return torch.randn(self.n_params, generator=self.gen, device=device, dtype=dtype)

    def _noise(self):
        """Standard normal noise shaped like the parameters (chain-major from a ``ChainRandom``'s streams, as the
        kernels lay out their noise: chain ``c``'s numbers fill its slice of every tensor, in tensor order)."""
        first = self.params[0]
        if isinstance(self.gen, ChainRandom) and self.gen.n_chains > 1:
            C = self.gen.n_chains
            block = self.gen.normal(self.n_params // C, first.dtype)  # (C, D / C)
            sizes = [p[0].numel() for p in self.params]
            return [c.reshape(p.shape) for c, p in zip(block.split(sizes, dim=1), self.params)]
        flat = self._flat_noise(first.device, first.dtype)
        return [c.view_as(p) for c, p in zip(flat.split(self.sizes), self.params)]

    def _value_grad(self, X, y):
        return self.value_grad(X, y)

    def _grad(self, X, y):
        return self._value_grad(X, y)[1]

    def run(self, n_steps: int) -> float:
        params, batches, eta, std = self.params, self.batches, self.eta, self.noise_std
        t0 = clock()
        if self.name == "sgld":
            for _ in range(n_steps):
                X, y = next(batches)
                grads = self._grad(X, y)
                with torch.no_grad():
                    torch._foreach_add_(params, grads, alpha=-eta)  # theta -= eta * g
                    torch._foreach_add_(params, self._noise(), alpha=std)  # theta += sqrt(2 eta T) xi
        elif self.name == "sgnht":  # as SGNHT.step
            r, flat, n = self.momentum, self.flat, self.n_params
            noise_std = math.sqrt(2.0 * self.noise * eta * self.temperature)
            for _ in range(n_steps):
                X, y = next(batches)
                self.thermostat += float(torch.dot(flat, flat)) / n - eta * self.temperature
                grads = self._grad(X, y)
                with torch.no_grad():
                    torch._foreach_mul_(r, 1.0 - self.thermostat)
                    torch._foreach_add_(r, grads, alpha=-eta)
                    torch._foreach_add_(r, self._noise(), alpha=noise_std)
                    torch._foreach_add_(params, r)
        elif self.name == "baoab":  # B/2 A/2 O A/2 B/2 with the end-of-step gradient reused
            p, h = self.momentum, TIME_STEP
            a = math.exp(-1.0 * h)
            o_std = math.sqrt(TEMPERATURE * (1 - a * a))
            for _ in range(n_steps):
                X, y = next(batches)
                if self.grad is None:
                    self.grad = self._grad(X, y)
                with torch.no_grad():
                    torch._foreach_add_(p, self.grad, alpha=-h / 2)
                    torch._foreach_add_(params, p, alpha=h / 2)
                    torch._foreach_mul_(p, a)
                    torch._foreach_add_(p, self._noise(), alpha=o_std)
                    torch._foreach_add_(params, p, alpha=h / 2)
                self.grad = self._grad(X, y)
                with torch.no_grad():
                    torch._foreach_add_(p, self.grad, alpha=-h / 2)
        elif self.name == "hmc":  # momentum refresh, LEAPFROG leapfrog steps, Metropolis test
            p, flat, h = self.momentum, self.flat, TIME_STEP
            for _ in range(n_steps):
                X, y = next(batches)
                torch.rand((), generator=self.gen)  # the kernel's step-size jitter draw (jitter = 0)
                # the kernel's randomised length, uniform on [ceil(L/2), L + L//2]
                n_leap = int(torch.randint(math.ceil(LEAPFROG / 2), LEAPFROG + LEAPFROG // 2 + 1, (),
                                           generator=self.gen))
                flat.copy_(torch.randn(self.n_params, generator=self.gen)).mul_(math.sqrt(TEMPERATURE))
                u0, g = self._value_grad(X, y)
                start = [t.detach().clone() for t in params]
                h0 = float(u0) + 0.5 * float(torch.dot(flat, flat))
                for _ in range(n_leap):
                    with torch.no_grad():
                        torch._foreach_add_(p, g, alpha=-h / 2)
                        torch._foreach_add_(params, p, alpha=h)
                    u1, g = self._value_grad(X, y)
                    with torch.no_grad():
                        torch._foreach_add_(p, g, alpha=-h / 2)
                h1 = float(u1) + 0.5 * float(torch.dot(flat, flat))
                log_ratio = -(h1 - h0) / TEMPERATURE
                accept_prob = min(1.0, math.exp(min(log_ratio, 0.0))) if math.isfinite(log_ratio) else 0.0
                if not float(torch.rand((), generator=self.gen)) < accept_prob:
                    with torch.no_grad():
                        for t, s0 in zip(params, start):
                            t.copy_(s0)
        elif self.name == "tacthmc":  # Algorithm 1 with the paper's coupling (1/3, 1, 3), walls 5/3, 50 ABF bins
            r, flat, n, eta, eta_xi = self.momentum, self.flat, self.n_params, STEP_SIZE, self.eta_xi
            wall, width = 5.0 / 3.0, 2.0 * (5.0 / 3.0) / 50
            for _ in range(n_steps):
                X, y = next(batches)
                xi, r_xi = self.xi, self.r_xi
                sc = ((xi.abs() - 1.0 / 3.0) / (2.0 / 3.0)).clamp_min(0.0)
                lam = 1.0 / (1.0 + sc**3)
                dlam = torch.where(sc > 0, -torch.sign(xi) * 3 * sc**2 / ((2.0 / 3.0) * (1.0 + sc**3) ** 2),
                                   torch.zeros_like(xi))
                r2 = torch.dot(flat, flat)
                self.xi_thermostat = self.xi_thermostat + dlam * dlam * (r_xi * r_xi - eta_xi * TEMPERATURE)
                self.thermostat = self.thermostat + lam * lam * (r2 / n - eta * TEMPERATURE)
                j = ((xi + wall) / width).floor().long().clamp_(0, 49)
                delta_a = self.abf[j]
                u, grads = self._value_grad(X, y)
                with torch.no_grad():
                    kick = torch.randn((), generator=self.gen)
                    r_xi = (r_xi - dlam * (eta_xi * u + math.sqrt(2.0 * NOISE * eta_xi * TEMPERATURE) * kick)
                            - dlam * dlam * self.xi_thermostat * r_xi + eta_xi * delta_a)
                    decay = 1.0 - lam * lam * self.thermostat
                    noise_std = lam * math.sqrt(2.0 * NOISE * eta * TEMPERATURE)
                    for m, g, w in zip(r, grads, self._noise()):
                        m.mul_(decay).add_(-eta * lam * g + noise_std * w)
                    self.visits[j] += 1
                    self.abf[j] += (dlam * u - self.abf[j]) / self.visits[j]
                    moved = xi + r_xi
                    outside = moved.abs() > wall
                    self.r_xi = torch.where(outside, -r_xi, r_xi)
                    self.xi = torch.where(outside, xi, moved)
                    torch._foreach_add_(params, r)
        else:
            v, decay = self.momentum, self.decay
            for _ in range(n_steps):
                X, y = next(batches)
                with torch.no_grad():
                    torch._foreach_add_(params, v)  # theta += v
                grads = self._grad(X, y)  # g at the new theta
                with torch.no_grad():
                    # as SGHMC.step (O then B): v = (1 - alpha) v + sqrt(2 alpha eta T) xi - eta g
                    torch._foreach_mul_(v, decay)
                    torch._foreach_add_(v, self._noise(), alpha=std)
                    torch._foreach_add_(v, grads, alpha=-eta)
        return clock() - t0


class SGDLoop:
    """(d) ``torch.optim.SGD`` on the mean cross-entropy."""

    def __init__(self, name, X, y):
        self.module = make_network()
        self.optimizer = torch.optim.SGD(self.module.parameters(), lr=SGD_LR)
        self.batches = cycle(make_iterator(X, y))

    def run(self, n_steps: int) -> float:
        module, optimizer, batches = self.module, self.optimizer, self.batches
        t0 = clock()
        for _ in range(n_steps):
            X, y = next(batches)
            optimizer.zero_grad()
            loss = F.cross_entropy(module(X), y)
            loss.backward()
            optimizer.step()
        return clock() - t0


def make_estimator(name: str, n_steps: int) -> bayesnet.BayesianMLPClassifier:
    return bayesnet.BayesianMLPClassifier(
        hidden_layer_sizes=(N_HIDDEN,), sampler=name, batch_size=BATCH_SIZE, burn_in=n_steps - 1, n_draws=1,
        thinning=1, prior_scale=PRIOR_SCALE, random_state=0,
        **{f"sampler__{k}": v for k, v in sampler_params(name).items()},
    )


def steps_run(est) -> int:
    return int(est.fit_status_["steps_taken"])


class EstimatorFit:
    """(b) A fresh ``BayesianMLPClassifier.fit``; time / steps, setup included."""

    def __init__(self, name, X, y):
        self.name = name
        self.X, self.y = X.numpy(), y.numpy()

    def run(self, n_steps: int) -> tuple[float, int]:
        est = make_estimator(self.name, n_steps)
        t0 = clock()
        est.fit(self.X, self.y)
        elapsed = clock() - t0
        return elapsed, steps_run(est)


VARIANTS = (("kernel", KernelLoop), ("estimator", EstimatorFit), ("hand", HandWrittenLoop), ("sgd", SGDLoop))


# --------------------------------------------------------------------------- #
# checks, timing, report
# --------------------------------------------------------------------------- #
#: the samplers whose hand-written loop draws every number from the kernel's own streams (``ChainRandom``), so
#: that the two can be compared step for step; the others' loops draw their decisions (trajectory lengths,
#: acceptances, tacthmc's scalar kicks) from a plain generator, and are timed but not compared
SAME_STREAMS = ("sgld", "sghmc", "sgnht")


def stream(name: str):
    """The random source of the kernel and of the hand-written loop for ``name`` (the same one for both)."""
    return ChainRandom(1, 1) if name in SAME_STREAMS else torch.Generator().manual_seed(1)


def check_same_update(name, X, y, n_steps: int = 10) -> float:
    """Max |theta_kernel - theta_hand| after ``n_steps`` from the same start, batches and noise."""
    kernel, hand = KernelLoop(name, X, y), HandWrittenLoop(name, X, y)
    kernel.run(n_steps)
    hand.run(n_steps)
    with torch.no_grad():
        return max(float((a - b).abs().max()) for a, b in zip(kernel.module.parameters(), hand.params))


def time_all(samplers, X, y, steps, estimator_steps, repeats, warmup):
    """Interleaved rounds; returns {(sampler, variant): [µs/step per round]} and the estimator's step counts.

    One round times every variant of every sampler once, back to back, in an
    order rotated from round to round; ratios are then formed within a round
    (paired), so that a slow stretch of the machine hits numerator and
    denominator alike.
    """
    loops = {(s, v): cls(s, X, y) for s in samplers for v, cls in VARIANTS}
    # warm-up: every variant once (the estimator with a one-epoch fit)
    for (s, v), loop in loops.items():
        loop.run(N_ROWS // BATCH_SIZE if v == "estimator" else warmup)
    order = list(loops)
    per_step = {key: [] for key in loops}
    n_est_steps = {}
    for r in range(repeats):
        k = r % len(order)
        for s, v in order[k:] + order[:k]:
            gc.collect()
            if v == "estimator":
                elapsed, n = loops[s, v].run(estimator_steps)
                n_est_steps[s] = n
            else:
                elapsed, n = loops[s, v].run(steps), steps
            per_step[s, v].append(1e6 * elapsed / n)
    return per_step, n_est_steps


def paired_ratio(raw, s, num, den) -> float:
    return statistics.median(a / b for a, b in zip(raw[s, num], raw[s, den]))


def print_table(samplers, raw):
    med = {key: statistics.median(vals) for key, vals in raw.items()}
    header = (f"{'sampler':<8} | {'kernel µs':>9} | {'estimator µs':>12} | {'hand-written µs':>15} | "
              f"{'SGD µs':>8} | {'kernel/hand':>11} | {'estimator/hand':>14} | {'kernel/SGD':>10} | "
              f"{'kernel':>6} | {'estim.':>6}")
    print(header)
    print("-" * len(header))
    all_pass = True
    for s in samplers:
        k, e, h, g = (med[s, v] for v in ("kernel", "estimator", "hand", "sgd"))
        kh, eh, kg = (paired_ratio(raw, s, *pair) for pair in (("kernel", "hand"), ("estimator", "hand"),
                                                                ("kernel", "sgd")))
        k_ok, e_ok = kh <= KERNEL_TARGET, eh <= ESTIMATOR_TARGET
        all_pass &= k_ok and e_ok
        print(f"{s:<8} | {k:9.1f} | {e:12.1f} | {h:15.1f} | {g:8.1f} | {kh:11.3f} | {eh:14.3f} | "
              f"{kg:10.3f} | {'PASS' if k_ok else 'MISS':>6} | {'PASS' if e_ok else 'MISS':>6}")
    print(f"targets: kernel/hand <= {KERNEL_TARGET:.2f}, estimator/hand <= {ESTIMATOR_TARGET:.2f}. "
          f"µs columns: median over rounds; ratios: median over rounds of the within-round ratio.")
    print("spread (min-max µs/step over rounds); ratio of medians kernel/hand, estimator/hand:")
    for s in samplers:
        parts = [f"{v} {min(raw[s, v]):.0f}-{max(raw[s, v]):.0f}" for v in ("kernel", "estimator", "hand", "sgd")]
        print(f"  {s:<6} " + ", ".join(parts) + f"; {med[s, 'kernel'] / med[s, 'hand']:.3f}, "
              f"{med[s, 'estimator'] / med[s, 'hand']:.3f}")
    return all_pass


def profile_fit(name, X, y, n_steps, top=25):
    est = make_estimator(name, n_steps)
    Xn, yn = X.numpy(), y.numpy()
    profiler = cProfile.Profile()
    profiler.enable()
    est.fit(Xn, yn)
    profiler.disable()
    n = steps_run(est)
    for key, label in (("cumulative", "cumulative"), ("tottime", "own (tottime)")):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(key)
        stats.print_stats(top)
        print(f"\n--- cProfile of {name} estimator fit ({n} steps), top {top} by {label} time ---")
        text = out.getvalue()
        # drop pstats' preamble up to the column header
        print(text[text.find("   ncalls"):].rstrip())


def main(argv=None) -> int:
    warnings.filterwarnings("ignore", message="hmc with mini-batches")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=64,
                        help="steps per timed repeat of the kernel, hand-written and SGD loops (default 64)")
    parser.add_argument("--estimator-steps", type=int, default=256,
                        help="sampler steps of each timed estimator fit, rounded up to whole epochs "
                             "(default 256, 8 epochs; the fit's one-off setup, ~7 ms, is then ~2%% of it)")
    parser.add_argument("--repeats", type=int, default=31,
                        help="interleaved timing rounds; each times every variant once (default 31)")
    parser.add_argument("--warmup", type=int, default=100, help="warm-up steps per loop (default 100)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS),
                        help="samplers to time (default: all six)")
    parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                        help="wall: time.perf_counter (default); process: time.process_time, the CPU time of "
                             "this process, which is robust to other processes on a busy machine when used "
                             "with --threads 1 (with more threads it counts OpenMP spin-waiting)")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile one estimator fit (>= 1024 steps) of the first sampler and print "
                             "the top entries")
    parser.add_argument("--profile-top", type=int, default=25, help="entries per profile listing (default 25)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    global clock
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    X, y = make_data()
    print(f"bayesnet {bayesnet.__version__}, torch {torch.__version__}, numpy {np.__version__}, "
          f"python {sys.version.split()[0]}; threads={torch.get_num_threads()}")
    print(f"MLP {N_FEATURES}-{N_HIDDEN}-{N_CLASSES} ReLU, N={N_ROWS}, batch={BATCH_SIZE}, float32, CPU; "
          f"step_size={STEP_SIZE:g}; {args.repeats} repeats x {args.steps} steps "
          f"(estimator: fresh fit of ~{args.estimator_steps} steps, setup included); clock={args.clock}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > 0.5:
        print(f"WARNING: 1-minute load average is {load:.1f} on {os.cpu_count()} CPUs; other processes "
              f"competing for the cores inflate and scatter the timings (OpenMP threads spin).")
    for s in args.samplers:
        if s in SAME_STREAMS:
            print(f"same-update check {s}: max|theta_kernel - theta_hand| after 10 steps = "
                  f"{check_same_update(s, X, y):.2e}")
        else:
            print(f"same-update check {s}: not compared (its loop draws its decisions from another stream)")

    t0 = time.perf_counter()
    raw, n_est = time_all(args.samplers, X, y, args.steps, args.estimator_steps, args.repeats, args.warmup)
    print(f"timing took {time.perf_counter() - t0:.0f} s; estimator fits ran "
          + ", ".join(f"{s}: {n} steps" for s, n in n_est.items()) + "\n")
    all_pass = print_table(args.samplers, raw)
    print("overall:", "PASS" if all_pass else "MISS")

    if args.profile:
        profile_fit(args.samplers[0], X, y, max(args.estimator_steps, 1024), args.profile_top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
