"""Ensemble quasi-Newton (EQN): BAOAB preconditioned by the covariance of the other walkers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Sequence

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, MOMENTUM_STATS, MomentumState, Potential, Sampler, Stat, StepInfo
from .registry import register_sampler
from .integrators import baoab_step, chain_numel, momentum_state, normal_flat
from .random import ChainRandom
from .compiled import potential_gradients, write_back
from .warmup import HEAT, WARMUP_DOC, Preconditioner, flatten, member_view, regrad, views

__all__ = ["EQN", "EQNState"]

#: :math:`\eta` of Heber et al. 2020 (TATi) Sec. 5.3.2, what ``covariance_blending="auto"`` is with a given step
PAPER_BLENDING = 10.0


@dataclass(kw_only=True)
class EQNState(MomentumState):
    r""":class:`MomentumState` of ``S = C L`` walkers, plus the preconditioner.

    Attributes
    ----------
    grad : list of Tensor or None
        ``grad U`` at the current positions (None before the first step).
    snapshot : list of Tensor or None
        The centred walker positions :math:`P` of the last update (None while :math:`B_i = I`).
    coefficients : Tensor or None, shape (C, L, L, L)
        :math:`M_i` with :math:`B_i = I + P^\\top M_i P`.
    preconditioned_grad : list of Tensor or None
        :math:`B_i \\nabla U` at the current positions.
    preconditioner_scale : Tensor or None, shape (S,)
        The largest eigenvalue of each walker's :math:`B_i`.
    follows_warmup : bool
        Whether the :math:`B_i` are set by the warm-up and frozen with it (the warm-up adapted the step size when
        the chains started), instead of refreshed every ``covariance_interval`` steps; fixed for the chains'
        life, so that a continued fit with an explicit step keeps them frozen.
    snapshot_mass : Tensor or None
        The inverse mass the snapshot was taken in (its coordinates ``q``): a new mass drops the snapshot.
    snapshot_blending : float or None
        The :math:`\eta` of the last update (None before one): a continued fit under another resolved
        ``covariance_blending`` rebuilds the :math:`B_i` at its first step.
    shared_mass : Tensor or None
        The inverse mass once its walkers' mean was taken (so that it is not taken again).
    """

    grad: list[Tensor] | None = None
    snapshot: list[Tensor] | None = None
    coefficients: Tensor | None = None
    preconditioned_grad: list[Tensor] | None = None
    preconditioner_scale: Tensor | None = None
    follows_warmup: bool = False
    snapshot_mass: Tensor | None = None
    snapshot_blending: float | None = None
    shared_mass: Tensor | None = None

    def __setstate__(self, state):
        if "follows_warmup" not in state:  # pickled before the warm-up set the B_i: its chains keep the refreshes,
            warm = state.get("warmup")  # unless they were still warming up with an adapted step
            state["follows_warmup"] = warm is not None and warm.adapt_step
        super().__setstate__(state)


def _selection(n_walkers: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    r"""The centring maps :math:`A_i`, shape ``(L, L, L - 1)``.

    Column ``n`` of ``A[i]`` is :math:`(e_{j_n} - \frac{1}{L-1}\sum_{k \ne i} e_k)/\sqrt{L-1}`, ``j_n`` the
    ``n``-th walker other than ``i``, so that :math:`X_i = P^\top A_i` holds the other walkers' deviations
    from their mean, scaled so that :math:`X_i X_i^\top` is their covariance (Listing 3's normalisation).
    Its columns sum to zero, so :math:`P^\top A_i` does not change when a common vector is subtracted from
    the rows of the snapshot :math:`P`.
    """
    L = n_walkers
    eye = torch.eye(L, dtype=dtype, device=device)
    cols = torch.arange(L - 1, device=device)
    others = cols[None, :] + (cols[None, :] >= torch.arange(L, device=device)[:, None]).long()  # (L, L-1)
    pick = eye[:, others].permute(1, 0, 2)  # (i, k, n) = [k == others[i, n]]
    mask = 1.0 - eye  # (i, k) = [k != i]
    return (pick - mask[:, :, None] / (L - 1)) / math.sqrt(L - 1)



def _apply(snapshot: Sequence[Tensor], coefficients: Tensor, vectors: Sequence[Tensor]) -> list[Tensor]:
    r""":math:`B_i v_i = v_i + P^\top M_i (P v_i)` for every walker, ``snapshot`` the centred positions :math:`P`
    and ``vectors`` shaped like the positions, ``coefficients`` the :math:`M_i`, ``(C, L, L, L)``: the eager step
    and the pure transition share it (a zero snapshot and zero coefficients give :math:`B_i = I`)."""
    C, L = coefficients.shape[0], coefficients.shape[1]
    inner = None  # (C, L, L): [c, i, j] = <v_(c,i), P_(c,j)>
    for s, v in zip(snapshot, vectors):
        k = torch.bmm(v.reshape(C, L, -1), s.reshape(C, L, -1).transpose(1, 2))
        inner = k if inner is None else inner + k
    coeff = torch.einsum("cijk,cik->cij", coefficients, inner)  # M_i (P v_i)
    return [(v.reshape(C, L, -1) + torch.bmm(coeff, s.reshape(C, L, -1))).reshape(v.shape)
            for s, v in zip(snapshot, vectors)]

@register_sampler
class EQN(Sampler):
    r"""Ensemble quasi-Newton Langevin dynamics (Heber et al. 2020 (TATi) Sec. 2, eqs. 16-19; Listing 3).

    ``L = n_walkers`` walkers per chain move together. Walker :math:`i`
    follows Langevin dynamics preconditioned by a symmetric matrix
    :math:`B_i` built from the positions of the *other* walkers of its chain
    (Heber et al. 2020 (TATi) eqs. 16-17, unit mass):

    .. math::

        d\theta_i = B_i p_i\,dt, \qquad
        dp_i = -B_i^\top \nabla U(\theta_i)\,dt + \operatorname{div}(B_i^\top)\,dt
               - \gamma p_i\,dt + \sqrt{2\gamma T}\,dW_i,

    discretised by the BAOAB variant of eq. (18): one step of length
    :math:`\varepsilon` is

    .. math::

        p &\leftarrow p - \tfrac{\varepsilon}{2} B_i^\top \nabla U(\theta) &\text{(18a)}\\
        \theta &\leftarrow \theta + \tfrac{\varepsilon}{2} B_i p &\text{(18b)}\\
        p &\leftarrow a p + \sqrt{(1 - a^2) T}\, R, \quad a = e^{-\gamma\varepsilon} &\text{(18c)}\\
        \theta &\leftarrow \theta + \tfrac{\varepsilon}{2} B_i p &\text{(18d)}\\
        p &\leftarrow p - \tfrac{\varepsilon}{2} B_i^\top \nabla U(\theta) &\text{(18e)}

    with the covariance-blended preconditioner of eq. (19),

    .. math::

        B_i = \big(I + \eta \operatorname{cov}(\theta_{[i]})\big)^{1/2},

    :math:`\theta_{[i]}` the ``L - 1`` other walkers of the chain, whose mean
    and covariance are normalised by :math:`1/(L-1)` as in Listing 3. As in
    the paper and the code of its reference [56], :math:`B_i` is recomputed
    only now and then, from the positions at that moment, and frozen in
    between (every ``covariance_interval`` steps at an explicit step size;
    with ``step_size="auto"`` by the warm-up, then frozen for good, see
    ``covariance_interval``): it is then independent of
    :math:`\theta_i`, so the divergence term :math:`\operatorname{div}(B_i^\top)`
    of (17) and (18c) vanishes and (18b) is explicit. With :math:`B_i` fixed
    the step is exactly BAOAB for :math:`q = B_i^{-1}\theta`, so it keeps
    :math:`\exp(-U/T)` up to BAOAB's discretisation error (none in the
    configurational marginal of a Gaussian). Each walker's position after
    each step is a draw of the target. For a Gaussian target whose
    covariance the walkers estimate well, :math:`B_i \nabla U` rescales
    every direction to a curvature near :math:`\eta + 1/\sigma^2`, so the
    slow (wide) directions relax about as fast as the stiff ones (Heber et al. 2020 (TATi)
    Sec. 5.3.2, Fig. 13).

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        "auto" is set by the warm-up as :class:`BAOAB`'s,
        :math:`\varepsilon^2 \lambda_{max} = 1` and capped for the gradient
        noise, with the curvature and the noise measured as the step applies
        them: :math:`\lambda_{max}` of
        :math:`B_i M^{-1/2} \nabla^2 U M^{-1/2} B_i`, the noise as
        :math:`B_i M^{-1/2}` carries it. The walkers of a chain share one
        diagonal mass :math:`M` (``preconditioner``; the mean of theirs; with
        "auto" one entry per parameter tensor when there are several walkers,
        see :meth:`preconditioner_mode`) and
        run in its coordinates :math:`q = M^{1/2}\theta`, where :math:`B_i` is
        built from the other walkers' :math:`q`; the warm-up sets the
        :math:`B_i` and freezes them with the step size (see
        ``covariance_interval``). A number is
        the time step :math:`\varepsilon > 0`, in the units of :class:`BAOAB`'s
        (``p`` has units of :math:`\sqrt{T}`). The preconditioner lowers the
        stable step: along a deviation :math:`d` of another walker
        (:math:`d^\top \nabla^2 U\, d \approx T D` near a Gaussian mode) the
        preconditioned curvature is about
        :math:`\lambda + \eta\, T D_{\mathrm{eff}} / (L - 1)`, with
        :math:`D_{\mathrm{eff}}` the number of directions the target
        constrains (at most :math:`D`), whatever their scales. Keep
        :math:`\varepsilon \sqrt{\lambda_{\max}(\nabla^2 U) + \eta T D / (L - 1)} \lesssim 1.5`
        (measured on the Gaussians of Heber et al. 2020 (TATi) Sec. 5.3.2 with
        :math:`\eta = 10`: ``D = 64, L = 8`` runs at 0.125 and diverges at
        0.18; ``L = 4`` diverges at 0.11; ``D = 256, L = 8`` runs at 0.07 and
        diverges at 0.1; with few parameters and few walkers the bound is not
        safe: ``D = 4, L = 4`` diverged after the first covariance update at
        1.14 and, at :math:`T = 2`, 1.05, measured in a user test). For many
        parameters this calls for a small
        :math:`\eta` or step, e.g. :math:`\varepsilon \lesssim 0.012` for
        :math:`D = 10^4`, ``L = 8``, :math:`\eta = 10`, :math:`T = 1`.
    friction : float, default=1.0
        :math:`\gamma > 0` per unit time.
    temperature : float, default=1.0
        :math:`T = 1/\beta > 0`.
    n_walkers : int, default=8
        :math:`L \ge 1` walkers per chain. ``L = 1`` (no other walker) and
        ``L = 2`` (one other walker, covariance zero) give :math:`B = I`:
        BAOAB on every walker.
    covariance_blending : float or "auto", default="auto"
        :math:`\eta \ge 0` of eq. (19), in units of 1 / (position units)^2;
        ``0`` gives BAOAB on every walker. Heber et al. 2020 (TATi) use 10 for the Gaussian
        models of Sec. 5.3.2 and up to 1e4 for MNIST (Sec. 5.3.3). It sets
        the stable step size (see ``step_size``). "auto" is
        :math:`(L - 1) / (T D)` when the warm-up sets the :math:`B_i`
        (``step_size="auto"``; :math:`D` parameters per walker, in the mass's
        coordinates, where the target's spread is about :math:`T` per
        coordinate), and the paper's 10 otherwise (an explicit step size, or
        no warm-up). The reason: the
        :math:`L - 1` other walkers' sample covariance has eigenvalues of
        about :math:`T D / (L - 1)` along their own deviations even for an
        isotropic target, so :math:`\eta = 10` stretches those directions by
        :math:`\sqrt{1 + 10 T D / (L - 1)}` (about 30 for a 600-parameter
        network with 8 walkers; up to 900 measured on the defaults panel,
        whose walkers sit further apart), and the step, the curvature along
        them, falls by as much; "auto" makes that stretch
        :math:`\sqrt 2` for an isotropic spread. Measured on the panel
        (benchmarks/README.md): eta = 10 at the estimators' defaults diverged
        on make_friedman1 and sunspots before the warm-up measured the
        :math:`B_i`, and with it ran at a step 30x (the curvature) to 400x
        (the gradient noise the :math:`B_i` amplify) smaller than
        :math:`B_i = I` allows, unconverged (R-hat 1.7); "auto" (about
        0.006-0.012 there) matches :math:`\eta = 0` within the seeds' spread on these
        networks.
    covariance_interval : int, default=1000
        Steps between two updates of the :math:`B_i` (:math:`\ge 1`); the
        paper updates "typically every 1,000 steps" (Sec. 2). The first update happens at the
        start of step ``covariance_interval`` (:math:`B_i = I` before, as
        Listing 3 starts from identity matrices), so that the walkers first
        equilibrate independently under plain BAOAB rather than being
        preconditioned by the spread of their initialisation. The interval
        is a bias trade-off, not only a cost one: each walker keeps the
        target exactly only while its :math:`B_i` is independent of its own
        position, which holds at an update when the walkers have decorrelated
        since the previous one; updating more often than the walkers
        decorrelate biases the ensemble (simultaneous moves with stale
        :math:`B_i`). Measured on the 64-D Gaussian of Heber et al. 2020 (TATi) Sec. 5.3.2
        (variances 1..100, :math:`\varepsilon = 0.125`, :math:`\gamma = 1`,
        :math:`\eta = 10`, ``L = 8``, 2e4 steps, 16 chains): the variance
        of the four slowest directions came out 0.99, 1.03, 1.01, 0.97
        (+-0.03) of the truth with 1000, 0.78-0.82 with 100, 0.19-0.24 with
        10 or 1 (the 7 other walkers span 6 of the 64 directions); in 4-D,
        where the walkers decorrelate within a few steps, 100 is unbiased.
        That is the paper's schedule, which runs at a given step size. With
        ``step_size="auto"`` the warm-up sets the :math:`B_i` instead
        (:meth:`prepare_step_size`): at each of its window ends from step
        ``covariance_interval`` on, and at its final window's start whenever
        that comes (step 900 of the estimators' ``burn_in="auto"`` of 1000
        steps on up to 640 rows), each time before it measures the step size
        with them; those of the final window's start are frozen with the step
        size, and the final window (10 % of the warm-up) tries them under the
        warm-up's guard. Every kept draw then comes from one fixed kernel per
        walker (a frozen preconditioner, as the warm-up's mass): adapting the
        :math:`B_i` adds no bias to BAOAB's own (its discretisation, and the
        mini-batches' noise). The chains keep that mode for their life (a
        continued fit with an explicit ``step_size`` keeps the :math:`B_i`
        frozen); a continued fit under another resolved
        ``covariance_blending`` (or temperature, which "auto" scales with)
        rebuilds them once, at its first step, at the frozen step size. An
        update costs :math:`O(L^2 D)` per
        chain plus ``L`` eigendecompositions of size ``L - 1``.

