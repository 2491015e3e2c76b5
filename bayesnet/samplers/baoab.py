"""Underdamped Langevin dynamics by BAOAB splitting, and the GLA1/GLA2 schemes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, StepInfo, register_sampler
from .integrators import (
    baoab_step,
    chain_numel,
    exact_ou_coefficients,
    gaussian_momentum,
    gradient_step,
    ornstein_uhlenbeck_step,
    position_step,
    squared_norm,
)
from .random import ChainRandom

__all__ = ["BAOAB", "BAOABState"]


@dataclass(kw_only=True)
class BAOABState(MomentumState):
    """:class:`MomentumState` plus the gradient at the current position (None before the first step), which
    serves the first kick of the next step."""

    grad: list[Tensor] | None = None

_SCHEMES = ("BAOAB", "GLA2", "GLA1")


@register_sampler
class BAOAB(Sampler):
    r"""Langevin dynamics discretised by splitting into A, B and O steps (paper 004, Sec. 2).

    Targets :math:`\pi(\theta, p) \propto \exp(-(U(\theta) + |p|^2/2)/T)` of
    the dynamics :math:`d\theta = p\,dt`,
    :math:`dp = -\nabla U dt - \gamma p\,dt + \sqrt{2\gamma T} dW` (paper 004
    eq. 9, unit mass), with the sub-steps of eq. (13):

    .. math::

        A_h: \theta \leftarrow \theta + h p, \quad
        B_h: p \leftarrow p - h \nabla U(\theta), \quad
        O_h: p \leftarrow a p + \sqrt{T (1 - a^2)}\, R, \; a = e^{-\gamma h}.

    ``scheme`` picks the composition for one step of length :math:`\varepsilon`:

    * ``"BAOAB"`` (default): :math:`B_{\varepsilon/2} A_{\varepsilon/2} O_\varepsilon A_{\varepsilon/2} B_{\varepsilon/2}`,
      second order, and exact configurational averages for harmonic potentials;
    * ``"GLA2"``: :math:`B_{\varepsilon/2} A_\varepsilon B_{\varepsilon/2} O_\varepsilon`, second order;
    * ``"GLA1"``: :math:`B_\varepsilon A_\varepsilon O_\varepsilon`, first order (paper 004 Table 1).

    Every scheme costs one gradient per step: the gradient at the end of a
    step, after the last A, serves the first B of the next (paper 004 Sec. 3.1
    computes the same sequence with the permutation ``BBAOA``); only the very
    first step evaluates an extra one. Each step's position is a draw.

    Parameters
    ----------
    step_size : float, default=0.01
        Time step :math:`\varepsilon > 0` (unit mass; ``p`` has units of
        :math:`\sqrt{T}`). Note that SGHMC's ``step_size`` is
        :math:`\varepsilon^2` in these units.
    friction : float, default=1.0
        :math:`\gamma > 0` per unit time.
    temperature : float, default=1.0
        :math:`T = 1/\beta > 0`.
    scheme : {"BAOAB", "GLA2", "GLA1"}, default="BAOAB"

    Raises
    ------
    ValueError
        From :meth:`validate`: on a non-positive step size, friction or
        temperature, or an unknown scheme.

    Notes
    -----
    ``StepInfo.kinetic_energy`` is :math:`|p|^2/2` and
    ``kinetic_temperature`` :math:`|p|^2/D`, both with the momentum synchronised
    with the returned position (for BAOAB and GLA2; for GLA1 after O).

    References
    ----------
    Heber, Trstanova, Leimkuhler, "TATi" (paper 004), Sec. 2 eqs. (9)-(13),
    Table 1; Leimkuhler and Matthews, Appl. Math. Res. Express 2013.
    """

    name = "baoab"
    stats = {**COMMON_STATS, **MOMENTUM_STATS}
    state_class = BAOABState
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither")],
        "friction": [Interval(Real, 0, np.inf, closed="neither")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "scheme": [StrOptions(set(_SCHEMES))],
    }

    def __init__(self, step_size: float = 0.01, friction: float = 1.0, temperature: float = 1.0,
                 scheme: str = "BAOAB"):
        self.step_size = step_size
        self.friction = friction
        self.temperature = temperature
        self.scheme = scheme

    def target_temperature(self) -> float:
        return float(self.temperature)

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout) -> BAOABState:
        momentum, flat = gaussian_momentum(position, math.sqrt(self.temperature), rng, layout)
        return BAOABState(position=position, layout=layout, rng=rng, momentum=momentum, flat_momentum=flat)

    def reset_cache(self, state: BAOABState) -> None:
        """Drop the cached gradient: the next step re-evaluates it on its own batch."""
        state.grad = None

    def step(self, state: BAOABState, potential: Potential, batch: Any) -> tuple[BAOABState, StepInfo]:
        eps, theta, p, flat = self.step_size, state.position, state.momentum, state.flat_momentum
        rng, layout = state.rng, state.layout
        a, noise = exact_ou_coefficients(self.friction, eps, 1.0, self.temperature)  # unit mass: eta = 1
        grad = state.grad
        if grad is None:  # first step: the gradient at the starting point
            _, grad = potential.value_and_grad(batch)
        if self.scheme == "BAOAB":
            value, grad = baoab_step(theta, p, grad, eps, a, noise, potential, batch, rng, layout, flat)
        elif self.scheme == "GLA2":
            gradient_step(p, grad, eps / 2)
            position_step(theta, p, eps)
            value, grad = potential.value_and_grad(batch)
            gradient_step(p, grad, eps / 2)
            ornstein_uhlenbeck_step(p, a, noise, rng, layout, flat)
        else:  # GLA1
            gradient_step(p, grad, eps)
            position_step(theta, p, eps)
            ornstein_uhlenbeck_step(p, a, noise, rng, layout, flat)
            value, grad = potential.value_and_grad(batch)
        state.grad = grad
        state.step += 1
        kinetic = 0.5 * squared_norm(p, flat)
        return state, StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                               kinetic_temperature=2.0 * kinetic / chain_numel(p, layout))
