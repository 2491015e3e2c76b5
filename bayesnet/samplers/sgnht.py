"""Stochastic gradient Nosé-Hoover thermostat (SGNHT)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, Stat, StepInfo, register_sampler
from .integrators import add_noise, chain_numel, gaussian_momentum, gradient_step, position_step, squared_norm
from .random import ChainRandom

__all__ = ["SGNHT", "SGNHTState"]


@dataclass(kw_only=True)
class SGNHTState(MomentumState):
    """:class:`MomentumState` plus the thermostat ``z``: shape ``(C,)`` with a chain axis (one per chain),
    ``()`` without."""

    thermostat: Tensor


@register_sampler
class SGNHT(Sampler):
    r"""Stochastic gradient Nosé-Hoover thermostat (Ding et al. 2014), as paper 000 uses it.

    Momentum dynamics whose friction :math:`z` is itself a dynamical variable
    (a scalar Nosé-Hoover thermostat) driven by the kinetic temperature, so
    that unknown mini-batch gradient noise is absorbed into :math:`z`. In the
    variables of paper 000 Sec. 3.3 (:math:`r = p\Delta t/m`,
    :math:`\eta = \Delta t^2/m`, :math:`z = s\Delta t`), which is Algorithm 1 of
    paper 000 with the tempering switched off (:math:`\lambda \equiv 1`), one
    step is

    .. math::

        z &\leftarrow z + \big(r^\top r / D - \eta T\big) / \gamma \\
        r &\leftarrow r - \eta \nabla\tilde U(\theta) + \mathcal N(0, 2 c\, \eta T) - z\, r \\
        \theta &\leftarrow \theta + r

    with :math:`D` the number of parameters. The invariant density has
    :math:`\theta \sim \exp(-U/T)`, :math:`r \sim \mathcal N(0, \eta T I)`, and
    the thermostat concentrated around :math:`c` plus the unknown
    gradient-noise level (paper 000 Theorem 1 with :math:`\lambda = 1`).

    Parameters
    ----------
    step_size : float, default=1e-4
        :math:`\eta > 0` (same units as :class:`SGHMC`'s).
    noise : float, default=0.05
        Injected-noise level :math:`c \ge 0` (Ding et al.'s :math:`A h`); also
        the thermostat's initial value (paper 000 Alg. 1 line 1).
    thermal_inertia : float, default=1.0
        :math:`\gamma > 0` (paper 000's :math:`\gamma_\theta = \kappa_\theta/(m_\theta D)`);
        larger values make the thermostat respond more slowly.
    temperature : float, default=1.0
        :math:`T > 0`.

    Raises
    ------
    ValueError
        From :meth:`validate`: on a non-positive step size, thermal inertia
        or temperature, or a negative noise level.

    Notes
    -----
    ``StepInfo.extra["thermostat"]`` is :math:`z` after the step and
    ``kinetic_temperature`` :math:`r^\top r/(\eta D)`. Momenta start at
    :math:`\mathcal N(0, \eta T I)`. The potential is reported at the position
    where the gradient was taken (the start of the step). With
    ``init(..., n_chains=C)`` every chain has its own thermostat (shape
    ``(C,)``) driven by its own kinetic temperature; without a chain axis one
    thermostat serves the whole position.

    References
    ----------
    N. Ding et al., "Bayesian sampling using stochastic gradient thermostats",
    NeurIPS 2014, Algorithm 2; paper 000 Sec. 3.1, 3.3, 4 and Algorithm 1.
    """

    name = "sgnht"
    stats = {**COMMON_STATS, **MOMENTUM_STATS, "thermostat": Stat("mean")}
    state_class = SGNHTState
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither")],
        "noise": [Interval(Real, 0, np.inf, closed="left")],
        "thermal_inertia": [Interval(Real, 0, np.inf, closed="neither")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
    }

    def __init__(self, step_size: float = 1e-4, noise: float = 0.05, thermal_inertia: float = 1.0,
                 temperature: float = 1.0):
        self.step_size = step_size
        self.noise = noise
        self.thermal_inertia = thermal_inertia
        self.temperature = temperature

    def target_temperature(self) -> float:
        return float(self.temperature)

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout) -> SGNHTState:
        momentum, flat = gaussian_momentum(position, math.sqrt(self.step_size * self.temperature), rng, layout)
        first = position[0]
        shape = () if layout.n_chains is None else (layout.chains,)
        thermostat = torch.full(shape, float(self.noise), dtype=first.dtype, device=first.device)
        return SGNHTState(position=position, layout=layout, rng=rng, momentum=momentum, flat_momentum=flat,
                          thermostat=thermostat)

    def step(self, state: SGNHTState, potential: Potential, batch: Any) -> tuple[SGNHTState, StepInfo]:
        eta, r, flat = self.step_size, state.momentum, state.flat_momentum
        dim = chain_numel(r, state.layout)
        target = eta * self.temperature
        r2 = squared_norm(r, flat)  # one value per chain: each chain has its own thermostat
        z = state.thermostat + (r2 / dim - target) / self.thermal_inertia
        state.thermostat = z
        value, grad = potential.value_and_grad(batch)
        with torch.no_grad():  # the thermostat friction -z r, on the buffer the momenta are views of
            flat.mul_((1.0 - z).unsqueeze(-1) if flat.ndim == 2 else 1.0 - z)
        gradient_step(r, grad, eta)
        add_noise(r, math.sqrt(2.0 * self.noise * target), state.rng, state.layout, flat)
        position_step(state.position, r)
        state.step += 1
        return state, StepInfo(potential=value.detach(), kinetic_energy=0.5 * r2 / eta,
                               kinetic_temperature=r2 / (eta * dim), extra={"thermostat": z})
