"""Our sampler step against the peers users would pick instead: BlackJAX, posteriors, a hand-written torch loop.

Issue 15, item 4. One command runs every implementation side by side and
prints the ratios.

Workloads
---------
mlp784
    The 784-100-10 ReLU MLP (MNIST's shape) at batch 128, one chain.
mlp30
    The 30-16-2 ReLU MLP (breast cancer's shape) at batch 64, with 1, 16 and
    64 independent chains. Every chain has its own weights, and all chains see
    the same mini-batch.

Both use a softmax likelihood and a Gaussian prior N(0, 1) on every weight
and bias. The potential is

    U(theta) = sum(theta**2) / 2 - (N / B) * sum_{i in batch} log softmax(f_theta(x_i))_{y_i}

with N = 60000 rows of random float32 data (``--n-data``) and B the batch
size. The values do not matter for the cost. The step sizes are small enough
that no chain diverges: 1e-8 for mlp784 and 1e-7 for mlp30. SGHMC's friction
and SGNHT's injected noise are both 0.05, and the temperature is 1.

Implementations
---------------
ours-kernel
    ``sampler.step(state, potential, batch)`` in a bare loop, on
    the potential the estimators use (one packed ``ChainPosterior`` for all
    chains).
ours-compiled
    The same kernel with its frozen step compiled whole by ``torch.compile``
    (``bayesnet.samplers.compiled.CompiledTransition``; sgld, sghmc and sgnht),
    compiled in the first call, before the timed blocks. ``--compile-mode
    reduce-overhead`` compiles it with CUDA graphs on a GPU.
ours-estimator
    ``BayesianMLPClassifier(..., n_chains=C).fit(X, y)`` on the N rows. This
    is seconds per sampler step inside the fit: the median over epochs of
    epoch time / steps, with the first epoch counted as warm-up. The one-off
    setup (validation, building the network, initialisation) is reported
    separately as ``setup``. The estimator draws its own shuffled mini-batches,
    so batch preparation is part of its step. The other implementations cycle
    through 8 ready-made batches.
ours-estimator-compiled
    The same fit with ``compile=True`` (and ``compile__mode`` from
    ``--compile-mode``), so that eager and compiled steps, bare and inside a
    fit, alternate in one run. With the explicit step size there is no
    warm-up: the step compiles in the first epoch, which the median leaves out.
torch-loop
    The same update written by hand with ``torch.autograd.grad`` and
    ``torch._foreach_*``: ``HandWrittenLoop`` of ``step_overhead.py``. One
    chain uses the ``nn.Module``. Several chains use stacked weights and
    ``baddbmm``, and sgnht keeps one thermostat per chain. The loop draws its
    random numbers from the same per-chain streams as our kernel
    (``ChainRandom``, same seed), so it computes the same chain; the pool it
    draws from is no dearer than a fresh ``randn``.
posteriors
    ``posteriors.sgmcmc.{sgld,sghmc,sgnht}`` (normal-computing) on the same
    ``nn.Module`` through ``torch.func.functional_call``. One chain calls
    ``transform.update(state, batch, inplace=True)``. Several chains use
    ``torch.func.vmap(..., randomness="different")`` over a function that
    rebuilds the state from the stacked tensors and calls ``update``, which
    is posteriors' functional route to chains. posteriors' log posterior is
    ``-U``, with temperature 1.
blackjax
    ``jax.jit`` of the BlackJAX step on the same MLP written in
    ``jax.numpy``, with the same initial weights, batches and float32. The
    gradient comes from ``blackjax.sgmcmc.gradients.grad_estimator(logprior,
    loglikelihood, N)``. Several chains are ``jax.vmap`` over the step inside
    the jit, and the PRNG key is split inside the jit too. That is BlackJAX's
    best case: one dispatch per step. ``blackjax.sgld`` and ``blackjax.sgnht``
    are used as they are. For SGHMC, BlackJAX's public ``blackjax.sghmc.step``
    redraws the momentum and runs ``num_integration_steps`` updates on one
    mini-batch (an HMC-style outer step). The persistent-momentum chain of
    Chen et al. (2014) that the others run is BlackJAX's own integrator
    ``blackjax.sgmcmc.diffusions.sghmc`` with the momentum carried between
    steps, and that is what is timed.

posteriors and BlackJAX write SGHMC and SGNHT with a momentum ``p`` and a
learning rate ``eps``. The kernels here use ``v = eps * p`` and
``step_size = eps**2``. So they run with ``eps = sqrt(step_size)`` and
``alpha = friction / eps`` (SGNHT: ``noise / eps``, which is also the
initial thermostat), and that is the same chain (for SGNHT to first order:
their friction is the Euler step ``1 - z``, ours its exact flow ``e^-z``,
one more elementwise call per chain and step).

Method
------
The parent process alternates whole processes: A B A B, ``--rounds`` times.
Each round runs one worker per (implementation, workload), in an order that
rotates from round to round. Each worker runs
``python benchmarks/peers.py --worker IMPL --workload W ...`` and prints
JSON. A worker builds each (chains, sampler) case, times the first call
(for BlackJAX that is the jit compile), warms up, then times ``--repeats``
blocks of ``--steps`` steps and reports the median seconds per step. The
device is synchronised at the end of every block (``block_until_ready``,
``torch.cuda.synchronize``). Over the rounds the parent takes the median of
the workers' medians. The ratios are ratios of these medians: ours/blackjax,
ours/posteriors, ours/torch-loop and estimator/kernel. The one-off costs
are reported apart: the first call minus a steady step (for the estimator,
its first epoch minus as many steady steps), and the estimator's setup.

Threads are pinned the same way in every worker (``--threads``, default 1):
``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``torch.set_num_threads`` and ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1``. Those flags alone leave jax 0.10's CPU
backend on several threads (measured), so jax's backend is also created
under a CPU affinity mask of ``--threads`` cores, and then the mask is
restored (:func:`import_jax`).

The same run also times a default fit: ``BayesianMLPClassifier()`` against
scikit-learn's ``MLPClassifier()``, each behind a ``StandardScaler``, on
breast cancer (75 % of the rows, stratified, seed 0). It prints the fit
seconds, the ratio and the test accuracy. These fits also alternate,
one process each, every round.

Correctness (``--check``)
-------------------------
The check runs in one process and exits non-zero on a failure.

1. Same potential. On both workloads, with 1 and 2 chains and shared
   initial weights, every implementation's U on the first batch equals the
   torch loop's to a relative 1e-5.
2. Same gradient step. One SGLD step at temperature 1e-12, where the noise
   is negligible, moves every implementation by the same ``-step_size *
   grad U``, to a relative 1e-3 of the largest move.
3. Same update, same noise. Our kernel and the torch loop start from the
   same weights and the same batches, and draw from the same per-chain
   streams (``ChainRandom`` with the same seed: initial momenta and every
   step's noise). After 5 steps their positions must agree to a relative
   1e-5 of their size (rounding), for every sampler with 1 and 2 chains.
4. Right distribution. Every implementation and sampler runs on a
   Gaussian target U = |theta|^2 / 2: 4 chains x 256 dimensions, 4000
   steps after 1000 of burn-in.
   The mean of theta^2 must be 1 within 5 %. That catches a wrong
   temperature, noise scale or parameter mapping, which are off by factors.
   SGLD uses step size 0.01 and expects its discretisation's exact
   1 / (1 - 0.01 / 2). SGHMC and SGNHT use step size 1e-4 with friction or
   noise 0.01 (eps = 0.01, alpha = 1 in posteriors' and BlackJAX's units).
   posteriors and BlackJAX integrate SGHMC by explicit Euler, with the
   gradient at the old position. That inflates the variance by about
   eps / alpha (11 % at eps = 0.1, worked out and seen), so the step is
   kept small.

The estimator is not in the check. It runs the kernel, and the test suite
covers that.

Usage
-----
Install the peers first with ``pip install -e ".[bench]"`` (CPU jax).
Nothing is installed at import time, and a missing peer shows as n/a.
Then, from the repository root::

    python benchmarks/peers.py --check            # correctness, under a minute
    python benchmarks/peers.py --quick            # everything, small sizes, a few minutes
    python benchmarks/peers.py                    # the full comparison (estimated 10-15 min on 2 idle cores)
    python benchmarks/peers.py --device cuda      # ours, torch loop, posteriors on the GPU (jax only if it sees one)
    python benchmarks/peers.py --output peers.json   # or .csv
    python benchmarks/peers.py --workloads mlp30 --impls ours-kernel blackjax --samplers sgld --rounds 7

On a busy machine use ``--clock process`` with ``--threads 1``. That is CPU
time, which other processes disturb less.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # step_overhead.py, also when imported from elsewhere
    sys.path.insert(0, HERE)

N_DATA = 60000
PRIOR_SCALE = 1.0
TEMPERATURE = 1.0
POOL = 8  # ready-made mini-batches the kernel-level implementations cycle through
FRICTION = 0.05  # sghmc
NOISE = 0.05  # sgnht: injected noise and initial thermostat
SAMPLERS = ("sgld", "sghmc", "sgnht")
IMPLS = ("ours-kernel", "ours-compiled", "ours-estimator", "ours-estimator-compiled", "torch-loop", "posteriors",
         "blackjax")
FITS = ("fit-bayesnet", "fit-sklearn")
JSON_TAG = "PEERS_JSON "
COMPILE_MODE = None  # torch.compile's mode for ours-compiled and ours-estimator-compiled (--compile-mode; None: its
# default)


@dataclass(frozen=True)
class Workload:
    name: str
    sizes: tuple  # layer widths, input first
    batch: int
    chains: tuple
    step_size: float  # eta in our units; eta * lambda_max << 1 for this N

    def label(self) -> str:
        return "-".join(map(str, self.sizes))


WORKLOADS = {
    # curvature of U up to about N * E|x|^2 / 4 = 60000 * 261 / 4 ~ 4e6 (784 inputs in [0, 1)); 60000 * 10 / 4 ~ 2e5
    "mlp784": Workload("mlp784", (784, 100, 10), 128, (1,), 1e-8),
    "mlp30": Workload("mlp30", (30, 16, 2), 64, (1, 16, 64), 1e-7),
}


class Unsupported(Exception):
    """This implementation cannot run this case (missing package, no GPU for jax, ...)."""


def hyperparameters(sampler: str, step_size: float, temperature: float = TEMPERATURE, friction: float = FRICTION,
                    noise: float = NOISE) -> dict:
    """Our samplers' hyperparameters (``make_sampler`` keywords) for one case."""
    params = {"step_size": step_size, "temperature": temperature}
    if sampler == "sghmc":
        params["friction"] = friction
    elif sampler == "sgnht":
        params["noise"] = noise
    return params


