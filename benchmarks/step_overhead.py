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
    momenta views of one flat buffer, but without any diagnostics. Its random
    numbers come from the kernel's own per-chain streams (``ChainRandom``
    with the same seed), in the kernel's order and layout, so that it computes
    the same chain; a block of a stream's pool costs no more than a fresh
    ``randn``. This is the floor the kernel should get close to.
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
same update: after ``SAME_UPDATE_STEPS`` steps the positions must agree to
``SAME_UPDATE_TOLERANCE`` (1e-5) of their largest value, a rounding error
(PASS/FAIL is printed; ``--check`` runs only this and exits 1 on a failure).

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
    python benchmarks/step_overhead.py --check    # the same-update check alone

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
from bayesnet.samplers.tacthmc import PAPER_TEMPERING

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


def kernel_params(name: str) -> dict:
    """:func:`sampler_params` plus the settings the hand-written loop fixes: tacthmc's well and tempering friction
    are the paper's (walls 5/3, ``tempering_noise=0.05``), which the defaults size to the network since 2026-11-29."""
    params = sampler_params(name)
    if name == "tacthmc":
        params.update(PAPER_TEMPERING)
    return params


# --------------------------------------------------------------------------- #
# the four variants; each is an object with run(n_steps) -> seconds
# --------------------------------------------------------------------------- #
class KernelLoop:
    """(a) ``sampler.step`` on a ``Posterior``."""

    def __init__(self, name, X, y):
        self.module = make_network()
        self.posterior = Posterior(self.module, CategoricalLikelihood(), GaussianPrior(PRIOR_SCALE), n_data=len(X))
        self.sampler = make_sampler(name, **kernel_params(name))
        self.gen = stream()
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
    """(c) The same update as the kernel, written inline with torch operations, no diagnostics.

    ``HandWrittenLoop(name, X, y)`` is the 784-100-10 network of this script.
    :meth:`from_parts` builds the sgld, sghmc or sgnht loop for another model (used by
    ``benchmarks/peers.py``).

    The random numbers come from a :class:`~bayesnet.samplers.ChainRandom` (one stream per chain), taken in
    the order, sizes and layout in which the kernel takes them from the same streams: the initial momenta,
    each step's noise, HMC's step-size jitter, trajectory length (the shared host stream) and acceptance
    uniform, TACT-HMC's tempering momentum and kick. Given the same seed the loop and the kernel therefore
    compute the same chain, up to rounding (:func:`check_same_update`). A block of a stream's pool costs no
    more than a fresh ``randn``, so this does not raise the floor; everything else is plain torch, no
    bayesnet code. The momenta are views of one flat buffer (chain-major ``(C, D / C)`` with several chains),
    as the kernels keep them, so that friction and noise are one operation on it.
    """

    def __init__(self, name, X, y):
        self.module = make_network()
        module, scale = self.module, len(X) / BATCH_SIZE  # N / |B|; every batch is full since 4096 = 32 * 128

        def value_grad(Xb, yb):
            params = self.params
            loss = F.cross_entropy(module(Xb), yb, reduction="sum") * scale \
                + 0.5 * sum((p * p).sum() for p in params) / PRIOR_SCALE**2
            return loss.detach(), torch.autograd.grad(loss, params)

        self._setup(name, list(module.parameters()), value_grad, cycle(make_iterator(X, y)), stream(),
                    **sampler_params(name))

    @classmethod
    def from_parts(cls, name, params, value_grad, batches, rng, *, step_size, temperature=1.0,
                   friction=FRICTION, noise=NOISE):
        """The sgld, sghmc or sgnht loop on any model, for one chain or several.

        Parameters
        ----------
        name : {"sgld", "sghmc", "sgnht"}
        params : list of Tensor
            Leaf tensors with ``requires_grad``, moved in place. With ``rng.n_chains = C > 1`` every tensor
            has a leading axis of ``C`` chains (chain ``c``'s numbers then fill row ``c`` of every tensor, in
            tensor order, as the kernels lay out their noise), and sgnht keeps one thermostat per chain.
        value_grad : callable
            ``value_grad(X, y) -> (U, grads)``, ``U`` summed over chains (autograd then gives every chain its
            own gradient).
        batches : iterator of (X, y)
        rng : bayesnet.samplers.ChainRandom
            The chains' streams, on the parameters' device: built as the kernel's (same seed and ``n_chains``),
            the loop draws exactly the kernel's numbers, the initial momenta included.
        step_size, temperature, friction, noise : float
            As :func:`bayesnet.samplers.make_sampler` takes them (``step_size`` is the learning rate
            ``eta``, the kernels' convention for these three samplers).

        Raises
        ------
        ValueError
            For another sampler name, or parameters without the leading axis of ``rng.n_chains`` chains.
        TypeError
            If ``rng`` is not a ``ChainRandom``.
        """
        if name not in ("sgld", "sghmc", "sgnht"):
            raise ValueError(f"from_parts supports sgld, sghmc and sgnht, got {name!r}")
        self = cls.__new__(cls)
        self._setup(name, list(params), value_grad, batches, rng, step_size=step_size, temperature=temperature,
                    friction=friction, noise=noise)
        return self

    def _setup(self, name, params, value_grad, batches, rng, step_size, temperature=1.0, friction=FRICTION,
               noise=NOISE, n_leapfrog=LEAPFROG, jitter=0.0):
        if not isinstance(rng, ChainRandom):
            raise TypeError(f"the hand-written loop draws from the kernels' streams, a ChainRandom; got {rng!r}")
        C = rng.n_chains
        if C > 1 and any(p.ndim == 0 or p.shape[0] != C for p in params):
            raise ValueError(f"{C} chains need a leading axis of {C} on every parameter, got "
                             f"{[tuple(p.shape) for p in params]}")
        if name == "hmc" and jitter != 0.0:
            raise ValueError("the hand-written hmc loop runs without step-size jitter")
        self.name, self.params, self.value_grad, self.batches, self.rng = name, params, value_grad, batches, rng
        self.n_chains = C
        self.n_params = sum(p.numel() for p in params)
        self.per_chain = self.n_params // C  # D per chain
        self.sizes = [p.numel() // C for p in params]
        self.dtype = params[0].dtype
        self.eta, self.temperature, self.friction, self.noise = step_size, temperature, friction, noise
        T = temperature
        if name == "sgld":
            self.noise_std = math.sqrt(2.0 * step_size * T)
            return
        if name not in ("sghmc", "sgnht", "baoab", "hmc", "tacthmc"):
            raise ValueError(f"no hand-written loop for sampler {name!r}")
        # the momenta at their equilibrium, as the kernels' init draws them: one standard normal per
        # coordinate, scaled by sqrt(T) (baoab, hmc: p has units of sqrt(T)) or sqrt(eta T) (velocity-per-step
        # units of the learning-rate samplers)
        std0 = math.sqrt(T) if name in ("baoab", "hmc") else math.sqrt(step_size * T)
        self.flat = self._normal().clone().mul_(std0)
        self.momentum = self._split(self.flat)
        if name == "sghmc":  # Chen et al. (2014) eq. 15: decay 1 - alpha, noise sqrt(2 alpha eta T)
            self.decay, self.noise_std = 1.0 - friction, math.sqrt(2.0 * friction * step_size * T)
        elif name == "sgnht":  # one thermostat per chain, starting at the noise level (Luo et al. 2018 Alg. 1)
            shape = () if C == 1 else (C,)
            self.thermostat = torch.full(shape, float(noise), dtype=self.dtype, device=self.flat.device)
            self.noise_std = math.sqrt(2.0 * noise * step_size * T)
        elif name == "baoab":  # step_size is the time step h; the gradient at the end of a step serves the next
            self.h, self.grad = step_size, None
            self.decay = math.exp(-friction * step_size)
            self.noise_std = math.sqrt(T * (1.0 - self.decay**2))
        elif name == "hmc":  # trajectory lengths uniform on [ceil(L/2), L + L//2], as the kernel draws them
            self.h = step_size
            self.lengths = (math.ceil(n_leapfrog / 2), n_leapfrog + n_leapfrog // 2)
        elif name == "tacthmc":  # as TACTHMC.init: theta's momenta (above), then r_xi; xi at 0, both thermostats
            if C != 1:
                raise ValueError("the hand-written tacthmc loop is one chain")
            self.eta_xi = 1.5e-3 * min(1.0, 2.0 / self.n_params) ** 2  # tempering_step_size="auto"
            self.r_xi = self._normal(1).reshape(()) * math.sqrt(self.eta_xi * T)
            self.xi = torch.zeros(())
            self.thermostat, self.xi_thermostat = torch.tensor(noise), torch.tensor(noise)
            self.abf, self.visits = torch.zeros(50), torch.zeros(50)

    def _normal(self, n=None):
        """``n`` standard normal numbers per chain (default: one chain's parameter count), a view of the
        streams' pool: shape ``(n,)`` for one chain, ``(C, n)`` chain-major for several."""
        block = self.rng.normal(self.per_chain if n is None else n, self.dtype)
        return block.reshape(-1) if self.n_chains == 1 else block

    def _split(self, flat):
        """Views of ``flat`` shaped like the parameters: consecutive pieces for one chain, pieces of every
        chain's row for several."""
        if flat.ndim == 1:
            return [c.view(p.shape) for c, p in zip(flat.split(self.sizes), self.params)]
        return [c.view(p.shape) for c, p in zip(flat.split(self.sizes, dim=1), self.params)]

    def _value_grad(self, X, y):
        return self.value_grad(X, y)

    def _grad(self, X, y):
        return self._value_grad(X, y)[1]

    def run(self, n_steps: int) -> float:
        params, batches, eta, std = self.params, self.batches, self.eta, getattr(self, "noise_std", None)
        t0 = clock()
        if self.name == "sgld":  # theta <- theta - eta g + sqrt(2 eta T) xi
            for _ in range(n_steps):
                X, y = next(batches)
                grads = self._grad(X, y)
                with torch.no_grad():
                    torch._foreach_add_(params, grads, alpha=-eta)
                    torch._foreach_add_(params, self._split(self._normal()), alpha=std)
        elif self.name == "sghmc":  # A, then O (friction and noise) and B at the new position, as SGHMC.step
            v, flat, decay = self.momentum, self.flat, self.decay
            for _ in range(n_steps):
                X, y = next(batches)
                with torch.no_grad():
                    torch._foreach_add_(params, v)  # theta += v
                grads = self._grad(X, y)
                with torch.no_grad():
                    flat.mul_(decay).add_(self._normal(), alpha=std)  # v = (1 - alpha) v + sqrt(2 alpha eta T) xi
                    torch._foreach_add_(v, grads, alpha=-eta)  # v -= eta g
        elif self.name == "sgnht":  # thermostat from the old momenta, gradient, friction, kick, noise, move
            r, flat, inv = self.momentum, self.flat, 1.0 / (eta * self.per_chain)
            T = self.temperature
            for _ in range(n_steps):
                X, y = next(batches)
                # z += eta (T_kin - T), T_kin = r'r / (eta D) per chain (no host synchronisation)
                t_kin = torch.dot(flat, flat) * inv if flat.ndim == 1 else flat.square().sum(1) * inv
                self.thermostat = self.thermostat + eta * (t_kin - T)
                grads = self._grad(X, y)
                with torch.no_grad():
                    z = self.thermostat
                    decay = torch.exp(-z)  # the friction's exact flow, as the kernel (integrators.friction_flow)
                    flat.mul_(decay if flat.ndim == 1 else decay.unsqueeze(1))
                    torch._foreach_add_(r, grads, alpha=-eta)
                    flat.add_(self._normal(), alpha=std)
                    torch._foreach_add_(params, r)
        elif self.name == "baoab":  # B/2 A/2 O A/2 B/2 with the end-of-step gradient reused
            p, flat, h, decay = self.momentum, self.flat, self.h, self.decay
            for _ in range(n_steps):
                X, y = next(batches)
                if self.grad is None:
                    self.grad = self._grad(X, y)
                with torch.no_grad():
                    torch._foreach_add_(p, self.grad, alpha=-h / 2)
                    torch._foreach_add_(params, p, alpha=h / 2)
                    flat.mul_(decay).add_(self._normal(), alpha=std)
                    torch._foreach_add_(params, p, alpha=h / 2)
                self.grad = self._grad(X, y)
                with torch.no_grad():
                    torch._foreach_add_(p, self.grad, alpha=-h / 2)
        elif self.name == "hmc":  # momentum refresh, a leapfrog trajectory, Metropolis test
            p, flat, h, T, rng = self.momentum, self.flat, self.h, self.temperature, self.rng
            lo, hi = self.lengths
            for _ in range(n_steps):
                X, y = next(batches)
                rng.uniform(1)  # the kernel's step-size jitter draw (jitter 0: the step stays h)
                n_leap = int(rng.shared.integers(lo, hi + 1)) if hi > lo else lo  # shared by the chains
                flat.copy_(self._normal()).mul_(math.sqrt(T))
                u0, g = self._value_grad(X, y)
                start = [t.detach().clone() for t in params]
                h0 = u0 + 0.5 * torch.dot(flat, flat)
                u1 = u0
                for _ in range(n_leap):
                    with torch.no_grad():
                        torch._foreach_add_(p, g, alpha=-h / 2)
                        torch._foreach_add_(params, p, alpha=h)
                    u1, g = self._value_grad(X, y)
                    with torch.no_grad():
                        torch._foreach_add_(p, g, alpha=-h / 2)
                log_ratio = -(u1 + 0.5 * torch.dot(flat, flat) - h0) / T
                accept_prob = torch.exp(log_ratio.clamp(max=0.0)) if torch.isfinite(log_ratio) else 0.0
                if not bool(rng.uniform(1).reshape(()) < accept_prob):
                    with torch.no_grad():
                        for t, s0 in zip(params, start):
                            t.copy_(s0)
        elif self.name == "tacthmc":  # Algorithm 1 with the paper's coupling (1/3, 1, 3), walls 5/3, 50 ABF bins
            r, flat, n, eta, eta_xi, T = self.momentum, self.flat, self.n_params, self.eta, self.eta_xi, \
                self.temperature
            c, c_xi = self.noise, PAPER_TEMPERING["tempering_noise"]  # TACTHMC's noise and kernel_params' c_xi
            wall = PAPER_TEMPERING["wall"]
            width = 2.0 * wall / 50
            for _ in range(n_steps):
                X, y = next(batches)
                xi, r_xi = self.xi, self.r_xi
                sc = ((xi.abs() - 1.0 / 3.0) / (2.0 / 3.0)).clamp_min(0.0)
                lam = 1.0 / (1.0 + sc**3)
                dlam = torch.where(sc > 0, -torch.sign(xi) * 3 * sc**2 / ((2.0 / 3.0) * (1.0 + sc**3) ** 2),
                                   torch.zeros_like(xi))
                t_kin = torch.dot(flat, flat) / (eta * n)  # theta's kinetic temperature
                self.xi_thermostat = self.xi_thermostat + dlam * dlam * (r_xi * r_xi - eta_xi * T)
                self.thermostat = self.thermostat + lam * lam * eta * (t_kin - T)
                j = ((xi + wall) / width).floor().long().clamp_(0, 49)
                delta_a = self.abf[j]
                u, grads = self._value_grad(X, y)
                with torch.no_grad():
                    kick = self._normal(1).reshape(())
                    # the friction as its exact flow (TACTHMC's default friction_step="exact")
                    r_xi = (torch.exp(-dlam * dlam * self.xi_thermostat) * r_xi
                            - dlam * (eta_xi * u + math.sqrt(2.0 * c_xi * eta_xi * T) * kick) + eta_xi * delta_a)
                    decay = torch.exp(-lam * lam * self.thermostat)
                    noise_std = lam * math.sqrt(2.0 * c * eta * T)
                    for m, g, w in zip(r, grads, self._split(self._normal())):
                        m.mul_(decay).add_(-eta * lam * g + noise_std * w)
                    self.visits[j] += 1
                    self.abf[j] += (dlam * u - self.abf[j]) / self.visits[j]
                    moved = xi + r_xi
                    outside = moved.abs() > wall
                    self.r_xi = torch.where(outside, -r_xi, r_xi)
                    self.xi = torch.where(outside, xi, moved)
                    torch._foreach_add_(params, r)
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
        **{f"sampler__{k}": v for k, v in kernel_params(name).items()},
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
#: the seed of the chains' streams, shared by the kernel and the hand-written loop
SEED = 1
#: the same-update check passes when the positions differ by less than this, relative to their largest value
SAME_UPDATE_TOLERANCE = 1e-5
SAME_UPDATE_STEPS = 10


def stream() -> ChainRandom:
    """The random streams of a kernel and of its hand-written loop: built alike (one chain, seed :data:`SEED`),
    so that both draw the same numbers."""
    return ChainRandom(SEED, 1)


def check_same_update(name, X, y, n_steps: int = SAME_UPDATE_STEPS) -> tuple[float, float]:
    """``(max |theta_kernel - theta_hand|, that / max |theta_kernel|)`` after ``n_steps`` from the same start,
    on the same batches, with the same random numbers."""
    kernel, hand = KernelLoop(name, X, y), HandWrittenLoop(name, X, y)
    kernel.run(n_steps)
    hand.run(n_steps)
    with torch.no_grad():
        ours = list(kernel.module.parameters())
        diff = max(float((a - b).abs().max()) for a, b in zip(ours, hand.params))
        return diff, diff / max(float(a.abs().max()) for a in ours)


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
                        help="sampler steps of each timed estimator fit "
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
    parser.add_argument("--check", action="store_true",
                        help="only run the same-update check; exit 1 if a sampler fails it")
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
    same = True
    for s in args.samplers:
        diff, rel = check_same_update(s, X, y)
        good = rel < SAME_UPDATE_TOLERANCE  # (NaN fails)
        same &= good
        print(f"same-update check {s}: max|theta_kernel - theta_hand| after {SAME_UPDATE_STEPS} steps = {diff:.2e}, "
              f"{rel:.2e} of max|theta| (tolerance {SAME_UPDATE_TOLERANCE:g}): {'PASS' if good else 'FAIL'}")
    if args.check:
        return 0 if same else 1
    if not same:
        print("WARNING: a hand-written loop no longer computes its kernel's update: its timings are not a floor")

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