{warmup}

    Raises
    ------
    ValueError
        From :meth:`validate`: on non-positive ``step_size``, ``friction`` or
        ``temperature``, a negative ``covariance_blending``, or ``n_walkers`` /
        ``covariance_interval`` that are not integers >= 1; from
        :meth:`init`, on position tensors without the leading axis of
        ``n_chains * n_walkers`` members.

    Notes
    -----
    Layout: every position tensor has a leading axis of
    ``S = n_chains * n_walkers`` packed members, chain major (walker ``m`` of
    chain ``c`` at index ``c * n_walkers + m``; ``n_chains=None`` means one
    chain, leading axis ``n_walkers``, or no chain axis at all when
    ``n_walkers == 1``). The potential returns one value per walker, shape
    ``(S,)``. Walkers of different chains never interact.

    Cost: no :math:`D \times D` matrix is formed (:math:`D` = parameters per
    walker). At an update the centred snapshot :math:`P` (``(L, D)`` per
    chain, stored like the positions) and its ``L x L`` Gram matrix give
    :math:`G_i = X_i^\top X_i = A_i^\top P P^\top A_i` for all walkers at once
    (``X_i = P^T A_i``, see ``_selection``); with
    :math:`G_i = V \operatorname{diag}(s) V^\top`,

    .. math::

        B_i = I + X_i V \operatorname{diag}(f(s)) V^\top X_i^\top
            = I + P^\top M_i P, \qquad
        f(s) = \frac{\sqrt{1 + \eta s} - 1}{s} = \frac{\eta}{1 + \sqrt{1 + \eta s}},

    the symmetric square root (:math:`B_i^\top = B_i`; Listing 3 uses a
    Cholesky factor instead, which differs from it by a rotation and gives
    the same invariant measure), exact whatever the rank of the covariance
    (:math:`L - 1 < D` included). The ``L x L`` matrices :math:`M_i` are
    kept; applying :math:`B_i` to a vector costs the ``L`` inner products
    :math:`P v` and one combination of the ``L`` snapshot rows: :math:`O(LD)`
    per walker. A step applies it twice (to the gradient and, for (18b) and
    (18d) together, to the sum of the two momenta), and keeps
    :math:`B_i\nabla U` for the next step's (18a): one gradient per step.
    The state holds, besides the momenta, the gradient, :math:`B_i \nabla U`
    and the snapshot (each the size of the positions) and the ``C L^3``
    coefficients.

    Exactness: the step conditional on :math:`B_i` preserves the target,
    so a walker whose position is independent of its :math:`B_i` keeps
    its law. After an update the walkers interact through their
    :math:`B_i` and are no longer independent; the next update is then
    biased unless they have decorrelated in between (see
    ``covariance_interval``); the paper's infrequent updates keep this
    small. (The continuous-time dynamics (16)-(17) with :math:`B_i` of the
    current positions is exact, but its discretisation with simultaneous
    moves converges to it only slowly as :math:`\varepsilon \to 0`, as
    :math:`B_i` stretches the steps by up to :math:`\sqrt{\eta}\sigma`:
    updating every step on the 16-D Gaussian of Sec. 5.3.2 with ``L = 8``
    gave 0.4 of the slow variances at :math:`\varepsilon = 0.125` and 0.6
    at 0.03.)

    Compiled (``compile=True``, :mod:`bayesnet.samplers.compiled`): the step
    (18a-e) is one pure function whose snapshot :math:`P` and coefficients
    :math:`M_i` are inputs (at a given step size refreshed eagerly every
    ``covariance_interval`` steps; with "auto" frozen before the compiled
    steps begin), so a refresh recompiles nothing. It applies :math:`B_i` three
    times per step (it recomputes :math:`B_i\nabla U` from the cached
    gradient instead of keeping it), and while :math:`B_i = I` it applies a
    zero snapshot, so a walker with an infinite coordinate turns NaN in all
    of them (it has diverged either way; the divergence monitor retires it).

    ``StepInfo``: ``potential``, ``kinetic_energy`` (:math:`|p|^2/2`) and
    ``kinetic_temperature`` (:math:`|p|^2/D`) per walker, shape ``(S,)``
    (0-d without a chain axis); ``extra["preconditioner_scale"]`` is the
    largest eigenvalue :math:`\sqrt{1 + \eta\sigma^2_{\max}}` of each
    walker's :math:`B_i` (1 before the first update).

    References
    ----------
    Heber, Trstanova, Leimkuhler, "TATi" (Heber et al. 2020 (TATi)), Sec. 2 eqs. (16)-(19)
    and Sec. 5.3, Listing 3, Fig. 13; B. Leimkuhler, C. Matthews, J. Weare,
    "Ensemble preconditioning for Markov chain Monte Carlo simulation",
    Statistics and Computing 28, 277-290 (2018) (Heber et al. 2020 (TATi) ref. [56]).
    """

    name = "eqn"
    gradients_at_positions = True  # one gradient per step, at the members' positions
    stats = {**COMMON_STATS, **MOMENTUM_STATS, "preconditioner_scale": Stat("mean")}
    state_class = EQNState
    fallback_step_size = 0.01
    stability = 1.0
    _parameter_constraints = {
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "friction": [Interval(Real, 0, np.inf, closed="neither")],
        "temperature": [Interval(Real, 0, np.inf, closed="neither")],
        "n_walkers": [Interval(Integral, 1, None, closed="left")],
        "covariance_blending": [Interval(Real, 0, np.inf, closed="left"), StrOptions({"auto"})],
        "covariance_interval": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, step_size: float | str = "auto", friction: float = 1.0, temperature: float = 1.0,
                 n_walkers: int = 8, covariance_blending: float | str = "auto", covariance_interval: int = 1000,
                 preconditioner: str | None = "auto", adaptation_steps: int | str = "auto"):
        self.step_size = step_size
        self.friction = friction
        self.temperature = temperature
        self.n_walkers = n_walkers
        self.covariance_blending = covariance_blending
        self.covariance_interval = covariance_interval
        self.preconditioner = preconditioner
        self.adaptation_steps = adaptation_steps

    def members_per_chain(self) -> int:
        """The ``n_walkers`` walkers of one chain."""
        return int(self.n_walkers)

    def target_temperature(self) -> float:
        return float(self.temperature)

    def divergence_hint(self, state: EQNState) -> str:
        scale = state.preconditioner_scale
        now = f", largest stretch now {float(scale.max()):.3g}" if isinstance(scale, Tensor) else ""
        return (f"{super().divergence_hint(state)}; or sampler__covariance_blending={self._blending(state):.3g}, the "
                "eta by which the preconditioner stretches the step, up to sqrt(1 + eta v) for the walkers' variance "
                f"v{now}")

    # ------------------------------------------------------------------ #
    def preconditioner_mode(self) -> str | None:
        """``preconditioner="auto"`` with an adapted step is one mass per parameter tensor ("layer") when a chain
        has several walkers, which share their mean mass (:meth:`preconditioner_changed`); one walker (BAOAB)
        keeps the per-parameter mass ("diagonal"). Walkers in differently ordered modes of a network (its
        hidden units permuted) have per-parameter masses that do not correspond, and their mean stiffened
        every walker: on a 1-50-1 regression the shared step froze 100x below BAOAB's and the noise variance
        stayed at its starting value (intervals covering 0.70). A tensor's mass is the same in any order of its
        units. On the defaults panel's tasks the two are alike (benchmarks/README.md)."""
        mode = super().preconditioner_mode()
        if self.preconditioner == "auto" and mode == "diagonal" and int(self.n_walkers) > 1:
            return "layer"
        return mode

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """``sqrt(stability / lambda)``, capped as BAOAB's for the gradient noise; ``lambda`` is measured with the
        walkers' :math:`B_i` on both sides of the Hessian whenever the warm-up has set them
        (:meth:`prepare_step_size`), so it is the curvature the preconditioned step meets."""
        step = torch.sqrt(self.stability / curvature)
        if noise_fraction is not None:
            step = torch.minimum(step, self.coordinate_noise_budget() / noise_fraction.clamp_min(1e-12))
        return step

    def coordinate_noise_budget(self) -> float:
        """``2 friction HEAT``, as BAOAB's
        (:meth:`bayesnet.samplers.baoab.BAOAB.coordinate_noise_budget`: the same cached gradient's noise enters
        as one full kick a step)."""
        return 2.0 * self.friction * HEAT

    def momentum_std(self, state: EQNState) -> Tensor:
        return torch.full_like(state.flat_momentum, self.temperature ** 0.5)  # unit mass in q = M^(1/2) theta

    def preconditioner_changed(self, state: EQNState) -> None:
        """The walkers of a chain share their mean mass and step size (their ``B_i`` mixes their coordinates);
        a covariance snapshot taken in another mass's coordinates is dropped (``B_i = I`` until the next
        update), one taken in this mass's (by :meth:`prepare_step_size`, or before a change of the step size
        alone) is kept."""
        pre, layout = state.precond, state.layout
        self._share_mass(state)
        self._drop_stale_snapshot(state)
        if layout.n_members is not None and layout.members_per_chain > 1:
            C, L = layout.chains, layout.members_per_chain
            pre.step_size = pre.step_size.reshape(C, L).mean(1, keepdim=True).expand(C, L).reshape(-1).contiguous()
        state.preconditioned_grad = None
        super().preconditioner_changed(state)

    @staticmethod
    def _drop_stale_snapshot(state: EQNState) -> None:
        """Drop a covariance snapshot taken in another mass's coordinates (:math:`B_i = I` until the next
        update)."""
        if state.snapshot is not None and state.snapshot_mass is not state.precond.inverse_mass:
            state.snapshot = state.coefficients = state.preconditioner_scale = None

    def _share_mass(self, state: EQNState) -> None:
        """The walkers of each chain take their mean inverse mass (one set of coordinates ``q`` per chain), once
        per new mass."""
        pre, layout = state.precond, state.layout
        if pre.inverse_mass is None or pre.inverse_mass is state.shared_mass:
            return
        if layout.n_members is not None and layout.members_per_chain > 1:
            C, L = layout.chains, layout.members_per_chain
            m = pre.inverse_mass.reshape(C, L, -1).mean(1, keepdim=True).expand(C, L, -1)
            pre.inverse_mass = m.reshape(pre.inverse_mass.shape).contiguous()
            pre.version += 1
        state.shared_mass = pre.inverse_mass

    def _blending(self, state: EQNState) -> float:
        r""":math:`\eta`: ``covariance_blending``, or for "auto" :math:`(L - 1) / (T D)` when the warm-up sets
        the :math:`B_i` (in the mass's coordinates) and Heber et al.'s 10 otherwise."""
        eta = self.covariance_blending
        if eta != "auto":
            return float(eta)
        if not state.follows_warmup:
            return PAPER_BLENDING
        D = sum(p[0].numel() for p in state.position) if state.layout.n_members is not None else \
            sum(p.numel() for p in state.position)
        return (int(self.n_walkers) - 1) / (float(self.temperature) * D)

    def _refresh_due(self, state: EQNState) -> bool:
        """Whether :meth:`step` refreshes the :math:`B_i` now: every ``covariance_interval`` steps, unless the
        warm-up sets them (:meth:`prepare_step_size`) and they stay frozen after it; then only once, when a
        continued fit resolves ``covariance_blending`` (or the temperature it scales with) to another value."""
        if state.follows_warmup:
            return state.snapshot_blending is not None and self._blending(state) != state.snapshot_blending
        return state.step > 0 and state.step % self.covariance_interval == 0

    def init(self, position, rng=None, n_chains=None) -> EQNState:
        state = super().init(position, rng, n_chains)
        state.follows_warmup = state.warmup is not None and state.warmup.adapt_step
        return state

    def prepare_step_size(self, state: EQNState):
        r"""With ``step_size="auto"`` when the chains started (also after an explicit step replaced it in a
        continued fit: the step is then not measured), the warm-up sets the :math:`B_i`: at each window's end from step
        ``covariance_interval`` on, and at the final window's start whenever that comes, from the walkers'
        positions in the new mass's coordinates (their mean mass, the one they run with), before the curvature
        for the new step size is measured with them. (Before the first update each walker's curvature is
        measured with its own mass, and the chain then runs the mean mass at the mean step, as before the
        :math:`B_i` took part: measured on the defaults panel, measuring with the mean mass there raised the
        curvature 2-3 fold on make_friedman1, where walkers in different modes have different masses, and
        the smaller steps left R-hat at 1.38 and 1.11 on two seeds against 1.03 and 1.03; the harmonic mean,
        1.08 and 1.11.) The :math:`B_i` of the final window's start are frozen
        with the step size: the kept draws come from one fixed kernel per walker, and the step they run was
        measured, and tried, with them. (A warm-up of fewer than 20 steps has no window ends: the :math:`B_i`
        stay :math:`I`.) Returns the map :math:`v \mapsto B_i v` (None while :math:`B_i = I`)."""
        if not state.follows_warmup:
            return None
        warm = state.warmup
        final_start = warm.ends[-2] if len(warm.ends) >= 2 else None
        if state.step > 0 and (state.step >= self.covariance_interval or state.step == final_start):
            self._share_mass(state)  # the coordinates the B_i are built in and act in
            self.update_preconditioner(state)
        else:
            self._drop_stale_snapshot(state)
        if state.snapshot is None:
            return None
        return lambda vectors: self.apply_preconditioner(state, vectors)

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> EQNState:
        """Start the walkers with momenta :math:`p \\sim \\mathcal N(0, T I)` and :math:`B_i = I`."""
        return momentum_state(EQNState, self.momentum_std, position, rng, layout, precond)

    def _root_mass(self, state: EQNState) -> list[Tensor] | None:
        """``s = M^{-1/2}`` shaped like the positions (None without a mass): ``theta = s q``."""
        pre = state.precond
        if pre.inverse_mass is None:
            return None
        return state.derived("root_mass", lambda: views(pre.inverse_mass.sqrt(), state.position))

    # ------------------------------------------------------------------ #
    @torch.no_grad()
    def update_preconditioner(self, state: EQNState) -> None:
        r"""Recompute every walker's :math:`B_i` (eq. 19) from the current positions.

        Stores the centred snapshot :math:`P` (list of tensors shaped like the
        positions), the coefficients :math:`M_i` (``(C, L, L, L)``) and the
        largest eigenvalue of each :math:`B_i` (``(S,)``) in the state.
        :meth:`step` calls it every ``covariance_interval`` steps at an explicit
        step size, :meth:`prepare_step_size` during a warm-up started with
        ``step_size="auto"``; a no-op with fewer than 3 walkers per chain or :math:`\eta = 0`
        (:math:`B = I`).
        """
        S, L, eta = state.layout.n_members, int(self.n_walkers), self._blending(state)
        state.snapshot_blending, state.snapshot_mass = eta, state.precond.inverse_mass
        if S is None or L < 3 or eta == 0.0:
            state.snapshot = state.coefficients = state.preconditioned_grad = state.preconditioner_scale = None
            return
        C = S // L
        snapshot, gram = [], None
        root = self._root_mass(state)
        for k, t in enumerate(state.position):
            x = (t.detach() / root[k] if root is not None else t.detach()).reshape(C, L, -1)  # q coordinates
            x = x - x.mean(dim=1, keepdim=True)  # centring by the chain mean keeps the Gram matrix accurate
            snapshot.append(x.reshape(t.shape))
            k = torch.bmm(x, x.transpose(1, 2))
            gram = k if gram is None else gram + k
        gram = gram.to(torch.float64)
        gram = torch.where(torch.isfinite(gram), gram, torch.zeros_like(gram))  # a diverged chain stays NaN anyway
        A = _selection(L, torch.float64, gram.device)  # (L, L, L-1)
        # chain by chain (a batched einsum or eigh rounds differently with the number of chains beside it, and a
        # chain must not depend on the others); a refresh is rare and the matrices are L x L
        s, M = zip(*(self._coefficients(A, g, eta) for g in gram.split(1)))
        s, M = torch.cat(s), torch.cat(M)
        dtype = state.position[0].dtype
        state.snapshot = snapshot
        state.coefficients = M.to(dtype)
        state.preconditioner_scale = torch.sqrt(1.0 + eta * s[..., -1]).reshape(S).to(dtype)
        grad = state.grad
        state.preconditioned_grad = None if grad is None else self.apply_preconditioner(state, self._to_q(state, grad))

    @staticmethod
    def _coefficients(A: Tensor, gram: Tensor, eta: float) -> tuple[Tensor, Tensor]:
        """The eigenvalues of the other walkers' Gram matrices ``X_i^T X_i`` (``(C, L, L-1)``, ascending) and the
        coefficients :math:`M_i` (``(C, L, L, L)``) from the chains' Gram matrix ``P P^T`` (``(C, L, L)``)."""
        G = torch.einsum("ikm,ckl,iln->cimn", A, gram, A)  # (C, L, L-1, L-1): X_i^T X_i
        s, V = torch.linalg.eigh(0.5 * (G + G.transpose(-1, -2)))
        s = s.clamp_min(0.0)
        f = eta / (1.0 + torch.sqrt(1.0 + eta * s))  # (sqrt(1 + eta s) - 1) / s without cancellation
        AV = torch.einsum("ikm,cimn->cikn", A, V)  # (C, L, L, L-1)
        return s, torch.einsum("cikn,cin,ciln->cikl", AV, f, AV)  # B_i = I + P^T M_i P

    @torch.no_grad()
    def apply_preconditioner(self, state: EQNState, vectors: Sequence[Tensor]) -> list[Tensor]:
        r"""Every walker's :math:`B_i v_i`, for ``vectors`` shaped like the positions.

        Returns new tensors (copies of ``vectors`` while :math:`B = I`). Costs
        :math:`O(L D)` per walker: :math:`B_i v = v + P^\top M_i (P v)`.
        """
        if state.snapshot is None:
            return [v.clone() for v in vectors]
        return _apply(state.snapshot, state.coefficients, vectors)

    # ------------------------------------------------------------------ #
    def reset_cache(self, state: EQNState) -> None:
        """Drop the cached gradients: the next step re-evaluates them on its own batch."""
        state.grad = state.preconditioned_grad = None

    def restart_members(self, state: EQNState, members: Tensor, potential: Potential, batch: Any) -> None:
        """The restarted walkers' cached gradient is taken anew at their restored position (:class:`BAOAB`'s
        rule); the preconditioned one follows from it at the next step."""
        state.grad = regrad(state.grad, members, potential, batch, state.layout)
        state.preconditioned_grad = None

    def _to_q(self, state: EQNState, grad: Sequence[Tensor]) -> list[Tensor]:
        """A gradient in the walkers' coordinates ``q``: ``s * grad`` (``grad`` without a mass)."""
        root = self._root_mass(state)
        return list(grad) if root is None else [r * g for r, g in zip(root, grad)]

    @torch.no_grad()
    def potential_changed(self, state: EQNState, delta_value: Tensor, delta_grad: list[Tensor]) -> None:
        """The cached gradient follows the change."""
        if state.grad is not None:
            state.grad = [g + d.to(g.dtype) for g, d in zip(state.grad, delta_grad)]
        state.preconditioned_grad = None

    def _scales(self, state: EQNState) -> dict:
        pre, flat = state.precond, state.flat_momentum
        h = pre.step_size
        decay = torch.exp(-self.friction * h)
        half = pre.per_coordinate(0.5 * h, 0.5, flat)  # (h/2) s: the kick of p and the drift of theta
        return {"kick": views(half, state.position), "drift": views(half, state.position), "decay": decay,
                # 1 - decay**2 of the float32 decay applied (see BAOAB._scales), not -expm1(-2 gamma h)
                "noise": pre.per_coordinate(torch.sqrt((1.0 - decay * decay) * self.temperature), 0.0, flat),
                "half_step": h / 2}

    @torch.no_grad()
    def _step(self, state: EQNState, potential: Potential, batch: Any) -> tuple[EQNState, StepInfo]:
        theta, p, flat, rng, layout = state.position, state.momentum, state.flat_momentum, state.rng, state.layout
        sc = state.derived("scales", lambda: self._scales(state))
        if self._refresh_due(state):
            self.update_preconditioner(state)  # also refreshes B_i grad for the new B_i
        grad = state.grad
        if grad is None:  # first step: the gradient at the starting point (and B_i of it, below)
            _, grad = potential.value_and_grad(batch)
            state.preconditioned_grad = None
        if state.snapshot is None:  # B = I: exactly BAOAB (in q = M^(1/2) theta)
            value, grad = baoab_step(theta, p, flat, grad, sc["kick"], sc["drift"], sc["decay"], sc["noise"],
                                     potential, batch, rng, layout)
        else:
            half_step = sc["half_step"]
            root = self._root_mass(state)
            pg = state.preconditioned_grad
            if pg is None:
                pg = self.apply_preconditioner(state, self._to_q(state, grad))
            for m, g in zip(p, pg):  # (18a), B_i^T = B_i
                m.sub_(member_view(half_step, m) * g)
            half = [m.clone() for m in p]
            flat.mul_(member_view(sc["decay"], flat) if flat.ndim > sc["decay"].ndim else sc["decay"])  # (18c)
            flat.addcmul_(normal_flat(rng, layout, flat.numel(), flat.dtype).view_as(flat), sc["noise"])
            torch._foreach_add_(half, p)
            move = self.apply_preconditioner(state, half)
            for k, (t, d) in enumerate(zip(theta, move)):  # (18b) + (18d), back in theta = s q
                t.add_(member_view(half_step, t) * (d if root is None else root[k] * d))
            value, grad = potential.value_and_grad(batch)
            pg = self.apply_preconditioner(state, self._to_q(state, grad))
            for m, g in zip(p, pg):  # (18e)
                m.sub_(member_view(half_step, m) * g)
            state.preconditioned_grad = pg
        state.grad = grad
        state.step += 1
        kinetic = 0.5 * (flat * flat).sum(-1)
        scale = state.preconditioner_scale
        if scale is None:
            scale = torch.ones_like(kinetic)
        return state, StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                               kinetic_temperature=2.0 * kinetic / chain_numel(p, layout),
                               extra={"preconditioner_scale": scale})


    # the same step as a pure function, for bayesnet.samplers.compiled
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """:meth:`_step` as a pure function: ``(positions, momenta, gradient, noise, root_mass, half_step, decay,
        noise_scale, snapshot, coefficients, X, y, factors, offset) -> (positions, momenta, gradient,
        potentials, kinetic energies)``, in :meth:`_step`'s order of operations for the
        preconditioned step (18a-e). The snapshot and coefficients are inputs, refreshed eagerly between steps
        (:meth:`transition_inputs`), so an update recompiles nothing; while :math:`B_i = I` they are zeros, which
        makes the same arithmetic plain BAOAB in ``q``. ``B_i grad U`` is recomputed from the cached gradient at
        each step (the eager step keeps it from the step before: the same values)."""
        grad_and_value = potential_gradients(potentials)

        def transition(position, flat, grad, z, root, half, decay, noise, snapshot, coefficients, X, y, factors,
                       offset):
            def preconditioned(vectors):
                return _apply(snapshot, coefficients, vectors)

            pg = preconditioned([r * g for r, g in zip(root, grad)])
            kicked = [m - h * g for m, h, g in zip(views(flat, position), half, pg)]  # (18a)
            flat = flatten(kicked, layout) * decay + z * noise  # (18c)
            move = preconditioned([a + b for a, b in zip(kicked, views(flat, position))])
            position = [t + h * (r * d) for t, h, r, d in zip(position, half, root, move)]  # (18b) + (18d)
            grad, (_, u) = grad_and_value(position, X, y, factors, offset)
            pg = preconditioned([r * g for r, g in zip(root, grad)])
            flat = flatten([m - h * g for m, h, g in zip(views(flat, position), half, pg)], layout)  # (18e)
            return position, flat, grad, u, 0.5 * (flat * flat).sum(-1)

        return transition

    def transition_inputs(self, state: EQNState, potential: Potential, batch: Any) -> tuple:
        """The eager part of a step: the preconditioner's update when due (as :meth:`_step` makes it), the
        first gradient, the noise from the chains' streams, and the step's scales."""
        theta, flat = state.position, state.flat_momentum
        sc = state.derived("scales", lambda: self._scales(state))
        if self._refresh_due(state):
            self.update_preconditioner(state)
        if state.grad is None:  # first step: the gradient at the starting point, eagerly
            _, state.grad = potential.value_and_grad(batch)
        fixed = state.derived("pure_inputs", lambda: self._pure_scales(state, sc))
        snapshot, coefficients = state.snapshot, state.coefficients
        if snapshot is None:  # B_i = I
            snapshot, coefficients = fixed["zero_snapshot"], fixed["zero_coefficients"]
        z = normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat)
        factors, offset = potential.prior_form()
        X, y = batch
        return ([p.detach() for p in theta], flat, [g.detach() for g in state.grad], z, fixed["root"],
                fixed["half"], fixed["decay"], sc["noise"], snapshot, coefficients, X, y, factors, offset)

    def _pure_scales(self, state: EQNState, sc: dict) -> dict:
        """What the pure transition reads besides the state, fixed until the preconditioner changes: the root
        mass (ones without a mass), the half step and the friction's decay broadcast like the positions and
        the momenta, and the zero snapshot that stands for :math:`B_i = I`."""
        theta, flat, layout = state.position, state.flat_momentum, state.layout
        root = self._root_mass(state)
        decay = sc["decay"]
        S = layout.n_members
        C, L = (S // int(self.n_walkers), int(self.n_walkers)) if S is not None else (1, 1)
        return {"root": [torch.ones_like(t) for t in theta] if root is None else root,
                "half": [member_view(sc["half_step"], t) for t in theta],
                "decay": member_view(decay, flat) if flat.ndim > decay.ndim else decay,
                "zero_snapshot": [torch.zeros_like(t) for t in theta],
                "zero_coefficients": torch.zeros(C, L, L, L, dtype=flat.dtype, device=flat.device)}

    def finish_transition(self, state: EQNState, outputs) -> StepInfo:
        moved, flat, grad, value, kinetic = outputs
        write_back(state, moved, flat, grad)
        state.preconditioned_grad = None  # recomputed from the gradient: by the next pure step, or eagerly
        state.step += 1
        scale = state.preconditioner_scale
        return StepInfo(potential=value.detach(), kinetic_energy=kinetic,
                        kinetic_temperature=2.0 * kinetic / chain_numel(state.momentum, state.layout),
                        extra={"preconditioner_scale": torch.ones_like(kinetic) if scale is None else scale})

EQN.__doc__ = EQN.__doc__.replace("{warmup}", WARMUP_DOC.replace(
    '"auto" is "diagonal" when ``step_size="auto"``',
    '"auto" is "layer" with several walkers (one mass per parameter\n'
    "        tensor, the walkers' mean; :meth:`preconditioner_mode`) and \"diagonal\"\n"
    '        with one when ``step_size="auto"``'))