def momentum_form(sampler: str, hyper: dict) -> tuple[float, float]:
    """``(eps, alpha)`` of posteriors' and BlackJAX's SGHMC/SGNHT for our hyperparameters (module docstring)."""
    eps = math.sqrt(hyper["step_size"])
    return eps, (hyper["friction"] if sampler == "sghmc" else hyper["noise"]) / eps


# --------------------------------------------------------------------------- #
# threads and clocks
# --------------------------------------------------------------------------- #
def thread_env(threads: int, device: str = "cpu") -> dict:
    """Environment that pins OpenMP/BLAS/XLA threads; set before torch, numpy or jax are imported."""
    n = str(int(threads))
    xla = f"--xla_cpu_multi_thread_eigen={'false' if threads == 1 else 'true'} intra_op_parallelism_threads={n}"
    env = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
           "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + xla).strip()}
    if device == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    return env


_THREADS = None  # the pinned thread count, for import_jax


def pin_threads(threads: int, device: str = "cpu") -> None:
    global _THREADS
    _THREADS = int(threads)
    for key, value in thread_env(threads, device).items():
        if key == "XLA_FLAGS" and "xla_cpu_multi_thread_eigen" in os.environ.get("XLA_FLAGS", ""):
            continue  # set by the parent already
        os.environ[key] = value


def import_jax():
    """``import jax`` with its CPU thread pools sized to the pinned thread count.

    The XLA flags alone do not pin jax 0.10's CPU backend. Measured here: a
    jitted 1500 x 1500 matmul kept 4 threads busy with
    ``--xla_cpu_multi_thread_eigen=false``. XLA sizes its pools from the
    process's CPU affinity mask, so the backend is created under a mask of
    ``threads`` CPUs, and then the mask is restored. The same matmul then
    runs on one thread, and the OS may place that thread on any core.
    """
    if "jax" in sys.modules:
        return sys.modules["jax"]
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    narrowed = bool(_THREADS and mask and len(mask) > _THREADS)
    if narrowed:
        os.sched_setaffinity(0, set(sorted(mask)[:_THREADS]))
    try:
        import jax

        jax.devices()  # creates the backend, and its thread pools, now
    finally:
        if narrowed:
            os.sched_setaffinity(0, mask)
    return jax


def get_clock(name: str, device: str):
    if name == "process" and not device.startswith("cuda"):
        return time.process_time
    return time.perf_counter


# --------------------------------------------------------------------------- #
# targets: the workloads' MLP potential, and a Gaussian for --check
# --------------------------------------------------------------------------- #
def init_weights(sizes, n_chains: int, rng) -> list:
    """``[W1, b1, W2, b2, ...]``, float32, shapes ``(S, out, in)`` and ``(S, out)`` (torch's Linear layout).

    Uniform on +-1/sqrt(fan_in), torch's default initialisation; every chain its own draw.
    """
    import numpy as np

    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / math.sqrt(a)
        out.append(rng.uniform(-bound, bound, (n_chains, b, a)).astype(np.float32))
        out.append(rng.uniform(-bound, bound, (n_chains, b)).astype(np.float32))
    return out


class MLPTarget:
    """A workload's potential: shared initial weights (numpy) and ``POOL`` mini-batches."""

    kind = "mlp"

    def __init__(self, workload: Workload, n_chains: int, n_data: int = N_DATA, seed: int = 0):
        import numpy as np

        self.workload, self.sizes, self.batch = workload, workload.sizes, workload.batch
        self.n_chains, self.n_data = int(n_chains), int(n_data)
        rng = np.random.default_rng(seed)
        self.init = init_weights(self.sizes, self.n_chains, rng)
        self.pool = [(rng.random((self.batch, self.sizes[0]), dtype=np.float32),
                      rng.integers(0, self.sizes[-1], self.batch).astype(np.int64)) for _ in range(POOL)]

    @property
    def scale(self) -> float:
        return self.n_data / self.batch


