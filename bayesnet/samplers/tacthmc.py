"""Thermostat-assisted continuously-tempered Hamiltonian Monte Carlo (TACT-HMC), Luo et al. 2018 (and its supplement)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from types import MappingProxyType
from numbers import Integral, Real
from typing import Any, Sequence

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import (COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, Stat, StepInfo, data_weighted,
                   require_data_weight)
from .registry import register_sampler
from .compiled import divided_prior_form, potential_gradients, weighted_outputs, write_back
from .integrators import friction_flow, gaussian_like, momentum_views, normal_flat
from .random import ChainRandom
from .estimates import flatten, mask_like, member_view
from .warmup import HEAT, WARMUP_DOC, Preconditioner, clamp_friction, views

__all__ = ["TACTHMC", "TACTHMCState", "coupling", "coupling_derivative"]


@dataclass(kw_only=True)
class TACTHMCState(MomentumState):
    """:class:`MomentumState` plus, per chain (shape ``(C,)``, ``()`` without a chain axis): the tempering
    variable ``xi`` and its momentum, the two thermostats, the biasing table and bin histogram
    (``(C, n_bins)``), the count of steps at unit temperature; and the resolved ``tempering_step_size``,
    ``tempering_noise`` and ``wall`` (None in a state pickled before those settings were resolved: the noise is
    then resolved from the sampler's own setting, the walls are those the chain was made with)."""

    xi: Tensor
    xi_momentum: Tensor
    thermostat: Tensor
    tempering_thermostat: Tensor
    bias: Tensor
    bin_visits: Tensor
    plateau_steps: Tensor
    tempering_step_size: float
    tempering_noise: float | None = None
    wall: float | None = None


#: the paper's tempering step size and noise level for its networks (Luo et al. 2018 Sec. 5.2: eta_xi = 1.5e-3,
#: c_xi = 0.05): the scale from which ``tempering_step_size="auto"`` and ``tempering_noise="auto"`` are derived
PAPER_TEMPERING_STEP_SIZE = 1.5e-3
PAPER_TEMPERING_NOISE = 0.05
#: the paper's walls of the confining well (Luo et al. 2018 (supplement) Appendix A: temperatures up to 9)
PAPER_WALL = 5.0 / 3.0
#: the settings of the paper's well and tempering friction, which ``wall="auto"`` and ``tempering_noise="auto"``
#: replaced as the defaults on 2026-11-29 (a model file written before reads them back, the benchmarks that measure
#: the paper's setting pass them)
PAPER_TEMPERING = MappingProxyType({"wall": PAPER_WALL, "tempering_noise": PAPER_TEMPERING_NOISE})
#: the heat of the paper's well, ``T_max / T - 1`` = 8 at its walls: ``wall="auto"`` heats a ``D``-parameter model by
#: ``PAPER_HEAT * sqrt(min(1, 2 / D))``, the paper's well for its 1-D and 2-D targets
PAPER_HEAT = 8.0

#: the coupling below which a chain put back at the plateau's centre at the warm-up's final window has its
#: thermostat capped as a descent's (:meth:`TACTHMC._step`): its temperature was more than 1/0.9 of the target
HOT_RETURN = 0.9


def coupling(xi: Tensor, plateau: float, width: float, order: int) -> Tensor:
    r"""The coupling function :math:`\lambda(\xi)` of Luo et al. 2018 (supplement) Appendix A.

    .. math::

        1/\lambda(\xi) = 1 \ \text{for}\ |\xi| \le \xi_0, \qquad
        1/\lambda(\xi) = 1 + \Big(\frac{|\xi| - \xi_0}{\xi_1 - \xi_0}\Big)^n \ \text{otherwise},

    with ``plateau`` :math:`=\xi_0`, ``width`` :math:`=\xi_1` and ``order``
    :math:`=n`. Exactly 1 on the plateau (the test for collecting a sample).
    """
    s = ((xi.abs() - plateau) / (width - plateau)).clamp_min(0.0)
    return 1.0 / (1.0 + s**order)


def coupling_derivative(xi: Tensor, plateau: float, width: float, order: int) -> Tensor:
    r""":math:`\lambda'(\xi) = -\operatorname{sign}(\xi)\, n s^{n-1} / ((\xi_1-\xi_0)(1+s^n)^2)`,
    :math:`s = \max(0, (|\xi|-\xi_0)/(\xi_1-\xi_0))`; zero on the plateau."""
    s = ((xi.abs() - plateau) / (width - plateau)).clamp_min(0.0)
    slope = order * s ** (order - 1) / ((width - plateau) * (1.0 + s**order) ** 2)
    return torch.where(s > 0, -torch.sign(xi) * slope, torch.zeros_like(xi))


def _auto_wall(dim: int, plateau: float, width: float, order: int) -> float:
    """``wall="auto"`` for ``dim`` parameters per chain: where the coupling's temperature reaches
    ``1 + PAPER_HEAT * sqrt(min(1, 2 / dim))`` (5/3 with the default coupling for ``dim <= 2``)."""
    heat = PAPER_HEAT * math.sqrt(min(1.0, 2.0 / max(int(dim), 1)))
    return plateau + (width - plateau) * heat ** (1.0 / order)


def _auto_tempering_noise(eta_xi: float) -> float:
    """``tempering_noise="auto"`` at the tempering step size ``eta_xi``: ``0.05 * sqrt(eta_xi / 1.5e-3)``."""
    return PAPER_TEMPERING_NOISE * math.sqrt(float(eta_xi) / PAPER_TEMPERING_STEP_SIZE)


def _auto_tempering_step_size(dim: int) -> float:
    """``tempering_step_size="auto"`` for ``dim`` parameters per chain: ``1.5e-3 * min(1, 2 / dim) ** 2``."""
    return PAPER_TEMPERING_STEP_SIZE * min(1.0, 2.0 / max(int(dim), 1)) ** 2


@register_sampler
class TACTHMC(Sampler):
    r"""Thermostat-assisted continuously-tempered Hamiltonian Monte Carlo (Luo et al. 2018, Algorithm 1).

    The parameters :math:`\theta` (momentum :math:`r_\theta`) are coupled to a
    scalar tempering variable :math:`\xi` (momentum :math:`r_\xi`) through the
    extended Hamiltonian :math:`H = \lambda(\xi) U(\theta) + W(\xi) + \ldots`
    (Luo et al. 2018 eq. 4): the effective temperature of :math:`\theta` is
    :math:`T/\lambda(\xi)`, which rises up to :meth:`highest_temperature` as
    :math:`\xi` leaves the plateau :math:`|\xi| \le \xi_0` and lets the chain
    cross energy barriers between modes. Each of :math:`\theta` and
    :math:`\xi` has a scalar Nosé-Hoover thermostat (:math:`z_\theta`,
    :math:`z_\xi`) that absorbs the unknown mini-batch noise (Luo et al. 2018
    eq. 5, Theorem 1; the isotropic simplification of Sec. 3.3). An adaptive
    biasing force (Sec. 3.2) flattens the free energy of :math:`\xi` so that
    it random-walks over the well. In the variables of Sec. 3.3
    (:math:`r = p\Delta t/m`, :math:`z = s\Delta t`, :math:`\eta = \Delta t^2/m`,
    :math:`\gamma_\theta = \kappa_\theta/(m_\theta D)`, :math:`\gamma_\xi = \kappa_\xi/m_\xi`)
    one step ``k`` is Algorithm 1 lines 4-18:

    .. math::

        z_\xi &\leftarrow z_\xi + \lambda'^2 (r_\xi^2 - \eta_\xi T)/\gamma_\xi \\
        z_\theta &\leftarrow z_\theta + \lambda^2 (r_\theta^\top r_\theta/D - \eta_\theta T)/\gamma_\theta \\
        r_\xi &\leftarrow r_\xi - \lambda' \big(\eta_\xi \tilde U + \mathcal N(0, 2 c_\xi \eta_\xi T)\big)
                 - \lambda'^2 z_\xi r_\xi + \eta_\xi\, \delta A(\xi) \\
        r_\theta &\leftarrow r_\theta + \lambda \big(\eta_\theta \tilde f + \mathcal N(0, 2 c_\theta \eta_\theta T I)\big)
                 - \lambda^2 z_\theta r_\theta \\
        \xi &\leftarrow \xi + r_\xi \quad(\text{if outside the well: } r_\xi \leftarrow -r_\xi,\ \xi \leftarrow \xi + r_\xi) \\
        \theta &\leftarrow \theta + r_\theta

    with :math:`\lambda, \lambda'` evaluated at the :math:`\xi` the step
    starts from, :math:`\tilde f = -\nabla \tilde U` and :math:`\delta A` the
    biasing force of :math:`\xi`'s bin, read before and updated after the
    momentum step. The friction terms are the paper's Euler steps with
    ``friction_step="euler"``; the default applies them as their exact
    flows, :math:`e^{-\lambda^2 z_\theta} r_\theta` and
    :math:`e^{-\lambda'^2 z_\xi} r_\xi`. ``theta`` counts as a sample when ``k`` is a multiple of
    ``steps_per_sample`` (:math:`K`) *and* the step ran at unit temperature,
    :math:`\lambda(\xi) = 1` (line 16): only those positions follow the
    posterior; the rest serve to cross barriers. :math:`T` is the
    ``temperature`` of the extended system (1 in the paper).

    The paper's per-task "7-tuple" :math:`[\eta_\theta, \eta_\xi, c_\theta,
    c_\xi, \gamma_\theta, \gamma_\xi, K]` (Sec. 5.2) is ``[step_size,
    tempering_step_size, noise, tempering_noise, thermal_inertia,
    tempering_thermal_inertia, steps_per_sample]``; build a sampler from one
    with :meth:`from_specification`.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        :math:`\eta_\theta > 0`, in the units of :class:`SGNHT`'s. A number
        is the paper's unpreconditioned step (with ``preconditioner=None``,
        as the paper runs): it shrinks roughly like ``1/N`` on the
        full-data potential of Sec. 3.1 (``N/|S|`` scaling), so the paper's
        1.5e-3 for EMNIST (N = 112,800) does not carry over to this
        potential. "auto" is set by the warm-up on the preconditioned
        potential, as for :class:`SGNHT` (:math:`\eta\lambda_{max} = 0.15`);
        with the diagonal mass :math:`M` the kick, the noise and the
        thermostat's kinetic temperature carry :math:`M^{-1}` as in SGNHT.
    tempering_step_size : float or "auto", default="auto"
        :math:`\eta_\xi > 0` (paper: 1.5e-3 for the MLP). The samples are
        exact only if :math:`\theta` stays near equilibrium at the current
        temperature while :math:`\xi` moves (the biasing force is learnt
        from those samples), and the potential of a ``D``-parameter model
        changes by about :math:`D/2` per unit of temperature, so
        :math:`\xi` must move more slowly the larger the model. "auto" is
        ``1.5e-3 * min(1, 2 / D) ** 2`` with ``D`` the number of parameters
        per chain, resolved by :meth:`init`: the paper's value for the 1-D
        and 2-D targets of Sec. 5.1, 2.1e-8 for a 530-weight network. Measured
        on that network in the paper's well with ``tempering_noise=0.05``
        (breast cancer, batch 64, 1e5 steps): with 2.1e-8
        :math:`\xi` leaves the plateau after 8e3 steps, lingers at
        temperatures 1.05-1.5 and is back after 8.5e4 steps (15 % of the steps
        at unit temperature); with 1e-8 it goes back and forth several times
        (about 30 %); with 1e-7 it reaches the walls and returns after 9e4
        steps; with 6e-6 it stays hot for all 1e5 steps
        (``benchmarks/tacthmc_tempering.py``), as the force learnt
        on the way out (from a still cool network) pushes it back; with the
        paper's 1.5e-3 the Euler friction step of its thermostat goes
        unstable within a few dozen steps.
    noise : float, default=0.05
        :math:`c_\theta \ge 0`, level of the injected noise on
        :math:`r_\theta`; also the initial value of :math:`z_\theta` (line 1).
    tempering_noise : float or "auto", default="auto"
        :math:`c_\xi \ge 0`, likewise for :math:`\xi` (and the initial
        :math:`z_\xi`). "auto" is the paper's 0.05 at its
        ``tempering_step_size`` 1.5e-3, carried to the resolved
        :math:`\eta_\xi` as a change of :math:`\xi`'s time step:
        ``0.05 * sqrt(tempering_step_size / 1.5e-3)`` (0.05 for the 1-D and
        2-D targets of Sec. 5.1, 1.2e-4 for an 803-weight network). In Sec.
        3.3's variables :math:`\eta_\xi = \Delta t^2/m_\xi` and
        :math:`c_\xi, z_\xi` are frictions times :math:`\Delta t`: a
        smaller "auto" step size slows :math:`\xi`'s velocity by
        :math:`\sqrt{\eta_\xi}`, and a friction per step kept at 0.05 then
        turned its motion into a slow diffusion (its velocity forgotten
        within 20 steps). Measured on iris's 803-weight MLP (seed 2 of the
        defaults panel): off the plateau, :math:`\xi` stayed between 0.6 and
        0.9 for the 74,000 steps left of the run (78,003 steps, 65 of 100
        draws); with the walls at 1 the run collected its draws in 31,500
        steps at 0.05 and 12,700 at "auto", and with ``wall="auto"`` (0.824
        there) in 12,400 steps.
    thermal_inertia : float, default=1.0
        :math:`\gamma_\theta > 0`.
    tempering_thermal_inertia : float, default=1.0
        :math:`\gamma_\xi > 0`.
    steps_per_sample : int, default=50
        :math:`K \ge 1`, steps per unit interval: a sample is taken at most
        every ``K`` steps.
    plateau : float, default=1/3
        Half-width :math:`\xi_0 > 0` of the plateau :math:`\lambda = 1`
        (Luo et al. 2018 (supplement) Appendix A).
    coupling_width : float, default=1.0
        :math:`\xi_1 > \xi_0`, where the effective temperature reaches 2.
    coupling_order : int, default=3
        Exponent :math:`n \ge 1` of the coupling function.
    wall : float or "auto", default="auto"
        Position :math:`W_0 > \xi_0` of the infinite walls of the confining
        well :math:`W(\xi)`; the highest effective temperature is
        ``T * (1 + ((wall - plateau) / (coupling_width - plateau)) ** coupling_order)``
        and the expected fraction of steps on the plateau, Appendix A's
        efficiency, is ``plateau / wall``. The paper's well is 5/3
        (temperature 9, 20 % on the plateau; :meth:`from_specification`
        builds it). "auto" puts the walls where the temperature is
        ``temperature * (1 + 8 sqrt(min(1, 2 / D)))`` for ``D`` parameters per
        chain, resolved by :meth:`init`: the paper's 5/3 for the 1-D and 2-D
        targets of Sec. 5.1, 0.824 for an 803-weight network (temperature 1.4,
        40 % on the plateau). The potential of a ``D``-parameter model rises
        by about :math:`D/2` per unit of temperature and fluctuates by about
        :math:`\sqrt{D/2}`: at the walls "auto" raises its mean by 8 of its
        own standard deviations, as the paper's well does at ``D = 2``. For a
        network the paper's well raises it by :math:`8\sqrt{D/2}` of them
        (160 for 803 weights), and the biasing force must then flatten a
        free energy of about :math:`(D/2)\log T_{max}` (880 units for 803
        weights) to within one unit from its own samples. Measured on iris's
        803-weight MLP (the defaults panel's splits, seeds 2 and 3, whose
        tempering variable leaves the plateau): in the paper's well the learnt
        force matched the equilibrium mean force to 1-3 %, and the residual,
        tens of units of free energy, held :math:`\xi` at temperatures 2.5-9
        for 50,000 steps and more (78,003 steps and 65 of 100 draws; 69,050
        steps); with "auto" it went out to the walls and back, and every draw
        was collected within 12,400 and 11,550 steps at the same log loss
        (``benchmarks/tacthmc_defaults.py``). A continued chain keeps the walls
        it was made with; the well cannot change under it (a new number is
        refused, "auto" keeps them).
    biasing : {"abf", "metadynamics", None}, default="abf"
        How the free energy of :math:`\xi` is flattened: the adaptive
        biasing force of Sec. 3.2-3.3, the metadynamics of Luo et al. 2018 (supplement)
        Appendix B, or not at all.
    n_bins : int, default=50
        Number :math:`J \ge 1` of equal bins over :math:`[-W_0, W_0]` in
        which the biasing force (or potential) is kept.
    metadynamics_height : float, default=0.1
        :math:`h_A > 0`, the increment of the biasing potential of the
        visited bin per step (Appendix B), in units of the potential.
    metadynamics_bias_temperature : float or None, default=None
        :math:`\Delta T > 0` turns on well-tempered metadynamics (Barducci et
        al. 2008, Luo et al. 2018 (supplement) ref. [1]): the increment becomes
        :math:`h_A \exp(-A_j/\Delta T)`, so the bias converges. None keeps
        the vanilla scheme of Appendix B.
    resample_momentum : bool, default=False
        Redraw :math:`r_\theta \sim \mathcal N(0, \eta_\theta T I)` and
        :math:`r_\xi \sim \mathcal N(0, \eta_\xi T)` after each collected
        sample (line 18, "optionally").
    temperature : float, default=1.0
        :math:`T > 0` of the extended system; samples follow
        :math:`\exp(-U/T)`.
    tempering : bool, default=True
        False freezes :math:`\xi = 0` (:math:`\lambda \equiv 1`): the
        "thermostats without tempering" ablation of Luo et al. 2018 Sec. 5.1, which
        is SGNHT collecting every ``K`` steps.
    thermostats : bool, default=True
        False holds :math:`z_\theta = c_\theta` and :math:`z_\xi = c_\xi`
        fixed: the "tempering without thermostats" ablation of Sec. 5.1
        (constant friction, which cannot absorb gradient noise).
    friction_step : {"exact", "euler"}, default="exact"
        How lines 9-10 apply the thermostats' friction: "euler" as the
        paper writes it, :math:`r \leftarrow (1 - \lambda^2 z_\theta) r`
        (and :math:`- \lambda'^2 z_\xi r_\xi`); "exact" as its exact flow,
        :math:`r \leftarrow e^{-\lambda^2 z_\theta} r` (and
        :math:`e^{-\lambda'^2 z_\xi} r_\xi`), as :class:`SGNHT` does. The
        two agree to first order, but above :math:`\lambda^2 z_\theta = 2`
        the Euler step reverses and amplifies the momenta, which a
        low-dimensional posterior's thermostat reaches: on a 5-parameter
        linear regression (4 chains, mini-batches of 50 of 300 rows, the
        "auto" step) 2 of 6 seeds diverged within 4,000 steps after the
        warm-up with "euler", none with "exact".
        :meth:`from_specification` builds the paper's "euler".
    tempered : {"posterior", "likelihood"}, default="posterior"
        What the coupling :math:`\lambda(\xi)` weighs. "posterior" is the
        paper's extended Hamiltonian, :math:`\lambda(\xi) U(\theta)` with
        :math:`U = U_D + U_P` (eq. 4): the prior is tempered too, so a prior
        with hyperparameters (the hierarchical prior, improper when tempered)
        is refused and ``prior_scale="auto"`` is the fan-in prior.
        "likelihood" weighs the data term alone, :math:`H = \lambda(\xi)
        U_D(\theta) + U_P(\theta) + W(\xi) + \ldots`: :math:`\theta`
        given :math:`\xi` follows :math:`p(y|\theta)^{\lambda/T}
        p(\theta)^{1/T}`, proper at every :math:`\xi`, so the hierarchical
        prior and its Gibbs steps (the same at every :math:`\xi`) serve and
        ``prior_scale="auto"`` is that prior. The kick is then
        :math:`\eta_\theta \nabla(\lambda U_D + U_P)` (line 10 without the
        factor :math:`\lambda` on the force; the noise keeps its
        :math:`\lambda` and the friction its :math:`\lambda^2`, whose ratio
        sets the temperature), and :math:`\xi`'s force and the biasing table
        read :math:`\lambda'(\xi) \tilde U_D` (lines 9 and 11). The
        draws (at :math:`\lambda = 1`) follow the same posterior in both
        forms. The warm-up's mass is estimated from the kernel's own
        gradients, here of :math:`\lambda U_D + U_P`, so from a softer
        curvature wherever :math:`\xi` left the plateau during the warm-up
        (the step size is measured on the untempered potential, and the
        final window holds :math:`\xi` at the plateau's centre). A continued
        chain keeps its form.
{warmup}

    Raises
    ------
    ValueError
        On out-of-range values (e.g. ``coupling_width <= plateau``,
        ``wall <= plateau``) or an unknown ``biasing``.

    Notes
    -----
    Choices where the paper is ambiguous, following Algorithm 1 and Sec. 3.3:

    * Line 16 reads "λ = 0"; the text (Sec. 3.1, Appendix A) collects at
      unit temperature, :math:`\lambda(\xi) = 1`, which is what is tested.
    * Line 21 averages the force with the global step count ``1/k``; Sec. 3.3
      describes a running time average per bin, which is what is kept here
      (``abf[j]`` is the mean of :math:`\lambda'(\xi)\tilde U` over the
      visits of bin ``j``; of :math:`\lambda'(\xi)\tilde U_D` with
      ``tempered="likelihood"``). An unvisited bin has zero bias.
    * The reflection of line 14 is done as written (the authors' released
      code is reported not to move :math:`\xi` back): on leaving the well
      the velocity is reversed and the step undone, so :math:`\xi` returns
      to where it was (up to rounding, which is avoided by keeping the old
      value).
    * Outside the plateau the noise :math:`\mathcal N(0, 2c_\xi\eta_\xi T)` is
      multiplied by :math:`\lambda'`, exactly as in line 9, which balances
      the friction :math:`\lambda'^2 z_\xi` (fluctuation-dissipation).

    Chains: ``init(..., n_chains=C)`` runs ``C`` independent chains packed on
    a leading axis of every position tensor; the potential must then return
    one value per chain (shape ``(C,)``). Each chain has its own
    :math:`\xi`, thermostats and bias table; ``StepInfo.is_draw`` is then a
    boolean tensor of shape ``(C,)``.

    ``StepInfo.extra`` holds ``xi``, ``effective_temperature``
    (:math:`T/\lambda(\xi)` of the step), ``thermostat`` (:math:`z_\theta`),
    ``tempering_thermostat`` (:math:`z_\xi`) and ``on_plateau``; the bias
    profile is available from :meth:`bias_profile` and the fraction of steps
    on the plateau from :meth:`plateau_fraction`.

    References
    ----------
    R. Luo, J. Wang, Y. Yang, Z. Zhu, J. Wang, "Thermostat-assisted
    continuously-tempered Hamiltonian Monte Carlo for Bayesian learning",
    NeurIPS 2018 (Luo et al. 2018: eqs. 4, 5, 10, 11, Sec. 3.3, Algorithm 1;
    Luo et al. 2018 (supplement): Appendix A for :math:`\lambda, W`, Appendix B for
    metadynamics).
    """

    name = "tacthmc"
    # the bias table's bins span [-wall, wall] in n_bins: a continued chain keeps its table
    state_settings = Sampler.state_settings + ("n_bins", "wall", "tempered")
    default_thinning = 1  # samples are already K steps apart
    stats = {**COMMON_STATS, **MOMENTUM_STATS, "xi": Stat("mean"), "effective_temperature": Stat("mean"),
             "thermostat": Stat("mean"), "tempering_thermostat": Stat("mean"),
             "on_plateau": Stat("mean", "plateau_fraction")}
    state_class = TACTHMCState
    _parameter_constraints = {
        **{key: [Interval(Real, 0, np.inf, closed="neither")] for key in (
            "thermal_inertia", "tempering_thermal_inertia", "plateau", "coupling_width",
            "metadynamics_height", "temperature")},
        "wall": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "noise": [Interval(Real, 0, np.inf, closed="left")],
        "tempering_noise": [Interval(Real, 0, np.inf, closed="left"), StrOptions({"auto"})],
        "tempering_step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "steps_per_sample": [Interval(Integral, 1, None, closed="left")],
        "coupling_order": [Interval(Integral, 1, None, closed="left")],
        "n_bins": [Interval(Integral, 1, None, closed="left")],
        "biasing": [StrOptions({"abf", "metadynamics"}), None],
        "metadynamics_bias_temperature": [Interval(Real, 0, np.inf, closed="neither"), None],
        "resample_momentum": ["boolean"],
        "tempering": ["boolean"],
        "thermostats": ["boolean"],
        "friction_step": [StrOptions({"exact", "euler"})],
        "tempered": [StrOptions({"posterior", "likelihood"})],
    }

    def __init__(self, step_size: float | str = "auto", tempering_step_size: float | str = "auto", noise: float = 0.05,
                 tempering_noise: float | str = "auto", thermal_inertia: float = 1.0,
                 tempering_thermal_inertia: float = 1.0,
                 steps_per_sample: int = 50, plateau: float = 1.0 / 3.0, coupling_width: float = 1.0,
                 coupling_order: int = 3, wall: float | str = "auto", biasing: str | None = "abf", n_bins: int = 50,
                 metadynamics_height: float = 0.1, metadynamics_bias_temperature: float | None = None,
                 resample_momentum: bool = False, temperature: float = 1.0, tempering: bool = True,
                 thermostats: bool = True, friction_step: str = "exact", preconditioner: str | None = "auto",
                 adaptation_steps: int | str = "auto", tempered: str = "posterior"):
        self.step_size = step_size
        self.tempering_step_size = tempering_step_size
        self.noise = noise
        self.tempering_noise = tempering_noise
        self.thermal_inertia = thermal_inertia
        self.tempering_thermal_inertia = tempering_thermal_inertia
        self.steps_per_sample = steps_per_sample
        self.plateau = plateau
        self.coupling_width = coupling_width
        self.coupling_order = coupling_order
        self.wall = wall
        self.biasing = biasing
        self.n_bins = n_bins
        self.metadynamics_height = metadynamics_height
        self.metadynamics_bias_temperature = metadynamics_bias_temperature
        self.resample_momentum = resample_momentum
        self.temperature = temperature
        self.tempering = tempering
        self.thermostats = thermostats
        self.friction_step = friction_step
        self.tempered = tempered
        self.preconditioner = preconditioner
        self.adaptation_steps = adaptation_steps

    def __setstate__(self, state):
        # pickled before friction_step existed (2026-11-29): that sampler ran the paper's Euler step (before:
        # get_params and bayesnet.save raised AttributeError on it). A continued fit builds its sampler from the
        # estimator's parameters, as for any other setting: the default, "exact", unless sampler__friction_step
        # says otherwise
        state.setdefault("friction_step", "euler")
        state.setdefault("tempered", "posterior")  # (likewise: before 2026-11-29 the whole posterior was tempered)
        super().__setstate__(state)

    def _check_params(self) -> None:
        if self.coupling_width <= self.plateau:
            raise ValueError(f"{self.name}: coupling_width ({self.coupling_width}) must exceed plateau "
                             f"({self.plateau}).")
        if self.wall != "auto" and self.wall <= self.plateau:
            raise ValueError(f"{self.name}: wall ({self.wall}) must exceed plateau ({self.plateau}), or the "
                             "tempering variable can never leave unit temperature.")

    # ------------------------------------------------------------------ #
    @classmethod
    def from_specification(cls, specification: Sequence[float], **params: Any) -> "TACTHMC":
        r"""Build from Luo et al. 2018's 7-tuple :math:`[\eta_\theta, \eta_\xi, c_\theta, c_\xi, \gamma_\theta, \gamma_\xi, K]`.

        E.g. the MLP/EMNIST setting of Sec. 5.2 is
        ``TACTHMC.from_specification([0.0015, 0.0015, 0.05, 0.05, 1.0, 1.0, 50])``.
        ``params`` set the other hyperparameters; ``friction_step`` is the
        paper's "euler" and ``wall`` the paper's 5/3 (Appendix A) unless ``params`` say otherwise.

        Raises
        ------
        ValueError
            If ``specification`` does not have 7 entries.
        """
        spec = list(specification)
        if len(spec) != 7:
            raise ValueError(f"the TACT-HMC specification has 7 entries [eta_theta, eta_xi, c_theta, c_xi, "
                             f"gamma_theta, gamma_xi, K], got {len(spec)}: {spec}.")
        keys = ("step_size", "tempering_step_size", "noise", "tempering_noise", "thermal_inertia",
                "tempering_thermal_inertia", "steps_per_sample")
        if isinstance(spec[6], float) and spec[6].is_integer():
            spec[6] = int(spec[6])
        return cls.from_params(**dict(zip(keys, spec)), **{"friction_step": "euler", "wall": PAPER_WALL, **params})

    def chain_wall(self, state: TACTHMCState | None = None) -> float:
        """The walls :math:`W_0` of the chains of ``state`` (resolved by :meth:`init`); without a state, ``wall``,
        and for "auto" the widest well it resolves to (a model of one or two parameters: 5/3 with the default
        coupling), which bounds every chain's."""
        if state is not None:
            return self._wall(state)
        return self.resolve_wall(1)

    def highest_temperature(self, state: TACTHMCState | None = None) -> float:
        """The effective temperature :math:`T/\\lambda(W_0)` at the walls (:meth:`chain_wall`)."""
        return self._temperature_at(self.chain_wall(state))

    def _temperature_at(self, wall: float) -> float:
        s = (wall - self.plateau) / (self.coupling_width - self.plateau)
        return self.temperature * (1.0 + s**self.coupling_order)

    @property
    def max_temperature(self) -> float:
        """Highest effective temperature :math:`T/\\lambda(W_0)` of any chain (9 in the paper's well, which
        ``wall="auto"`` gives a model of one or two parameters; a network's chains: :meth:`highest_temperature`
        of their state)."""
        return self.highest_temperature()

    def ideal_plateau_fraction(self, state: TACTHMCState | None = None) -> float:
        """Appendix A's efficiency ``plateau / wall`` for the chains of ``state`` (:meth:`chain_wall`): the
        fraction of steps at unit temperature when the biasing makes :math:`\\xi` uniform on the well."""
        return self.plateau / self.chain_wall(state) if self.tempering else 1.0

    @property
    def expected_plateau_fraction(self) -> float:
        """:meth:`ideal_plateau_fraction` without a state: 20 % in the paper's well (and ``wall="auto"``'s least)."""
        return self.ideal_plateau_fraction()

    def steps_per_draw(self, state: TACTHMCState | None = None) -> float:
        """Expected number of steps between two collected samples, ``K / ideal_plateau_fraction(state)``; without a
        state (the estimators' plan, made before :meth:`init` resolves ``wall="auto"``) at most that of any
        chain."""
        return self.steps_per_sample / self.ideal_plateau_fraction(state)

    # ------------------------------------------------------------------ #
    def target_temperature(self) -> float:
        return float(self.temperature)

    def temperature_range(self, state: TACTHMCState | None = None) -> tuple[float, float]:
        T = float(self.temperature)
        return T, float(self.highest_temperature(state)) if self.tempering else T

    def prior_temperature_range(self) -> tuple[float, float]:
        """The sampler's own ``temperature`` with ``tempered="likelihood"`` (the coupling weights the data term
        only), else :meth:`temperature_range`."""
        if self.tempered == "likelihood":
            return float(self.temperature), float(self.temperature)
        return self.temperature_range()

    def untempered_prior_hint(self) -> str | None:
        """The setting that leaves the prior untempered: ``tempered="likelihood"``, where that is not already set
        and the sampler's ``temperature`` is 1 (otherwise the prior is sampled at that temperature either way)."""
        if self.tempered == "likelihood" or float(self.temperature) != 1.0:
            return None
        return "sampler__tempered='likelihood', which tempers the likelihood only"

    fallback_step_size = 1e-4
    member_potentials = True  # (the tempering variable's force reads each member's potential)
    stability = 0.15

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """As :class:`SGNHT`'s: ``min(stability / lambda, 1 / rho)``."""
        return self._stable_and_cool(curvature, noise_fraction, 1.0)

    def coordinate_noise_budget(self) -> float:
        """As :class:`SGNHT`'s: ``2 noise HEAT`` (its thermostat's friction on one coordinate is at least ``c``)."""
        return 2.0 * float(self.noise) * HEAT

    def restart_members(self, state: TACTHMCState, members: Tensor, potential: Potential, batch: Any) -> None:
        """A restarted chain's thermostats start again at their initial values, its tempering variable at the
        plateau's centre (with a fresh momentum: :meth:`redraw_momenta`)."""
        mask = mask_like(members, state.xi)
        state.thermostat = torch.where(mask, torch.full_like(state.thermostat, float(self.noise)), state.thermostat)
        state.tempering_thermostat = torch.where(mask, torch.full_like(state.tempering_thermostat,
                                                                       self._tempering_noise(state)),
                                                 state.tempering_thermostat)
        state.xi = torch.where(mask, torch.zeros_like(state.xi), state.xi)
        state.xi_momentum = torch.where(mask, torch.zeros_like(state.xi_momentum), state.xi_momentum)
        # the biasing table and histogram learnt along the way out may hold non-finite or runaway values: a
        # restarted chain learns them afresh
        rows = mask.reshape(mask.shape + (1,)) if state.bias.ndim > mask.ndim else mask
        state.bias = torch.where(rows, torch.zeros_like(state.bias), state.bias)
        state.bin_visits = torch.where(rows, torch.zeros_like(state.bin_visits), state.bin_visits)

    @torch.no_grad()
    def redraw_momenta(self, state: TACTHMCState, members: Tensor | None = None) -> None:
        r"""The parameters' momenta (:meth:`Sampler.redraw_momenta`) and, for the guard's restarted chains
        (``members``), the tempering momentum from its stationary law :math:`N(0, \eta_\xi T)`, drawn for every
        chain at every check. Before, a restarted chain's tempering variable stayed at rest at the plateau's
        centre, where neither force nor noise reaches it (both carry :math:`\lambda'(\xi) = 0` there): its
        tempering was over for good, silently (measured: 8 chains started 50 sd out, all restarted at the first
        check, ``xi`` exactly 0 for the 2,500 steps after)."""
        super().redraw_momenta(state, members)
        if members is None or not self.tempering:
            return
        r_xi = state.xi_momentum
        state.xi_momentum = torch.where(mask_like(members, r_xi), self._fresh_tempering_momentum(state), r_xi)

    @torch.no_grad()
    def warmup_frozen(self, state: TACTHMCState) -> None:
        r"""The tempering resumes after the final window (:meth:`_tempering_paused`): every chain's tempering
        momentum drawn afresh from :math:`N(0, \eta_\xi T)` (at the plateau's centre neither force nor noise
        would move it)."""
        warm = state.warmup
        if self.tempering and warm is not None and len(warm.ends) > 1:  # (a warm-up with a final window)
            state.xi_momentum = self._fresh_tempering_momentum(state)

    def _fresh_tempering_momentum(self, state: TACTHMCState) -> Tensor:
        r"""Every chain's tempering momentum drawn from its stationary law :math:`N(0, \eta_\xi T)`."""
        r_xi = state.xi_momentum
        return state.rng.normal(1, r_xi.dtype).reshape(r_xi.shape) * math.sqrt(state.tempering_step_size
                                                                                * self.temperature)

    def momentum_std(self, state: TACTHMCState) -> Tensor:
        return self._scaled_momentum_std(state, lambda pre: torch.sqrt(pre.step_size * self.temperature))

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> TACTHMCState:
        """Start at ``position`` with :math:`\\xi = 0` (unit temperature), momenta from their stationary laws."""
        first = position[0]
        shape = () if layout.n_chains is None else (layout.chains,)
        opts = dict(dtype=first.dtype, device=first.device)
        T = self.temperature
        flat = normal_flat(rng, layout, sum(p.numel() for p in position), first.dtype).clone()
        dim = sum(p.numel() for p in position) // layout.chains
        eta_xi = self.resolve_tempering_step_size(dim)
        c_xi = self.resolve_tempering_noise(eta_xi)
        wall = self.resolve_wall(dim)
        r_xi = rng.normal(1, first.dtype).reshape(shape) * math.sqrt(eta_xi * T)
        if not self.tempering:
            r_xi.zero_()
        state = TACTHMCState(
            position=position, layout=layout, rng=rng, momentum=momentum_views(flat, position), flat_momentum=flat,
            precond=precond, xi=torch.zeros(shape, **opts), xi_momentum=r_xi,
            thermostat=torch.full(shape, float(self.noise), **opts),
            tempering_thermostat=torch.full(shape, c_xi, **opts),
            bias=torch.zeros(shape + (self.n_bins,), **opts), bin_visits=torch.zeros(shape + (self.n_bins,), **opts),
            plateau_steps=torch.zeros(shape, **opts), tempering_step_size=eta_xi, tempering_noise=c_xi,
            wall=wall)
        flat.mul_(self.momentum_std(state))
        return state

    def resolve_wall(self, dim: int) -> float:
        """:math:`W_0` for a model with ``dim`` parameters per chain (see ``wall``)."""
        if self.wall == "auto":
            return _auto_wall(dim, float(self.plateau), float(self.coupling_width), int(self.coupling_order))
        return float(self.wall)

    def _wall(self, state: TACTHMCState) -> float:
        # a state pickled before wall was resolved at init holds None: its chains were made with a number, which
        # their made_with records (read before adopt() replaces made_with)
        if state.wall is None:
            made = (state.made_with or {}).get("wall", self.wall)
            state.wall = float(made) if made != "auto" else self.resolve_wall(state.flat_momentum.shape[-1])
        return state.wall

    def adopt(self, state: TACTHMCState) -> None:
        self._wall(state)  # (the walls the chain was made with, before made_with records the new settings)
        super().adopt(state)

    def changed_state_settings(self, previous: Sampler, state: TACTHMCState | None = None) -> dict[str, tuple]:
        """As :meth:`Sampler.changed_state_settings`; ``wall="auto"`` on a continued chain keeps the walls it was
        made with (resolved at :meth:`init`), so it is no change, nor is the number of the chains' own walls
        (``state``); another number is refused, naming the chains' walls."""
        out = super().changed_state_settings(previous, state)
        if "wall" in out:
            new = out["wall"][0]
            own = None if state is None else self._wall(state)
            if new == "auto" or (own is not None and float(new) == own):
                del out["wall"]
            elif own is not None:
                out["wall"] = (new, own)
        return out

    def resolve_tempering_step_size(self, dim: int) -> float:
        """:math:`\\eta_\\xi` for a model with ``dim`` parameters per chain (see ``tempering_step_size``)."""
        if self.tempering_step_size == "auto":
            return _auto_tempering_step_size(dim)
        return float(self.tempering_step_size)

    def resolve_tempering_noise(self, eta_xi: float) -> float:
        r""":math:`c_\xi` for the tempering step size ``eta_xi`` (see ``tempering_noise``): "auto" is the paper's
        0.05 at the paper's 1.5e-3, time-rescaled, ``0.05 * sqrt(eta_xi / 1.5e-3)``."""
        if self.tempering_noise == "auto":
            return _auto_tempering_noise(eta_xi)
        return float(self.tempering_noise)

    def _bin_width(self, wall: float) -> float:
        """The width of the biasing table's bins, ``n_bins`` of them on ``[-wall, wall]``."""
        return 2.0 * wall / self.n_bins

    def _bin_centre(self, j: Tensor, wall: float) -> Tensor:
        """The centre of bin ``j`` (a float tensor of bin indices) on ``[-wall, wall]``."""
        return -wall + (j + 0.5) * self._bin_width(wall)

    def _bin(self, xi: Tensor, wall: float) -> Tensor:
        return ((xi + wall) / self._bin_width(wall)).floor().long().clamp_(0, self.n_bins - 1)

    def _bias_force(self, bias: Tensor, j: Tensor, xi: Tensor, wall: float) -> Tensor:
        """:math:`\\delta A` of line 7 for the bin ``j`` that holds ``xi``."""
        if self.biasing is None:
            return torch.zeros_like(xi)
        if self.biasing == "abf":
            return bias.gather(-1, j.unsqueeze(-1)).squeeze(-1)
        # metadynamics, Luo et al. 2018 (supplement) Appendix B: -dA/dxi by a one-sided difference towards xi's side of the centre
        centre = self._bin_centre(j.to(xi.dtype), wall)
        upper = torch.where(xi >= centre, (j + 1).clamp(max=self.n_bins - 1), j)
        lower = torch.where(xi >= centre, j, (j - 1).clamp(min=0))
        a_hi = bias.gather(-1, upper.unsqueeze(-1)).squeeze(-1)
        a_lo = bias.gather(-1, lower.unsqueeze(-1)).squeeze(-1)
        return (a_lo - a_hi) / self._bin_width(wall)

    def _updated_bias(self, bias: Tensor, visits: Tensor, j: Tensor, force: Tensor) -> tuple[Tensor, Tensor]:
        """ABFUPDATE (line 11, 19-21) or the metadynamics deposit of Appendix B: the new ``(bias, visits)``."""
        if self.biasing is None:
            return bias, visits
        idx = j.unsqueeze(-1)
        visits = visits.scatter_add(-1, idx, torch.ones_like(force).unsqueeze(-1))
        if self.biasing == "abf":
            n = visits.gather(-1, idx)
            old = bias.gather(-1, idx)
            return bias.scatter(-1, idx, old + (force.unsqueeze(-1) - old) / n), visits
        height = torch.full_like(force, float(self.metadynamics_height)).unsqueeze(-1)
        if self.metadynamics_bias_temperature is not None:
            height = height * torch.exp(-bias.gather(-1, idx) / self.metadynamics_bias_temperature)
        return bias.scatter_add(-1, idx, height), visits

    # The step (Luo et al. 2018, Alg. 1 lines 4-15) in two pure halves around the gradient, shared by the eager
    # step and the compiled one (pure_transition): the momenta as their flat buffer ``flat``, ``(C, D)`` chain
    # major or ``(D,)``, every per-chain quantity ``(C,)`` or ``()``.

    def _before_gradient(self, flat: Tensor, weight: Tensor, xi: Tensor, r_xi: Tensor, z_theta: Tensor,
                         z_xi: Tensor, eta: Tensor, eta_xi: float, bias: Tensor, wall: float) -> tuple:
        """Lines 4-8: the coupling ``(lam, dlam)``, the kinetic temperature, the thermostats' new values, the
        bin of ``xi`` and its biasing force."""
        T = self.temperature
        if self.tempering:
            lam = coupling(xi, self.plateau, self.coupling_width, self.coupling_order)
            dlam = coupling_derivative(xi, self.plateau, self.coupling_width, self.coupling_order)
        else:
            lam, dlam = torch.ones_like(xi), torch.zeros_like(xi)
        t_kin = (flat * flat * weight).sum(-1) / flat.shape[-1]  # per chain
        if self.thermostats:  # line 6 in kinetic-temperature form: r'r/D - eta T = eta (T_kin - T) for M = I
            z_xi = z_xi + dlam * dlam * (r_xi * r_xi - eta_xi * T) / self.tempering_thermal_inertia
            z_theta = z_theta + lam * lam * eta * (t_kin - T) / self.thermal_inertia
        j = self._bin(xi, wall)
        return lam, dlam, t_kin, z_theta, z_xi, j, self._bias_force(bias, j, xi, wall)

    @staticmethod
    def _coupled_and_reported(value: Tensor, data: Tensor | None, lam: Tensor) -> tuple[Tensor, Tensor]:
        """The term the coupling weighs, which ``xi``'s force and the biasing table read, and the potential the step
        reports, per chain: ``(U, U)`` in the paper's form (``data`` None); with ``tempered="likelihood"``, from the
        weighted ``value`` ``lambda U_D + U_P`` and the data term ``data``, ``(U_D, U_D + U_P)`` (the untempered
        potential, ``value + (1 - lambda) U_D``)."""
        if data is None:
            return value, value
        return data, value + (1.0 - lam) * data

    def _after_gradient(self, flat: Tensor, grad: Tensor, value: Tensor, xi: Tensor, r_xi: Tensor,
                        z_theta: Tensor, z_xi: Tensor, bias: Tensor, visits: Tensor, lam: Tensor, dlam: Tensor,
                        j: Tensor, delta_a: Tensor, eta_xi: float, c_xi: float, wall: float, kick: Tensor,
                        noise_scale: Tensor, noise: Tensor, xi_kick: Tensor, in_place: bool = False,
                        weighted: bool = False) -> tuple:
        """Lines 9-14 given the gradient ``grad`` (laid out as ``flat``) and the potential ``value`` per chain:
        the new ``(flat, xi, r_xi, bias, visits)``; ``in_place`` updates ``flat`` itself (the eager step: the same
        operations, no temporaries of its size), else a new tensor (the pure one). ``weighted``
        (``tempered="likelihood"``): ``grad`` is already that of ``lambda U_D + U_P`` and ``value`` the data term
        ``U_D``, which is what ``xi``'s force and the biasing table read; the kick then does not multiply the
        gradient by ``lambda`` again (the noise keeps its ``lambda`` and the friction its ``lambda^2``, whose
        ratio sets the temperature)."""
        T = self.temperature
        lam2, dlam2 = lam * lam, dlam * dlam
        exact = self.friction_step == "exact"  # the friction's exact flow e^-x, or the paper's Euler step 1 - x
        if self.tempering:  # line 9: tempering momentum
            force = dlam * (eta_xi * value + math.sqrt(2.0 * c_xi * eta_xi * T) * xi_kick)
            if exact:
                r_xi = friction_flow(dlam2 * z_xi) * r_xi - force + eta_xi * delta_a
            else:  # (the paper's order of operations)
                r_xi = r_xi - force - dlam2 * z_xi * r_xi + eta_xi * delta_a
        # line 10: parameter momentum, r <- (1 - lam^2 z) r - lam eta M^-1 grad + lam sqrt(2 c eta T M^-1) N (the
        # friction as e^(-lam^2 z) with friction_step="exact")
        friction = lam2 * z_theta
        lam_f = member_view(lam, flat)
        decay = member_view(friction_flow(friction) if exact else 1.0 - friction, flat)
        push = kick if weighted else kick * lam_f
        if in_place:
            flat.mul_(decay).addcmul_(grad, push, value=-1.0).addcmul_(noise, noise_scale * lam_f)
        else:
            flat = torch.addcmul(torch.addcmul(flat * decay, grad, push, value=-1.0), noise,
                                 noise_scale * lam_f)
        if self.tempering:
            bias, visits = self._updated_bias(bias, visits, j, dlam * value)  # line 11
            # lines 12-14: move xi inside the infinite well; on leaving it, reverse the velocity and undo the move
            moved = xi + r_xi
            outside = moved.abs() > wall
            r_xi, xi = torch.where(outside, -r_xi, r_xi), torch.where(outside, xi, moved)
        return flat, xi, r_xi, bias, visits

    def _scales(self, state: TACTHMCState) -> tuple[Tensor, Tensor, Tensor]:
        """Per coordinate, laid out as the momenta (cached until the preconditioner changes): the kick
        ``eta M^-1``, the noise sd ``sqrt(2 c eta T M^-1)`` and the kinetic energy's weight ``M^-1 / eta``."""
        pre, flat, T = state.precond, state.flat_momentum, self.temperature
        eta = pre.step_size
        kick = state.derived("kick_flat", lambda: pre.per_coordinate(eta, 1.0, flat))
        noise = state.derived("noise_flat", lambda: pre.per_coordinate(torch.sqrt(2.0 * self.noise * eta * T), 0.5,
                                                                        flat))
        weight = state.derived("kinetic_weight", lambda: pre.per_coordinate(1.0 / eta, -1.0, flat))
        return kick, noise, weight

    def _draw_noise(self, state: TACTHMCState) -> tuple[Tensor, Tensor]:
        """The step's noise from the chains' streams, in the order the step uses it: the tempering kick (drawn
        also without tempering, so that the streams stay aligned), then the momenta's."""
        xi_kick = state.rng.normal(1, state.xi.dtype).reshape(state.xi.shape)
        flat = state.flat_momentum
        return xi_kick, normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat)

    def _tempering_step_size(self, state: TACTHMCState) -> float:
        if self.tempering_step_size != "auto":  # a value set on a continuing chain takes effect
            state.tempering_step_size = float(self.tempering_step_size)
        return state.tempering_step_size

    def _tempering_noise(self, state: TACTHMCState) -> float:
        # resolved at every step from the chain's tempering step size, which a continuing chain may have changed (a
        # state pickled before this setting existed holds None here)
        state.tempering_noise = self.resolve_tempering_noise(state.tempering_step_size)
        return state.tempering_noise

    def _tempering_paused(self, state: TACTHMCState) -> bool:
        r"""Whether this step belongs to the warm-up's final window, which runs the kernel with the tempering
        variable held at the plateau's centre (:math:`\xi = 0`, :math:`\lambda = 1`, at rest), until the freeze
        draws its momentum afresh (:meth:`warmup_frozen`). There :math:`\lambda'(\xi) = 0`: the network's
        coordinates and thermostat take the kernel's own step at :math:`\xi = 0`; the tempering variable is put back
        after the biasing force's nudge, and the biasing table is left as it was (a metadynamics hill deposited at
        every held step, all on the centre's bin, kept the chains off the plateau after the freeze).

        The final window tries the step size the warm-up freezes (a restart or a hot window there halves it and
        reports the warm-up unsettled), and a step is least stable at :math:`\lambda = 1`: the kick and noise carry
        :math:`\lambda`, the friction :math:`\lambda^2`. A chain that spent the window hot passed a step it could not
        keep on the plateau (measured: every window's step 10x the rule's, a 4-D Gaussian, 8 chains; on 6 of 12 seeds
        a chain with 0-37 % of its final window on the plateau froze at 2.5x the rule's step under a settled report,
        and left the typical set after the freeze; 2 of 12 now). A chain brought back more than 10 % hot
        (:data:`HOT_RETURN`) sheds its tempering's heat there; with ``friction_step="exact"`` its thermostat is
        capped as a descent's until the guard's next check sees it cool
        (:func:`~bayesnet.samplers.warmup.clamp_friction`; with the exact friction flow it climbed to ``z = 2``
        within five steps, out of ``THERMOSTAT_RANGE``: 3 of 8 far starts reported unsettled)."""
        warm = state.warmup
        return (self.tempering and warm is not None and warm.adapt_step and len(warm.ends) > 1
                and state.step >= warm.ends[-2])  # (an explicit step size: no step to try, the chains temper on)

    @torch.no_grad()
    def _step(self, state: TACTHMCState, potential: Potential, batch: Any) -> tuple[TACTHMCState, StepInfo]:
        paused = self._tempering_paused(state)
        if paused:  # (the warm-up's final window: at the plateau's centre, at rest)
            if int(state.step) == state.warmup.ends[-2] and self.friction_step == "exact":
                # a chain brought from a temperature T / lambda to T sheds its heat, which pumps its thermostat (to
                # z = 2 within five steps, measured on a 4-D Gaussian): capped as a descent's until the guard's next
                # check sees it cool (warmup.clamp_friction). Only a chain more than 10 % hot (lambda < 0.9): one
                # just past the plateau's edge has no heat to shed, and a capped thermostat cannot show the guard a
                # step too large. (The paper's Euler step damps such a chain within a step or two: left as it was.)
                lam_old = coupling(state.xi, self.plateau, self.coupling_width, self.coupling_order)
                warm, hot = state.warmup, (lam_old < HOT_RETURN).reshape(-1)
                if warm.hot_descent is not None:  # (None: no check yet, every member capped)
                    warm.hot_descent = warm.hot_descent | hot
            state.xi, state.xi_momentum = torch.zeros_like(state.xi), torch.zeros_like(state.xi_momentum)
        eta_xi, c_xi, wall = self._tempering_step_size(state), self._tempering_noise(state), self._wall(state)
        kick, noise_scale, weight = self._scales(state)
        flat, xi = state.flat_momentum, state.xi
        lam, dlam, t_kin, z_theta, z_xi, j, delta_a = self._before_gradient(
            flat, weight, xi, state.xi_momentum, state.thermostat, state.tempering_thermostat,
            state.precond.step_size, eta_xi, state.bias, wall)
        if state.warmup is not None:  # (lam <= 1: the friction step lam^2 z_theta stays at most 1; warmup.py)
            z_theta = clamp_friction(state, z_theta)
        state.thermostat, state.tempering_thermostat = z_theta, z_xi
        weighted = self.tempered == "likelihood"
        with data_weighted(self.name, potential, lam.reshape(-1)) if weighted else nullcontext():  # lines 7-8
            value, grad = potential.value_and_grad(batch)  # (weighted: lambda U_D + U_P, and U_D recorded)
            data = potential.data_value.to(xi.dtype).reshape(xi.shape) if weighted else None
        coupled, value = self._coupled_and_reported(value.detach().to(xi.dtype).reshape(xi.shape), data, lam)
        xi_kick, noise = self._draw_noise(state)
        table = state.bias, state.bin_visits
        _, state.xi, state.xi_momentum, state.bias, state.bin_visits = self._after_gradient(
            flat, flatten(grad, state.layout), coupled, xi, state.xi_momentum, z_theta, z_xi,
            state.bias, state.bin_visits, lam, dlam, j, delta_a, eta_xi, c_xi, wall, kick, noise_scale, noise,
            xi_kick, in_place=True, weighted=weighted)
        torch._foreach_add_(state.position, state.momentum)  # line 15
        if paused:  # (the biasing table as it was: metadynamics would pile a hill per held step on the centre's
            # bin, and a bin straddling the plateau's edge would average in the held steps' zero force)
            state.xi, state.xi_momentum = torch.zeros_like(state.xi), torch.zeros_like(state.xi_momentum)
            state.bias, state.bin_visits = table
        state.step += 1
        return state, self._step_info(state, value, t_kin, xi, lam, z_theta, z_xi)

    def _step_info(self, state: TACTHMCState, value: Tensor, t_kin: Tensor, xi: Tensor, lam: Tensor,
                   z_theta: Tensor, z_xi: Tensor) -> StepInfo:
        """Lines 16-18 after the step (``state.step`` advanced; ``xi`` the step's starting value): count the
        plateau, collect at unit temperature every ``steps_per_sample`` steps (resampling the momenta when
        asked), and the step's diagnostics."""
        # on the plateau |xi| <= xi_0, tested on xi itself: just outside it, lambda = 1 / (1 + s^n) rounds to 1 in
        # float32 although the step ran (infinitesimally) hot
        on_plateau = (xi.abs() <= self.plateau) if self.tempering else torch.ones_like(xi, dtype=torch.bool)
        plateau_flag = on_plateau.to(xi.dtype)
        state.plateau_steps = state.plateau_steps + plateau_flag
        batched = state.layout.n_chains is not None
        if state.step % self.steps_per_sample == 0:  # the only steps that synchronise with the device
            is_draw = on_plateau.clone()
            if self.resample_momentum:  # every chain draws, so that its stream does not depend on the others
                self._resample(state, is_draw)
            if not batched:
                is_draw = bool(is_draw)
        else:
            is_draw = torch.zeros_like(on_plateau) if batched else False
        dim = state.flat_momentum.shape[-1]
        return StepInfo(potential=value, kinetic_energy=0.5 * t_kin * dim, kinetic_temperature=t_kin,
                        is_draw=is_draw,
                        extra={"xi": xi, "effective_temperature": self.temperature / lam, "thermostat": z_theta,
                               "tempering_thermostat": z_xi, "on_plateau": plateau_flag})

    # the same step as a pure function, for bayesnet.samplers.compiled; the momentum resampling of line 17 (every
    # steps_per_sample steps, when asked) stays an eager update after it
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """:meth:`_step` as a pure function: ``(positions, momenta, xi, r_xi, thermostat, tempering thermostat,
        bias, visits, eta, eta_xi, c_xi, wall, kick, noise_scale, weight, noise, xi_kick, X, y, factors, offset) ->
        (positions, momenta, xi, r_xi, bias, visits, thermostats, potentials, kinetic temperatures, lam)``, the
        same halves as :meth:`_step`."""
        grad_and_value = potential_gradients(potentials)
        weighted = self.tempered == "likelihood"

        def transition(position, flat, xi, r_xi, z_theta, z_xi, bias, visits, eta, eta_xi, c_xi, wall, kick,
                       noise_scale, weight, noise, xi_kick, X, y, factors, offset):
            lam, dlam, t_kin, z_theta, z_xi, j, delta_a = self._before_gradient(flat, weight, xi, r_xi, z_theta,
                                                                                z_xi, eta, eta_xi, bias, wall)
            if weighted:  # lambda U_D + U_P = lambda (U_D + U_P / lambda): the pure form, the prior's divided
                factors, offset = divided_prior_form(factors, offset, lam.reshape(-1))
            grads, (_, u) = grad_and_value(position, X, y, factors, offset)
            data = None
            if weighted:
                u, grads, data = weighted_outputs(u, grads, factors, offset, position, lam.reshape(-1))
                data = data.to(xi.dtype).reshape(xi.shape)
            coupled, value = self._coupled_and_reported(u.to(xi.dtype).reshape(xi.shape), data, lam)
            flat, xi, r_xi, bias, visits = self._after_gradient(
                flat, flatten(grads, layout), coupled, xi, r_xi, z_theta, z_xi, bias, visits,
                lam, dlam, j, delta_a, eta_xi, c_xi, wall, kick, noise_scale, noise, xi_kick, weighted=weighted)
            moved = [p + m for p, m in zip(position, views(flat, position))]
            return moved, flat, xi, r_xi, bias, visits, z_theta, z_xi, value, t_kin, lam

        return transition

    def transition_inputs(self, state: TACTHMCState, potential: Potential, batch: Any) -> tuple:
        if self.tempered == "likelihood":  # (the pure form weighs the data term from the prior's form)
            require_data_weight(self.name, potential)
        eta_xi, c_xi, wall = self._tempering_step_size(state), self._tempering_noise(state), self._wall(state)
        kick, noise_scale, weight = self._scales(state)
        xi_kick, noise = self._draw_noise(state)
        factors, offset = potential.prior_form()
        X, y = batch
        return ([p.detach() for p in state.position], state.flat_momentum, state.xi, state.xi_momentum,
                state.thermostat, state.tempering_thermostat, state.bias, state.bin_visits, state.precond.step_size,
                eta_xi, c_xi, wall, kick, noise_scale, weight, noise, xi_kick, X, y, factors, offset)

    def finish_transition(self, state: TACTHMCState, outputs) -> StepInfo:
        # copies, not the outputs themselves (a compiled function's outputs may be reused by its next call: CUDA
        # graphs), as write_back copies the positions and momenta
        moved, flat, xi, r_xi, bias, visits, z_theta, z_xi, value, t_kin, lam = outputs
        start = state.xi
        write_back(state, moved, flat)
        state.xi, state.xi_momentum, state.bias, state.bin_visits = xi.clone(), r_xi.clone(), bias.clone(), \
            visits.clone()
        state.thermostat, state.tempering_thermostat = z_theta.clone(), z_xi.clone()
        state.step += 1
        return self._step_info(state, value.detach(), t_kin, start, lam, z_theta, z_xi)

    def _resample(self, state: TACTHMCState, chains: Tensor) -> None:
        T = self.temperature
        fresh = gaussian_like(state.momentum, state.rng, state.layout)
        std = views(self.momentum_std(state), state.momentum)
        for m, w, sd in zip(state.momentum, fresh, std):
            m.copy_(torch.where(member_view(chains, m), w * sd, m))
        r_xi = state.xi_momentum
        new = state.rng.normal(1, r_xi.dtype).reshape(r_xi.shape)
        state.xi_momentum = torch.where(chains, new * math.sqrt(state.tempering_step_size * T), r_xi)

    def divergence_hint(self, state: TACTHMCState) -> str:
        return (f"{super().divergence_hint(state)}; or sampler__tempering_step_size (now "
                f"{state.tempering_step_size:g}), whose kick on the tempering variable grows with the "
                "size of the potential")

    def shortfall_hint(self, state: TACTHMCState, active=None) -> str:
        per_chain = self.plateau_fraction(state).reshape(-1)
        chains = torch.arange(per_chain.numel())
        if active is not None and len(active) == per_chain.numel() and any(active):  # the running chains only
            chains = chains[torch.as_tensor(active, dtype=torch.bool)]
        frac = float(per_chain[chains].mean())
        low = int(chains[per_chain[chains].argmin()])
        # with several chains the shortest one is the one the run waited for: name it
        worst = f", chain {low}'s {float(per_chain[low]):.1%}" if per_chain.numel() > 1 else ""
        xi = state.xi.reshape(-1)[low]
        now = self.temperature / float(coupling(xi, self.plateau, self.coupling_width, self.coupling_order))
        # a tempering step size above its "auto" value moves xi faster than the network follows, and it stays hot.
        # At "auto" the measurements point both ways (breast cancer's 530 weights: 1e-8 came back more often than
        # "auto"'s 2.1e-8; iris's 803 weights at "auto": xi diffused back too slowly, which a smaller step slows
        # further; benchmarks/README.md, "tacthmc at its defaults"), so the hint offers it only above "auto"
        dim = state.flat_momentum.shape[-1]
        auto = _auto_tempering_step_size(dim)
        fixes = ["Run longer (partial_fit continues the chain)"]
        wall, auto_wall = self._wall(state), _auto_wall(dim, self.plateau, self.coupling_width, self.coupling_order)
        if wall > auto_wall * (1 + 1e-9):  # a wider well than "auto" gives this model (e.g. the paper's 5/3)
            top = self._temperature_at(auto_wall)
            fixes.append(f"narrow the temperature range in a new fit (sampler__wall='auto': walls at {auto_wall:.3g}, "
                         f"highest temperature {top:.3g}, against {wall:.3g} and {self.highest_temperature(state):.3g} "
                         "now; an iris fit that ran 78,003 steps for 65 draws in the paper's well kept all 100 in "
                         "12,400; a continued chain keeps its walls)")
        else:
            fixes.append(f"narrow the temperature range further in a new fit (sampler__wall, now {wall:.3g}, highest "
                         f"temperature {self.highest_temperature(state):.3g})")
        c_xi, c_auto = self._tempering_noise(state), _auto_tempering_noise(state.tempering_step_size)
        if c_xi > c_auto * (1 + 1e-9):
            fixes.append(f"set sampler__tempering_noise='auto' (now {c_xi:.3g}, 'auto' "
                         f"{c_auto:.3g}): a tempering friction above it turns the tempering variable's travel into a "
                         "slow diffusion")
        fixes.append("set sampler__tempering=False, which samples at unit temperature throughout (SGNHT collecting "
                     "every steps_per_sample steps)")
        if state.tempering_step_size > auto * (1 + 1e-9):
            fixes.append(f"lower sampler__tempering_step_size (now {state.tempering_step_size:.3g}, above the 'auto' "
                         f"{auto:.3g}): a tempering variable that moves faster than the network can follow gets "
                         "stuck at high temperature")
        return (f"the tempering variable spent {frac:.1%} of all the steps at unit temperature{worst} (the warm-up's "
                "included; diagnostics_['plateau_fraction'] counts the steps after the burn-in only; the ideal is "
                f"{self.ideal_plateau_fraction(state):.0%}), and {'it' if not worst else f'chain {low}'} is at "
                f"temperature {now:.3g} now. " + "; ".join(fixes[:-1]) + "; or " + fixes[-1] + ".")

    # ------------------------------------------------------------------ #
    def bias_profile(self, state: TACTHMCState) -> tuple[Tensor, Tensor, Tensor]:
        """The biasing table over :math:`\\xi`'s bins.

        Returns
        -------
        centres : Tensor, shape (n_bins,)
            Bin centres on :math:`[-W_0, W_0]` (the chains' walls, :meth:`chain_wall`).
        bias : Tensor, shape (n_bins,) or (n_chains, n_bins)
            ABF: the running mean force :math:`\\langle\\lambda'(\\xi)\\tilde U\\rangle` per bin (the estimate
            of :math:`A'(\\xi)`, eq. 11; the data term's :math:`\\tilde U_D` with ``tempered="likelihood"``);
            metadynamics: the biasing potential :math:`A_j`.
        visits : Tensor, same shape as ``bias``
            Steps spent in each bin (a histogram of :math:`\\xi`).
        """
        centres = self._bin_centre(torch.arange(self.n_bins, dtype=torch.float64), self._wall(state))
        return centres, state.bias.detach().cpu(), state.bin_visits.detach().cpu()

    @staticmethod
    def plateau_fraction(state: TACTHMCState) -> Tensor:
        """Fraction of the steps so far taken at unit temperature, per chain (Appendix A's efficiency)."""
        return state.plateau_steps / max(state.step, 1)


TACTHMC.__doc__ = TACTHMC.__doc__.replace("{warmup}", WARMUP_DOC)
