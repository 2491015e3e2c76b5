"""Underdamped Langevin dynamics by BAOAB splitting, and the GLA1/GLA2 schemes."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor

from .base import Potential, Sampler, SamplerState, StepInfo, register_sampler
from .integrators import (
    baoab_step,
    exact_ou_coefficients,
    gaussian_momentum,
    gradient_step,
    chain_numel,
    ornstein_uhlenbeck_step,
    position_step,
    squared_norm,
)

__all__ = ["BAOAB"]

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
        On non-positive step size, friction or temperature, or an unknown scheme.

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
    _positive = ("step_size", "friction", "temperature")

    def __init__(self, step_size: float = 0.01, friction: float = 1.0, temperature: float = 1.0,
                 scheme: str = "BAOAB"):
        self.step_size = step_size
        self.friction = friction
        self.temperature = temperature
        self.scheme = scheme
        self._validate()
        if scheme not in _SCHEMES:
            raise ValueError(f"baoab: scheme must be one of {list(_SCHEMES)}, got {scheme!r}.")

    def init(self, position: Sequence[Tensor], generator: torch.Generator | None,
             n_chains: int | None = None) -> SamplerState:
        position = list(position)
        self._check_chain_axis(position, n_chains)
        momentum, flat = gaussian_momentum(position, math.sqrt(self.temperature), generator, n_chains)
        return SamplerState(position=position, momentum=momentum, extra={"flat_momentum": flat, "n_chains": n_chains})

    def step(
        self, state: SamplerState, potential: Potential, batch: Any, generator: torch.Generator | None
    ) -> tuple[SamplerState, StepInfo]:
        eps, theta, p = self.step_size, state.position, state.momentum
        a, noise = exact_ou_coefficients(self.friction, eps, 1.0, self.temperature)  # unit mass: eta = 1
        grad = state.extra.get("grad")
        if grad is None:  # first step: the gradient at the starting point
            _, grad = potential.value_and_grad(batch)
        if self.scheme == "BAOAB":
            value, grad = baoab_step(theta, p, grad, eps, a, noise, potential, batch, generator)
        elif self.scheme == "GLA2":
            gradient_step(p, grad, eps / 2)
            position_step(theta, p, eps)
            value, grad = potential.value_and_grad(batch)
            gradient_step(p, grad, eps / 2)
            ornstein_uhlenbeck_step(p, a, noise, generator)
        else:  # GLA1
            gradient_step(p, grad, eps)
            position_step(theta, p, eps)
            ornstein_uhlenbeck_step(p, a, noise, generator)
            value, grad = potential.value_and_grad(batch)
        state.extra["grad"] = grad
        state.step += 1
        kinetic = 0.5 * squared_norm(p, state.extra.get("flat_momentum"))
        return state, StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                               kinetic_temperature=2.0 * kinetic / chain_numel(p, state.extra.get("n_chains")))
