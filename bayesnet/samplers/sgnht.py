"""Stochastic gradient Nosé-Hoover thermostat (SGNHT)."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, Stat, StepInfo
from .registry import register_sampler
from .compiled import potential_gradients, write_back
from .integrators import chain_numel, friction_flow, momentum_state, normal_flat, position_step
from .random import ChainRandom
from .estimates import mask_like
from .warmup import HEAT, WARMUP_DOC, Preconditioner, clamp_friction, flatten, views

__all__ = ["SGNHT", "SGNHTState"]


@dataclass(kw_only=True)
class SGNHTState(MomentumState):
    """:class:`MomentumState` plus the thermostat ``z``: shape ``(C,)`` with a chain axis (one per chain),
    ``()`` without."""

    thermostat: Tensor


@register_sampler
class SGNHT(Sampler):
    r"""Stochastic gradient Nosé-Hoover thermostat (Ding et al. 2014), as Luo et al. 2018 uses it.

    Momentum dynamics whose friction :math:`z` is itself a dynamical variable
    (a scalar Nosé-Hoover thermostat) driven by the kinetic temperature, so
    that unknown mini-batch gradient noise is absorbed into :math:`z`. In the
    variables of Luo et al. 2018 Sec. 3.3 (:math:`r = p\Delta t/m`,
    :math:`\eta = \Delta t^2/m`, :math:`z = s\Delta t`), which is Algorithm 1 of
    Luo et al. 2018 with the tempering switched off (:math:`\lambda \equiv 1`), one
    step is

    .. math::

        z &\leftarrow z + \big(r^\top r / D - \eta T\big) / \gamma \\
        r &\leftarrow e^{-z} r - \eta \nabla\tilde U(\theta) + \mathcal N(0, 2 c\, \eta T) \\
        \theta &\leftarrow \theta + r

    with :math:`D` the number of parameters. The friction is applied as its
    exact flow :math:`e^{-z} r`, as splitting schemes for thermostats do
    (Leimkuhler and Shang 2016), where Ding et al. 2014 (Algorithm 2) and
    Luo et al. 2018 (Algorithm 1, line 10) take the Euler step
    :math:`r - z r`. The two agree to first order (at equilibrium :math:`z`
    is of the order of the step), but above :math:`z = 2` the Euler step
    reverses and amplifies the momenta, and the thermostat fluctuates by
    about :math:`\eta\sqrt{2/D}/\gamma` a step: on a 5-parameter linear
    regression (4 chains, mini-batches of 50 of 300 rows) 3 of 6 seeds
    diverged within 4,000 steps after the warm-up with the Euler step,
    none with the exact flow, which never amplifies the momenta for
    :math:`z \ge 0`. The invariant density has
    :math:`\theta \sim \exp(-U/T)`, :math:`r \sim \mathcal N(0, \eta T I)`, and
    the thermostat concentrated around :math:`c` plus the unknown
    gradient-noise level (Luo et al. 2018 Theorem 1 with :math:`\lambda = 1`).

    With a diagonal mass matrix :math:`M` (the warm-up's preconditioner) the
    kick is :math:`\eta M^{-1}\nabla\tilde U`, the noise
    :math:`\mathcal N(0, 2c\eta T M^{-1})`, and the thermostat follows the
    kinetic temperature :math:`T_{kin} = \sum_i r_i^2 M_i/(\eta D)`:
    :math:`z \leftarrow z + \eta (T_{kin} - T)/\gamma` (the same update as
    above with :math:`M = I`).

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        :math:`\eta > 0` (same units as :class:`SGHMC`'s). "auto" is set by
        the warm-up to :math:`\eta\lambda_{max}(M^{-1}H) = 0.15` (within 5 % of the stiffest direction's variance, measured); the
        thermostat absorbs the gradient noise's heat, so no noise cap is
        needed beyond :math:`\eta\rho \le 1` (a friction below 1).
    noise : float, default=0.05
        Injected-noise level :math:`c \ge 0` (Ding et al.'s :math:`A h`); also
        the thermostat's initial value (Luo et al. 2018 Alg. 1 line 1).
    thermal_inertia : float, default=1.0
        :math:`\gamma > 0` (Luo et al. 2018's :math:`\gamma_\theta = \kappa_\theta/(m_\theta D)`);
        larger values make the thermostat respond more slowly.
    temperature : float, default=1.0
        :math:`T > 0`.
{warmup}

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
    NeurIPS 2014, Algorithm 2; Luo et al. 2018 Sec. 3.1, 3.3, 4 and Algorithm 1;
    B. Leimkuhler and X. Shang, "Adaptive thermostats for noisy gradient
    systems", SIAM J. Sci. Comput. 38(2), 2016 (the friction's exact flow).
    """

    name = "sgnht"
    gradients_at_positions = True  # one gradient per step, at the members' positions
    stats = {**COMMON_STATS, **MOMENTUM_STATS, "thermostat": Stat("mean")}
    state_class = SGNHTState
    fallback_step_size = 1e-4
    stability = 0.15
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "noise": [Interval(Real, 0, np.inf, closed="left")],
        "thermal_inertia": [Interval(Real, 0, np.inf, closed="neither")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    }

    def __init__(self, step_size: float | str = "auto", noise: float = 0.05, thermal_inertia: float = 1.0,
                 temperature: float = 1.0, preconditioner: str | None = "auto", adaptation_steps: int | str = "auto"):
        self.step_size = step_size
        self.noise = noise
        self.thermal_inertia = thermal_inertia
        self.temperature = temperature
        self.preconditioner = preconditioner
        self.adaptation_steps = adaptation_steps

    def target_temperature(self) -> float:
        return float(self.temperature)

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """``min(stability / lambda, 1 / rho)``: see ``step_size``."""
        return self._stable_and_cool(curvature, noise_fraction, 1.0)

    def coordinate_noise_budget(self) -> float:
        """``2 noise HEAT``: the thermostat's friction absorbs the mean heat over coordinates; on one coordinate it
        is at least the injected noise's level ``c``, and the gradient noise heats it by at most
        ``eta m_i Var_i / (2 c)``."""
        return 2.0 * float(self.noise) * HEAT

    def restart_members(self, state: SGNHTState, members: Tensor, potential: Potential, batch: Any) -> None:
        """A restarted chain's thermostat starts again at ``noise``."""
        state.thermostat = torch.where(mask_like(members, state.thermostat),
                                       torch.full_like(state.thermostat, float(self.noise)), state.thermostat)

    def momentum_std(self, state: SGNHTState) -> Tensor:
        return self._scaled_momentum_std(state, lambda pre: torch.sqrt(pre.step_size * self.temperature))

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> SGNHTState:
        first = position[0]
        shape = () if layout.n_chains is None else (layout.chains,)
        thermostat = torch.full(shape, float(self.noise), dtype=first.dtype, device=first.device)
        return momentum_state(SGNHTState, self.momentum_std, position, rng, layout, precond, thermostat=thermostat)

    def _scales(self, state: SGNHTState) -> tuple[Tensor, Tensor]:
        """Per coordinate, laid out as the momenta: the noise sd ``sqrt(2 c eta T m)`` and the kinetic
        temperature's weight ``1 / (eta m)`` (cached until the preconditioner changes)."""
        pre, flat = state.precond, state.flat_momentum
        noise = state.derived("noise", lambda: pre.per_coordinate(
            torch.sqrt(2.0 * self.noise * pre.step_size * self.temperature), 0.5, flat))
        weight = state.derived("kinetic_weight", lambda: pre.per_coordinate(1.0 / pre.step_size, -1.0, flat))
        return noise, weight

    def _step(self, state: SGNHTState, potential: Potential, batch: Any) -> tuple[SGNHTState, StepInfo]:
        pre, r, flat = state.precond, state.momentum, state.flat_momentum
        eta = pre.step_size  # per chain (one member each)
        kick = state.derived("kick", lambda: views(pre.per_coordinate(eta, 1.0, flat), state.position))
        noise, weight = self._scales(state)
        dim = chain_numel(r, state.layout)
        with torch.no_grad():
            t_kin = (flat * flat * weight).sum(-1) / dim  # one value per chain: each chain has its own thermostat
        z = state.thermostat + eta * (t_kin - self.temperature) / self.thermal_inertia
        if state.warmup is not None:  # (a chain's descent from a far start: warmup.WARMUP_MAX_FRICTION)
            z = clamp_friction(state, z)
        state.thermostat = z
        value, grad = potential.value_and_grad(batch)
        with torch.no_grad():  # the thermostat friction's exact flow e^-z r, on the buffer the momenta are views of
            decay = friction_flow(z)
            flat.mul_(decay.unsqueeze(-1) if flat.ndim == 2 else decay)
            torch._foreach_addcmul_(r, list(grad), kick, value=-1.0)
            flat.addcmul_(normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat), noise)
        position_step(state.position, r)
        state.step += 1
        return state, StepInfo(potential=value.detach(), kinetic_energy=0.5 * t_kin * dim,
                               kinetic_temperature=t_kin, extra={"thermostat": z})

    # the same step as a pure function, for bayesnet.samplers.compiled
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """:meth:`_step` as a pure function: ``(positions, momenta, thermostat, noise, eta, kick, noise_scale,
        weight, X, y, factors, offset) -> (positions, momenta, thermostat, potentials, kinetic temperatures)``,
        in :meth:`_step`'s order of operations."""
        temperature, inertia = float(self.temperature), float(self.thermal_inertia)
        grad_and_value = potential_gradients(potentials)

        def transition(position, flat, thermostat, noise_draw, eta, kick, noise, weight, X, y, factors, offset):
            dim = flat.shape[-1]
            t_kin = (flat * flat * weight).sum(-1) / dim
            z = thermostat + eta * (t_kin - temperature) / inertia
            grads, (_, u) = grad_and_value(position, X, y, factors, offset)
            decay = friction_flow(z)
            flat = flat * (decay.unsqueeze(-1) if flat.ndim == 2 else decay)
            flat = flat - flatten(grads, layout) * kick + noise_draw * noise
            moved = [p + m for p, m in zip(position, views(flat, position))]
            return moved, flat, z, u, t_kin

        return transition

    def transition_inputs(self, state: SGNHTState, potential: Potential, batch: Any) -> tuple:
        pre, flat = state.precond, state.flat_momentum
        eta = pre.step_size
        kick = state.derived("kick_flat", lambda: pre.per_coordinate(eta, 1.0, flat))
        noise, weight = self._scales(state)
        draw = normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat)
        factors, offset = potential.prior_form()
        X, y = batch
        return ([p.detach() for p in state.position], flat, state.thermostat, draw, eta, kick, noise, weight, X, y,
                factors, offset)

    def finish_transition(self, state: SGNHTState, outputs) -> StepInfo:
        moved, flat, z, value, t_kin = outputs
        write_back(state, moved, flat)
        state.thermostat = z.clone()  # (an output may be reused by the next call: CUDA graphs)
        state.step += 1
        dim = chain_numel(state.momentum, state.layout)
        return StepInfo(potential=value.detach(), kinetic_energy=0.5 * t_kin * dim, kinetic_temperature=t_kin,
                        extra={"thermostat": z})


SGNHT.__doc__ = SGNHT.__doc__.replace("{warmup}", WARMUP_DOC)