class GaussianTarget:
    """``U(theta) = |theta|^2 / (2 sigma^2)`` per chain, no data: a sampler of variance ``sigma^2 T`` (--check)."""

    kind = "gaussian"

    def __init__(self, dim: int, n_chains: int, sigma: float = 1.0, seed: int = 0):
        import numpy as np

        self.dim, self.n_chains, self.sigma = int(dim), int(n_chains), float(sigma)
        rng = np.random.default_rng(seed)
        self.init = [(sigma * rng.standard_normal((self.n_chains, self.dim))).astype(np.float32)]
        self.pool = [(None, None)]


# --------------------------------------------------------------------------- #
# OUR SIDE: the only functions written against bayesnet's sampler API.
# The integrator adapts these to the new API; everything else is peers.
# --------------------------------------------------------------------------- #
def ours_potential(target, device: str):
    """Today's API: the potential our kernels step on, at ``target.init``.

    The workloads use the estimators' ``ChainPosterior`` (every chain packed
    on a leading axis, the MLP's batched products). The Gaussian target uses
    a ``FunctionPotential`` returning one value per chain.
    """
    import torch

    from bayesnet.posterior import ChainPosterior, FunctionPotential

    init = [torch.tensor(a, device=device) for a in target.init]
    if target.kind == "gaussian":
        inv_var = 1.0 / target.sigma**2

        def potentials(ps, X=None, y=None, factors=None, offset=None):
            return 0.5 * inv_var * (ps[0] * ps[0]).sum(1)

        class GaussianPotential(FunctionPotential):
            """With the pure form a compiled transition differentiates (``ChainPosterior.functional``'s
            signature; no data and no prior terms)."""

            def functional(self):
                return potentials

            def prior_form(self):
                return [], torch.zeros((), device=device)

        return GaussianPotential(lambda ps, batch: potentials(ps), init)
    from bayesnet.likelihoods import CategoricalLikelihood
    from bayesnet.networks import MLP
    from bayesnet.priors import GaussianPrior

    sizes = target.sizes
    module = MLP(sizes[0], sizes[1:-1], sizes[-1]).to(device)
    members = [[p[s] for p in init] for s in range(target.n_chains)]
    return ChainPosterior(module, CategoricalLikelihood(), GaussianPrior(PRIOR_SCALE), target.n_data, members)


def ours_kernel_step_fn(sampler: str, hyper: dict, potential, n_chains: int, seed: int, device: str,
                        compiled: bool = False):
    """Today's API: ``(step(batch), position() -> [Tensor (S, ...)], value(batch) -> Tensor (S,))``.

    ``step`` is one ``sampler.step`` of all chains (with ``compiled``, one call of the sampler's
    :class:`~bayesnet.samplers.compiled.CompiledTransition`, compiled at its first call). The chains are packed
    on the leading axis, ``n_chains`` of them, as the estimators run them, each with its own random stream.
    """
    from bayesnet.samplers import ChainRandom, make_sampler

    kernel = make_sampler(sampler, **hyper)
    state = kernel.init(potential.parameters, ChainRandom(seed, n_chains, device), n_chains=n_chains)
    if compiled:
        from bayesnet.samplers.compiled import CompiledTransition

        transition = CompiledTransition(kernel, potential, state.layout,
                                        options={"mode": COMPILE_MODE} if COMPILE_MODE else None)

        def step(batch):
            transition(state, potential, batch)
    else:
        def step(batch):
            kernel.step(state, potential, batch)

    def position():
        return [p.detach() for p in state.position]

    def value(batch):
        return potential.value(batch).detach().reshape(-1)

    return step, position, value


