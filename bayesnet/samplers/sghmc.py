"""Stochastic gradient Hamiltonian Monte Carlo (SGHMC)."""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np
from sklearn.utils._param_validation import Interval
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, StepInfo, register_sampler
from .integrators import (
    chain_numel,
    gaussian_momentum,
    gradient_step,
    ornstein_uhlenbeck_step,
    position_step,
    squared_norm,
)
from .random import ChainRandom

__all__ = ["SGHMC"]


@register_sampler
class SGHMC(Sampler):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox and Guestrin 2014).

    In the "SGD with momentum" parametrisation of Chen et al. eq. (15), which
    is the one the TACT-HMC paper (paper 000, Sec. 3.3 change of variables
    :math:`r = p\Delta t/m`, :math:`\eta = \Delta t^2/m`) uses for its SGHMC
    baseline, one step is the composition ``A O B``:

    .. math::

        \theta &\leftarrow \theta + r                                     && (A)\\
        r &\leftarrow (1-\alpha)\, r + \mathcal N\big(0,\, 2(\alpha - \hat\beta)\,\eta T\big) && (O)\\
        r &\leftarrow r - \eta \nabla \tilde U(\theta)                     && (B)

    i.e. exactly :math:`r \leftarrow (1-\alpha) r - \eta\nabla\tilde U(\theta) +
    \mathcal N(0, 2(\alpha-\hat\beta)\eta T)` (Chen et al. eq. 15), the friction
    acting on the old momentum only.

    where :math:`\alpha` is the friction (momentum decay per step) and
    :math:`\hat\beta` an estimate of the mini-batch gradient noise
    (:math:`\hat\beta = \eta \hat V/2` in Chen et al.'s notation), which is
    subtracted from the injected noise. The dynamics targets
    :math:`\pi(\theta) \propto \exp(-U(\theta)/T)` with momenta
    :math:`r \sim \mathcal N(0, \eta T I)`; positions after each step are the
    draws. The gradient is evaluated once per step, at the position the step
    returns.

    Parameters
    ----------
    step_size : float, default=1e-4
        :math:`\eta > 0` ("learning rate"), same units as in :class:`SGLD`.
    friction : float, default=0.05
        :math:`\alpha \in (0, 1]`, the fraction of momentum removed per step
        (``1 - momentum`` in SGD terms). Chen et al. suggest 0.01-0.1.
    noise_estimate : float, default=0.0
        :math:`\hat\beta \in [0, \alpha)`; 0 ignores the gradient noise, which is
        the usual choice.
    temperature : float, default=1.0
        :math:`T > 0`.

    Raises
    ------
    ValueError
        From :meth:`validate`: on a non-positive step size or temperature, a
        friction outside (0, 1], or ``noise_estimate`` not in [0, friction).

    Notes
    -----
    The friction enters as Euler's :math:`(1-\alpha)` rather than the exact
    :math:`e^{-\alpha}` (the latter is the O step of :mod:`baoab`), as in Chen
    et al. Momenta start at their equilibrium :math:`\mathcal N(0, \eta T I)`.
    ``StepInfo.kinetic_temperature`` is :math:`\sum r^2/(\eta D)`.

    References
    ----------
    T. Chen, E. Fox, C. Guestrin, "Stochastic gradient Hamiltonian Monte Carlo",
    ICML 2014, eq. (15) and Algorithm 2; paper 000, Sec. 3.3 and 4.
    """

    name = "sghmc"
    stats = {**COMMON_STATS, **MOMENTUM_STATS}
    state_class = MomentumState
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither")],
        "friction": [Interval(Real, 0, 1, closed="right")],
        "noise_estimate": [Interval(Real, 0, 1, closed="left")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
    }

    def __init__(
        self,
        step_size: float = 1e-4,
        friction: float = 0.05,
        noise_estimate: float = 0.0,
        temperature: float = 1.0,
    ):
        self.step_size = step_size
        self.friction = friction
        self.noise_estimate = noise_estimate
        self.temperature = temperature

    def _check_params(self) -> None:
        if self.noise_estimate >= self.friction:
            raise ValueError(f"sghmc: noise_estimate must be smaller than friction ({self.friction!r}), got "
                             f"{self.noise_estimate!r}.")

    def target_temperature(self) -> float:
        return float(self.temperature)

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout) -> MomentumState:
        std = math.sqrt(self.step_size * self.temperature)
        # The momenta are views of one (chain-major) buffer: diagnostics reduce it in one op per chain.
        momentum, flat = gaussian_momentum(position, std, rng, layout)
        return MomentumState(position=position, layout=layout, rng=rng, momentum=momentum, flat_momentum=flat)

    def step(self, state: MomentumState, potential: Potential, batch: Any) -> tuple[MomentumState, StepInfo]:
        eta, alpha = self.step_size, self.friction
        flat = state.flat_momentum
        position_step(state.position, state.momentum)  # A
        value, grad = potential.value_and_grad(batch)
        noise_std = math.sqrt(2.0 * (alpha - self.noise_estimate) * eta * self.temperature)
        ornstein_uhlenbeck_step(state.momentum, 1.0 - alpha, noise_std, state.rng, state.layout, flat)  # O
        gradient_step(state.momentum, grad, eta)  # B
        state.step += 1
        kinetic = squared_norm(state.momentum, flat) / (2.0 * eta)
        return state, StepInfo(
            potential=value.detach(),
            kinetic_energy=kinetic,
            kinetic_temperature=2.0 * kinetic / chain_numel(state.momentum, state.layout),
        )
