"""Compiled transitions: the whole step of a frozen kernel (gradient, noise, update, diagnostics) as one graph.

After the warm-up a kernel is a fixed function of its state, the mini-batch and its noise. A sampler that
declares :meth:`~bayesnet.samplers.Sampler.pure_transition` writes that step once as a pure function of tensors;
:class:`CompiledTransition` compiles it whole with ``torch.compile(fullgraph=True)`` (TorchInductor: one C++ or
Triton kernel per fused group, instead of dozens of small eager launches), the gradient by
``torch.func.grad_and_value`` of the potential's own pure form
(:meth:`~bayesnet.posterior.ChainPosterior.functional`).

* **Same numbers.** The noise is drawn eagerly from each chain's own stream, in the order the eager kernel
  draws it, and passed in, so a compiled step is the eager step up to float rounding (tested step for step for
  every compiling sampler, and over whole runs: sgld, sghmc and sgnht to 1e-3 relative after 400 steps; a weakly
  damped baoab chain, or eqn's walkers preconditioned by each other's spread, part from the eager ones once
  rounding flips a ReLU unit, as any two machines' would).
* **Once per fit.** The function is compiled at its first call (about 3-15 s on a CPU; each new batch shape, such
  as the batches one row shorter when an epoch's rows do not divide evenly, compiles once more) and reused for
  every later step; the time is reported.
* **Eager fallback.** Where compilation is unavailable or fails (no C++ compiler, an operation the compiler
  cannot trace), the first call warns once and the same pure function runs eagerly from then on, with the same
  noise, so the run does not stop (its draws agree with the eager kernel's up to float rounding: the pure form
  takes its gradient through ``torch.func``). A network that cannot compile at all says so (``compiles = False``:
  the RNN, whose fused recurrent kernels ``torch.compile`` does not trace), and no compilation is tried.

``sgld``, ``sghmc``, ``sgnht``, ``baoab`` (each of its schemes), ``eqn`` and ``tacthmc`` compile their whole step;
``hmc`` compiles its leapfrog step (:meth:`~bayesnet.samplers.Sampler.run_compiled`: a transition repeats it a
random number of times, so a whole transition would compile once per trajectory length), its momentum refresh and
Metropolis test (a few operations per trajectory) eager around it. ``pt-langevin`` compiles its potential's
gradient only (:class:`CompiledPotential`), its step eager: each step draws which replicas make a Langevin
proposal and takes the gradient at the current positions only where its cache is stale (a host-side choice of
which gradients to take), so one pure step would take both gradients at every step where the eager step takes one
or two. Work a kernel does only at some steps stays an eager update between compiled steps: eqn's walkers'
covariance preconditioner, refreshed every ``covariance_interval`` steps, whose result (the snapshot and its
coefficients) enters the compiled step as an input, so it recompiles nothing; tacthmc's momentum resampling at
its collection steps. tacthmc's biasing table
and bin histogram are inputs and outputs of its compiled step (the bin of the tempering variable indexes them by
``gather`` and ``scatter`` inside the graph).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch

from ..posterior import quadratic_terms
from .estimates import member_view

__all__ = ["CompiledPotential", "CompiledTransition", "COMPILE_MIN_STEPS", "COMPILE_MIN_STEPS_CUDA", "compile_decision",
           "divided_prior_form", "potential_gradients", "weighted_outputs", "write_back"]

#: with ``compile="auto"``, a run compiles only when it has at least this many steps after its warm-up.
#: Measured (``benchmarks/compile_step.py``, one busy CPU core), 2026-11-23: the compiled SGHMC step saved 0.3-1.1 ms
#: of 0.5-2.4 ms per step on MLPs of 30-16-2 and 784-100-10, and its first compilation costs 3.6-9.8 s, so it repaid
#: after 1,000-25,000 steps (eqn saves 0.3-0.5 ms per step and compiles in 3 s with a warm cache, 12-14 s cold: it
#: repays after 10,000-50,000 steps); 20,000 was the threshold then. Since the MLP's written-out gradient
#: (2026-11-26) the eager estimator step has caught up on the CPU: the whole fit's step of the 30-16-2 MLP 0.304 ms
#: eager against 0.347 compiled (one chain), 0.556 against 0.554 (16 chains), and a 784-100-10 fit's 1.96-2.05 ms
#: against 1.90-2.22 (Intel CPUs). On a 2-core AMD EPYC without AVX-512 (2026-11-27) the fit's compiled step was
#: 0.82-0.95x the eager one and repaid its compilation (5.7 s) after about 47,000 steps. A default fit's draws span
#: its burn-in (up to 20,000 steps, from 12,673 rows on), where a compilation would now cost 3-9 s and save
#: little or nothing: the threshold is above that.
COMPILE_MIN_STEPS = 50_000

#: with ``compile="auto"`` on a GPU, a run compiles, with CUDA graphs (torch's ``mode="reduce-overhead"``: the whole
#: step replayed as one launch), when it has at least this many steps after its warm-up. On a GPU a small network's
#: step is the host's launch time, which the graphs remove. Measured on the 784-100-10 MLP's SGHMC step inside a
#: fit (batch 128, one chain): on an H100 (``benchmarks/gpu_check.sh peers``) the graphs took it from 1603 to 1020
#: µs for 5.8 s more of compilation and setup at the fifth lease, from 1106 to 652 µs for 6.6 s at the sixth
#: (repaid after 10,000-14,500 steps); on an H200, a whole fit of 18,095 steps (2026-11-27, the sixth lease's
#: second machine; 16,000 steps after the warm-up): 27.0-28.6 s eager, 31.6 s with graphs compiled from a cold cache,
#: 17.5 s when the compilation was cached. The graphs save about 0.7 ms a step (11.1 s over the 16,000), and the cold
#: compilation and setup cost about 15 s (11.7 s of it compiling): repaid after about 22,000 steps there
#: (a cached compilation, as in a second fit of a grid search in the same process, repays at once). On an H100
#: (the seventh lease, 2026-11-27; ``benchmarks/compile_auto.py --device cuda``, 26,000 steps after a warm-up of
#: 2,200) the same fit took 47.1-47.3 s eager, 63.1 s with graphs compiled cold (18.0 s compiling) and 41.2 s
#: cached: the graphs saved only 0.23 ms a step there, and the cold compilation and setup (21.9 s) repaid after
#: about 95,000 steps; at the threshold of 25,000 then in force, "auto" made that fit a third slower. The
#: threshold is the slower machine's cold case, rounded up, so that "auto" does not make a fit slower.
COMPILE_MIN_STEPS_CUDA = 100_000


def potential_gradients(potentials):
    """``f(ps, X, y, factors, offset) -> (grads, (total, u))`` for a kernel's pure transition: the gradient of
    the members' summed potentials in every parameter tensor (each member's own gradient, as the members do not
    interact) and the per-member potentials ``u``, from ``potentials``
    (:meth:`~bayesnet.posterior.ChainPosterior.functional`)."""

    def total(ps, X, y, factors, offset):
        u = potentials(ps, X, y, factors, offset)
        return u.sum(), u

    return torch.func.grad_and_value(total, has_aux=True)


@torch.no_grad()
def write_back(state, position, flat=None, grad=None) -> None:
    """A pure transition's results into the state's own buffers (a kernel's ``finish_transition``): the positions,
    the momenta's flat buffer and the cached gradient, each where given. Copied, not bound: a compiled function's
    outputs may be reused by its next call (CUDA graphs), and the positions are the posterior's leaves."""
    torch._foreach_copy_(list(state.position), list(position))
    if flat is not None:
        state.flat_momentum.copy_(flat)
    if grad is not None:
        if state.grad is None:
            state.grad = [g.clone() for g in grad]
        else:
            torch._foreach_copy_(state.grad, list(grad))


def divided_prior_form(factors, offset, weight):
    """The prior's pure form divided by a per-member data weight ``w`` (S,): with it the pure potential gives
    ``U_D + U_P / w``, which times ``w`` is the weighted potential ``w U_D + U_P`` (:func:`weighted_outputs`)."""
    return [f / member_view(weight.to(f.dtype), f) for f in factors], offset / weight.to(offset.dtype)


def weighted_outputs(u, grads, factors, offset, parameters, weight):
    """From the pure potential ``u = U_D + U_P / w`` and its gradients, evaluated with the prior's form divided by
    the data weight ``w`` (:func:`divided_prior_form`; ``factors``, ``offset`` the divided form): ``(w u, its
    gradients, U_D)``, the weighted potential ``w U_D + U_P``, its gradient and the unweighted data term."""
    w = weight.to(u.dtype)
    data = u - (0.5 * quadratic_terms(factors, parameters[: len(factors)]) - offset)
    return w * u, [g * member_view(w.to(g.dtype), g) for g in grads], data


class CompiledPotential:
    """``potential`` whose :meth:`value_and_grad` is ``fn``, the compiled gradient of its pure form
    (:func:`potential_gradients` of :meth:`~bayesnet.posterior.ChainPosterior.functional`) at the current
    positions: for a kernel whose own step stays eager but whose gradients compile (pt-langevin). With the
    potential's per-member data weight set (:meth:`~bayesnet.posterior.ChainPosterior.set_data_weight`), the same
    compiled form is evaluated with the prior's form divided by the weight and the result multiplied by it,
    ``beta U_D + U_P = beta (U_D + U_P / beta)``, and the unweighted data terms recorded as the eager potential
    records them. Everything else is the potential's own."""

    def __init__(self, potential, fn):
        self._potential = potential
        self._fn = fn

    def value_and_grad(self, batch):
        potential = self._potential
        factors, offset = potential.prior_form()
        X, y = batch
        weight = getattr(potential, "data_weight", None)
        if weight is not None:  # beta U_D + U_P = beta (U_D + U_P / beta): the same pure form, the prior's divided
            factors, offset = divided_prior_form(factors, offset, weight)
        parameters = [p.detach() for p in potential.parameters]
        grads, (_, u) = self._fn(parameters, X, y, factors, offset)
        if weight is not None:
            with torch.no_grad():
                value, grads, data = weighted_outputs(u, grads, factors, offset, parameters, weight)
                potential.data_value = data.detach().clone()  # U_D, unweighted
                return value, grads
        # copies: the kernel keeps gradients across steps, and a compiled function's outputs may be reused by its
        # next call (CUDA graphs)
        return u.clone(), [g.clone() for g in grads]

    def __getattr__(self, name):
        return getattr(self._potential, name)


#: the ``compile__*`` keys by which a user chooses how to compile: with any of them, "auto" adds no mode of its own
#: (``torch.compile`` refuses ``mode`` beside ``options``, and another backend may take no mode)
_USER_CHOICES = ("mode", "options", "backend")


def compile_decision(setting, sampler, potential, steps_after_warmup: int, device: torch.device | str = "cpu",
                     options: dict | None = None) -> tuple[bool, str, dict]:
    """Whether to compile, why, and the options for ``torch.compile`` (through :func:`compile_options`):
    ``setting`` is the estimators' ``compile`` (False, True or "auto"), ``device`` the fit's and ``options`` the
    user's ``compile__*`` parameters.

    ``"auto"`` compiles runs of at least :data:`COMPILE_MIN_STEPS` steps after the warm-up on a CPU, in torch's
    default mode; on a GPU runs of at least :data:`COMPILE_MIN_STEPS_CUDA`, with CUDA graphs
    (``mode="reduce-overhead"``) unless ``options`` choose a ``mode``, ``options`` or ``backend`` themselves.
    True compiles every run as ``options`` say (torch's default mode without them)."""
    options = dict(options or {})
    if setting is None or (setting != "auto" and not bool(setting)):
        return False, "compile=False", options
    if options.get("disable"):
        return False, "compile__disable=True (torch.compile compiles nothing)", options
    if not getattr(type(sampler), "compiles", False):
        return False, f"{sampler.name} has no pure transition (see bayesnet.samplers.compiled)", options
    module = getattr(potential, "module", None)
    if module is not None and not getattr(module, "compiles", True):
        return False, (f"the {type(module).__name__} network does not compile (its fused recurrent kernels are "
                       "outside what torch.compile traces)"), options
    if getattr(potential, "functional", lambda: None)() is None:
        return False, "the potential has no pure form (a prior or likelihood without batched closed forms)", options
    if setting != "auto":
        return True, "compiled", options
    cuda = torch.device(device).type == "cuda"
    least = COMPILE_MIN_STEPS_CUDA if cuda else COMPILE_MIN_STEPS
    if steps_after_warmup < least:
        return False, (f"compile='auto': {steps_after_warmup} steps after the warm-up would not repay the "
                       f"compilation (below {least}{' on a GPU' if cuda else ''})"), options
    if cuda and all(options.get(key) is None for key in _USER_CHOICES):  # (None: set_params cannot remove a key)
        return True, "compiled with CUDA graphs (compile='auto' on a GPU: mode='reduce-overhead')", \
            {**options, "mode": "reduce-overhead"}
    return True, "compiled", options


def compile_options(options: dict | None) -> dict:
    """The keyword arguments for ``torch.compile``: ``options`` (the estimators' ``compile__*`` parameters) over
    the defaults ``fullgraph=True, dynamic=False``."""
    # (a nested dict copied: torch.compile pops keys such as guard_filter_fn from the options dict it is given)
    return {"fullgraph": True, "dynamic": False,
            **{k: dict(v) if isinstance(v, dict) else v for k, v in (options or {}).items()}}


class CompiledTransition:
    """A sampler's frozen transition, compiled once and called at every step after the warm-up.

    Parameters
    ----------
    sampler : Sampler
        One that declares ``compiles = True`` and implements :meth:`~bayesnet.samplers.Sampler.pure_transition`,
        ``transition_inputs`` and ``finish_transition``.
    potential : ChainPosterior
        With :meth:`~bayesnet.posterior.ChainPosterior.functional`.
    layout : ChainLayout
        The chains' layout (the state's).
    compile : bool, default=True
        False runs the pure function eagerly (the fallback, and the reference in the equality tests).
    options : dict or None, default=None
        Keyword arguments for ``torch.compile`` (``mode``, ``backend``, ``options``, ...: the estimators'
        ``compile__*`` parameters), over the defaults ``fullgraph=True, dynamic=False``.

    Raises
    ------
    TypeError
        For an ``options`` key that ``torch.compile`` does not take.
    ValueError
        From a call after a hyperparameter of ``sampler`` was set to another value: the transition holds the
        settings it was built with (build a new one; the eager :meth:`~bayesnet.samplers.Sampler.step` takes the
        change up).

    Attributes
    ----------
    compile_seconds : float
        Wall time of the calls that compiled (the first, and one per new batch shape).
    fallback : str or None
        Why it runs eagerly after a failed compilation (None while compiled).
    """

    def __init__(self, sampler, potential, layout, compile: bool = True, options: dict | None = None):
        self.sampler = sampler
        self._token = sampler._token()  # (the settings the pure transition closes over)
        self._params = sampler.get_params(deep=False)
        self.pure = sampler.pure_transition(potential.functional(), layout)
        self.fn = torch.compile(self.pure, **compile_options(options)) if compile else self.pure
        self.fallback = None if compile else "compile=False"
        self.compile_seconds = 0.0
        self._shapes: set = set()
        self._shape = None

    def __call__(self, state, potential, batch: Any):
        """One step of the frozen kernel (the prior's Gibbs step first, as in :meth:`Sampler.step`), through
        the sampler's :meth:`~bayesnet.samplers.Sampler.run_compiled`."""
        if self.sampler.__dict__.get("_settings_token") is not self._token:
            if self.sampler.get_params(deep=False) != self._params:
                raise ValueError(f"{self.sampler.name}: a hyperparameter was set after this compiled transition was "
                                 "built with the old settings; build a new CompiledTransition (or step eagerly).")
            self._token = self.sampler._token()  # (set again to the values it holds: nothing changed)
        if state.stamp is not self._token:
            self.sampler.adopt(state)  # (a state made or last stepped under another sampler object)
        self.sampler.gibbs_step(state, potential)
        self._shape = (tuple(None if b is None else tuple(b.shape) for b in batch) if isinstance(batch, (tuple, list))
                       else None)  # (a potential without data takes (None, None))
        return state, self.sampler.run_compiled(state, potential, batch, self._run)

    def _run(self, *inputs):
        """The compiled function on ``inputs`` (compiling at the first call per batch shape, timed), or the pure
        one eagerly after a failure."""
        shape = self._shape
        first = shape not in self._shapes and self.fallback is None
        start = time.perf_counter()
        try:
            out = self.fn(*inputs)
        except Exception as exc:  # no compiler, or a graph the compiler cannot build: eager from here on
            if self.fallback is not None:
                raise
            self.fallback = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            warnings.warn(f"torch.compile could not compile the {self.sampler.name} transition ({self.fallback}); "
                          "sampling continues eagerly with the same noise (the pure step run eagerly: the draws "
                          "agree with compile=False's up to float rounding; compile=False silences this).",
                          UserWarning, stacklevel=2)
            self.fn = self.pure
            out = self.fn(*inputs)
        if first:
            self.compile_seconds += time.perf_counter() - start
            self._shapes.add(shape)
        return out

    def __getstate__(self):  # a compiled function does not pickle: a continued fit compiles again
        raise TypeError("a CompiledTransition is not picklable; the estimators drop it when pickled.")