def ours_estimator_fn(sampler: str, hyper: dict, workload: Workload, n_chains: int, X, y, n_epochs: int,
                      device: str, seed: int, clock, compiled: bool = False) -> dict:
    """Today's API: one ``BayesianMLPClassifier.fit`` of ``n_epochs`` epochs.

    ``compiled``: fit with ``compile=True`` (in ``COMPILE_MODE`` when set).

    Returns ``{"epoch_s": [seconds per epoch], "epoch_steps": [steps per
    epoch], "total_s": fit seconds}``. The epochs are timed with ``clock``
    by a skorch callback.
    """
    from skorch.callbacks import Callback

    from bayesnet import BayesianMLPClassifier

    class EpochClock(Callback):
        def initialize(self):
            self.epochs = []
            return self

        def on_epoch_begin(self, net, **kwargs):
            _torch_sync(device)
            self._t0 = clock()

        def on_epoch_end(self, net, **kwargs):
            _torch_sync(device)
            self.epochs.append(clock() - self._t0)

    steps = n_epochs * math.ceil(len(X) / workload.batch)
    thinning = 10
    n_draws = max(1, steps // (2 * thinning))
    timer = EpochClock()
    # compiled: the frozen step compiled (in --compile-mode's mode, as for ours-compiled); with the explicit step
    # size there is no warm-up: it compiles in the first epoch, which the median leaves out
    compile_options = {}
    if compiled:
        compile_options = {"compile": True, **({"compile__mode": COMPILE_MODE} if COMPILE_MODE else {})}
    est = BayesianMLPClassifier(
        hidden_layer_sizes=tuple(workload.sizes[1:-1]), sampler=sampler, batch_size=workload.batch,
        n_chains=n_chains, max_epochs=n_epochs, burn_in=steps - n_draws * thinning, n_draws=n_draws,
        thinning=thinning, prior_scale=PRIOR_SCALE, device=device, random_state=seed,
        callbacks=[("epoch_clock", timer)], **{f"sampler__{k}": v for k, v in hyper.items()}, **compile_options)
    t0 = clock()
    est.fit(X, y)
    total = clock() - t0
    return {"epoch_s": list(timer.epochs), "epoch_steps": [e.get("train_batch_count", 0) for e in est.history_],
            "total_s": total}


def ours_default_fit(device: str, seed: int):
    """Today's API: the default classifier (only ``device`` and ``random_state`` set)."""
    from bayesnet import BayesianMLPClassifier

    return BayesianMLPClassifier(device=device, random_state=seed)


# --------------------------------------------------------------------------- #
# runners: one implementation's chains on a target
# --------------------------------------------------------------------------- #
def _torch_sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _torch_pool(target, device):
    import torch

    if target.kind == "gaussian":
        return [(None, None)]
    return [(torch.as_tensor(X, device=device), torch.as_tensor(y, device=device)) for X, y in target.pool]


class OursKernel:
    """``ours-kernel``: our kernel through :func:`ours_kernel_step_fn`."""

    compiled = False

    def __init__(self, sampler, hyper, target, device, seed=1):
        self.device, self.pool, self.i = device, _torch_pool(target, device), 0
        potential = ours_potential(target, device)
        self._step, self._position, self._value = ours_kernel_step_fn(sampler, hyper, potential, target.n_chains,
                                                                      seed, device, self.compiled)

    def run(self, n):
        step, pool, P = self._step, self.pool, len(self.pool)
        for k in range(self.i, self.i + n):
            step(pool[k % P])
        self.i += n

    def sync(self):
        _torch_sync(self.device)

    def position(self):
        return [p.cpu().numpy().copy() for p in self._position()]

    def potential(self):
        return self._value(self.pool[0]).cpu().numpy()


def _torch_terms(target, device):
    """The hand-written potential: ``(params, total_u(X, y), per_chain_u(X, y) -> (S,), to_chains(params))``.

    ``total_u`` is the sum over chains, which is what autograd differentiates
    (every chain gets its own gradient). One chain uses the parameters of a
    ``bayesnet.networks.MLP``, which is what a user would write. Several
    chains use stacked leaves through ``baddbmm``.
    """
    import torch
    import torch.nn.functional as F

    inv_var, S = 1.0 / PRIOR_SCALE**2, target.n_chains
    if target.kind == "gaussian":
        params = [torch.tensor(target.init[0], device=device).requires_grad_()]
        inv_var = 1.0 / target.sigma**2

        def per_chain_u(X, y):
            return 0.5 * inv_var * (params[0] * params[0]).sum(1)

        return params, (lambda X, y: per_chain_u(X, y).sum()), per_chain_u, (lambda ps: ps)
    scale = target.scale
    if S == 1:
        from bayesnet.networks import MLP

        module = MLP(target.sizes[0], target.sizes[1:-1], target.sizes[-1]).to(device)
        params = list(module.parameters())
        with torch.no_grad():
            for p, a in zip(params, target.init):
                p.copy_(torch.as_tensor(a[0]))

        def total_u(X, y):
            return scale * F.cross_entropy(module(X), y, reduction="sum") \
                + 0.5 * inv_var * sum((p * p).sum() for p in params)

        return params, total_u, (lambda X, y: total_u(X, y).reshape(1)), (lambda ps: [p.unsqueeze(0) for p in ps])
    params = [torch.tensor(a, device=device).requires_grad_() for a in target.init]
    n_layers = len(params) // 2

    def per_chain_u(X, y):
        h = X.expand(S, *X.shape)
        for i in range(n_layers):
            h = torch.baddbmm(params[2 * i + 1].unsqueeze(1), h, params[2 * i].transpose(1, 2))
            if i < n_layers - 1:
                h = torch.relu(h)
        nll = F.cross_entropy(h.reshape(-1, h.shape[-1]), y.repeat(S), reduction="none").view(S, -1).sum(1)
        return scale * nll + 0.5 * inv_var * sum((p * p).reshape(S, -1).sum(1) for p in params)

    return params, (lambda X, y: per_chain_u(X, y).sum()), per_chain_u, (lambda ps: ps)


class TorchLoop:
    """``torch-loop``: ``step_overhead.HandWrittenLoop`` on this workload."""

    def __init__(self, sampler, hyper, target, device, seed=1):
        import torch

        from step_overhead import HandWrittenLoop

        self.device, self.pool = device, _torch_pool(target, device)
        params, total_u, self._u, self._to_chains = _torch_terms(target, device)

        def value_grad(X, y):
            total = total_u(X, y)
            return total.detach(), torch.autograd.grad(total, params)

        def batches():
            while True:
                yield from self.pool

        from bayesnet.samplers import ChainRandom

        # the streams our kernel draws from (OursKernel: ChainRandom(seed, n_chains)): the same noise, step for step
        generator = ChainRandom(seed, target.n_chains, device)
        self.loop = HandWrittenLoop.from_parts(sampler, params, value_grad, batches(), generator, **hyper)

    def run(self, n):
        self.loop.run(n)

    def sync(self):
        _torch_sync(self.device)

    def position(self):
        return [p.detach().cpu().numpy().copy() for p in self._to_chains(self.loop.params)]

    def potential(self):
        import torch

        with torch.no_grad():
            return self._u(*self.pool[0]).cpu().numpy()


class Posteriors:
    """``posteriors``: its sgld/sghmc/sgnht transforms on the same ``nn.Module``."""

    def __init__(self, sampler, hyper, target, device, seed=1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tensordict FutureWarnings on import
                import posteriors
        except ImportError as exc:
            raise Unsupported(f"posteriors is not installed ({exc}); pip install -e '.[bench]'") from None
        import torch
        import torch.nn.functional as F
        from torch.func import functional_call

        torch.manual_seed(seed)  # posteriors draws its noise from the global generator
        self.device, self.pool, self.S = device, _torch_pool(target, device), target.n_chains
        S = self.S
        if target.kind == "gaussian":
            inv_var = 1.0 / target.sigma**2
            names = ["theta"]

            def log_posterior(params, batch):
                theta = params["theta"]
                value = -0.5 * inv_var * (theta * theta).sum()
                return value, value
        else:
            from bayesnet.networks import MLP

            module = MLP(target.sizes[0], target.sizes[1:-1], target.sizes[-1]).to(device)
            names = [n for n, _ in module.named_parameters()]
            scale, inv_var = target.scale, 1.0 / PRIOR_SCALE**2

            def log_posterior(params, batch):
                X, y = batch
                logits = functional_call(module, params, (X,))
                value = (-scale * F.cross_entropy(logits, y, reduction="sum")
                         - 0.5 * inv_var * sum((p * p).sum() for p in params.values()))
                return value, logits
        self._log_posterior = log_posterior
        stacked = {n: torch.tensor(a, device=device) for n, a in zip(names, target.init)}
        T = hyper["temperature"]
        if sampler == "sgld":
            module_ = posteriors.sgmcmc.sgld
            transform = module_.build(log_posterior, lr=hyper["step_size"], temperature=T)
        else:
            eps, alpha = momentum_form(sampler, hyper)
            module_ = getattr(posteriors.sgmcmc, sampler)
            transform = module_.build(log_posterior, lr=eps, alpha=alpha, temperature=T)
            momenta = {n: math.sqrt(T) * torch.randn_like(v) for n, v in stacked.items()}  # p ~ N(0, T)
        self.transform = transform
        if S == 1:
            params = {n: v[0].clone() for n, v in stacked.items()}
            if sampler == "sgld":
                self.state = transform.init(params)
            elif sampler == "sghmc":
                self.state = module_.init(params, {n: m[0].clone() for n, m in momenta.items()})
            else:
                self.state = module_.init(params, {n: m[0].clone() for n, m in momenta.items()}, alpha)
            self._run = self._run_single
        else:
            # torch.func.vmap over chains: a function of plain tensors that rebuilds the state and updates it
            if sampler == "sgld":
                def one(params, batch):
                    return transform.update(module_.init(params), batch, inplace=False)[0].params
                self.carry = (stacked,)
            elif sampler == "sghmc":
                def one(params, momenta, batch):
                    new = transform.update(module_.init(params, momenta), batch, inplace=False)[0]
                    return new.params, new.momenta
                self.carry = (stacked, momenta)
            else:
                def one(params, momenta, xi, batch):  # (sgnht.init calls torch.tensor(xi), which vmap refuses)
                    new = transform.update(module_.SGNHTState(params, momenta, xi), batch, inplace=False)[0]
                    return new.params, new.momenta, new.xi
                self.carry = (stacked, momenta, torch.full((S,), alpha, device=device))
            in_dims = (0,) * len(self.carry) + (None,)
            self.update = torch.func.vmap(one, in_dims=in_dims, randomness="different")
            self._run = self._run_vmap

    def _run_single(self, n):
        update, pool, P, state = self.transform.update, self.pool, len(self.pool), self.state
        for k in range(n):
            state, _ = update(state, pool[k % P], inplace=True)
        self.state = state

    def _run_vmap(self, n):
        update, pool, P, carry = self.update, self.pool, len(self.pool), self.carry
        for k in range(n):
            out = update(*carry, pool[k % P])
            carry = out if isinstance(out, tuple) else (out,)
        self.carry = carry

    def run(self, n):
        self._run(n)

    def sync(self):
        _torch_sync(self.device)

    def _params(self):
        if self.S == 1:
            return {n: v.unsqueeze(0) for n, v in self.state.params.items()}
        return self.carry[0]

    def position(self):
        return [v.detach().cpu().numpy().copy() for v in self._params().values()]

    def potential(self):
        import torch

        batch = self.pool[0]
        with torch.no_grad():
            values = [-self._log_posterior({n: v[s] for n, v in self._params().items()}, batch)[0]
                      for s in range(self.S)]
        return torch.stack(values).cpu().numpy()


class BlackJAX:
    """``blackjax``: the jit-compiled BlackJAX step on the same MLP in ``jax.numpy``."""

    def __init__(self, sampler, hyper, target, device, seed=1):
        try:
            jax = import_jax()
            import jax.numpy as jnp

            import blackjax
            from blackjax.sgmcmc.diffusions import sghmc as sghmc_diffusion
            from blackjax.sgmcmc.gradients import grad_estimator, logdensity_estimator
        except ImportError as exc:
            raise Unsupported(f"jax/blackjax is not installed ({exc}); pip install -e '.[bench]'") from None
        if device.startswith("cuda") and jax.default_backend() != "gpu":
            raise Unsupported("jax sees no GPU (CPU jaxlib); BlackJAX is timed on the CPU runs only")
        S = target.n_chains
        self.S, self.jax = S, jax
        if target.kind == "gaussian":
            inv_var = 1.0 / target.sigma**2

            def potential_fn(position, batch):
                return 0.5 * inv_var * jnp.sum(position[0] ** 2)

            def grad_fn(position, batch):  # gradient of the log density
                return jax.grad(lambda p: -potential_fn(p, batch))(position)

            self.pool = [jnp.zeros(())]
        else:
            n_layers, inv_var = len(target.init) // 2, 1.0 / PRIOR_SCALE**2

            def logprior(position):
                return -0.5 * inv_var * sum(jnp.sum(p * p) for p in position)

            def loglikelihood(position, example):  # one row, as blackjax's estimators vmap it
                x, label = example
                h = x
                for i in range(n_layers):
                    h = position[2 * i] @ h + position[2 * i + 1]
                    if i < n_layers - 1:
                        h = jax.nn.relu(h)
                return jax.nn.log_softmax(h)[label]

            grad_fn = grad_estimator(logprior, loglikelihood, target.n_data)
            log_density = logdensity_estimator(logprior, loglikelihood, target.n_data)

            def potential_fn(position, batch):
                return -log_density(position, batch)

            self.pool = [(jnp.asarray(X), jnp.asarray(y)) for X, y in target.pool]
        T, key = hyper["temperature"], jax.random.PRNGKey(seed)
        position = [jnp.asarray(a if S > 1 else a[0]) for a in target.init]
        if sampler == "sgld":
            algorithm, step_size = blackjax.sgld(grad_fn), hyper["step_size"]
            state = algorithm.init(position)

            def one(k, state, batch):
                return algorithm.step(k, state, batch, step_size, T)

            self._pos = lambda state: state
        else:
            eps, alpha = momentum_form(sampler, hyper)
            key, sub = jax.random.split(key)
            momentum = [math.sqrt(T) * jax.random.normal(k, p.shape, p.dtype)
                        for k, p in zip(jax.random.split(sub, len(position)), position)]
            if sampler == "sghmc":
                integrator = sghmc_diffusion(alpha)
                state = (position, momentum)

                def one(k, state, batch):
                    pos, mom = state
                    return integrator(k, pos, mom, grad_fn(pos, batch), eps, T)

                self._pos = lambda state: state[0]
            else:
                algorithm = blackjax.sgnht(grad_fn, alpha)
                xi = jnp.full((S,), alpha, jnp.float32) if S > 1 else jnp.float32(alpha)
                state = blackjax.sgmcmc.sgnht.SGNHTState(position, momentum, xi)

                def one(k, state, batch):
                    return algorithm.step(k, state, batch, eps, T)

                self._pos = lambda state: state.position
        if S == 1:
            def step(key, state, batch):
                key, sub = jax.random.split(key)
                return key, one(sub, state, batch)

            self._potential = jax.jit(lambda state, batch: potential_fn(self._pos(state), batch)[None])
        else:
            batched = jax.vmap(one, in_axes=(0, 0, None))

            def step(key, state, batch):
                key, sub = jax.random.split(key)
                return key, batched(jax.random.split(sub, S), state, batch)

            self._potential = jax.jit(jax.vmap(lambda state, batch: potential_fn(self._pos(state), batch),
                                               in_axes=(0, None)))
        self.step, self.key, self.state = jax.jit(step), key, state

    def run(self, n):
        step, pool, P, key, state = self.step, self.pool, len(self.pool), self.key, self.state
        for k in range(n):
            key, state = step(key, state, pool[k % P])
        self.key, self.state = key, state

    def sync(self):
        self.jax.block_until_ready(self.state)

    def position(self):
        import numpy as np

        return [np.array(p) if self.S > 1 else np.array(p)[None] for p in self._pos(self.state)]

    def potential(self):
        import numpy as np

        return np.asarray(self._potential(self.state, self.pool[0]))


class OursCompiled(OursKernel):
    """``ours-compiled``: our kernel's frozen step compiled whole (``bayesnet.samplers.compiled``; sgld, sghmc, sgnht);
    the compilation happens in the first call, before the timed blocks."""

    compiled = True


RUNNERS = {"ours-kernel": OursKernel, "ours-compiled": OursCompiled, "torch-loop": TorchLoop,
           "posteriors": Posteriors, "blackjax": BlackJAX}


# --------------------------------------------------------------------------- #
# worker: time one implementation on one workload
# --------------------------------------------------------------------------- #
def time_runner(runner, steps: int, repeats: int, warmup: int, clock) -> dict:
    """First call, warm-up, then ``repeats`` blocks of ``steps`` steps (synchronised); seconds per step."""
    import numpy as np

    gc.collect()
    t0 = clock()
    runner.run(1)
    runner.sync()
    first = clock() - t0
    runner.run(warmup)
    runner.sync()
    blocks = []
    for _ in range(repeats):
        gc.collect()
        t0 = clock()
        runner.run(steps)
        runner.sync()
        blocks.append((clock() - t0) / steps)
    step = statistics.median(blocks)
    finite = all(bool(np.isfinite(p).all()) for p in runner.position())
    return {"step_s": step, "blocks_s": blocks, "first_s": first, "compile_s": max(first - step, 0.0),
            "finite": finite}


def make_data(workload: Workload, n_data: int, seed: int = 0):
    """The estimator's N rows: uniform float32 features, uniform class labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.random((n_data, workload.sizes[0]), dtype=np.float32)
    y = rng.integers(0, workload.sizes[-1], n_data).astype(np.int64)
    y[: workload.sizes[-1]] = np.arange(workload.sizes[-1])  # every class present
    return X, y


def library_versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("bayesnet", "torch", "jax", "jaxlib", "blackjax", "posteriors", "scikit-learn", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def run_worker(args) -> list:
    global COMPILE_MODE
    COMPILE_MODE = args.compile_mode
    pin_threads(args.threads, args.device)
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(args.threads)
    clock = get_clock(args.clock, args.device)
    if args.worker in FITS:
        return [run_fit(args, clock)]
    workload = WORKLOADS[args.workload]
    records = []
    data = None
    for chains in args.chains:
        for sampler in args.samplers:
            hyper = hyperparameters(sampler, workload.step_size)
            rec = {"impl": args.worker, "workload": workload.name, "chains": chains, "sampler": sampler,
                   "device": args.device, "threads": args.threads, "clock": args.clock}
            try:
                if args.worker in ("ours-estimator", "ours-estimator-compiled"):
                    if data is None:
                        data = make_data(workload, args.n_data)
                    out = ours_estimator_fn(sampler, hyper, workload, chains, *data, args.estimator_epochs,
                                            args.device, 0, clock, compiled=args.worker.endswith("compiled"))
                    per_step = [s / n for s, n in zip(out["epoch_s"], out["epoch_steps"]) if n]
                    timed = per_step[1:] or per_step  # the first epoch is the warm-up
                    step = statistics.median(timed)
                    rec.update(step_s=step, blocks_s=timed, first_s=per_step[0],
                               # what the first epoch took beyond steady steps (a lazy compile would show here)
                               compile_s=max(out["epoch_s"][0] - step * out["epoch_steps"][0], 0.0),
                               setup_s=out["total_s"] - sum(out["epoch_s"]), steps=sum(out["epoch_steps"]))
                else:
                    runner = RUNNERS[args.worker](sampler, hyper, MLPTarget(workload, chains, args.n_data),
                                                  args.device)
                    rec.update(time_runner(runner, args.steps, args.repeats, args.warmup, clock))
            except Unsupported as exc:
                rec["skipped"] = str(exc)
            records.append(rec)
    return records


def run_fit(args, clock) -> dict:
    """A default fit on breast cancer (StandardScaler in front): fit seconds and test accuracy."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    if args.worker == "fit-bayesnet":
        model = make_pipeline(StandardScaler(), ours_default_fit(args.device, 0))
    else:
        model = make_pipeline(StandardScaler(), MLPClassifier(random_state=0))
    t0 = clock()
    model.fit(X_tr, y_tr)
    fit_s = clock() - t0
    return {"impl": args.worker, "fit_s": fit_s, "accuracy": float(model.score(X_te, y_te)),
            "n_train": len(y_tr), "device": args.device, "threads": args.threads, "clock": args.clock}


# --------------------------------------------------------------------------- #
# parent: alternate worker processes, collect, report
# --------------------------------------------------------------------------- #
def worker_command(impl, args, workload=None) -> list:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl, "--threads", str(args.threads),
           "--device", args.device, "--clock", args.clock]
    if args.compile_mode:
        cmd += ["--compile-mode", args.compile_mode]
    if workload is not None:
        wl = WORKLOADS[workload]
        chains = [c for c in wl.chains if args.chains is None or c in args.chains] or list(wl.chains)
        cmd += ["--workload", workload, "--chains", *map(str, chains), "--samplers", *args.samplers,
                "--steps", str(args.steps), "--repeats", str(args.repeats), "--warmup", str(args.warmup),
                "--estimator-epochs", str(args.estimator_epochs), "--n-data", str(args.n_data)]
    return cmd


def spawn(cmd, env, timeout) -> tuple[list, str | None]:
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout} s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(JSON_TAG):
            return json.loads(line[len(JSON_TAG):]), None
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    return [], f"exit {proc.returncode}:\n{tail}"


