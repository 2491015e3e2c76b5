"""Hamiltonian Monte Carlo with leapfrog trajectories and a Metropolis-Hastings test."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor

from .base import Potential, Sampler, SamplerState, StepInfo, register_sampler
from .integrators import chain_numel, gaussian_momentum, gradient_step, position_step, squared_norm

__all__ = ["HMC"]


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
    ``[ceil(n_leapfrog/2), n_leapfrog + floor(n_leapfrog/2)]`` and :math:`h`
    uniform within ``+-jitter`` of the current step size.

    During the first ``adaptation_steps`` transitions the step size is tuned
    by dual averaging towards ``target_accept`` (Hoffman and Gelman 2014,
    Alg. 5, with their defaults gamma=0.05, t0=10, kappa=0.75); afterwards it is
    frozen at the averaged value, so the kept draws come from a fixed kernel.
    The estimators set ``adaptation_steps = burn_in`` unless it is given.

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
    adaptation_steps : int, default=0
        Number of initial transitions with step-size adaptation.

    Raises
    ------
    ValueError
        On out-of-range values.

    Notes
    -----
    ``StepInfo.extra`` holds ``accept_prob``, ``accepted`` (0/1),
    ``step_size`` (the base step size of this transition), ``n_leapfrog`` and
    ``divergent`` (1 when the proposal's energy was not finite; it is then
    rejected), per chain with ``init(..., n_chains=C)``: the chains share the
    trajectory length and step size but each has its own Metropolis test (the
    adaptation tunes the shared step size on their mean acceptance). Each transition evaluates :math:`L + 1` gradients: the one at
    the start is recomputed on the current batch so that the energies in the
    test refer to the same batch.

    References
    ----------
    Duane et al. 1987; Neal, "MCMC using Hamiltonian dynamics", 2011; paper 004
    Sec. 2 eq. (15); Hoffman and Gelman, JMLR 15 (2014), Sec. 3.2.
    """

    name = "hmc"
    exact_potential = True
    _positive = ("step_size", "temperature")
    _non_negative = ("jitter",)
    _integers = {"n_leapfrog": 1, "adaptation_steps": 0}

    def __init__(self, step_size: float = 0.01, n_leapfrog: int = 20, jitter: float = 0.1, temperature: float = 1.0,
                 target_accept: float = 0.8, adaptation_steps: int = 0):
        self.step_size = step_size
        self.n_leapfrog = n_leapfrog
        self.jitter = jitter
        self.temperature = temperature
        self.target_accept = target_accept
        self.adaptation_steps = adaptation_steps
        self._validate()
        if not 0 <= jitter < 1:
            raise ValueError(f"hmc: jitter must be in [0, 1), got {jitter!r}.")
        if not 0 < target_accept < 1:
            raise ValueError(f"hmc: target_accept must be in (0, 1), got {target_accept!r}.")

    def init(self, position: Sequence[Tensor], generator: torch.Generator | None,
             n_chains: int | None = None) -> SamplerState:
        position = list(position)
        self._check_chain_axis(position, n_chains)
        momentum, flat = gaussian_momentum(position, math.sqrt(self.temperature), generator, n_chains)
        log_h = math.log(self.step_size)
        first = position[0]
        shape = () if n_chains is None else (n_chains,)
        return SamplerState(position=position, momentum=momentum, extra={
            "flat_momentum": flat, "log_step": log_h, "log_step_bar": log_h, "h_bar": 0.0,
            "mu": math.log(10 * self.step_size), "n_chains": n_chains,
            "accepted_total": torch.zeros(shape, dtype=first.dtype, device=first.device), "transitions": 0})

    def _uniform(self, generator, device) -> float:
        return float(torch.rand((), generator=generator, device=device))

    def step(
        self, state: SamplerState, potential: Potential, batch: Any, generator: torch.Generator | None
    ) -> tuple[SamplerState, StepInfo]:
        theta, p, ex = state.position, state.momentum, state.extra
        flat = ex["flat_momentum"]
        device = theta[0].device
        adapting = state.step < self.adaptation_steps
        base = math.exp(ex["log_step"] if adapting else ex["log_step_bar"])
        h = base * (1.0 + self.jitter * (2.0 * self._uniform(generator, device) - 1.0))
        lo, hi = math.ceil(self.n_leapfrog / 2), self.n_leapfrog + self.n_leapfrog // 2
        n_steps = int(torch.randint(lo, hi + 1, (), generator=generator, device=device)) if hi > lo else lo
        # momentum refresh: p ~ N(0, T I), in the flat buffer the views share
        fresh = torch.randn(flat.shape, generator=generator, device=device, dtype=flat.dtype)
        flat.copy_(fresh).mul_(math.sqrt(self.temperature))
        u0, grad = potential.value_and_grad(batch)
        start = [t.detach().clone() for t in theta]
        start_momentum = flat.clone()
        h0 = u0 + 0.5 * squared_norm(p, flat)  # one energy per chain with a chain axis
        u1 = u0
        for _ in range(n_steps):
            gradient_step(p, grad, h / 2)
            position_step(theta, p, h)
            u1, grad = potential.value_and_grad(batch)
            gradient_step(p, grad, h / 2)
        h1 = u1 + 0.5 * squared_norm(p, flat)
        # Metropolis-Hastings test, separately for every chain (they share L and h)
        log_ratio = (-(h1 - h0) / self.temperature).to(flat.dtype)
        divergent = ~torch.isfinite(log_ratio)
        accept_prob = torch.where(divergent, torch.zeros_like(log_ratio), torch.exp(log_ratio.clamp(max=0.0)))
        accepted = ~divergent & (torch.rand(log_ratio.shape, generator=generator, device=device,
                                            dtype=flat.dtype) < accept_prob)
        if not bool(accepted.all()):  # rejected chains go back to the start (with the refreshed momentum)
            with torch.no_grad():
                for t, s in zip(theta, start):
                    t.copy_(torch.where(accepted.reshape(accepted.shape + (1,) * (t.ndim - accepted.ndim)), t, s))
                flat.copy_(torch.where(accepted.unsqueeze(-1) if flat.ndim == 2 else accepted, flat, start_momentum))
        u1 = torch.where(accepted, u1.reshape(accepted.shape), u0.reshape(accepted.shape))
        if adapting:  # one step size for all chains, tuned on their mean acceptance probability
            self._adapt(ex, float(accept_prob.mean()), state.step + 1)
        state.step += 1
        ex["transitions"] += 1
        ex["accepted_total"] = ex["accepted_total"] + accepted.to(flat.dtype)
        kinetic = 0.5 * squared_norm(p, flat)
        return state, StepInfo(
            potential=u1.detach(), kinetic_energy=kinetic,
            kinetic_temperature=2.0 * kinetic / chain_numel(p, ex.get("n_chains")),
            extra={"accept_prob": accept_prob, "accepted": accepted.to(flat.dtype), "step_size": base,
                   "n_leapfrog": float(n_steps), "divergent": divergent.to(flat.dtype)},
        )

    def _adapt(self, ex: dict, accept_prob: float, m: int) -> None:
        gamma, t0, kappa = 0.05, 10.0, 0.75
        w = 1.0 / (m + t0)
        ex["h_bar"] = (1.0 - w) * ex["h_bar"] + w * (self.target_accept - accept_prob)
        ex["log_step"] = ex["mu"] - math.sqrt(m) / gamma * ex["h_bar"]
        eta = m ** (-kappa)
        ex["log_step_bar"] = eta * ex["log_step"] + (1.0 - eta) * ex["log_step_bar"]
