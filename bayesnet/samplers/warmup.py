"""Warm-up: a diagonal mass matrix and a step size adapted during burn-in, then frozen.

Every sampler that takes ``step_size="auto"`` or ``preconditioner="diagonal"`` (or ``"layer"``) is warmed up
the same way, in windows after Stan's (Carpenter et al. 2017; Hoffman and Gelman 2014):

1. **Start.** At the first step the mass ``M`` is set to the absolute Hessian diagonal at the starting
   point (estimated from Hessian-vector products with random sign vectors, Bekas et al. 2007), and the step
   size from the curvature it leaves (below).
2. **Windows.** The warm-up's ``W`` steps (the run's burn-in) are cut into an initial window (15 %), a
   sequence of windows that double in length, and a final window (10 %) (:func:`windows`). Over each window
   every member accumulates the first and second moments of its gradient ``g`` and of its position
   ``theta``. At the end of each doubling window the mass becomes, per coordinate,
   ``M_i = sd(g_i) / sd(theta_i)``: the curvature linking the gradient's spread to the position's. For a
   quadratic potential it is exactly the Hessian's diagonal whether or not the chain has reached equilibrium,
   and it needs no knowledge of the temperature; mini-batch noise in ``g`` adds to it, which slows the noisiest
   coordinates. (Li et al. 2016's pSGLD and Wenzel et al. 2020's layer-wise preconditioner use the square root
   of ``E[g_i^2]``; measured on the defaults panel, the secant estimate mixed faster and its step size was
   more stable across feature scales.) With ``preconditioner="layer"`` each parameter tensor gets the mean
   of its entries. A regressor's noise variance that lags above its conditional is then drawn from it, given
   the network's outputs on the last mini-batches (:func:`settle_likelihood`; samplers at temperature 1), and
   the step size is set anew. The secant rule fails for such a likelihood parameter (its gradient noise dwarfs
   its curvature, so it barely moves and its mass grows): once the step is set, its mass is the lightest its own
   mini-batch noise, read off the residuals, allows at that step, where that noise limits it
   (:func:`likelihood_mass`).
3. **Frozen.** After ``W`` steps the mass and step size no longer change, so the kept draws come from one
   fixed kernel: a constant preconditioner needs no correction term (the ``Gamma`` of Li et al. 2016, eq. 4),
   and each sampler stays exact for its target.

The step size. With that mass the preconditioned Hessian ``m^{1/2} H m^{1/2}`` (``m = M^{-1}``) has curvatures of
order one in every well-determined direction, whatever the features' scales and the data size, so one
dimensionless rule serves all problems. At each window's end the warm-up measures, per member, the largest
preconditioned curvature ``lambda`` by power iteration on finite-difference Hessian-vector products over the last
``N_BATCHES`` mini-batches (the same batch on both sides of each difference, so that it is a curvature and not
noise; the largest over the batches; for the step the warm-up freezes at, set at the final window's start, at
least ``SPOT_SHARE`` (half) of the largest curvature at up to ``N_SPOTS`` positions the member held over the
window before, since a step set where the potential happens to be flat is too large for the rest of the typical
set, and there it needs to be stable, not to keep the rule's margin), and the mini-batch noise ``rho`` of the
gradient, the mean over coordinates of its variance times the inverse mass (``noise_fraction``, a variance whatever
the name; from the gradients of each batch's two halves; 0 on the full data); a
kernel preconditioned beyond the mass (eqn's walkers' covariance) sets that preconditioner first and has both
measured through it (:meth:`~bayesnet.samplers.Sampler.prepare_step_size`). A regressor's data term curves as
``1 / sigma^2``, with ``sigma`` sampled: the curvature is scaled to the window's mean of that weight (the likelihood's
``curvature_weight``, read at every guard check) over its value at the measurement, where that is above one (and
to at most ``MAX_GROWTH`` times the previous window's curvature, never below the measurement: the factor scales
the prior's share too), so that a chain that let ``sigma`` grow is not given a step for a data term it has
flattened (:func:`_typical_curvature`). The sampler turns them into its step size
(:meth:`~bayesnet.samplers.Sampler.warmup_step_size`): stable (``step * lambda`` below a constant) and cool (the
heat the gradient noise adds, ``step * rho / 2`` for SGLD, ``step * rho / (2 friction)`` for SGHMC, below ``HEAT``
= 5 % of the temperature). The initial window, and a later one after which a member was still descending (its
potential fell from the window's first half to its second by more than its equilibrium spread), take the stable
step whatever the noise, up to the final window's start: far from the typical set the gradient's noise is far
larger than there (the residuals are), and a step kept cool where a chain starts crawls and keeps it there. A step may
grow at most ``MAX_GROWTH`` times per window, not after a window shorter
than ``MIN_WINDOW`` steps, and not into the final window; a window whose second half ran hot (kinetic temperature
above ``1 + HOT`` times the target, beyond the chance fluctuation of a mean of ``D`` squares, while the potential
was not still descending) halves it.

Guards, so that no chain is lost to a bad estimate:

- a zero, tiny or non-finite mass entry never becomes a divisor: entries are floored at ``MASS_FLOOR``
  times the member's median, a non-finite one keeps its previous mass, and a member with no valid entry keeps
  its previous mass (or unit mass); a non-finite curvature keeps the previous step size;
- every ``guard_every`` steps, a member whose potential or position went non-finite, whose kinetic
  temperature ran above ``GUARD_HEAT`` times its target while its energy (potential plus kinetic) did not stay
  below its fallback's potential (a chain descending from far above its typical set turns the potential it loses
  into heat; one diverging gains energy: :func:`_descending`), or whose potential rose above its fallback's by
  ``RISE`` (100) times the fallback's size plus ``D`` times the temperature (a kernel without momenta shows a
  divergence no other way), is put back to its fallback with half its step size and fresh momenta
  (:func:`guard`); its window's moments do not set its mass. The fallback is
  the position at the last check where the member ran cool, or where it was descending and its mean potential over
  the interval was below the fallback's by the potential's equilibrium spread, once the next step's potential (the
  position's own, for the kernels that report the potential they moved from) is finite and has not risen so
  (:func:`_confirm`);
- the thermostat kernels (sgnht, tacthmc) cap their thermostat's ``z`` at ``WARMUP_MAX_FRICTION`` (1) before the
  guard's first verdict on a member and while its last check found it hot but descending (a descent's heat pumps
  ``z`` far above it at once: the papers' Euler friction step ``(1 - z) r``, tacthmc's with
  ``friction_step="euler"``, then reverses and amplifies the momenta, the exact flow ``e^-z r`` of sgnht and of
  tacthmc's default stops them until ``z`` sinks back, by at most ``eta T / gamma`` a step), and a
  member whose ``z`` left ``THERMOSTAT_RANGE`` (-1 to 1.5) at any step is restarted at the next check like a hot
  one: the thermostat's early sign of a step it cannot keep (:func:`clamp_friction`);
- a member restarted in the final window, or whose final window ran hot, freezes at half the step it tried
  there, and the warm-up reports that it did not settle (the estimators raise a ``ConvergenceWarning`` that
  names ``burn_in``), as it does for a warm-up shorter than ``MIN_SETTLED`` steps and for members frozen at a
  step below ``STUCK_STEP_RATIO`` of the members' median or of the step their rule gives.

Every decision is per member, and every random number is drawn from each chain's own stream whether or not it
is used, so that a chain never depends on the chains beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor

from .estimates import (_per_member_reduce, curvature, mask_like, diagonal_curvature, flatten, mass_from_moments, member_mask, member_view,
                        noise_fraction, regrad, views)

__all__ = ["Preconditioner", "WarmUp", "windows", "member_view", "flatten", "views", "regrad", "mass_from_moments",
           "HEAT", "WARMUP_DOC"]

#: the heat the mini-batch gradient noise may add at the warmed-up step size (5 % of the temperature)
HEAT = 0.05
#: the most a step size may grow from one window to the next (the curvature is measured at one point)
MAX_GROWTH = 16.0
#: a window shorter than this many steps neither sets the mass (too few gradients) nor lets the step grow
MIN_WINDOW = 20
#: a warm-up shorter than this many steps has not settled (its last windows are too short to estimate from)
MIN_SETTLED = 200
#: a member whose frozen step is below this fraction of the median member's, or of the step its rule gives for the last
#: measured curvature, has not settled (:func:`after_step`)
STUCK_STEP_RATIO = 1e-3

#: the warm-up parameters' docstring, shared by the samplers that take them
WARMUP_DOC = """    preconditioner : {"auto", "diagonal", "layer"} or None, default="auto"
        The diagonal mass matrix ``M`` adapted during the warm-up
        (:mod:`bayesnet.samplers.warmup`): one entry per parameter
        ("diagonal") or one per parameter tensor ("layer"), from the
        spreads of the gradients and positions (the secant rule
        ``sd(g) / sd(theta)``), frozen afterwards. None is the identity.
        "auto" is "diagonal" when ``step_size="auto"`` and None when a step
        size is given, so that an explicit step keeps its meaning (the
        papers' settings).
    adaptation_steps : int or "auto", default="auto"
        Length of the warm-up in steps; "auto" is the estimators' burn-in
        (the run plan's), and 0 for a kernel used without a plan. The kept
        draws must come after it (the estimators' burn-in does that)."""


@dataclass
class Preconditioner:
    """The adapted quantities a kernel reads: each member's step size and the diagonal inverse mass.

    Attributes
    ----------
    step_size : Tensor, shape (S,) or ()
        Per member, in the sampler's own step-size units.
    inverse_mass : Tensor or None
        ``m = M^{-1}`` as one buffer laid out as the momenta (:func:`flatten`); None is the identity.
    version : int
        Incremented whenever either changes (kernels cache what they derive from them).
    """

    step_size: Tensor
    inverse_mass: Tensor | None = None
    version: int = 0

    def per_coordinate(self, factor: Tensor | float, power: float, template: Tensor) -> Tensor:
        """``factor * m ** power`` as a buffer shaped like ``template`` (a flat buffer), ``factor`` per member
        (shape ``()`` or ``(S,)``) or a float: the kernels' per-coordinate step and noise scales."""
        f = torch.as_tensor(factor, dtype=template.dtype, device=template.device)
        f = f.reshape(f.shape + (1,) * (template.ndim - f.ndim))
        if self.inverse_mass is None:
            return f.expand_as(template).contiguous()
        m = self.inverse_mass if power == 1.0 else self.inverse_mass.pow(power)
        return (f * m).contiguous()


def windows(n_steps: int) -> list[int]:
    """The steps at which the warm-up sets the mass and step size anew, in order: the end of the initial
    window (15 %), of each doubling window (25, 50, 100, ... steps, the last stretched to the final window),
    of the final window's start (90 %), and ``n_steps`` itself, where the warm-up freezes. Fewer than 20 steps:
    only the freeze (the start's estimates stay)."""
    if n_steps < 20:
        return [n_steps] if n_steps > 0 else []
    first = max(int(0.15 * n_steps), 5)
    final = n_steps - max(int(0.1 * n_steps), 5)
    out, at, size = [first], first, 25
    while at < final:
        nxt = at + size
        if nxt + 2 * size > final:  # the last doubling window runs to the final window's start
            nxt = final
        out.append(nxt)
        at, size = nxt, 2 * size
    return out + [n_steps]


@dataclass
class WarmUp:
    """Warm-up bookkeeping kept in the state while it runs (None once frozen).

    Attributes
    ----------
    n_steps : int
        The warm-up's length ``W``.
    ends : list of int
        Steps at which a window ends (:func:`windows`); the last is ``W``.
    adapt_mass : bool
    adapt_step : bool
        Whether the sampler's step size is set from the curvature (else it is fixed, or tuned by the sampler
        itself on its acceptance rate).
    layerwise : bool
        One mass per parameter tensor (the mean of its moments) instead of one per coordinate.
    moments : list of Tensor or None
        Read-only: the current window's sums of ``g``, ``g^2``, ``theta``, ``theta^2`` (float32), each taken
        about ``origin``, per member and coordinate, shaped like the gradients and positions (views of
        ``sums``; None before the window's first record).
    sums : Tensor or None
        The same sums as one buffer, shape ``(2, n)`` (float32): row 0 the sums of the differences, row 1 of
        their squares, the gradients' and then the positions' coordinates laid end to end tensor by tensor
        (``shapes`` their shapes, the first ``n_grads`` the gradients'). One buffer, so that a record is a few
        whole-buffer operations, not a few per tensor (a small network's warm-up step is mostly launches).
    origin : Tensor or None
        The window's first gradient and position laid out as a row of ``sums`` (their own dtype): the moments
        are sums of the differences from them, so that a coordinate whose mean is far from zero against its
        spread keeps its variance (plain float32 sums of ``theta^2`` lose it once ``|mean| / sd`` is in the
        hundreds).
    count : int
        Gradients summed into ``sums``.
    history : list of Tensor
        The step sizes set at each window's end (per member), for the settling check.
    """

    n_steps: int
    ends: list[int]
    adapt_mass: bool
    adapt_step: bool
    layerwise: bool = False
    started: bool = False
    sums: Tensor | None = None
    count: int = 0
    history: list[Tensor] = field(default_factory=list)
    origin: Tensor | None = None
    shapes: list | None = None
    n_grads: int = 0
    scratch: Tensor | None = None  # the record's copy of the gradient and position (not pickled)
    scratch_views: list | None = None
    curvature: Tensor | None = None
    noise_fraction: Tensor | None = None

    first_only: bool = False
    recorded_step: int = -1
    guard_every: int = 10
    backup: list[Tensor] | None = None
    backup_potential: Tensor | None = None  # per member: the potential at its fallback (see :func:`_confirm`)
    candidate: list | None = None  # the positions a check offers as the new fallback, and the members it offers
    candidate_members: Tensor | None = None  # them for (confirmed at the next step: :func:`_confirm`)
    heat: Tensor | None = None
    heat_count: int = 0
    bad: Tensor | None = None
    pending: list | None = None  # this interval's (second half?, potential, kinetic temperature) per step
    interval_potential: Tensor | None = None  # per member: the mean potential over the last interval (float64)
    n_restarts: int = 0
    window_restarts: int = 0
    restarted: Tensor | None = None  # per member: restarted in the current window
    temperature: float = 1.0  # the sampler's temperature (its lowest; the potential's equilibrium spread)
    n_hot: int = 0  # windows (per member) that ran hot
    recent: list = field(default_factory=list)  # the last mini-batches seen (references, not copies)
    window_start: int = 0
    window_heat: Tensor | None = None  # per member: sum of T_kin / target over the window's second half
    window_heat_count: int = 0
    window_potential: list | None = None  # per member: sums of the potential over the window's two halves
    window_potential_count: list | None = None
    scale_accepted: Tensor | None = None  # per member: the scale moves' summed acceptance fractions
    scale_count: int = 0  # rounds of scale moves made
    window_weight: Tensor | None = None  # per member: sum of the data term's curvature weight at the window's checks
    window_weight_count: int = 0
    spots: list | None = None  # positions kept from the window before the final one (:func:`_keep_spot`)
    hot_descent: Tensor | None = None  # per member: hot at the last check but descending (None: no check yet)
    unsteady: Tensor | None = None  # per member: the kernel's sign of an unstable step since the last check

    def remember(self, batch) -> None:
        """Keep ``batch`` among the last ``N_BATCHES`` seen (a full batch, the same object each step, once)."""
        if not self.recent or self.recent[-1] is not batch:
            self.recent = (self.recent + [batch])[-N_BATCHES:]

    def __getstate__(self):
        # the recent batches are views of the block of rows the estimator's batches are sliced from (up to 4 MiB):
        # pickled as they are, each would carry its whole block; pickle compact copies instead
        state = self.__dict__.copy()
        state["scratch"] = state["scratch_views"] = None  # (rebuilt at the next record; views would not share)
        state["recent"] = [tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in b)
                           if isinstance(b, (tuple, list)) else b for b in self.recent]
        return state

    def record(self, grads: Sequence[Tensor], position: Sequence[Tensor], step: int | None = None) -> None:
        """Add one gradient (and the position it was taken at) to the window's moments: the sums of ``g``,
        ``g^2``, ``theta``, ``theta^2``. A non-finite entry makes its coordinate's sums non-finite, and
        :func:`~bayesnet.samplers.estimates.mass_from_moments` then keeps that coordinate's previous mass (a
        member that went non-finite is put back by the guard, and its window's mass is not used either). With
        ``first_only``, only the first gradient of each step counts (samplers whose later gradients are at
        proposals that may be rejected, e.g. HMC's leapfrog)."""
        if self.first_only and step is not None:
            if step == self.recorded_step:
                return
            self.recorded_step = step
        with torch.no_grad():  # (no graph here: no detach; no per-tensor cleaning of non-finite values)
            values = [*grads, *position]
            if self.sums is None or self.scratch is None:  # a window's first record, or a state just unpickled
                # one buffer (see ``sums``), copied into in one launch: each coordinate's arithmetic is the
                # per-tensor one's, in the same order
                dtype = values[0].dtype
                for x in values[1:]:  # (one dtype in practice; mixed, the widest: nothing is cast down)
                    dtype = torch.promote_types(dtype, x.dtype)
                self.scratch = torch.empty(sum(x.numel() for x in values), dtype=dtype, device=values[0].device)
                self.scratch_views = views(self.scratch, values)
            torch._foreach_copy_(self.scratch_views, values)
            flat = self.scratch
            if self.sums is None:  # a window's first record: its values are the origin of the sums
                self.origin, self.shapes, self.n_grads = flat.clone(), [x.shape for x in values], len(grads)
            elif self.origin is None:  # a state pickled mid-window before the origin existed: plain sums
                self.origin = torch.zeros_like(flat)
            shifted = flat - self.origin  # in the values' dtype, then float32
            if shifted.dtype != torch.float32:
                shifted = shifted.float()
            if self.sums is None:
                self.sums = torch.stack([shifted, shifted * shifted])
            else:
                self.sums[0].add_(shifted)
                self.sums[1].add_(shifted * shifted)
        self.count += 1

    @property
    def moments(self) -> list[Tensor] | None:
        """The window's sums as :func:`~bayesnet.samplers.estimates.mass_from_moments` reads them: ``g``,
        ``g^2``, ``theta``, ``theta^2``, each a list of views shaped like the gradients or positions."""
        if self.sums is None:
            return None
        sizes = [math.prod(shape) for shape in self.shapes]
        first, second = ([c.view(shape) for c, shape in zip(row.split(sizes), self.shapes)] for row in self.sums)
        k = self.n_grads
        return [*first[:k], *second[:k], *first[k:], *second[k:]]

    def __setstate__(self, state):
        # a state pickled mid-window by a version that kept one tensor per sum (``moments`` and ``origin`` as
        # lists in the order [g, g^2, theta, theta^2] and [g, theta]): the same sums in one buffer
        moments = state.pop("moments", None)
        if moments is not None and state.get("sums") is None:
            k = len(moments) // 4
            g1, g2, t1, t2 = (moments[i * k:(i + 1) * k] for i in range(4))
            state["sums"] = torch.stack([torch.cat([x.reshape(-1) for x in g1 + t1]),
                                         torch.cat([x.reshape(-1) for x in g2 + t2])])
            state["shapes"], state["n_grads"] = [x.shape for x in g1 + t1], k
            origin = state.get("origin")
            state["origin"] = None if origin is None else torch.cat([x.reshape(-1) for x in origin])
        self.__dict__.update(state)


class _Watched:
    """The potential, seen through the warm-up: every gradient it returns is recorded."""

    def __init__(self, potential, warmup: WarmUp, step: int):
        self._potential = potential
        self._warmup = warmup
        self._step = step
        self.parameters = potential.parameters

    def value_and_grad(self, batch):
        value, grads = self._potential.value_and_grad(batch)
        self._warmup.record(grads, self._potential.parameters, self._step)
        return value, grads

    def value(self, batch):
        return self._potential.value(batch)

    def __getattr__(self, name):
        return getattr(self._potential, name)


def start(sampler, state, potential, batch) -> None:
    """The warm-up's first step: mass from the Hessian's diagonal at the start, then the first step size."""
    warm = state.warmup
    if warm.adapt_mass:
        diag = diagonal_curvature(potential, batch, state.position, state.layout, state.rng)
        zeros = [torch.zeros_like(d) for d in diag]
        # as a window of one: the "moments" whose estimate is M = diag (see mass_from_moments)
        moments = zeros + [d * d for d in diag] + zeros + zeros
        state.precond.inverse_mass = mass_from_moments(moments, 1, state.layout, warm.layerwise,
                                                       state.position[0].dtype)
        warm.sums, warm.count = None, 0
    _set_step_size(sampler, state, potential, batch)
    warm.backup = [p.detach().clone() for p in state.position]  # the guard's first fallback: the start
    value = getattr(potential, "value", None)
    if value is not None:  # and its potential, which a diverging member's rises far above (see RISE)
        with torch.no_grad():
            u = value(batch).detach().reshape(-1).double()
        if u.numel() == (state.layout.n_members or 1):  # (one per member, as the guard reads it)
            warm.backup_potential = torch.where(torch.isfinite(u), u, torch.full_like(u, math.inf))
    warm.started = True


def _in_second_half(warm: WarmUp, step: int) -> bool:
    """Whether ``step`` lies in the second half of the current window (where its heat is measured)."""
    end = next((e for e in warm.ends if e >= step), warm.n_steps)
    return 2 * (step - warm.window_start) > end - warm.window_start


#: the guard's fallback position is renewed only for members whose kinetic temperature averaged below this
#: multiple of the target over the interval
BACKUP_HEAT = 1.5


def _per_member(flags: Tensor, S: int) -> Tensor:
    """A per-member bool tensor ``(S,)`` from one with a value per member or a single value."""
    flags = flags.reshape(-1)
    return flags if flags.numel() == S else flags.any().expand(S)


#: a window whose second half ran this much above the target kinetic temperature on average (besides the
#: chance fluctuation of a mean of D squares) ran too hot: its step was too large for the region the chain
#: moved into (the curvature was measured at the window's start)
HOT = 0.1


def _too_hot(warm: WarmUp, n_coordinates: int, shape) -> Tensor | None:
    """Per member, whether the window's second half ran hot (None when nothing was measured)."""
    if warm.window_heat is None or warm.window_heat_count == 0:
        return None
    mean = warm.window_heat / warm.window_heat_count
    tolerance = HOT + 2.0 * math.sqrt(2.0 / max(n_coordinates, 1))
    hot = mean > 1.0 + tolerance
    descending = _window_descending(warm, n_coordinates)
    if descending is not None:
        # a chain still descending to its typical set runs warm while the friction removes the potential energy
        # it loses: not hot
        hot = hot & ~descending
    return hot.reshape(shape) if len(shape) else hot.any().reshape(())


def _window_descending(warm: WarmUp, n_coordinates: int, spreads: float = 1.0) -> Tensor | None:
    """Per member, whether the window's potential fell from its first half to its second by more than
    ``spreads`` times the potential's equilibrium spread (``sqrt(D / 2)`` times the temperature): a chain still on
    its way to its typical set (None when the window measured no potential in one of its halves)."""
    sums, counts = warm.window_potential, warm.window_potential_count
    if sums is None or min(counts) == 0:
        return None
    drop = sums[0] / counts[0] - sums[1] / counts[1]
    return drop > spreads * math.sqrt(max(n_coordinates, 1) / 2.0) * warm.temperature


#: a final window whose potential still fell by this many equilibrium spreads ``sqrt(D / 2)`` from its first half
#: to its second had not reached the typical set when the kernel froze (:func:`after_step`). Four, not the one
#: that exempts a descending window from running hot: two 50-step means of a slowly mixing chain differ by about a
#: spread or two by chance (default classifiers and regressors of the panel, seeds 0-2 of breast cancer, iris,
#: wine and diabetes: -1.1 to 3.5 spreads, sd about 1.5; the regressors of y = sin(2x) that diverged after the
#: freeze: 4.4 to 7.3)
FINAL_DESCENT = 4.0


#: mini-batches the step size is measured on at a window's end: the last ones the chain saw
N_BATCHES = 4


def _last_batches(warm: WarmUp, batch) -> list:
    """``batch`` and the ``N_BATCHES - 1`` mini-batches seen before it (the warm-up's measurements' rows)."""
    return [b for b in warm.recent if b is not batch][-(N_BATCHES - 1):] + [batch]


def _measure(warm: WarmUp, potential, batch, state, inverse_mass,
             transform=None) -> tuple[Tensor, Tensor | None, list]:
    """The largest preconditioned curvature and the noise fraction, per member, over the last ``N_BATCHES``
    mini-batches: the largest curvature (a mini-batch's Hessian is what a step meets, and its largest
    eigenvalue varies from batch to batch, by 50 % on a 64-row batch of a small network), the mean noise
    fraction. The power iteration on each further batch starts from the previous one's vector. ``transform``:
    the kernel's preconditioner beyond the mass (:meth:`~bayesnet.samplers.Sampler.prepare_step_size`),
    applied on both sides of the Hessian. Also returns the power iteration's last vector."""
    batches = _last_batches(warm, batch)
    lams, rhos, v = [], [], None
    for k, b in enumerate(reversed(batches)):
        lam, v = curvature(potential, b, state.position, inverse_mass, state.layout, state.rng,
                           n_iter=10 if k == 0 else 4, start_vector=v, return_vector=True, transform=transform)
        lams.append(lam)
        rho = noise_fraction(potential, b, inverse_mass, state.layout, transform)
        if rho is not None:
            rhos.append(rho)
    lam = torch.stack(lams).max(dim=0).values
    return lam, (torch.stack(rhos).mean(dim=0) if rhos else None), v


#: positions kept from the window before the final one, where the curvature is measured too before the step size
#: the warm-up freezes at is set (:func:`_keep_spot`)
N_SPOTS = 12
#: the share of the largest curvature at those positions the frozen step must allow for: they need the step to be
#: stable, not the rule's margin (each sampler's rule keeps it at least 4x inside its stability limit: baoab's
#: ``h^2 lambda = 1`` against 4, sghmc's ``eta lambda = 0.3`` against 4), so the step changes only where the
#: curvature there is more than twice the one measured at the window's end, not for the scatter of the power
#: iteration's estimates (measured: with the full curvature, MNIST-1D's default CNN lost about a point of accuracy)
SPOT_SHARE = 0.5


def _keep_spot(warm: WarmUp, step: int) -> None:
    """At a guard check in the window before the final one, keep the fallback positions (each member's last cool
    position) at ``N_SPOTS`` points spread evenly over the window (when the step size is adapted: nothing reads
    them otherwise). The frozen step size allows for ``SPOT_SHARE`` of the largest curvature over these, besides
    the curvature at the final window's start: measured at one point, a member that sat in a flat region got a
    step too large for the rest of its typical set (a banana target: 27 of 128 baoab chains that froze at
    0.6-0.76 near its centre blew up in its arms after the warm-up, while it reported settled)."""
    if not warm.adapt_step or len(warm.ends) < 3 or not warm.ends[-3] < step < warm.ends[-2]:
        return
    spots = warm.spots if warm.spots is not None else []
    length = warm.ends[-2] - warm.ends[-3]
    if len(spots) < N_SPOTS and step - warm.ends[-3] >= (len(spots) + 1) * length / (N_SPOTS + 1):
        spots.append(warm.backup)  # (a fresh list of fresh tensors at every check: never changed in place)
    warm.spots = spots


@torch.no_grad()
def _curvature_at_spots(warm: WarmUp, potential, batch, state, inverse_mass, transform, lam: Tensor,
                        vector: list) -> Tensor:
    """``lam`` raised, per member, to ``SPOT_SHARE`` times the largest curvature at the kept positions
    (:func:`_keep_spot`), each measured on ``batch`` by a power iteration started from ``vector`` (so that it draws
    no random numbers); a position where the curvature is not finite is passed over. The positions are restored
    bit for bit."""
    spots, warm.spots = warm.spots, None
    if not spots:
        return lam
    here = [p.detach().clone() for p in state.position]
    try:
        for spot in spots:
            for p, q in zip(state.position, spot):
                p.copy_(q)
            at = curvature(potential, batch, state.position, inverse_mass, state.layout, state.rng, n_iter=4,
                           start_vector=vector, transform=transform)
            at = SPOT_SHARE * at.to(lam.dtype)
            lam = torch.maximum(lam, torch.where(torch.isfinite(at), at, torch.zeros_like(lam)))
    finally:
        for p, q in zip(state.position, here):
            p.copy_(q)
    return lam


def _set_step_size(sampler, state, potential, batch) -> None:
    warm, pre = state.warmup, state.precond
    if not warm.adapt_step:
        # (a kernel's own preconditioner still follows the warm-up it was started with: eqn's B_i, when an
        # explicit step replaced the adapted one in a continued fit; None and nothing done otherwise)
        sampler.prepare_step_size(state)
        pre.version += 1
        sampler.preconditioner_changed(state)
        return
    transform = sampler.prepare_step_size(state)
    lam, rho, vector = _measure(warm, potential, batch, state, pre.inverse_mass, transform)
    # the step the warm-up freezes at (the final window's start, the first measurement after positions were kept)
    lam = _curvature_at_spots(warm, potential, batch, state, pre.inverse_mass, transform, lam, vector)
    lam = _typical_curvature(warm, potential, lam)
    warm.curvature, warm.noise_fraction = lam, rho
    lam = lam.to(pre.step_size.dtype)
    new = sampler.warmup_step_size(lam, None if rho is None else rho.to(pre.step_size.dtype))
    # (at the start, before any window: the initial window is where a chain descends from its start, Stan's
    # "initial fast interval")
    descending = torch.ones((), dtype=torch.bool, device=new.device) if not warm.history \
        else _window_descending(warm, _coordinates(state))
    if rho is not None and descending is not None and len(warm.ends) >= 2 and state.step != warm.ends[-2]:
        # a member still descending to its typical set gets the stable step whatever the gradient's noise, until
        # the final window's start (whose step is frozen, and is set by the full rule): far from the typical set
        # the mini-batch gradients' noise is far larger (the residuals are), and a step kept cool there crawls,
        # so the chain stays where the noise is large (measured: a linear regression on 500 rows with batches of
        # 50, started 50 posterior sd out, sgld's step held at 0.002 and R-hat 15 after 2,000 warm-up steps). The
        # window runs hot; the next, nearer the typical set, measures a smaller noise
        stable = sampler.warmup_step_size(lam, None)
        if descending.numel() != new.numel():  # (a step per chain, members packed chain major; or one step)
            descending = descending.reshape(new.numel(), -1).all(1) if descending.numel() % new.numel() == 0 \
                else descending.all().expand(new.shape)
        new = torch.where(descending.reshape(new.shape), stable, new)
    new = torch.where(torch.isfinite(new) & (new > 0), new, pre.step_size)
    hot = _too_hot(warm, _coordinates(state), new.shape)
    if hot is not None and not sampler.tunes_step_on_acceptance:  # a window that ran hot: half its step at most
        new = torch.where(hot, torch.minimum(new, pre.step_size / 2), new)
        warm.n_hot += int(hot.sum())
    if warm.history and not sampler.tunes_step_on_acceptance:
        # a step may grow by at most MAX_GROWTH (16x) per window, and not at all after a window that needed restarts (its
        # curvature estimate, a lower bound, was already too low there)
        # (nor into the final window, which only tries the step it freezes at)
        grows = state.step - warm.window_start >= MIN_WINDOW and state.step != warm.ends[-2:][0]
        growth = torch.full_like(new, MAX_GROWTH if grows else 1.0)
        if warm.restarted is not None:  # per member, so that a chain never depends on the others
            growth = torch.where(mask_like(warm.restarted, new), torch.ones_like(new), growth)
        new = torch.minimum(new, growth * pre.step_size)
    pre.step_size = new
    warm.history.append(new.detach().clone())
    likelihood_mass(sampler, state, potential, batch, transform)
    pre.version += 1
    sampler.preconditioner_changed(state)


#: a member whose potential rose above its fallback's by more than this many times the fallback's size plus ``D``
#: times the temperature (twice the potential's typical excess over its minimum, ``D / 2`` at unit temperature) is
#: diverging, with or without momenta: a kernel without them (SGLD) has no kinetic temperature to show it, and on a
#: banana target its chains ran out to 1e145 through finite potentials, each such position becoming their fallback.
#: A chain in equilibrium moves by about ``sqrt(D / 2)``, one descending from its start falls, and one tempered to
#: a temperature ``T`` (tacthmc's tempering variable, up to 9 in the paper's well) rises by about ``(T - 1) D / 2``
RISE = 100.0

#: a member whose kinetic temperature averages above this multiple of its target over a guard interval, or ends it
#: above it while its energy is not falling (:func:`_descending`), or whose potential or position is not finite, is put
#: back and its step size halved. A chain far from its typical set heats while its excess potential energy turns
#: kinetic and the friction removes it (hundreds of times its target, started 50 sd out); an unstable step heats it
#: exponentially, past this within a few steps, and feeds its energy
GUARD_HEAT = 5.0

#: the most a thermostat's friction step may take off the momenta during the warm-up: the Euler step
#: ``r <- (1 - z) r`` (Ding et al. 2014; Luo et al. 2018 Alg. 1 line 10; tacthmc's ``friction_step="euler"``)
#: reverses and amplifies the momenta once ``z > 1`` (diverges once ``z > 2``); the exact flow ``e^-z r`` of sgnht and
#: of tacthmc's default (since 2026-11-29) stops them, and a ``z`` pumped high stays high for ``z / (eta T / gamma)``
#: steps. A chain started far from the mode
#: meets that at its first steps: the descent's heat, hundreds of times the target temperature, pumps ``z`` by
#: ``eta (T_kin - T) / gamma`` per step (measured: 61 after one step on a linear regression 40-100 sd out, 1e15
#: three steps later, the guard's restarts halving the step to 1e-6). Clamped at 1 while warming up the momenta are
#: at most stopped, the chain descends as a gradient step with noise, and the thermostat sinks back to
#: equilibrium (by up to ``eta T / gamma`` a step) once the descent ends; at equilibrium ``z`` is near ``noise``
#: (0.05) and the clamp never acts. The kept steps, after the freeze, run the thermostat as published.
WARMUP_MAX_FRICTION = 1.0

#: the range a thermostat's ``z`` stays in at a stable step (the Euler friction step ``1 - z`` neither reverses the
#: momenta by more than half nor amplifies them by more than 2x; the exact flow ``e^-z`` neither amplifies them by
#: more than 2.7x nor takes off more than 78 %): outside it at any warm-up step, the member is
#: restarted at the guard's next check with half its step (:func:`thermostat_unsteady`)
THERMOSTAT_RANGE = (-1.0, 1.5)


def thermostat_unsteady(z: Tensor) -> Tensor:
    """Per chain, whether the thermostat ``z`` is outside :data:`THERMOSTAT_RANGE`: the early sign of a step too
    large for the thermostat's Euler update (Ding et al. 2014), whose fluctuation ``eta sqrt(2 / D) / gamma`` grows
    with the step and shrinks with the dimension. Measured on a D-dimensional standard Gaussian, 64 chains of sgnht
    at a fixed step, 1,000 steps: at D = 4 none diverged at steps up to 0.2 (``z`` left the range in 0-5 chains),
    11, 39 and 64 at 0.25, 0.3 and 0.4, each after ``z`` had left the range (a median of 40-90 steps before); at
    D = 16 none up to 0.3, 23 at 0.4 (leaving it 320 steps before); at D = 256 none up to 0.4. Divergences that take
    longer than the warm-up's final window to build up otherwise froze unnoticed: sgnht chains whose every window's
    step was 10x the rule's froze at 2.5x it and diverged after the freeze under a settled report, on 2-6 seeds of
    12. With sgnht's friction as its exact flow (2026-11-29) the same runs diverge in none of 64 chains at any of
    these steps up to 1.0, but the thermostat still leaves the range at the steps too large for the target (D = 4:
    in 2, 22, 57 and 64 chains at 0.2, 0.25, 0.3 and 0.4; D = 16: 51 at 0.4, where the variance came out 1.22
    against 1; D = 256: all at 0.6, variance 1.22), so it still marks a step to halve (for tacthmc's exact flow
    too; its final window caps a chain brought back hot, :data:`~bayesnet.samplers.tacthmc.HOT_RETURN`)."""
    lo, hi = THERMOSTAT_RANGE
    return (z < lo) | (z > hi)


def clamp_friction(state, z: Tensor) -> Tensor:
    """A thermostat's ``z`` (one per chain, or 0-d) during the warm-up, with :data:`WARMUP_MAX_FRICTION` as its
    ceiling for the members the warm-up has not yet seen cool: before its first verdict (a chain's first steps), and
    where its last check found the member hot while descending (:func:`_descending`). Elsewhere ``z`` as it is: the
    warm-up then sees the kernel the kept steps run, whose thermostat diverges at a step too large (measured: clamped
    at every warm-up step, sgnht froze at twice the step the guard's restarts otherwise find, on a 4-D regression at
    mini-batches, and its chains then diverged 100 steps into sampling). The chains whose ``z`` so returned is outside
    :data:`THERMOSTAT_RANGE` are noted for the guard's next check (:func:`thermostat_unsteady`)."""
    warm = state.warmup
    if warm is None:
        return z
    capped = z.clamp(max=WARMUP_MAX_FRICTION)
    z = capped if warm.hot_descent is None else torch.where(mask_like(warm.hot_descent, z), capped, z)
    out = thermostat_unsteady(z).reshape(-1)
    warm.unsteady = out if warm.unsteady is None else warm.unsteady | out
    return z


def _descending(warm: WarmUp, state, info, t: Tensor, target: float) -> Tensor | None:
    """Per member, whether a chain's energy, potential plus kinetic (``u + D t / 2``), lies below its fallback's
    potential plus ``D`` times the target temperature: a chain descending from far above its typical set (None
    where no fallback's potential is known; the guard asks only where the potentials are per member).

    Such a chain turns the potential energy it loses into heat, which the friction then removes: its kinetic
    temperature runs far above the target (hundreds of times, started 50 posterior sd from the mode), while its
    energy falls. An unstable step heats a chain by feeding its energy, which then grows beyond its fallback's
    (a chain hot by ``GUARD_HEAT`` has a kinetic energy of ``2.5 D T`` already). Measured, 4-D Gaussian target
    started 50 sd out, full batch: without this test, the heat of the descent put baoab's, sgnht's, sghmc's and
    hmc's chains back at their start at every check (61-320 restarts), their steps halved each time; after the
    warm-up the means were 0.015-0.19 against 1.0, reported settled. The slack of ``D T`` over the fallback's
    potential covers its kinetic energy, about ``D T / 2`` at a cool check, and the batches' noise."""
    if warm.backup_potential is None:
        return None
    u = info.potential.detach().reshape(-1).double()  # (one per member: the guard calls it only then)
    D = _coordinates(state)
    energy = u + 0.5 * D * t
    return torch.isfinite(warm.backup_potential) & (energy < warm.backup_potential + D * target)


@torch.no_grad()
def guard(sampler, state, info, potential, batch) -> None:
    """The warm-up's safety net: every ``guard_every`` steps, a member that went non-finite or hot (the step
    size its curvature estimate gave was too large: a power iteration on a mini-batch finds a lower bound) is
    put back where it was at the last check, with half its step size and fresh momenta."""
    warm, layout = state.warmup, state.layout
    target = sampler.target_temperature()
    # a step between checks only keeps references to its statistics (no device work: a small network's step is
    # mostly per-operation overhead); the check reduces the interval's steps at once (_take_interval)
    t = info.kinetic_temperature if info.kinetic_temperature is not None and target else None
    if warm.pending is None:
        warm.pending = []
    warm.pending.append((_in_second_half(warm, state.step), info.potential.detach(),
                         None if t is None else t.detach()))
    S = layout.n_members or 1
    _confirm(warm, state, info, S)
    if state.step % warm.guard_every != 0 and state.step not in warm.ends:  # (checked before a window's update)
        return
    _take_interval(warm, target)
    # positions too: samplers that report the potential from before their move have not evaluated this one
    warm.bad = warm.bad | _per_member_reduce([p.detach() for p in state.position], layout,
                                             lambda x: ~torch.isfinite(x).all(dim=1)).reshape(-1)
    warm_ok = torch.ones(S, dtype=torch.bool, device=warm.bad.device)
    if warm.heat is not None and target:  # hot on average over the interval, or at its last step
        t = info.kinetic_temperature.detach().reshape(-1).double()
        mean = warm.heat / warm.heat_count
        # a mean of D squares fluctuates by sqrt(2/D) about its target: a small network's chain passes 5x on
        # chance alone at a single step, so the thresholds widen by that fluctuation (a few per cent for D ~ 1000)
        spread = math.sqrt(2.0 / _coordinates(state))
        hot = (mean > (GUARD_HEAT + 5.0 * spread) * target) | (t > (GUARD_HEAT + 10.0 * spread) * target)
        warm_ok = _per_member(mean <= (BACKUP_HEAT + 2.0 * spread) * target, S)
        if info.potential.numel() == S and t.numel() == S:
            falling = _descending(warm, state, info, t, target)
        else:  # no potential per member (a summed one): no descent is ever seen, so the thermostats run uncapped
            # from the first check on (capped all warm-up, the guard would accept a step the frozen kernel cannot keep)
            falling, warm.hot_descent = None, torch.zeros(S, dtype=torch.bool, device=t.device)
        if falling is not None:  # a descending chain is not diverging, and where it now is will do as a fallback
            warm.hot_descent = hot & falling
            hot = hot & ~falling  # once its potential over the interval, on average (one step's estimate is a
            # mini-batch's: a reviewer's test with noise of sd 200 in a 4-D potential renewed a fallback 57 sd out
            # on one low estimate), fell below the fallback's by the potential's equilibrium spread
            below = warm.backup_potential - math.sqrt(_coordinates(state) / 2.0) * target
            mean_u = warm.interval_potential
            if mean_u is not None and mean_u.numel() == S:
                warm_ok = warm_ok | (falling & (mean_u < below))
        warm.bad = warm.bad | hot
    if warm.unsteady is not None:  # a kernel's own early sign of an unstable step over the interval
        if warm.unsteady.numel() == S:
            warm.bad = warm.bad | warm.unsteady.reshape(-1)
        warm.unsteady = None
    u = info.potential.detach().reshape(-1)
    if warm.backup_potential is not None and u.numel() == S:
        warm.bad = warm.bad | _risen(warm, state, u.double())
    member_bad = _per_member(warm.bad, S)
    any_bad = warm.backup is not None and bool(member_bad.any())  # the one host synchronisation per interval
    if any_bad:
        warm.n_restarts += int(member_bad.sum())
        warm.window_restarts += int(member_bad.sum())
        warm.restarted = member_bad.clone() if warm.restarted is None else warm.restarted | member_bad
        for p, b in zip(state.position, warm.backup):
            p.copy_(torch.where(member_mask(member_bad, p, layout), b, p))
        pre = state.precond
        pre.step_size = torch.where(mask_like(member_bad, pre.step_size), pre.step_size / 2, pre.step_size)
        pre.version += 1
        sampler.restart_members(state, member_bad, potential, batch)
    # fresh momenta for the restarted members; drawn at every check, so that no chain's stream depends on
    # whether another chain was restarted
    sampler.redraw_momenta(state, member_bad if any_bad else torch.zeros_like(member_bad))
    # the new fallback: the members that ran cool over the interval (a chain on its way out may not be hot yet), or
    # that descended below their fallback's potential on average, once the next step has confirmed it (_confirm)
    warm.candidate = [p.detach().clone() for p in state.position]
    warm.candidate_members = warm_ok & ~member_bad
    warm.heat, warm.heat_count, warm.bad = None, 0, None
    _keep_spot(warm, state.step)
    _weigh(warm, potential)  # (after the restarts: a member put back is weighed where it now is)


def _confirm(warm: WarmUp, state, info, S: int) -> None:
    """The step after a check: the positions it offered (``warm.candidate``) become the fallback of the members it
    offered them for whose potential now is finite and has not risen far above their fallback's (``RISE``).

    A kernel that reports the potential at the position it moved from (SGLD, SGHMC, SGNHT: one gradient per step,
    taken before the move) shows a position's potential one step after reaching it: confirmed at once, a position
    one step into a divergence became the fallback (measured on a banana target: an SGNHT chain's fallback at
    (18.3, -0.7), potential 5.6e4, where the check saw the previous position's 28; every restart then went back
    there and halved the step, to 1e-17 by the warm-up's end). For the others, a one-step-later look at the same
    neighbourhood. (A Gibbs step of the prior or a scale move at the start of that step changes the precisions
    or rescales the layers first: then it is the potential near the position, which serves the same purpose.)"""
    candidate, members, warm.candidate, warm.candidate_members = warm.candidate, warm.candidate_members, None, None
    if candidate is None:
        return
    # (the offered positions are finite: a member whose position was not is restarted by the check, not offered)
    u = info.potential.detach().reshape(-1).double()
    per_member = u.numel() == S  # (else a potential not per member: nothing to confirm the positions by)
    if per_member:
        members = members & torch.isfinite(u)
        if warm.backup_potential is not None:
            members = members & ~_risen(warm, state, u)
    warm.backup = [torch.where(member_mask(members, c, state.layout), c, b) for c, b in zip(candidate, warm.backup)]
    if per_member:
        before = torch.full_like(u, math.inf) if warm.backup_potential is None else warm.backup_potential
        warm.backup_potential = torch.where(members, u, before)  # (a member confirmed here has a finite u)


def _risen(warm: WarmUp, state, u: Tensor) -> Tensor:
    """Per member, whether the potential ``u`` rose far above its fallback's (``RISE``)."""
    excess = _coordinates(state) * warm.temperature
    return (u - warm.backup_potential) > RISE * (warm.backup_potential.abs() + excess)


def _weigh(warm: WarmUp, potential) -> None:
    """Add the data term's curvature weight (:meth:`~bayesnet.posterior.ChainPosterior.curvature_weight`) at this
    check to the window's sum, for :func:`_typical_curvature`."""
    weigh = getattr(potential, "curvature_weight", None)
    w = None if weigh is None or not warm.adapt_step else weigh()
    if w is None:
        return
    w = torch.nan_to_num(w.double(), nan=0.0, posinf=0.0)  # (a member gone non-finite is put back by the guard)
    warm.window_weight = w if warm.window_weight is None else warm.window_weight + w
    warm.window_weight_count += 1


def _typical_curvature(warm: WarmUp, potential, lam: Tensor) -> Tensor:
    """``lam``, measured at the current position, scaled to the window's typical noise level: by the window's mean
    of the data term's curvature weight over its value here, where that is above one, and to at most
    ``MAX_GROWTH`` times the previous window's curvature (or ``lam`` itself, where that is larger).

    A regressor's data term curves as ``1 / sigma^2``, and ``sigma`` is sampled with the weights: a chain that ran
    warm let ``sigma`` grow, the data's curvature fall with ``1 / sigma^2``, and a step set there grows, heating
    the chain further (measured: 10 diabetes rows, ``log sigma^2`` at 19 at a window's end against about -3 over
    the window, a step 30x the stable one, a divergence after the freeze). Measured where the chain sits at its
    typical noise level, the factor is about one. The factor scales the prior's share of ``lam`` too, which does
    not depend on sigma: where the data term is all but switched off the prior dominates ``lam`` and the factor
    overshoots (measured: 1.8e7 on 10 diabetes rows, a step of 4e-9 frozen for the run), hence the bound, the
    mirror of a step's growth limit."""
    weigh = getattr(potential, "curvature_weight", None)
    if weigh is None or warm.window_weight is None or warm.window_weight_count == 0:
        return lam
    now = weigh()
    if now is None:
        return lam
    mean = warm.window_weight / warm.window_weight_count
    factor = torch.where(torch.isfinite(now) & (now > 0), mean / now.double(), torch.ones_like(mean))
    scaled = lam * factor.clamp_min(1.0).to(lam.dtype).reshape(lam.shape)
    previous = warm.curvature if warm.curvature is not None else lam
    bound = torch.maximum(lam, MAX_GROWTH * previous.to(lam.dtype).reshape(lam.shape))
    return torch.where(torch.isfinite(bound), torch.minimum(scaled, bound), lam)  # (no bound known: unscaled)


def _take_interval(warm: WarmUp, target: float) -> None:
    """Reduce the steps kept since the last check (``warm.pending``) into the check's flags and sums: per member,
    ``bad`` (a non-finite potential or kinetic temperature), ``heat`` (the summed kinetic temperatures,
    non-finite values replaced; ``heat_count`` steps), and the window's potential sums over its two halves
    and heat over its second half (for :func:`_too_hot`)."""
    pending, warm.pending = warm.pending or [], None
    if not pending:
        return
    halves = [h for h, _, _ in pending]
    u = torch.stack([v.reshape(-1) for _, v, _ in pending]).double()  # (steps, S)
    bad = ~torch.isfinite(u).all(0)
    u = torch.nan_to_num(u, nan=0.0, posinf=1e300, neginf=-1e300)
    warm.interval_potential = u.mean(0)
    if warm.window_potential is None:
        warm.window_potential = [torch.zeros_like(u[0]), torch.zeros_like(u[0])]
        warm.window_potential_count = [0, 0]
    n_late = sum(halves)  # steps in the window's second half
    n_early = len(halves) - n_late
    if halves == [False] * n_early + [True] * n_late:  # (an interval ends at every window end): slices, which
        early, second = slice(0, n_early), slice(n_early, None)  # need no index copied to (and waited for on) a GPU
    else:
        second = torch.as_tensor(halves, device=u.device)
        early = ~second
    for half, rows, n in ((0, early, n_early), (1, second, n_late)):
        if n:
            warm.window_potential[half] = warm.window_potential[half] + u[rows].sum(0)
            warm.window_potential_count[half] += n
    if pending[0][2] is not None:
        t = torch.stack([v.reshape(-1) for _, _, v in pending]).double()
        bad = bad | ~torch.isfinite(t).all(0)
        heat = torch.nan_to_num(t, nan=0.0, posinf=1e300)
        warm.heat = heat.sum(0) if warm.heat is None else warm.heat + heat.sum(0)
        warm.heat_count += len(pending)
        if n_late:
            late = (heat[second] / target).sum(0)
            warm.window_heat = late if warm.window_heat is None else warm.window_heat + late
            warm.window_heat_count += n_late
    warm.bad = bad if warm.bad is None else warm.bad | bad


def _coordinates(state) -> int:
    """Coordinates per member (the ``D`` of its kinetic temperature)."""
    return sum(p.numel() for p in state.position) // (state.layout.n_members or 1)


def after_step(sampler, state, potential, batch) -> None:
    """At a window's end: new mass (from the window's moments) and step size; at the warm-up's end, freeze."""
    warm = state.warmup
    step = state.step
    if step not in warm.ends:
        return
    if warm.adapt_mass and warm.count >= MIN_WINDOW and step != warm.ends[-1]:
        previous = state.precond.inverse_mass
        new = mass_from_moments(warm.moments, warm.count, state.layout, warm.layerwise, state.position[0].dtype,
                                previous)
        if warm.restarted is not None and previous is not None:  # a window that needed a restart has moments
            new = torch.where(member_mask(warm.restarted, new, state.layout), previous, new)  # from the way out
        state.precond.inverse_mass = new
    warm.sums, warm.count = None, 0
    if step != warm.ends[-1]:
        if settle_likelihood(sampler, state, potential):  # (before the step size: the noise sets the curvature)
            sampler.reset_cache(state)
        _set_step_size(sampler, state, potential, batch)
        warm.window_restarts, warm.restarted = 0, None
        warm.window_start, warm.window_heat, warm.window_heat_count = step, None, 0
        warm.window_weight, warm.window_weight_count = None, 0
        warm.window_potential = warm.window_potential_count = None
        return
    final_hot = _too_hot(warm, _coordinates(state), state.precond.step_size.shape)
    # still descending at the freeze: the fit was still improving (a noise-free target's noise variance follows it),
    # and its data term stiffens past the step measured at the final window's start. Measured on a default
    # regressor of y = sin(2x) on 200 rows (seeds 0-23): 5 of 24 fits diverged after the freeze, 1 with those
    # chains' steps halved, none with a burn-in of 3,000 steps (benchmarks/README.md, "Still descending at the
    # freeze")
    # Only where the potential is per member (a sum over the members varies sqrt(S) times more than one member's
    # spread: a reviewer's healthy sghmc chains, 64 of them on a summed Gaussian, were called descending on 3 of 10
    # seeds), and only for a warm-up long enough to settle at all (a shorter one has no final window of its own:
    # its "final window" is its descent from the start, and it is reported unsettled already)
    final_descent = _window_descending(warm, _coordinates(state), FINAL_DESCENT) \
        if warm.adapt_step and not sampler.tunes_step_on_acceptance and warm.n_steps >= MIN_SETTLED else None
    if final_descent is not None and final_descent.numel() == (state.layout.n_members or 1):  # (one per member)
        final_descent = mask_like(final_descent, state.precond.step_size)
        if not bool(final_descent.any()):
            final_descent = None
    else:
        final_descent = None
    # frozen from here on. The last step size was set at the final window's start and tried there; a member the
    # guard restarted in that window freezes at a quarter of the step that failed (half of the halved one), one
    # whose final window ran hot or was still descending at half of it. A warm-up shorter than MIN_SETTLED steps,
    # or one with restarts, heat or a descent in its final window, has not settled (the estimators warn)
    hot_final = final_hot is not None and bool(final_hot.any()) and warm.adapt_step \
        and not sampler.tunes_step_on_acceptance
    settled = warm.n_steps >= MIN_SETTLED and warm.window_restarts == 0 and not hot_final and final_descent is None
    pre = state.precond
    failed = torch.zeros_like(pre.step_size, dtype=torch.bool)
    if warm.adapt_step and not sampler.tunes_step_on_acceptance:
        if warm.restarted is not None:
            failed = failed | mask_like(warm.restarted, pre.step_size)
        if final_hot is not None:  # the final window ran hot: its step, halved
            failed = failed | final_hot
            warm.n_hot += int(final_hot.sum())
        if final_descent is not None:  # still descending: its step, halved
            failed = failed | final_descent
        pre.step_size = torch.where(failed, pre.step_size / 2, pre.step_size)
        pre.version += 1
    # the failed members' momenta drawn afresh at their new step (drawn for all, used for them: no chain's
    # stream depends on the others)
    sampler.redraw_momenta(state, failed.reshape(-1) if failed.ndim else failed.reshape(1))
    sampler.warmup_frozen(state)
    # members frozen at a vanishing step (repeated halvings after restarts far out in a tail: on a banana target
    # 2 of 128 sgnht chains froze at 6e-12 against about 0.1 for the others, and never moved again) have not
    # settled either; judged against the other members, so only with several (one chain of an estimator: none)
    stuck = 0
    sizes = pre.step_size.detach().reshape(-1)
    if warm.adapt_step and sizes.numel() >= 4:
        stuck = int((sizes < STUCK_STEP_RATIO * sizes.median()).sum())
    # or frozen at a step below that fraction of the one their curvature gives (the rule, uncapped, at the final
    # window's start): all members together too, or the one chain (a reviewer's test: sghmc chains started 50 sd
    # out with a step 3x the rule's every window were all frozen at steps near 0, 39 sd out, and reported settled)
    rule = _rule_step(sampler, warm, sizes)
    if rule is not None:
        stuck = max(stuck, int((sizes < STUCK_STEP_RATIO * rule).sum()))
    settled = settled and stuck == 0
    reason = None if settled else (
        f"{stuck} of {sizes.numel()} members froze at a step below {STUCK_STEP_RATIO:g} of the members' median or of "
        "the step their curvature gives (after repeated restarts: they barely move)" if stuck else
        f"it is too short for its windows to estimate the mass and step size (at least {MIN_SETTLED} steps)"
        if warm.n_steps < MIN_SETTLED else
        f"{warm.window_restarts} restart(s) of an overheating chain in its final window; those chains froze at a "
        "quarter of the step size that failed" if warm.window_restarts else
        "its final window ran hot (kinetic temperature above its target); those chains froze at half the step size "
        "they tried there" if hot_final else
        f"its final window was still descending (the potential fell by more than {FINAL_DESCENT:g} times its "
        "equilibrium spread sqrt(D/2) within it): the fit was still improving when the kernel froze; those chains "
        "froze at half the step size they tried there")
    state.warmup_report = {"step_sizes": [h.detach().cpu() for h in warm.history], "settled": settled,
                           "reason": reason,
                           "n_steps": warm.n_steps, "restarts": warm.n_restarts, "hot_windows": warm.n_hot,
                           "curvature": None if warm.curvature is None else warm.curvature.detach().cpu(),
                           "noise_fraction": None if warm.noise_fraction is None
                           else warm.noise_fraction.detach().cpu(),
                           "scale_moves": warm.scale_count,
                           "scale_acceptance": None if warm.scale_accepted is None
                           else (warm.scale_accepted / warm.scale_count).detach().cpu()}
    state.warmup = None


def _rule_step(sampler, warm: WarmUp, sizes: Tensor) -> Tensor | None:
    """The step the sampler's rule gives for the last measured curvature and noise, per member like ``sizes`` (None
    where the step is not set from the curvature, or nothing was measured)."""
    if not warm.adapt_step or sampler.tunes_step_on_acceptance or warm.curvature is None:
        return None
    noise = None if warm.noise_fraction is None else warm.noise_fraction.to(sizes.dtype)
    rule = sampler.warmup_step_size(warm.curvature.to(sizes.dtype), noise).detach().reshape(-1)
    if rule.numel() != sizes.numel():
        return None
    return torch.where(torch.isfinite(rule), rule, torch.zeros_like(rule))


#: the sd of a scale move's log factor (about half of the digits MLP's moves accepted)
SCALE_MOVE_SD = 0.15


def scale_moves(sampler, state, potential) -> bool:
    r"""The warm-up's scale moves, made after each of the prior's Gibbs steps from there until the final window
    starts; True when positions moved (the sampler then drops what it cached).

    Under the hierarchical prior a layer's weights and its precision are tied, :math:`\tau_k|\theta_k|^2
    \approx n_k`, and the Gibbs steps move one given the other: a layer's scale drifts in steps of about
    :math:`\sqrt{2/n_k}` relative per Gibbs step, while the sampler moves the weights at a step its stiffest
    direction limits. Measured on digits (default MLP, sghmc): the output layer's precision fell from 0.6 to
    0.06 over 9,000 steps, still falling, the predictive underconfident meanwhile (ECE 0.10 at 2,000 steps).
    One Metropolis move per tensor along that ridge
    (:meth:`~bayesnet.posterior.ChainPosterior.scale_move`, on the warm-up's last mini-batches) takes the
    layers most of the way to their posterior scale within the warm-up (defaults panel, digits with a scaler, two
    seeds: ECE 0.097 / 0.073 -> 0.051 / 0.021).
    Only during the warm-up: the kept draws come from the frozen kernel (the sampler and the exact Gibbs step),
    as before; the moves use mini-batches (their likelihood ratio is an estimate) and need not be exact there.
    The final window, where the frozen step size is tried, sees no move."""
    warm = state.warmup
    if warm is None or not warm.recent or len(warm.ends) < 2 or state.step >= warm.ends[-2]:
        return False
    rate = getattr(potential, "scale_move", None)
    rate = None if rate is None else rate(warm.recent, state.rng, SCALE_MOVE_SD)
    if rate is None:
        return False
    warm.scale_accepted = rate if warm.scale_accepted is None else warm.scale_accepted + rate
    warm.scale_count += 1
    return True


#: the warm-up redraws a regressor's noise variance where its log lies above its conditional draw by more than this
#: many of the conditional's standard deviations (:func:`settle_likelihood`)
NOISE_LAG = 3.0


def settle_likelihood(sampler, state, potential) -> bool:
    r"""At a window's end before the freeze (before its step size is set), a regressor's noise variance that lags
    behind the network's fit is drawn anew from its conditional given the network's outputs on the warm-up's
    last mini-batches (:meth:`~bayesnet.posterior.ChainPosterior.likelihood_update`): where its log lies above its
    draw by more than ``NOISE_LAG`` (3) of the conditional's standard deviations (about :math:`\sqrt{2/N}`); True
    when the draw was made (the sampler then drops what it cached). Only for a sampler at temperature 1
    throughout (the draw is the untempered conditional).

    The sampler moves :math:`\gamma = \log\sigma^2` at the step the network's stiffest direction allows, and
    :math:`\gamma`'s own curvature is far below it: on Mackey-Glass's default recurrent regressor
    :math:`\eta\,m_\gamma\,\partial^2_\gamma U = 9\times10^{-5}` against the rule's 0.3 for the stiffest direction,
    about 500 steps for :math:`\gamma` to relax (SGHMC, friction 0.05). As the network fitted, the noise sd lagged
    behind its residuals all through the kept draws (seed 0: 2.1 times the draws' own training residual, falling
    from 0.016 to 0.009 while they fell from 0.0068 to 0.0045), and the 95 % intervals were twice as wide as the
    errors called for (coverage 1.0). Every member redrawn at every window's end instead left the tabular MLPs'
    intervals as they were (their noise tracked their residuals already) but changed friedman1's draws at random
    (NLL +0.010 +- 0.0045 over 12 seeds), and drawn up as well as down, the noise absorbed the misfit of a
    network not yet fitted (raw inputs of 1e9: a fit of R^2 -3e11 instead of the DivergenceError that names
    them); one below its draw is the sampler's to raise. Only during the warm-up: the kept draws come from the
    frozen kernel; the last mini-batches stand for the data, an estimate that need not be exact there."""
    warm = state.warmup
    if warm is None or not warm.recent or tuple(float(t) for t in sampler.temperature_range()) != (1.0, 1.0):
        return False
    update = getattr(potential, "likelihood_update", None)
    moved = None if update is None else update(warm.recent, state.rng, lag=NOISE_LAG)
    if not moved:
        return False

    def patched(positions):  # (new lists: the fallback's tensors are shared with the kept spots, never changed)
        if positions is None:
            return None
        out = list(positions)
        for k, take in moved.items():
            out[k] = torch.where(member_mask(take, out[k], state.layout), state.position[k].detach(), out[k])
        return out

    # the guard's fallback, the positions a check offered as the next one and those kept for the frozen step's
    # curvature take the new values too: a restart would otherwise put the lagging noise back (and freeze it, in
    # the final window), and a spot measured at it would understate its data term's curvature (a reviewer's finding)
    warm.backup, warm.candidate = patched(warm.backup), patched(warm.candidate)
    if warm.spots:
        warm.spots = [patched(spot) for spot in warm.spots]
    return True


def likelihood_mass(sampler, state, potential, batch, transform=None) -> bool:
    r"""At each step size the warm-up sets, a likelihood's own parameter (a regressor's log noise variance
    :math:`\gamma`) whose mini-batch gradient noise limits it takes the lightest mass that noise allows at that
    step; True when a mass changed.

    The secant rule ``sd(g) / sd(theta)`` fails for them: :math:`\gamma`'s mini-batch gradient noise is of
    order :math:`N/\sqrt{n}` against a curvature of :math:`N/2`, and a coordinate the noise makes heavy barely
    moves within a window, so its ``sd(theta)`` shrinks and its mass grows further. Measured on Mackey-Glass's
    default recurrent regressor (seed 0): an inverse mass of 0.0025, :math:`\eta m_\gamma N/2 = 7.6\times
    10^{-5}` at the frozen step, some 13,000 steps to relax against 1,000 kept, an ESS of 1.5 for
    :math:`\log\sigma` over 100 draws, and the noise sd 1.3-1.5 times the draws' own training residual. Their
    curvature ``k`` and the variance ``V`` of their gradient on a mini-batch are known from the residuals
    instead (the posterior's ``likelihood_curvature_and_noise``, on the warm-up's last mini-batches), and each
    coordinate's inverse mass is set to its heat bound ``sampler.coordinate_noise_budget() / (eta V)``, the
    gradient noise heating it by ``HEAT`` (5 %) of the temperature at the step ``eta`` just set, where the noise
    limits it: where that bound lies below its stability bound ``lambda / k`` (no stiffer than the stiffest
    direction measured, ``lambda`` the curvature the step was set from). At the final window's start, whose step
    the kept draws use (at the start, for a warm-up too short for windows), it is lowered to that bound too where
    the window's moments made it lighter (a coordinate the rule had sped up moved more in the next window, and its
    secant mass let it run hot at the frozen step: 14 % on friedman1, sgnht, seed 0); before, only raised, since
    the initial window and a window after which the chain was still descending take a step that ignores the
    noise, and lowered to its heat bound there the noise variance could not follow the descent (5-11x heavier at
    Mackey-Glass's start; 10 of 12 fits warned, against 5 of 12). Where the noise is too small to limit it (a
    full batch, ``V = 0``) the secant mass, which the noise no longer distorts, stands: lightened to its
    stability bound instead, :math:`\sigma` followed a noise-free target's still improving fit
    within a few steps, the data term stiffened past the frozen step, and 2 of 24 default fits of a small
    recurrent regressor on 40 rows diverged (none without the rule; none on 24 fits of 160 and 250 rows, whose
    mini-batches limit it by the heat bound). Not for a sampler without a noise budget (a step tuned on
    acceptance), nor for one with several members per chain or preconditioned beyond the mass (eqn's walkers
    share their chain's mass, and their spread scales the noise: ``transform``). During the warm-up only, like
    every mass: the kept draws come from the frozen kernel, exact for any constant mass."""
    warm, pre = state.warmup, state.precond
    if not warm.adapt_mass or pre.inverse_mass is None or warm.curvature is None or transform is not None \
            or sampler.members_per_chain() > 1:
        return False
    budget = sampler.coordinate_noise_budget()
    measure = getattr(potential, "likelihood_curvature_and_noise", None)
    if budget is None or measure is None:
        return False
    batches = _last_batches(warm, batch)
    found = measure(batches, max(b[1].shape[0] for b in batches))
    if not found:
        return False
    # the step the kept draws use: the final window's start, or the start itself for a warm-up too short for windows
    final = len(warm.ends) < 2 or state.step == warm.ends[-2]
    flat = pre.inverse_mass.clone()
    parts = views(flat, state.position)
    eta = pre.step_size.detach().double()
    lam = warm.curvature.detach().double().to(eta.device)
    changed = False
    for k, (curv, noise) in found.items():
        m = parts[k]
        curv, noise = curv.reshape(m.shape).to(eta.device), noise.reshape(m.shape).to(eta.device)
        with torch.no_grad():  # (one member per chain: the step and curvature are per member, or one value)
            heat = budget / (member_view(eta, m) * noise)  # (inf where there is no noise: never taken)
            stable = member_view(lam, m) / curv
            old = m.double()
            take = (noise > 0) & (curv > 0) & torch.isfinite(heat) & (heat < stable) \
                & ((heat > old) | (final & (heat < old)))
            if bool(take.any()):
                m.copy_(torch.where(take, heat.to(m.dtype), m))
                changed = True
    if changed:
        pre.inverse_mass = flat
    return changed


def watch(potential, warm: WarmUp, step: int = 0) -> Any:
    """The potential whose gradients feed the warm-up's moments."""
    return _Watched(potential, warm, step) if warm.adapt_mass else potential