def _progress_figure(rec: dict) -> str:
    """A worker's record as the parent's progress line shows it ("" for a record without a figure)."""
    if "step_s" in rec:
        flag = "" if rec.get("finite", True) else " NON-FINITE"
        return f"{rec.get('sampler', '')} x{rec.get('chains', '')} {rec['step_s'] * 1e6:.0f} µs{flag}"
    return f"fit {rec['fit_s']:.2f} s" if "fit_s" in rec else ""


def run_parent(args) -> dict:
    env = dict(os.environ)
    env.update(thread_env(args.threads, args.device))
    jobs = [(impl, w) for impl in args.impls for w in args.workloads]
    if args.fit:
        jobs += [(f, None) for f in FITS]
    records, failures = [], []
    t_start = time.perf_counter()
    for r in range(args.rounds):
        k = r % len(jobs)
        for impl, workload in jobs[k:] + jobs[:k]:  # A B A B ..., starting one later each round
            t0 = time.perf_counter()
            out, error = spawn(worker_command(impl, args, workload), env, args.worker_timeout)
            for rec in out:
                rec["round"] = r
            records += out
            what = f"{impl}" + (f" {workload}" if workload else "")
            if error:
                failures.append(f"round {r + 1} {what}: {error}")
                print(f"  round {r + 1}/{args.rounds} {what}: FAILED ({error.splitlines()[0]})", flush=True)
            else:  # the figures too, so that a run stopped at a time limit still shows what it measured
                got = " ".join(filter(None, map(_progress_figure, out)))
                print(f"  round {r + 1}/{args.rounds} {what}: {time.perf_counter() - t0:.0f} s"
                      + (f" ({got})" if got else ""), flush=True)
    return {"records": records, "failures": failures, "wall_s": time.perf_counter() - t_start}


