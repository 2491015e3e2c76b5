"""Underdamped Langevin dynamics by BAOAB splitting, and the GLA1/GLA2 schemes."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, StepInfo
from .registry import register_sampler
from .integrators import baoab_step, chain_numel, momentum_state, normal_flat
from .random import ChainRandom
from .compiled import potential_gradients, write_back
from .warmup import HEAT, WARMUP_DOC, Preconditioner, flatten, member_view, regrad, views

__all__ = ["BAOAB", "BAOABState"]


@dataclass(kw_only=True)
class BAOABState(MomentumState):
    """:class:`MomentumState` plus the gradient at the current position (None before the first step), which
    serves the first kick of the next step."""

    grad: list[Tensor] | None = None

_SCHEMES = ("BAOAB", "GLA2", "GLA1")


@register_sampler
class BAOAB(Sampler):
    r"""Langevin dynamics discretised by splitting into A, B and O steps (Heber et al. 2020 (TATi), Sec. 2).

    Targets :math:`\pi(\theta, p) \propto \exp(-(U(\theta) + |p|^2/2)/T)` of
    the dynamics :math:`d\theta = p\,dt`,
    :math:`dp = -\nabla U dt - \gamma p\,dt + \sqrt{2\gamma T} dW` (Heber et al. 2020 (TATi)
    eq. 9, unit mass), with the sub-steps of eq. (13):

    .. math::

        A_h: \theta \leftarrow \theta + h p, \quad
        B_h: p \leftarrow p - h \nabla U(\theta), \quad
        O_h: p \leftarrow a p + \sqrt{T (1 - a^2)}\, R, \; a = e^{-\gamma h}.

    ``scheme`` picks the composition for one step of length :math:`\varepsilon`:

    * ``"BAOAB"`` (default): :math:`B_{\varepsilon/2} A_{\varepsilon/2} O_\varepsilon A_{\varepsilon/2} B_{\varepsilon/2}`,
      second order, and exact configurational averages for harmonic potentials;
    * ``"GLA2"``: :math:`B_{\varepsilon/2} A_\varepsilon B_{\varepsilon/2} O_\varepsilon`, second order;
    * ``"GLA1"``: :math:`B_\varepsilon A_\varepsilon O_\varepsilon`, first order (Heber et al. 2020 (TATi) Table 1).

    Every scheme costs one gradient per step: the gradient at the end of a
    step, after the last A, serves the first B of the next (Heber et al. 2020 (TATi) Sec. 3.1
    computes the same sequence with the permutation ``BBAOA``); only the very
    first step evaluates an extra one. Each step's position is a draw.

    With a diagonal mass matrix :math:`M` (the warm-up's preconditioner) the
    kernel runs in velocity units :math:`v = M^{-1}p`:
    :math:`B_h: v \leftarrow v - h M^{-1}\nabla U`,
    :math:`A_h: \theta \leftarrow \theta + h v`,
    :math:`O_h: v \leftarrow a v + \sqrt{T(1-a^2)M^{-1}}\,R` (the same
    steps as above with :math:`M = I`).

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        Time step :math:`\varepsilon > 0` (unit mass; ``p`` has units of
        :math:`\sqrt{T}`). Note that SGHMC's ``step_size`` is
        :math:`\varepsilon^2` in these units. "auto" is set by the warm-up:
        stable, :math:`\varepsilon^2\lambda_{max}(M^{-1}H) = 1` (BAOAB is
        stable below 4), and cool, the gradient noise's heat
        :math:`\varepsilon\rho/(2\gamma) \le 5\%` (the cached gradient's noise
        enters as one full kick a step: :meth:`coordinate_noise_budget`).
    friction : float, default=1.0
        :math:`\gamma > 0` per unit time.
    temperature : float, default=1.0
        :math:`T = 1/\beta > 0`.
    scheme : {"BAOAB", "GLA2", "GLA1"}, default="BAOAB"
{warmup}

    Raises
    ------
    ValueError
        From :meth:`validate`: on a non-positive step size, friction or
        temperature, or an unknown scheme.

    Notes
    -----
    ``StepInfo.kinetic_energy`` is :math:`\sum_i v_i^2 M_i/2` and
    ``kinetic_temperature`` :math:`\sum_i v_i^2 M_i/D`, both with the momentum synchronised
    with the returned position (for BAOAB and GLA2; for GLA1 after O).

    References
    ----------
    Heber, Trstanova, Leimkuhler, "TATi" (Heber et al. 2020 (TATi)), Sec. 2 eqs. (9)-(13),
    Table 1; Leimkuhler and Matthews, Appl. Math. Res. Express 2013.
    """

    name = "baoab"
    gradients_at_positions = True  # one gradient per step, at the members' positions
    stats = {**COMMON_STATS, **MOMENTUM_STATS}
    state_class = BAOABState
    fallback_step_size = 0.01
    stability = 1.0
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "friction": [Interval(Real, 0, np.inf, closed="neither")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "scheme": [StrOptions(set(_SCHEMES))],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    }

    def __init__(self, step_size: float | str = "auto", friction: float = 1.0, temperature: float = 1.0,
                 scheme: str = "BAOAB", preconditioner: str | None = "auto", adaptation_steps: int | str = "auto"):
        self.step_size = step_size
        self.friction = friction
        self.temperature = temperature
        self.scheme = scheme
        self.preconditioner = preconditioner
        self.adaptation_steps = adaptation_steps

    def target_temperature(self) -> float:
        return float(self.temperature)

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """``min(sqrt(stability / lambda), 2 friction HEAT / rho)``: see ``step_size``."""
        step = torch.sqrt(self.stability / curvature)
        if noise_fraction is not None:
            step = torch.minimum(step, self.coordinate_noise_budget() / noise_fraction.clamp_min(1e-12))
        return step

    def coordinate_noise_budget(self) -> float:
        """``2 friction HEAT``: the gradient noise heats a coordinate by ``h m_i Var_i / (2 friction)``. In BAOAB
        the closing half-kick of one step and the opening half-kick of the next use the same (cached) mini-batch
        gradient with no friction step between them; in GLA2 an O step sits between them, and GLA1 takes one full
        kick: in all three its noise enters as about one full kick ``h m_i xi`` a step, not two independent halves
        (simulated: an excess of 0.415 where ``h m V / (4 friction)`` predicted 0.2; the budget was twice this until
        2026-11-29, a reviewer's finding). To leading order in the step: at ``h = 0.3``, friction 1, the excess is
        1.03x this (GLA1 1.19x), and at the stability edge ``h sqrt(m k) = 1`` with ``friction h = 1``, 1.44x."""
        return 2.0 * self.friction * HEAT

    def momentum_std(self, state: BAOABState) -> Tensor:
        return self._scaled_momentum_std(state, lambda pre: self.temperature ** 0.5)

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> BAOABState:
        return momentum_state(BAOABState, self.momentum_std, position, rng, layout, precond)

    def reset_cache(self, state: BAOABState) -> None:
        """Drop the cached gradient: the next step re-evaluates it on its own batch."""
        state.grad = None

    @torch.no_grad()
    def restart_members(self, state: BAOABState, members: Tensor, potential: Potential, batch: Any) -> None:
        """The restarted members' cached gradient is taken anew at their restored position (on the step's batch,
        where the others' was taken)."""
        state.grad = regrad(state.grad, members, potential, batch, state.layout)

    @torch.no_grad()
    def potential_changed(self, state: BAOABState, delta_value: Tensor, delta_grad: list[Tensor]) -> None:
        """The cached gradient follows the change."""
        if state.grad is not None:
            state.grad = [g + d.to(g.dtype) for g, d in zip(state.grad, delta_grad)]

    def _scales(self, state: BAOABState) -> dict:
        """The per-coordinate scales of the B, A and O steps for step ``h`` and mass ``M`` (velocity form)."""
        pre, flat = state.precond, state.flat_momentum
        h = pre.step_size
        decay = torch.exp(-self.friction * h)
        part = {"BAOAB": (0.5, 0.5, 1.0), "GLA2": (0.5, 1.0, 1.0), "GLA1": (1.0, 1.0, 1.0)}[self.scheme]
        kick, drift = pre.per_coordinate(part[0] * h, 1.0, flat), pre.per_coordinate(part[1] * h, 0.0, flat)
        return {"kick": views(kick, state.position), "drift": views(drift, state.position),
                "kick_flat": kick, "drift_flat": drift,  # the same buffers, for the pure transition
                "decay": decay,
                # 1 - decay**2 of the float32 decay the O step applies, not -expm1(-2 gamma h): the noise must match
                # the rounded decay to hold the temperature (the exact form was off by several per cent at
                # gamma h ~ 1e-6)
                "noise": pre.per_coordinate(torch.sqrt((1.0 - decay * decay) * self.temperature), 0.5, flat),
                "weight": pre.per_coordinate(0.5, -1.0, flat)}

    def _step(self, state: BAOABState, potential: Potential, batch: Any) -> tuple[BAOABState, StepInfo]:
        theta, p, flat, rng, layout = state.position, state.momentum, state.flat_momentum, state.rng, state.layout
        sc = state.derived("scales", lambda: self._scales(state))
        grad = state.grad
        if grad is None:  # first step: the gradient at the starting point
            _, grad = potential.value_and_grad(batch)
        if self.scheme == "BAOAB":
            value, grad = baoab_step(theta, p, flat, grad, sc["kick"], sc["drift"], sc["decay"], sc["noise"],
                                     potential, batch, rng, layout)
        else:
            with torch.no_grad():
                torch._foreach_addcmul_(p, list(grad), sc["kick"], value=-1.0)
                torch._foreach_addcmul_(theta, p, sc["drift"])
            if self.scheme == "GLA2":
                value, grad = potential.value_and_grad(batch)
                with torch.no_grad():
                    torch._foreach_addcmul_(p, list(grad), sc["kick"], value=-1.0)
            self._ou(state, sc)
            if self.scheme == "GLA1":
                value, grad = potential.value_and_grad(batch)
        state.grad = grad
        state.step += 1
        with torch.no_grad():
            kinetic = (flat * flat * sc["weight"]).sum(-1)
        return state, StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                               kinetic_temperature=2.0 * kinetic / chain_numel(p, layout))

    # the same step as a pure function, for bayesnet.samplers.compiled
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """:meth:`_step` as a pure function for its scheme: ``(positions, momenta, gradient, noise, kick, drift,
        decay, noise_scale, weight, X, y, factors, offset) -> (positions, momenta, gradient, potentials, kinetic
        energies)``, ``gradient`` the cached one at the start (the previous step's last) and at the end, in
        :meth:`_step`'s order of operations (one gradient per step)."""
        scheme = self.scheme
        grad_and_value = potential_gradients(potentials)

        def drift_by(position, flat, drift):
            return [p + d * m for p, d, m in zip(position, views(drift, position), views(flat, position))]

        def transition(position, flat, grad, z, kick, drift, decay, noise, weight, X, y, factors, offset):
            flat = flat - flatten(grad, layout) * kick  # B
            position = drift_by(position, flat, drift)  # A
            if scheme == "BAOAB":
                flat = flat * decay + z * noise  # O
                position = drift_by(position, flat, drift)  # A
            grad, (_, u) = grad_and_value(position, X, y, factors, offset)
            if scheme != "GLA1":
                flat = flat - flatten(grad, layout) * kick  # B
            if scheme != "BAOAB":  # (GLA1's O comes before its gradient: that gradient does not read the momenta)
                flat = flat * decay + z * noise  # O
            return position, flat, grad, u, (flat * flat * weight).sum(-1)

        return transition

    def transition_inputs(self, state: BAOABState, potential: Potential, batch: Any) -> tuple:
        sc = state.derived("scales", lambda: self._scales(state))
        flat = state.flat_momentum
        if state.grad is None:  # first step: the gradient at the starting point, eagerly
            _, state.grad = potential.value_and_grad(batch)
        decay = sc["decay"]
        decay = decay.reshape(decay.shape + (1,) * (flat.ndim - decay.ndim))
        z = normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat)
        factors, offset = potential.prior_form()
        X, y = batch
        return ([p.detach() for p in state.position], flat, [g.detach() for g in state.grad], z, sc["kick_flat"],
                sc["drift_flat"], decay, sc["noise"], sc["weight"], X, y, factors, offset)

    def finish_transition(self, state: BAOABState, outputs) -> StepInfo:
        moved, flat, grad, value, kinetic = outputs
        write_back(state, moved, flat, grad)
        state.step += 1
        return StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                        kinetic_temperature=2.0 * kinetic / chain_numel(state.momentum, state.layout))

    @staticmethod
    @torch.no_grad()
    def _ou(state: BAOABState, sc: dict) -> None:
        flat = state.flat_momentum
        flat.mul_(member_view(sc["decay"], flat) if flat.ndim > sc["decay"].ndim else sc["decay"])
        flat.addcmul_(normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat), sc["noise"])


BAOAB.__doc__ = BAOAB.__doc__.replace("{warmup}", WARMUP_DOC)
