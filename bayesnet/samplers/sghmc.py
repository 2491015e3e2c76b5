"""Stochastic gradient Hamiltonian Monte Carlo (SGHMC)."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, StepInfo
from .registry import register_sampler
from .compiled import potential_gradients, write_back
from .integrators import chain_numel, momentum_state, normal_flat, position_step
from .random import ChainRandom
from .warmup import HEAT, WARMUP_DOC, Preconditioner, flatten, views

__all__ = ["SGHMC"]


@register_sampler
class SGHMC(Sampler):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox and Guestrin 2014).

    In the "SGD with momentum" parametrisation of Chen et al. eq. (15), which
    is the one the TACT-HMC paper (Luo et al. 2018, Sec. 3.3 change of variables
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

    With a diagonal mass matrix :math:`M` (the warm-up's preconditioner) the
    kick and the noise are :math:`\eta M^{-1}\nabla\tilde U` and
    :math:`\mathcal N(0, 2(\alpha-\hat\beta)\eta T M^{-1})`, and the momenta
    :math:`r \sim \mathcal N(0, \eta T M^{-1})`.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        :math:`\eta > 0` ("learning rate"), same units as in :class:`SGLD`.
        "auto" is set by the warm-up: stable,
        :math:`\eta\lambda_{max}(M^{-1}H) = 0.3` (``stability``; the Euler scheme's limit is 4), and cool, the gradient
        noise's heat :math:`\eta\rho/(2\alpha) \le 5\%`. Along a curvature :math:`\lambda` the kernel's
        stationary variance is about :math:`1/(1-\eta\lambda/4)` times the target's (small :math:`\alpha`): 8 %
        more in the stiffest direction at the rule's step, less in every other; 0.3 was chosen on the defaults
        panel against 0.1, 0.2, 1.0 and BAOAB (benchmarks/README.md, "SGHMC's stability rule").
    friction : float, default=0.05
        :math:`\alpha \in (0, 1]`, the fraction of momentum removed per step
        (``1 - momentum`` in SGD terms). Chen et al. suggest 0.01-0.1.
    noise_estimate : float, default=0.0
        :math:`\hat\beta \in [0, \alpha)`; 0 ignores the gradient noise, which is
        the usual choice.
    temperature : float, default=1.0
        :math:`T > 0`.
{warmup}

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
    ``StepInfo.kinetic_temperature`` is :math:`\sum_i r_i^2 M_i/(\eta D)`.

    References
    ----------
    T. Chen, E. Fox, C. Guestrin, "Stochastic gradient Hamiltonian Monte Carlo",
    ICML 2014, eq. (15) and Algorithm 2; Luo et al. 2018, Sec. 3.3 and 4.
    """

    name = "sghmc"
    gradients_at_positions = True  # one gradient per step, at the members' positions
    stats = {**COMMON_STATS, **MOMENTUM_STATS}
    state_class = MomentumState
    fallback_step_size = 1e-4
    stability = 0.3
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "friction": [Interval(Real, 0, 1, closed="right")],
        "noise_estimate": [Interval(Real, 0, 1, closed="left")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    }

    def __init__(self, step_size: float | str = "auto", friction: float = 0.05, noise_estimate: float = 0.0,
                 temperature: float = 1.0, preconditioner: str | None = "auto", adaptation_steps: int | str = "auto"):
        self.step_size = step_size
        self.friction = friction
        self.noise_estimate = noise_estimate
        self.temperature = temperature
        self.preconditioner = preconditioner
        self.adaptation_steps = adaptation_steps

    def _check_params(self) -> None:
        if self.noise_estimate >= self.friction:
            raise ValueError(f"sghmc: noise_estimate must be smaller than friction ({self.friction!r}), got "
                             f"{self.noise_estimate!r}.")

    def target_temperature(self) -> float:
        return float(self.temperature)

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """``min(stability / lambda, 2 friction HEAT / rho)``: see ``step_size``."""
        return self._stable_and_cool(curvature, noise_fraction, self.coordinate_noise_budget())

    def coordinate_noise_budget(self) -> float:
        """``2 friction HEAT``: the gradient noise heats a coordinate by ``eta m_i Var_i / (2 friction)``."""
        return 2.0 * self.friction * HEAT

    def momentum_std(self, state: MomentumState) -> Tensor:
        return self._scaled_momentum_std(state, lambda pre: torch.sqrt(pre.step_size * self.temperature))

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> MomentumState:
        return momentum_state(MomentumState, self.momentum_std, position, rng, layout, precond)

    def _scales(self, state: MomentumState) -> tuple[Tensor, Tensor]:
        """Per coordinate, laid out as the momenta: the noise sd ``sqrt(2 (alpha - beta) eta T m)`` and the
        kinetic energy's weight ``1 / (2 eta m)`` (cached until the preconditioner changes)."""
        pre, flat = state.precond, state.flat_momentum
        noise = state.derived("noise", lambda: pre.per_coordinate(
            torch.sqrt(2.0 * (self.friction - self.noise_estimate) * pre.step_size * self.temperature), 0.5, flat))
        weight = state.derived("kinetic_weight", lambda: pre.per_coordinate(0.5 / pre.step_size, -1.0, flat))
        return noise, weight

    def _step(self, state: MomentumState, potential: Potential, batch: Any) -> tuple[MomentumState, StepInfo]:
        pre, alpha, flat = state.precond, self.friction, state.flat_momentum
        kick = state.derived("kick", lambda: views(pre.per_coordinate(pre.step_size, 1.0, flat), state.position))
        noise, weight = self._scales(state)
        position_step(state.position, state.momentum)  # A
        value, grad = potential.value_and_grad(batch)
        with torch.no_grad():
            flat.mul_(1.0 - alpha)  # O: friction, then noise
            flat.addcmul_(normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat), noise)
            torch._foreach_addcmul_(state.momentum, list(grad), kick, value=-1.0)  # B
            kinetic = (flat * flat * weight).sum(-1)
        state.step += 1
        return state, StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                               kinetic_temperature=2.0 * kinetic / chain_numel(state.momentum, state.layout))

    # the same step as a pure function, for bayesnet.samplers.compiled
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """:meth:`_step` as a pure function: ``(positions, momenta, noise, kick, noise_scale, weight, X, y,
        factors, offset) -> (positions, momenta, potentials, kinetic energies)``."""
        alpha = float(self.friction)
        grad_and_value = potential_gradients(potentials)

        def transition(position, flat, z, kick, noise, weight, X, y, factors, offset):
            moved = [p + m for p, m in zip(position, views(flat, position))]  # A
            grads, (_, u) = grad_and_value(moved, X, y, factors, offset)
            flat = flat * (1.0 - alpha) + z * noise - flatten(grads, layout) * kick  # O, then B
            return moved, flat, u, (flat * flat * weight).sum(-1)

        return transition

    def transition_inputs(self, state: MomentumState, potential: Potential, batch: Any) -> tuple:
        pre, flat = state.precond, state.flat_momentum
        kick = state.derived("kick_flat", lambda: pre.per_coordinate(pre.step_size, 1.0, flat))
        noise, weight = self._scales(state)
        z = normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat)
        factors, offset = potential.prior_form()
        X, y = batch
        return [p.detach() for p in state.position], flat, z, kick, noise, weight, X, y, factors, offset

    def finish_transition(self, state: MomentumState, outputs) -> StepInfo:
        moved, flat, value, kinetic = outputs
        write_back(state, moved, flat)
        state.step += 1
        return StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                        kinetic_temperature=2.0 * kinetic / chain_numel(state.momentum, state.layout))


SGHMC.__doc__ = SGHMC.__doc__.replace("{warmup}", WARMUP_DOC)