def summarise(records) -> tuple[list, list]:
    """Per (workload, chains, sampler, impl): medians over rounds; fits: per impl."""
    groups, fits = {}, {}
    for rec in records:
        if "fit_s" in rec:
            fits.setdefault(rec["impl"], []).append(rec)
        else:
            groups.setdefault((rec["workload"], rec["chains"], rec["sampler"], rec["impl"]), []).append(rec)
    rows = []
    for (workload, chains, sampler, impl), recs in groups.items():
        timed = [r for r in recs if "step_s" in r]
        row = {"workload": workload, "chains": chains, "sampler": sampler, "impl": impl, "rounds": len(timed)}
        if timed:
            steps = [r["step_s"] for r in timed]
            row.update(step_s=statistics.median(steps), min_s=min(steps), max_s=max(steps),
                       first_s=statistics.median(r["first_s"] for r in timed),
                       finite=all(r.get("finite", True) for r in timed))
            if "compile_s" in timed[0]:
                row["compile_s"] = statistics.median(r["compile_s"] for r in timed)
            if "setup_s" in timed[0]:
                row["setup_s"] = statistics.median(r["setup_s"] for r in timed)
        else:
            row["skipped"] = recs[0].get("skipped", "failed")
        rows.append(row)
    fit_rows = [{"impl": impl, "rounds": len(recs), "fit_s": statistics.median(r["fit_s"] for r in recs),
                 "min_s": min(r["fit_s"] for r in recs), "max_s": max(r["fit_s"] for r in recs),
                 "accuracy": statistics.median(r["accuracy"] for r in recs)} for impl, recs in fits.items()]
    return rows, fit_rows


