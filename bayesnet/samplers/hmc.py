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
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, Stat, StepInfo, register_sampler
from .integrators import chain_numel, gaussian_momentum, normal_flat, squared_norm
from .random import ChainRandom

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


def _per_member(t: Tensor, like: Tensor) -> Tensor:
    """Broadcast a per-chain tensor, shape () or (S,), against a position tensor (S, ...)."""
    return t.reshape(t.shape + (1,) * (like.ndim - t.ndim))


@register_sampler
class HMC(Sampler):
    r"""Hamiltonian (hybrid) Monte Carlo (paper 004 Sec. 2, eq. 15).

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
    a fixed kernel. ``"auto"`` adapts during the estimators' burn-in.

    Parameters
    ----------
    step_size : float, default=0.01
        Leapfrog time step :math:`h > 0` (initial value when adapting).
    n_leapfrog : int, default=20
        Mean number of leapfrog steps :math:`L \ge 1` per transition.
    jitter : float, default=0.1
        Relative half-width of the uniform step-size randomisation, in [0, 1).
    temperature : float, default=1.0
        :math:`T > 0`.
    target_accept : float, default=0.8
        Acceptance probability the adaptation aims at, in (0, 1).
    adaptation_steps : int or "auto", default="auto"
        Number of initial transitions with step-size adaptation; "auto" is
        the run plan's ``burn_in`` (:meth:`configure`), and 0 without a plan.

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
    Duane et al. 1987; Neal, "MCMC using Hamiltonian dynamics", 2011; paper 004
    Sec. 2 eq. (15); Hoffman and Gelman, JMLR 15 (2014), Sec. 3.2.
    """

    name = "hmc"
    full_batch = True
    stats = {**COMMON_STATS, **MOMENTUM_STATS, "accept_prob": Stat("mean", "acceptance_rate"),
             "accepted": Stat("mean"), "step_size": Stat("last"), "n_leapfrog": Stat("mean"),
             "divergent": Stat("sum", "n_divergent")}
    state_class = HMCState
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither")],
        "n_leapfrog": [Interval(Integral, 1, None, closed="left")],
        "jitter": [Interval(Real, 0, 1, closed="left")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "target_accept": [Interval(Real, 0, 1, closed="neither")],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    }

    def __init__(self, step_size: float = 0.01, n_leapfrog: int = 20, jitter: float = 0.1, temperature: float = 1.0,
                 target_accept: float = 0.8, adaptation_steps: int | str = "auto"):
        self.step_size = step_size
        self.n_leapfrog = n_leapfrog
        self.jitter = jitter
        self.temperature = temperature
        self.target_accept = target_accept
        self.adaptation_steps = adaptation_steps

    def configure(self, plan) -> "HMC":
        super().configure(plan)
        self.adaptation_steps_ = plan.burn_in if self.adaptation_steps == "auto" else int(self.adaptation_steps)
        return self

    @property
    def n_adaptation_steps(self) -> int:
        """Transitions with step-size adaptation: ``adaptation_steps``, resolved by :meth:`configure`."""
        if self.adaptation_steps != "auto":
            return int(self.adaptation_steps)
        return int(getattr(self, "adaptation_steps_", 0))

    def target_temperature(self) -> float:
        return float(self.temperature)

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout) -> HMCState:
        momentum, flat = gaussian_momentum(position, math.sqrt(self.temperature), rng, layout)
        first = position[0]
        shape = () if layout.n_chains is None else (layout.chains,)
        opts = dict(dtype=first.dtype, device=first.device)
        log_h = torch.full(shape, math.log(self.step_size), **opts)
        return HMCState(position=position, layout=layout, rng=rng, momentum=momentum, flat_momentum=flat,
                        log_step=log_h, log_step_bar=log_h.clone(), h_bar=torch.zeros(shape, **opts),
                        mu=torch.full(shape, math.log(10 * self.step_size), **opts),
                        accepted_total=torch.zeros(shape, **opts))

    def step(self, state: HMCState, potential: Potential, batch: Any) -> tuple[HMCState, StepInfo]:
        theta, p, flat, rng, layout = state.position, state.momentum, state.flat_momentum, state.rng, state.layout
        adapting = state.step < self.n_adaptation_steps
        base = torch.exp(state.log_step if adapting else state.log_step_bar)  # (C,) or ()
        jitter = rng.uniform(1, base.dtype).reshape(base.shape)
        h = base * (1.0 + self.jitter * (2.0 * jitter - 1.0))
        lo, hi = math.ceil(self.n_leapfrog / 2), self.n_leapfrog + self.n_leapfrog // 2
        n_steps = int(rng.shared.integers(lo, hi + 1)) if hi > lo else lo
        # momentum refresh: p ~ N(0, T I), in the flat buffer the views share
        flat.copy_(normal_flat(rng, layout, flat.numel(), flat.dtype).view_as(flat)).mul_(math.sqrt(self.temperature))
        u0, grad = potential.value_and_grad(batch)
        start = [t.detach().clone() for t in theta]
        start_momentum = flat.clone()
        h0 = u0 + 0.5 * squared_norm(p, flat)  # one energy per chain with a chain axis
        u1 = u0
        with torch.no_grad():
            for _ in range(n_steps):
                for m, g in zip(p, grad):
                    m.addcmul_(g, _per_member(h, m), value=-0.5)
                for t, m in zip(theta, p):
                    t.addcmul_(m, _per_member(h, t))
                u1, grad = potential.value_and_grad(batch)
                for m, g in zip(p, grad):
                    m.addcmul_(g, _per_member(h, m), value=-0.5)
        h1 = u1 + 0.5 * squared_norm(p, flat)
        # Metropolis-Hastings test, separately for every chain
        log_ratio = (-(h1 - h0) / self.temperature).to(flat.dtype)
        divergent = ~torch.isfinite(log_ratio)
        accept_prob = torch.where(divergent, torch.zeros_like(log_ratio), torch.exp(log_ratio.clamp(max=0.0)))
        uniform = rng.uniform(1, flat.dtype).reshape(log_ratio.shape)
        accepted = ~divergent & (uniform < accept_prob)
        with torch.no_grad():  # rejected chains go back to the start (with the refreshed momentum)
            for t, s0 in zip(theta, start):
                t.copy_(torch.where(_per_member(accepted, t), t, s0))
            flat.copy_(torch.where(accepted.unsqueeze(-1) if flat.ndim == 2 else accepted, flat, start_momentum))
        u1 = torch.where(accepted, u1.reshape(accepted.shape), u0.reshape(accepted.shape))
        if adapting:
            self._adapt(state, accept_prob, state.step + 1)
        state.step += 1
        state.transitions += 1
        state.accepted_total = state.accepted_total + accepted.to(flat.dtype)
        kinetic = 0.5 * squared_norm(p, flat)
        return state, StepInfo(
            potential=u1.detach(), kinetic_energy=kinetic,
            kinetic_temperature=2.0 * kinetic / chain_numel(p, layout),
            extra={"accept_prob": accept_prob, "accepted": accepted.to(flat.dtype), "step_size": base,
                   "n_leapfrog": float(n_steps), "divergent": divergent.to(flat.dtype)},
        )

    def _adapt(self, state: HMCState, accept_prob: Tensor, m: int) -> None:
        """One dual-averaging update of every chain's log step size (Hoffman and Gelman 2014, Alg. 5)."""
        gamma, t0, kappa = 0.05, 10.0, 0.75
        w = 1.0 / (m + t0)
        state.h_bar = (1.0 - w) * state.h_bar + w * (self.target_accept - accept_prob.to(state.h_bar.dtype))
        state.log_step = state.mu - math.sqrt(m) / gamma * state.h_bar
        eta = m ** (-kappa)
        state.log_step_bar = eta * state.log_step + (1.0 - eta) * state.log_step_bar
