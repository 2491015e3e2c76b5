"""Stochastic gradient Langevin dynamics (SGLD)."""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np
from sklearn.utils._param_validation import Interval
from torch import Tensor

from ..plan import ChainLayout
from .base import Potential, Sampler, SamplerState, StepInfo, register_sampler
from .integrators import add_noise, gradient_step
from .random import ChainRandom

__all__ = ["SGLD"]


@register_sampler
class SGLD(Sampler):
    r"""Stochastic gradient Langevin dynamics (Welling and Teh 2011; Karagiannis, Algorithm 21).

    One step on a mini-batch :math:`S` of a dataset of size :math:`N` is

    .. math::

        \theta_{t+1} = \theta_t - \eta \nabla \tilde U(\theta_t)
                       + \sqrt{2 \eta T}\, \epsilon_t, \qquad
        \epsilon_t \sim \mathcal N(0, I),

    with :math:`\tilde U(\theta) = -\log p(\theta) - (N/|S|)\sum_{i\in S}
    \log p(y_i | x_i, \theta)` (paper 001 eq. 3.2; the N/|S| scaling is done by
    the potential, see :class:`bayesnet.posterior.Posterior`). It is the
    Euler-Maruyama discretisation of the overdamped Langevin diffusion
    (paper 001 eq. 3.5, paper 004 eqs. 4-5) whose invariant density is
    :math:`\propto \exp(-U(\theta)/T)` (paper 001 eqs. 3.3 and 3.6). Every step's
    position is a draw; ``burn_in`` and ``thinning`` are applied by the trace.

    Parameters
    ----------
    step_size : float, default=1e-4
        :math:`\eta > 0`, in units of (parameter units)^2 per unit of
        potential. The stationary variance of a Gaussian direction with
        curvature :math:`\lambda` is inflated by :math:`1/(1-\eta\lambda/2)`;
        keep :math:`\eta\lambda_{max} \ll 1`.
    temperature : float, default=1.0
        :math:`T = \tau > 0`; ``1`` samples the posterior, larger values
        flatten it (paper 001 Remark 26).

    Raises
    ------
    ValueError
        From :meth:`validate` (called by :meth:`init` and the estimators), if ``step_size`` or
        ``temperature`` is not a finite positive number.

    Notes
    -----
    The handout prints the noise of eq. (3.2) as :math:`\sqrt{\eta\tau}\,\epsilon`;
    with a drift of :math:`\eta\nabla\log p` that samples at temperature
    :math:`\tau/2`, inconsistent with its own diffusion (3.5), with Welling and
    Teh (2011) and with paper 004 eq. (4). We implement the consistent
    variance :math:`2\eta T`. The step size is constant (paper 004 Sec. 2:
    a fixed step size has the same efficiency up to a constant), so draws are
    equally weighted.

    References
    ----------
    Karagiannis, "Bayesian learning via stochastic gradient and SGLD", eqs. (3.2)-(3.6) and Algorithm 21;
    Welling and Teh, "Bayesian learning via stochastic gradient Langevin dynamics", ICML 2011.
    """

    name = "sgld"
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
    }

    def __init__(self, step_size: float = 1e-4, temperature: float = 1.0):
        self.step_size = step_size
        self.temperature = temperature

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout) -> SamplerState:
        return SamplerState(position=position, layout=layout, rng=rng)

    def step(self, state: SamplerState, potential: Potential, batch: Any) -> tuple[SamplerState, StepInfo]:
        value, grad = potential.value_and_grad(batch)
        gradient_step(state.position, grad, self.step_size)  # B applied to theta
        add_noise(state.position, math.sqrt(2.0 * self.step_size * self.temperature), state.rng, state.layout)
        state.step += 1
        return state, StepInfo(potential=value.detach())