RATIOS = (("ours-kernel", "blackjax", "kernel/blackjax"), ("ours-compiled", "blackjax", "compiled/blackjax"),
          ("ours-compiled", "ours-kernel", "compiled/kernel"), ("ours-kernel", "posteriors", "kernel/posteriors"),
          ("ours-kernel", "torch-loop", "kernel/torch-loop"), ("ours-estimator", "ours-kernel", "estimator/kernel"),
          ("ours-estimator", "blackjax", "estimator/blackjax"),
          ("ours-estimator-compiled", "ours-estimator", "est-compiled/estimator"),
          ("ours-estimator-compiled", "ours-compiled", "est-compiled/compiled"))


def ratio_rows(rows) -> list:
    by = {(r["workload"], r["chains"], r["sampler"], r["impl"]): r for r in rows}
    cases = sorted({(r["workload"], r["chains"], r["sampler"]) for r in rows},
                   key=lambda c: (list(WORKLOADS).index(c[0]), c[1], SAMPLERS.index(c[2])))
    out = []
    for case in cases:
        entry = {"workload": case[0], "chains": case[1], "sampler": case[2]}
        for impl in IMPLS:
            r = by.get((*case, impl))
            entry[impl] = r.get("step_s") if r else None
        for num, den, name in RATIOS:
            a, b = entry.get(num), entry.get(den)
            entry[name] = a / b if a and b else None
        out.append(entry)
    return out


def _fmt(value, scale=1e6, digits=0):
    return "n/a" if value is None else f"{value * scale:.{digits}f}"


def print_report(summary, fit_rows, args, failures) -> None:
    impls = [i for i in IMPLS if i in args.impls]
    ratios = [name for num, den, name in RATIOS if num in impls and den in impls]
    print(f"\n### Seconds per sampler step (µs, median over {args.rounds} alternating rounds; "
          f"device {args.device}, {args.threads} thread(s), clock {args.clock})\n")
    header = ["workload", "chains", "sampler", *[f"{i} µs" for i in impls], *ratios]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for e in summary["ratios"]:
        wl = WORKLOADS[e["workload"]].label()
        cells = [wl, str(e["chains"]), e["sampler"], *[_fmt(e[i]) for i in impls],
                 *[_fmt(e[name], 1, 2) for name in ratios]]
        print("| " + " | ".join(cells) + " |")
    rows = summary["rows"]
    print("\n### One-off costs (median over rounds)\n")
    print("| workload | chains | sampler | impl | first call (estimator: epoch) − steady steps (ms) | "
          "estimator setup (ms) | spread of step µs (min-max) |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (list(WORKLOADS).index(r["workload"]), r["chains"],
                                         SAMPLERS.index(r["sampler"]), IMPLS.index(r["impl"]))):
        if "step_s" not in r:
            print(f"| {WORKLOADS[r['workload']].label()} | {r['chains']} | {r['sampler']} | {r['impl']} | "
                  f"skipped: {r['skipped'].splitlines()[0]} | | |")
            continue
        flag = "" if r["finite"] else " (NON-FINITE position)"
        print(f"| {WORKLOADS[r['workload']].label()} | {r['chains']} | {r['sampler']} | {r['impl']} | "
              f"{_fmt(r.get('compile_s'), 1e3, 1)} | {_fmt(r.get('setup_s'), 1e3, 1) if 'setup_s' in r else ''} | "
              f"{r['min_s'] * 1e6:.0f}-{r['max_s'] * 1e6:.0f}{flag} |")
    if fit_rows:
        by = {r["impl"]: r for r in fit_rows}
        print("\n### Default fit on breast cancer (StandardScaler in front; 426 training rows)\n")
        print("| model | fit s (median) | min-max s | test accuracy | fit / MLPClassifier |")
        print("|---|---|---|---|---|")
        base = by.get("fit-sklearn", {}).get("fit_s")
        for impl, label in (("fit-bayesnet", "BayesianMLPClassifier()"), ("fit-sklearn", "MLPClassifier()")):
            if impl in by:
                r = by[impl]
                ratio = f"{r['fit_s'] / base:.2f}" if base else "n/a"
                print(f"| {label} | {r['fit_s']:.2f} | {r['min_s']:.2f}-{r['max_s']:.2f} | "
                      f"{r['accuracy']:.3f} | {ratio} |")
    if failures:
        print("\nFailures:")
        for f in failures:
            print("  " + f.replace("\n", "\n    "))


def write_output(path, summary, meta) -> None:
    if path.endswith(".csv"):
        fields = ["kind", "workload", "chains", "sampler", "impl", "rounds", "step_s", "min_s", "max_s", "first_s",
                  "compile_s", "setup_s", "finite", "skipped", "fit_s", "accuracy"]
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields + [name for _, _, name in RATIOS], extrasaction="ignore")
            writer.writeheader()
            for r in summary["rows"]:
                writer.writerow({"kind": "step", **r})
            for e in summary["ratios"]:
                writer.writerow({"kind": "ratio", **{k: v for k, v in e.items() if k not in IMPLS}})
            for r in summary["fit"]:
                writer.writerow({"kind": "fit", **r})
    else:
        with open(path, "w") as fh:
            json.dump({"meta": meta, **summary}, fh, indent=1)
    print(f"\nwrote {path}")


# --------------------------------------------------------------------------- #
# --check
# --------------------------------------------------------------------------- #
GAUSS_SGLD_STEP, GAUSS_MOMENTUM_STEP, GAUSS_BURN_IN, GAUSS_STEPS, GAUSS_TOLERANCE = 0.01, 1e-4, 1000, 4000, 0.05


