"""Hamiltonian Monte Carlo with leapfrog trajectories and a Metropolis-Hastings test."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, Stat, StepInfo
from .registry import register_sampler
from .compiled import potential_gradients, write_back
from .integrators import chain_numel, momentum_state, normal_flat
from .random import ChainRandom
from .estimates import flatten, mask_like, member_view
from .warmup import Preconditioner, views

__all__ = ["HMC", "HMCState"]


@dataclass(kw_only=True)
class HMCState(MomentumState):
    """:class:`MomentumState` plus each chain's dual-averaging variables (shape ``(C,)``, ``()`` without a
    chain axis) and its acceptance count."""

    log_step: Tensor
    log_step_bar: Tensor
    h_bar: Tensor
    mu: Tensor
    accepted_total: Tensor
    transitions: int = 0
    adapted: Tensor | None = None  # per chain: dual-averaging updates since its last restart


@register_sampler
class HMC(Sampler):
    r"""Hamiltonian (hybrid) Monte Carlo (Heber et al. 2020 (TATi) Sec. 2, eq. 15).

    One transition: resample the momenta :math:`p \sim \mathcal N(0, T I)`
    (unit mass), integrate :math:`L` leapfrog steps
    :math:`(B_{h/2} A_h B_{h/2})^L`, and accept the end point with probability

    .. math::

        \min\big(1, \exp(-(H(\tilde\theta, \tilde p) - H(\theta, p))/T)\big),
        \qquad H = U(\theta) + |p|^2/2,

    otherwise stay at :math:`\theta`. Each transition (accepted or not) is one
    draw; ``burn_in`` and ``thinning`` count transitions. The chain is exact
    (no discretisation bias) for full-batch potentials; with mini-batches the
    test compares two noisy energies and is no longer exact (the estimators
    warn). As TATi does, the trajectory length and step size are randomised
    per transition to avoid periodic orbits: :math:`L` uniform on
    ``[ceil(n_leapfrog/2), n_leapfrog + floor(n_leapfrog/2)]`` (one draw shared
    by the chains, from the shared stream) and :math:`h` uniform within
    ``+-jitter`` of each chain's current step size (from the chain's stream).

    During the first ``adaptation_steps`` transitions each chain tunes its own
    step size by dual averaging towards ``target_accept`` (Hoffman and Gelman
    2014, Alg. 5, with their defaults gamma=0.05, t0=10, kappa=0.75);
    afterwards it is frozen at the averaged value, so the kept draws come from
    a fixed kernel. ``"auto"`` adapts during the estimators' burn-in. With the
    warm-up's diagonal mass matrix :math:`M` (``preconditioner``, Stan's
    windowed adaptation), :math:`p \sim \mathcal N(0, T M)` and
    :math:`H = U + p^\top M^{-1} p/2`; the dual averaging restarts at every
    window's end from the step the preconditioned curvature gives.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        Leapfrog time step :math:`h > 0` (initial value when adapting).
        "auto" starts from :math:`h^2\lambda_{max}(M^{-1}H) = 1` (the
        leapfrog is stable below 4).
    n_leapfrog : int, default=20
        Mean number of leapfrog steps :math:`L \ge 1` per transition.
    jitter : float, default=0.1
        Relative half-width of the uniform step-size randomisation, in [0, 1).
    temperature : float, default=1.0
        :math:`T > 0`.
    target_accept : float, default=0.8
        Acceptance probability the adaptation aims at, in (0, 1). The
        acceptance after the warm-up comes out above it, as Stan's does (the
        frozen step is the dual averaging's average of log steps, not its
        last iterate; a user's test on a 30-8-2 network with 3 leapfrog
        steps: 0.67, 0.84, 0.93 for targets 0.5, 0.65, 0.8).
    preconditioner : {"auto", "diagonal", "layer"} or None, default="auto"
        The diagonal mass matrix adapted during the warm-up, from the
        gradients' and positions' spreads (:mod:`bayesnet.samplers.warmup`); None is
        the identity. "auto" is "diagonal" with ``step_size="auto"``, None
        when a step size is given.
    adaptation_steps : int or "auto", default="auto"
        Number of initial transitions with step-size (and mass) adaptation;
        "auto" is the run plan's ``burn_in`` (:meth:`configure`), and 0
        without a plan.

    Raises
    ------
    ValueError
        From :meth:`validate`, on out-of-range values.

    Notes
    -----
    ``StepInfo.extra`` holds ``accept_prob``, ``accepted`` (0/1),
    ``step_size`` (the base step size of this transition), ``n_leapfrog`` and
    ``divergent`` (1 when the proposal's energy was not finite; it is then
    rejected), per chain with ``init(..., n_chains=C)``: the chains share the
    trajectory length, and each has its own step size, adaptation and
    Metropolis test, so a chain does not depend on the chains beside it. Each
    transition evaluates :math:`L + 1` gradients: the one at the start is
    recomputed on the current batch so that the energies in the test refer to
    the same batch.

    References
    ----------
    Duane et al. 1987; Neal, "MCMC using Hamiltonian dynamics", 2011; Heber et al. 2020 (TATi)
    Sec. 2 eq. (15); Hoffman and Gelman, JMLR 15 (2014), Sec. 3.2.
    """

    name = "hmc"
    full_batch = True
    stats = {**COMMON_STATS, **MOMENTUM_STATS, "accept_prob": Stat("mean", "acceptance_rate", "acceptance_rate"),
             "accepted": Stat("mean"), "step_size": Stat("last"), "n_leapfrog": Stat("mean", arviz="n_steps"),
             "divergent": Stat("sum", "n_divergent", "diverging")}
    state_class = HMCState
    fallback_step_size = 0.01
    member_potentials = True  # (its Metropolis test reads each member's potential)
    stability = 1.0
    warmup_first_gradient_only = True  # the leapfrog's gradients are at proposals that may be rejected
    tunes_step_on_acceptance = True
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "n_leapfrog": [Interval(Integral, 1, None, closed="left")],
        "jitter": [Interval(Real, 0, 1, closed="left")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "target_accept": [Interval(Real, 0, 1, closed="neither")],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
    }

    def __init__(self, step_size: float | str = "auto", n_leapfrog: int = 20, jitter: float = 0.1,
                 temperature: float = 1.0, target_accept: float = 0.8, adaptation_steps: int | str = "auto",
                 preconditioner: str | None = "auto"):
        self.step_size = step_size
        self.n_leapfrog = n_leapfrog
        self.jitter = jitter
        self.temperature = temperature
        self.target_accept = target_accept
        self.adaptation_steps = adaptation_steps
        self.preconditioner = preconditioner

    @property
    def n_adaptation_steps(self) -> int:
        """Transitions with step-size adaptation: ``adaptation_steps`` resolved (:meth:`adaptation_length`)."""
        return self.adaptation_length()

    def target_temperature(self) -> float:
        return float(self.temperature)

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """``sqrt(stability / lambda)``: the dual averaging's restart point."""
        return torch.sqrt(self.stability / curvature)

    def momentum_std(self, state: HMCState) -> Tensor:
        return self._scaled_momentum_std(state, lambda pre: self.temperature ** 0.5)

    def preconditioner_changed(self, state: HMCState) -> None:
        """The dual averaging restarts from the warm-up's step size (Stan restarts it at every window's end)."""
        log_h = torch.log(state.precond.step_size)
        state.log_step, state.log_step_bar = log_h.clone(), log_h.clone()
        state.mu = log_h + math.log(10.0)
        state.h_bar = torch.zeros_like(log_h)
        state.adapted = torch.zeros_like(log_h)
        super().preconditioner_changed(state)

    def restart_members(self, state: HMCState, members: Tensor, potential: Potential, batch: Any) -> None:
        """A restarted chain's dual averaging starts again from its halved step size."""
        mask = mask_like(members, state.log_step)
        log_h = torch.log(state.precond.step_size).reshape(state.log_step.shape)
        state.log_step = torch.where(mask, log_h, state.log_step)
        state.log_step_bar = torch.where(mask, log_h, state.log_step_bar)
        state.mu = torch.where(mask, log_h + math.log(10.0), state.mu)
        state.h_bar = torch.where(mask, torch.zeros_like(state.h_bar), state.h_bar)
        state.adapted = torch.where(mask, torch.zeros_like(state.adapted), state.adapted)

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> HMCState:
        shape = () if layout.n_chains is None else (layout.chains,)
        log_h = torch.log(precond.step_size).reshape(shape)
        return momentum_state(HMCState, self.momentum_std, position, rng, layout, precond, log_step=log_h,
                              log_step_bar=log_h.clone(), h_bar=torch.zeros_like(log_h), mu=log_h + math.log(10.0),
                              accepted_total=torch.zeros_like(log_h), adapted=torch.zeros_like(log_h))

    def _step(self, state: HMCState, potential: Potential, batch: Any) -> tuple[HMCState, StepInfo]:
        return state, self._transition(state, potential, batch)

    def _transition(self, state: HMCState, potential: Potential, batch: Any, leapfrog=None) -> StepInfo:
        """One transition; its leapfrog steps eager (in place), or, with ``leapfrog``, each by that function (the
        compiled :meth:`pure_transition`) on the flat momenta, written back before the Metropolis test."""
        theta, p, flat, rng, layout = state.position, state.momentum, state.flat_momentum, state.rng, state.layout
        pre = state.precond
        adapting = state.step < self.n_adaptation_steps
        base = torch.exp(state.log_step if adapting else state.log_step_bar)  # (C,) or ()
        jitter = rng.uniform(1, base.dtype).reshape(base.shape)
        h = base * (1.0 + self.jitter * (2.0 * jitter - 1.0))
        lo, hi = math.ceil(self.n_leapfrog / 2), self.n_leapfrog + self.n_leapfrog // 2
        n_steps = int(rng.shared.integers(lo, hi + 1)) if hi > lo else lo
        weight = state.derived("kinetic_weight", lambda: pre.per_coordinate(0.5, -1.0, flat))
        kick = pre.per_coordinate(0.5 * h, 1.0, flat)  # v <- v - (h/2) M^-1 grad
        drift = pre.per_coordinate(h, 0.0, flat)  # theta <- theta + h v
        # momentum refresh: v ~ N(0, T M^-1), in the flat buffer the views share
        flat.copy_(normal_flat(rng, layout, flat.numel(), flat.dtype).view_as(flat)).mul_(self.momentum_std(state))
        u0, grad = potential.value_and_grad(batch)
        start = [t.detach().clone() for t in theta]
        start_momentum = flat.clone()
        h0 = u0 + (flat * flat * weight).sum(-1)  # one energy per chain with a chain axis
        u1 = u0
        with torch.no_grad():
            if leapfrog is None:
                kick, drift = views(kick, theta), views(drift, theta)
                for _ in range(n_steps):
                    torch._foreach_addcmul_(p, list(grad), kick, value=-1.0)
                    torch._foreach_addcmul_(theta, p, drift)
                    u1, grad = potential.value_and_grad(batch)
                    torch._foreach_addcmul_(p, list(grad), kick, value=-1.0)
            else:
                factors, offset = potential.prior_form()
                X, y = batch
                # the gradient as one flat buffer: the same layout from the eager first gradient and from the
                # compiled steps' (per-tensor gradients' strides differ between the two: a second graph)
                position, momentum, grad = start, flat, flatten(list(grad), layout)
                for _ in range(n_steps):
                    out = leapfrog(position, momentum, grad, kick, drift, X, y, factors, offset)
                    # copied out: under CUDA graphs the next call's replay overwrites a compiled function's
                    # outputs, and these are its next inputs (on a CPU, one copy of the state per leapfrog step)
                    position, momentum, grad, u1 = [t.clone() for t in out[0]], *(t.clone() for t in out[1:])
                write_back(state, position, momentum)
        h1 = u1 + (flat * flat * weight).sum(-1)
        # Metropolis-Hastings test, separately for every chain
        log_ratio = (-(h1 - h0) / self.temperature).to(flat.dtype)
        divergent = ~torch.isfinite(log_ratio)
        accept_prob = torch.where(divergent, torch.zeros_like(log_ratio), torch.exp(log_ratio.clamp(max=0.0)))
        uniform = rng.uniform(1, flat.dtype).reshape(log_ratio.shape)
        accepted = ~divergent & (uniform < accept_prob)
        with torch.no_grad():  # rejected chains go back to the start (with the refreshed momentum)
            for t, s0 in zip(theta, start):
                t.copy_(torch.where(member_view(accepted, t), t, s0))
            flat.copy_(torch.where(accepted.unsqueeze(-1) if flat.ndim == 2 else accepted, flat, start_momentum))
        u1 = torch.where(accepted, u1.reshape(accepted.shape), u0.reshape(accepted.shape))
        if adapting:
            self._adapt(state, accept_prob)
        state.step += 1
        state.transitions += 1
        state.accepted_total = state.accepted_total + accepted.to(flat.dtype)
        kinetic = (flat * flat * weight).sum(-1)
        return StepInfo(
            potential=u1.detach(), kinetic_energy=kinetic,
            kinetic_temperature=2.0 * kinetic / chain_numel(p, layout),
            extra={"accept_prob": accept_prob, "accepted": accepted.to(flat.dtype), "step_size": base,
                   "n_leapfrog": float(n_steps), "divergent": divergent.to(flat.dtype)},
        )

    # the compiled unit is one leapfrog step (bayesnet.samplers.compiled): a transition repeats it a random number
    # of times, so the whole transition would compile once per trajectory length; the momentum refresh and the
    # Metropolis test stay eager around it (a few operations against the trajectory's gradients)
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """One leapfrog step :math:`B_{h/2} A_h B_{h/2}` as a pure function: ``(positions, flat momenta, flat
        gradient, kick, drift, X, y, factors, offset) -> (positions, flat momenta, flat gradient, potentials)``,
        ``kick`` the per-coordinate ``(h/2) M^-1`` and ``drift`` ``h``, the gradient, kick and drift laid out as
        the flat momenta; the potentials and gradient at the new positions."""
        grad_and_value = potential_gradients(potentials)

        def leapfrog(position, flat, grad, kick, drift, X, y, factors, offset):
            flat = torch.addcmul(flat, grad, kick, value=-1.0)
            position = [torch.addcmul(t, m, d) for t, m, d in zip(position, views(flat, position),
                                                                   views(drift, position))]
            grads, (_, u) = grad_and_value(position, X, y, factors, offset)
            grad = flatten(grads, layout)
            return position, torch.addcmul(flat, grad, kick, value=-1.0), grad, u

        return leapfrog

    def run_compiled(self, state: HMCState, potential: Potential, batch: Any, fn) -> StepInfo:
        """A transition whose leapfrog steps are ``fn`` (:meth:`pure_transition`, compiled)."""
        return self._transition(state, potential, batch, leapfrog=fn)

    def _adapt(self, state: HMCState, accept_prob: Tensor) -> None:
        """One dual-averaging update of every chain's log step size (Hoffman and Gelman 2014, Alg. 5)."""
        gamma, t0, kappa = 0.05, 10.0, 0.75
        state.adapted = state.adapted + 1
        m = state.adapted
        w = 1.0 / (m + t0)
        state.h_bar = (1.0 - w) * state.h_bar + w * (self.target_accept - accept_prob.to(state.h_bar.dtype))
        state.log_step = state.mu - torch.sqrt(m) / gamma * state.h_bar
        eta = m.pow(-kappa)
        state.log_step_bar = eta * state.log_step + (1.0 - eta) * state.log_step_bar

    def warmup_frozen(self, state: HMCState) -> None:
        """The kept draws use the averaged step (``log_step_bar``), also as the preconditioner's step size."""
        state.precond.step_size = torch.exp(state.log_step_bar).reshape(state.precond.step_size.shape)
