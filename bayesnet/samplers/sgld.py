"""Stochastic gradient Langevin dynamics (SGLD)."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import Potential, Sampler, SamplerState, StepInfo
from .registry import register_sampler
from .compiled import potential_gradients, write_back
from .integrators import gaussian_like
from .random import ChainRandom
from .warmup import HEAT, WARMUP_DOC, Preconditioner, flatten, views

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
    \log p(y_i | x_i, \theta)` (Karagiannis's SGLD notes eq. 3.2; the N/|S| scaling is done by
    the potential, see :class:`bayesnet.posterior.Posterior`). It is the
    Euler-Maruyama discretisation of the overdamped Langevin diffusion
    (Karagiannis's SGLD notes eq. 3.5, Heber et al. 2020 (TATi) eqs. 4-5) whose invariant density is
    :math:`\propto \exp(-U(\theta)/T)` (Karagiannis's SGLD notes eqs. 3.3 and 3.6). Every step's
    position is a draw; ``burn_in`` and ``thinning`` are applied by the trace.

    With a diagonal mass matrix :math:`M` (the warm-up's preconditioner) the
    step is :math:`\theta_{t+1} = \theta_t - \eta M^{-1}\nabla\tilde U +
    \sqrt{2\eta T M^{-1}}\,\epsilon_t`: a constant :math:`M` needs no
    correction term, so the chain keeps the same target (Li et al. 2016, eq. 4
    with :math:`\Gamma = 0`).

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        :math:`\eta > 0`. A number is in units of (parameter units)^2 per
        unit of potential (with ``preconditioner=None``); the stationary
        variance of a Gaussian direction with curvature :math:`\lambda` is
        inflated by :math:`1/(1-\eta\lambda/2)`. "auto" is dimensionless and
        set by the warm-up (:meth:`warmup_step_size`): stable,
        :math:`\eta\lambda_{max}(M^{-1}H) = 0.1` (5 % inflation of the
        stiffest direction's variance), and cool, the gradient noise's heat
        :math:`\eta\rho/2 \le 5\%` (:math:`\rho = \overline{m_i
        \mathrm{Var}_i}`, the gradient's mini-batch noise variance in
        preconditioned units, averaged over coordinates).
    temperature : float, default=1.0
        :math:`T = \tau > 0`; ``1`` samples the posterior, larger values
        flatten it (Karagiannis's SGLD notes Remark 26).
{warmup}

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
    Teh (2011) and with Heber et al. 2020 (TATi) eq. (4). We implement the consistent
    variance :math:`2\eta T`. The step size is constant (Heber et al. 2020 (TATi) Sec. 2:
    a fixed step size has the same efficiency up to a constant), so draws are
    equally weighted.

    References
    ----------
    Karagiannis, "Bayesian learning via stochastic gradient and SGLD", eqs. (3.2)-(3.6) and Algorithm 21;
    Welling and Teh, "Bayesian learning via stochastic gradient Langevin dynamics", ICML 2011.
    """

    name = "sgld"
    gradients_at_positions = True  # one gradient per step, at the members' positions
    fallback_step_size = 1e-4
    #: the preconditioned stability target: step * lambda_max
    stability = 0.1
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    }

    def __init__(self, step_size: float | str = "auto", temperature: float = 1.0, preconditioner: str | None = "auto",
                 adaptation_steps: int | str = "auto"):
        self.step_size = step_size
        self.temperature = temperature
        self.preconditioner = preconditioner
        self.adaptation_steps = adaptation_steps

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """``min(stability / lambda, 2 HEAT / rho)``: see ``step_size``."""
        return self._stable_and_cool(curvature, noise_fraction, self.coordinate_noise_budget())

    def coordinate_noise_budget(self) -> float:
        """``2 HEAT``: the gradient noise heats a coordinate by ``eta m_i Var_i / 2``."""
        return 2.0 * HEAT

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> SamplerState:
        return SamplerState(position=position, layout=layout, rng=rng, precond=precond)

    def _scales(self, state: SamplerState) -> tuple[list[Tensor], list[Tensor]]:
        """Per coordinate, the drift's step ``eta m`` and the noise sd ``sqrt(2 eta T m)``, shaped as the
        positions (cached until the preconditioner changes)."""
        pre, position = state.precond, state.position
        template = state.derived("template", lambda: flatten([p.detach() for p in position], state.layout))
        drift = state.derived("drift", lambda: views(pre.per_coordinate(pre.step_size, 1.0, template), position))
        noise = state.derived("noise", lambda: views(pre.per_coordinate(
            torch.sqrt(2.0 * pre.step_size * self.temperature), 0.5, template), position))
        return drift, noise

    def _step(self, state: SamplerState, potential: Potential, batch: Any) -> tuple[SamplerState, StepInfo]:
        position = state.position
        drift, noise = self._scales(state)
        value, grad = potential.value_and_grad(batch)
        with torch.no_grad():
            torch._foreach_addcmul_(position, list(grad), drift, value=-1.0)  # B applied to theta
            torch._foreach_addcmul_(position, gaussian_like(position, state.rng, state.layout), noise)
        state.step += 1
        return state, StepInfo(potential=value.detach())

    # the same step as a pure function, for bayesnet.samplers.compiled
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """:meth:`_step` as a pure function: ``(positions, noise, drift, noise_scale, X, y, factors, offset) ->
        (positions, potentials)``."""
        grad_and_value = potential_gradients(potentials)

        def transition(position, z, drift, noise, X, y, factors, offset):
            grads, (_, u) = grad_and_value(position, X, y, factors, offset)
            return [p - d * g + n * e for p, d, g, n, e in zip(position, drift, grads, noise, z)], u

        return transition

    def transition_inputs(self, state: SamplerState, potential: Potential, batch: Any) -> tuple:
        position = state.position
        drift, noise = self._scales(state)
        z = gaussian_like(position, state.rng, state.layout)
        factors, offset = potential.prior_form()
        X, y = batch
        return [p.detach() for p in position], z, drift, noise, X, y, factors, offset

    def finish_transition(self, state: SamplerState, outputs) -> StepInfo:
        new, value = outputs
        write_back(state, new)
        state.step += 1
        return StepInfo(potential=value.detach())


SGLD.__doc__ = SGLD.__doc__.replace("{warmup}", WARMUP_DOC)