def _rel(a, b) -> float:
    import numpy as np

    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def run_check(args) -> bool:
    """The four checks of the module docstring; prints one line per check, returns whether all pass."""
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    device, ok = args.device, True

    def report(name, value, tol, extra=""):
        nonlocal ok
        good = value is not None and np.isfinite(value) and value <= tol
        ok &= bool(good)
        print(f"  {'PASS' if good else 'FAIL'}  {name}: {value:.2e} (tolerance {tol:g}){extra}")

    def build(impl, sampler, hyper, target):
        try:
            return RUNNERS[impl](sampler, hyper, target, device)
        except Unsupported as exc:
            print(f"  skip  {impl} {sampler}: {exc}")
            return None

    impls = [i for i in args.impls if i in RUNNERS]
    print("1-2. same potential and same SGLD gradient step (temperature 1e-12) as the torch loop")
    for name in args.workloads:
        wl = WORKLOADS[name]
        for chains in (1, 2):
            target = MLPTarget(wl, chains, args.n_data)
            cold = hyperparameters("sgld", wl.step_size, temperature=1e-12)
            ref = build("torch-loop", "sgld", cold, target)
            u_ref, start = ref.potential(), ref.position()
            ref.run(1)
            move_ref = [a - b for a, b in zip(ref.position(), start)]
            for impl in impls:
                if impl == "torch-loop":
                    continue
                runner = build(impl, "sgld", cold, target)
                if runner is None:
                    continue
                report(f"{wl.label()} x{chains} {impl}: U vs torch loop", _rel(runner.potential(), u_ref), 1e-5)
                runner.run(1)
                runner.sync()
                move = [a - b for a, b in zip(runner.position(), target.init)]
                largest = max(float(np.max(np.abs(r))) for r in move_ref)
                error = max(float(np.max(np.abs(m - r))) for m, r in zip(move, move_ref))
                report(f"{wl.label()} x{chains} {impl}: SGLD move vs torch loop (relative to the largest move)",
                       error / largest, 1e-3)
    print("3. same update given the same noise: our kernel vs the torch loop, 5 steps from the same start")
    for name in args.workloads:
        wl = WORKLOADS[name]
        for sampler in SAMPLERS:
            for chains in (1, 2):
                target = MLPTarget(wl, chains, args.n_data)
                hyper = hyperparameters(sampler, wl.step_size)
                a, b = OursKernel(sampler, hyper, target, device), TorchLoop(sampler, hyper, target, device)
                a.run(5)
                b.run(5)
                report(f"{wl.label()} x{chains} {sampler}: max|theta_ours - theta_loop| / max|theta|",
                       max(_rel(p, q) for p, q in zip(a.position(), b.position())), 1e-5)
    print("4. Gaussian target |theta|^2/2: mean theta^2 after burn-in (expected 1; sgld 1/(1 - step/2))")
    for impl in impls:
        for sampler in SAMPLERS:
            target = GaussianTarget(256, 4)
            # sgld: eta = 0.01, relaxation ~100 steps, bias 0.5 % (known exactly). sghmc/sgnht: eps = 0.01 and
            # alpha = 1 in posteriors'/BlackJAX's units, where their explicit Euler scheme's bias is ~1 %
            # (it is 11 % at eps = 0.1), relaxation ~200 steps
            step = GAUSS_SGLD_STEP if sampler == "sgld" else GAUSS_MOMENTUM_STEP
            hyper = hyperparameters(sampler, step, friction=math.sqrt(step), noise=math.sqrt(step))
            runner = build(impl, sampler, hyper, target)
            if runner is None:
                continue
            runner.run(GAUSS_BURN_IN)
            second = []
            for _ in range(GAUSS_STEPS // 10):
                runner.run(10)
                second.append(float(np.mean(runner.position()[0].astype(np.float64) ** 2)))
            expected = 1.0 / (1.0 - step / 2) if sampler == "sgld" else 1.0
            value = statistics.fmean(second)
            report(f"{impl} {sampler}: |mean theta^2 / expected - 1|", abs(value / expected - 1.0), GAUSS_TOLERANCE,
                   f"  (mean theta^2 = {value:.3f})")
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return ok


# --------------------------------------------------------------------------- #
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=list(IMPLS))
    ap.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    ap.add_argument("--chains", type=int, nargs="+", default=None,
                    help="restrict the chain counts (default: 1 for mlp784; 1, 16, 64 for mlp30)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of worker processes (default 5)")
    ap.add_argument("--steps", type=int, default=200, help="steps per timed block (default 200)")
    ap.add_argument("--repeats", type=int, default=7, help="timed blocks per worker (default 7)")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up steps after the first call (default 50)")
    ap.add_argument("--estimator-epochs", type=int, default=4,
                    help="epochs of each estimator fit, the first one warm-up (default 4)")
    ap.add_argument("--n-data", type=int, default=N_DATA, help=f"N, rows of the data set (default {N_DATA})")
    ap.add_argument("--threads", type=int, default=1, help="threads of every worker (default 1)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda for ours, the torch loop and posteriors")
    ap.add_argument("--clock", choices=["wall", "process"], default="wall",
                    help="wall (default) or process CPU time (busy machine, with --threads 1)")
    ap.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"],
                    help="torch.compile's mode for ours-compiled and ours-estimator-compiled (reduce-overhead: CUDA "
                         "graphs on a GPU)")
    ap.add_argument("--no-fit", dest="fit", action="store_false", help="skip the default-fit comparison")
    ap.add_argument("--quick", action="store_true",
                    help="2 rounds, N=4096, 20-step blocks x 3, 2 estimator epochs: to validate, not to measure")
    ap.add_argument("--check", action="store_true", help="run the correctness checks (module docstring) and exit")
    ap.add_argument("--output", help="write the summary to this .json or .csv file")
    ap.add_argument("--worker-timeout", type=int, default=3600, help="seconds before a worker is abandoned")
    ap.add_argument("--worker", choices=list(IMPLS) + list(FITS), help=argparse.SUPPRESS)
    ap.add_argument("--workload", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.repeats, args.warmup = min(args.rounds, 2), 20, 3, 5
        args.estimator_epochs, args.n_data = 2, min(args.n_data, 4096)
    for name in ("rounds", "steps", "repeats", "estimator_epochs", "n_data", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        ap.error("--warmup must be non-negative")
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        ap.error(f"--device must be cpu or cuda, got {args.device!r}")
    if args.output and not args.output.endswith((".json", ".csv")):
        ap.error("--output must end in .json or .csv")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        if args.worker not in FITS and args.workload is None:
            raise SystemExit("--worker needs --workload")
        print(JSON_TAG + json.dumps(run_worker(args)))
        return 0
    pin_threads(args.threads, args.device)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no GPU on this machine.")
        if args.clock == "process":
            print("note: --clock process is meaningless on a GPU; timing wall clock")
            args.clock = "wall"
    if args.check:
        warnings.filterwarnings("ignore")
        return 0 if run_check(args) else 1
    versions = library_versions()
    print("peers: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in versions.items()))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load {load:.1f}; device {args.device}, "
          f"threads {args.threads}, clock {args.clock}; N={args.n_data}; {args.rounds} rounds x "
          f"({args.repeats} blocks x {args.steps} steps after {args.warmup} warm-up)"
          + ("; QUICK: to validate, not to measure" if args.quick else ""))
    if load > 0.5 * (os.cpu_count() or 1):
        print("WARNING: the machine is busy; other processes inflate and scatter the timings.")
    result = run_parent(args)
    rows, fit_rows = summarise(result["records"])
    summary = {"rows": rows, "ratios": ratio_rows(rows), "fit": fit_rows, "raw": result["records"]}
    print(f"\ntotal {result['wall_s']:.0f} s")
    print_report(summary, fit_rows, args, result["failures"])
    if args.output:
        meta = {"versions": versions, "args": vars(args), "load": load, "failures": result["failures"]}
        write_output(args.output, summary, meta)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
