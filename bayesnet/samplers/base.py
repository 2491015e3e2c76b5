"""The sampler contract: kernels, their typed states, what they report, and the registry.

A sampler is a small scikit-learn style object that holds only
hyperparameters (``get_params``/``set_params``, validated against
``_parameter_constraints``). Its chain lives in an explicit, typed state (a
dataclass per sampler, as BlackJAX's ``HMCState``); one call of
:meth:`Sampler.step` advances it by one transition and returns diagnostics in
a :class:`StepInfo`. Randomness comes only from the state's per-chain streams
(:class:`~bayesnet.samplers.random.ChainRandom`).

What a kernel declares, so that the estimators never look behind it:

* :meth:`Sampler.configure` takes the :class:`~bayesnet.plan.RunPlan` (planned
  steps, burn-in, data size, batch size, chain layout) and resolves the
  settings that depend on it (warm-up length, a schedule over the run);
* :attr:`Sampler.stats` names the diagnostic fields of its :class:`StepInfo`
  and how each one summarises over a run (:class:`Stat`, as NumPyro's
  ``default_fields``);
* :attr:`Sampler.full_batch` says whether it wants the full batch by default,
  :meth:`Sampler.steps_per_draw` and :attr:`Sampler.default_thinning` which
  steps count as draws, :meth:`Sampler.members_per_chain` the chain layout;
* :meth:`Sampler.divergence_hint`, :meth:`Sampler.shortfall_hint`,
  :meth:`Sampler.target_temperature` and :meth:`Sampler.state_summary`
  supply the words and figures the estimators report.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field, fields
from numbers import Real
from typing import Any, ClassVar, Protocol, Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch import Tensor

from ..plan import ChainLayout, RunPlan
from . import warmup as _warmup
from .random import ChainRandom, as_chain_random
from .warmup import Preconditioner, WarmUp

__all__ = [
    "Potential",
    "SamplerState",
    "MomentumState",
    "StepInfo",
    "Stat",
    "Sampler",
    "DivergenceError",
    "state_fields",
    "for_chains",
]


def refuse_bools(owner: str, constraints: dict, params: dict) -> None:
    """Bools are not numbers here: a ValueError for a bool (Python's or NumPy's) among ``params`` whose
    scikit-learn ``constraints`` admit none (only "boolean", "verbose" and "random_state" do). scikit-learn's
    ``Interval(Integral)`` takes True: an estimator's ``batch_size=True`` was a batch of one row. ``owner`` names
    the class in the message."""
    for key, options in constraints.items():
        val = params[key]
        if isinstance(val, (bool, np.bool_)) and not {"boolean", "verbose", "random_state"} & {
                o for o in options if isinstance(o, str)}:
            raise ValueError(f"The {key!r} parameter of {owner} must not be a bool, got {val!r}.")


class Potential(Protocol):
    """What a sampler needs from the target: ``U`` and ``grad U`` on a batch.

    ``parameters`` are the position tensors the sampler moves (leaf tensors,
    updated in place); ``value_and_grad(batch)`` returns the (mini-batch
    estimate of the) potential ``U(theta) = -log posterior`` and its gradient,
    one tensor per parameter; ``value(batch)`` returns the potential alone,
    without building a graph (Metropolis tests on proposals). See
    :class:`bayesnet.posterior.ChainPosterior` for the network posterior.

    The chain axis: when the position tensors carry a leading axis of ``S``
    packed members (chains, tempering replicas or ensemble walkers; see
    :class:`~bayesnet.plan.ChainLayout`), both methods return one potential
    per member, shape ``(S,)``, and the gradients are those of their sum,
    i.e. every member's own gradient.
    """

    parameters: list[Tensor]

    def value_and_grad(self, batch: Any) -> tuple[Tensor, list[Tensor]]: ...

    def value(self, batch: Any) -> Tensor: ...


def per_chain_mean(value: Any) -> float:
    """A diagnostic as one float: the mean over the chain axis of a per-member tensor, else the value."""
    if isinstance(value, Tensor):
        return float(value.float().mean()) if value.numel() != 1 else float(value.reshape(()))
    return float(value)


class DivergenceError(FloatingPointError):
    """A chain produced a non-finite or exploding potential or position.

    Attributes
    ----------
    step : int
        The 1-based sampler step at which the divergence was detected.
    """

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step

    def __reduce__(self):  # picklable, so that it crosses joblib's process boundary intact
        return type(self), (str(self), self.step)


@dataclass(kw_only=True)
class SamplerState:
    """Explicit state of a chain (of all chains of a layout at once). Samplers subclass it with their own
    typed fields.

    Attributes
    ----------
    position : list of Tensor
        ``theta``, one tensor per parameter; these are the potential's own parameter tensors, updated in
        place.
    layout : ChainLayout
        How the leading axis packs chains and their members.
    rng : ChainRandom
        The chains' random streams.
    step : int
        Number of transitions taken so far.
    """

    position: list[Tensor]
    layout: ChainLayout
    rng: ChainRandom
    step: int = 0
    precond: Preconditioner | None = None
    warmup: WarmUp | None = None
    warmup_report: dict | None = None
    cache: dict = field(default_factory=dict)
    #: the sampler's hyperparameters the state was made (or last stepped) with, and the token of that sampler's
    #: settings (:meth:`Sampler.step` takes up a change of the settings through :meth:`Sampler.adopt`)
    made_with: dict | None = None
    stamp: object = None

    def replace_position(self, position: list[Tensor]) -> None:
        """Point the state at new position tensors (the same values), e.g. after a copy."""
        self.position = list(position)

    def derived(self, key: str, make):
        """A quantity derived from the preconditioner (a per-coordinate scale), recomputed when it changes."""
        version = self.precond.version if self.precond is not None else -1
        hit = self.cache.get(key)
        if hit is None or hit[0] != version:
            hit = self.cache[key] = (version, make())
        return hit[1]

    @property
    def step_size(self) -> Tensor:
        """Each member's step size (the adapted one during and after warm-up)."""
        return self.precond.step_size


@dataclass(kw_only=True)
class MomentumState(SamplerState):
    """State of the samplers with momenta.

    Attributes
    ----------
    momentum : list of Tensor
        ``r`` (see :mod:`.integrators` for its units), views of ``flat_momentum``.
    flat_momentum : Tensor, shape (D,) or chain-major (S, D / S)
        The buffer the momenta share: kinetic energies and refreshes take one operation.
    """

    momentum: list[Tensor]
    flat_momentum: Tensor

    def __setstate__(self, state):
        # pickle does not keep views sharing storage: make the momenta views of the flat buffer again, as the
        # kernels update one through the other.
        from .integrators import momentum_views

        self.__dict__.update(state)
        self.momentum = momentum_views(self.flat_momentum, self.momentum)
        self.cache = {}  # derived views of derived buffers: rebuilt on use


@dataclass
class StepInfo:
    """Diagnostics of one transition.

    Attributes
    ----------
    potential : Tensor
        0-d tensor, or ``(S,)`` with a chain axis: the (mini-batch) potential ``U`` evaluated during the step.
    kinetic_energy : Tensor or None
        For samplers with momenta.
    kinetic_temperature : Tensor or None
        ``2 K / D``; its long-run average should equal :meth:`Sampler.target_temperature`.
    is_draw : bool or Tensor
        Whether the new position counts as a sample; with a chain axis a bool tensor of shape ``(S,)``.
    extra : dict
        The kernel's further diagnostics, exactly the fields its :attr:`Sampler.stats` declares besides
        the three above: floats, or ``(S,)`` tensors with a chain axis.

    Notes
    -----
    The tensors are the step's own: a kernel must not write into them after it returns (the warm-up's guard
    keeps references to ``potential`` and ``kinetic_temperature`` until its next check instead of copying them).
    """

    potential: Tensor
    kinetic_energy: Tensor | None = None
    kinetic_temperature: Tensor | None = None
    is_draw: bool | Tensor = True
    extra: dict = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """Every reported field by name (the three common ones that are set, then ``extra``)."""
        out = {"potential": self.potential}
        if self.kinetic_energy is not None:
            out["kinetic_energy"] = self.kinetic_energy
        if self.kinetic_temperature is not None:
            out["kinetic_temperature"] = self.kinetic_temperature
        out.update(self.extra)
        return out

    def scalars(self) -> dict[str, float]:
        """All fields as Python floats, per-member values averaged over the chain axis (synchronises)."""
        return {k: per_chain_mean(v) for k, v in self.fields().items()}


@dataclass(frozen=True)
class Stat:
    """How a per-step diagnostic summarises over the steps of a run (after burn-in).

    Parameters
    ----------
    reduce : {"mean", "sum", "last", "max"}
        ``"mean"`` for levels (potential, temperature) and rates (acceptance), ``"sum"`` for counts
        (divergent transitions), ``"last"`` for settings that move (an adapted step size).
    summary : str or None
        Name in the estimators' ``diagnostics_``; None keeps the field's name.
    arviz : str or None
        Name in ArviZ's ``sample_stats`` (``to_arviz``), where its plots and summaries look for it
        ("acceptance_rate", "diverging", "n_steps", ...); None keeps the field's name.
    """

    reduce: str = "mean"
    summary: str | None = None
    arviz: str | None = None

    def __post_init__(self):
        if self.reduce not in ("mean", "sum", "last", "max"):
            raise ValueError(f"Stat.reduce must be 'mean', 'sum', 'last' or 'max', got {self.reduce!r}.")


#: the fields every sampler reports
COMMON_STATS = {"potential": Stat("mean")}
#: what samplers with momenta add
MOMENTUM_STATS = {"kinetic_energy": Stat("mean"), "kinetic_temperature": Stat("mean")}


class Sampler(BaseEstimator):
    """Base class of the sampling kernels.

    Subclasses declare their hyperparameters as keyword arguments of
    ``__init__`` stored untouched, their constraints in
    ``_parameter_constraints`` (scikit-learn's mechanism, checked by
    :meth:`validate`), the fields they report in :attr:`stats`, and
    implement :meth:`_init` and :meth:`step`.

    Raises
    ------
    sklearn.utils._param_validation.InvalidParameterError
        (a ``ValueError``) from :meth:`validate`, on an out-of-range hyperparameter.
    """

    name: ClassVar[str] = ""
    #: the least thinning the estimators' ``thinning="auto"`` gives (samplers that thin themselves use 1); after
    #: ``burn_in="auto"`` it grows until the draws span the burn-in (``bayesnet.estimators.run.resolve_thinning``)
    default_thinning: ClassVar[int] = 10
    #: whether the kernel wants the full batch by default (Metropolis tests need exact energies)
    full_batch: ClassVar[bool] = False
    #: the diagnostic fields of :class:`StepInfo` and how each summarises over a run
    stats: ClassVar[dict[str, Stat]] = COMMON_STATS
    #: the state class :meth:`init` returns
    state_class: ClassVar[type] = SamplerState
    _parameter_constraints: ClassVar[dict] = {}

    # ------------------------------------------------------------------ #
    # parameters (scikit-learn's get_params / set_params)
    # ------------------------------------------------------------------ #
    def __setattr__(self, name: str, value: Any) -> None:
        # a hyperparameter set after init() (by set_params or directly) invalidates the settings' token, and the
        # next step() takes the change up (:meth:`adopt`); resolved (``x_``) and private attributes do not
        if not name.startswith("_") and not name.endswith("_"):
            self.__dict__.pop("_settings_token", None)
        object.__setattr__(self, name, value)

    def _token(self) -> object:
        """A token that stays the same object while no hyperparameter is set (one identity test per step)."""
        token = self.__dict__.get("_settings_token")
        if token is None:
            token = self.__dict__["_settings_token"] = object()
        return token

    @classmethod
    def hyperparameter_names(cls) -> list[str]:
        """Names accepted by ``__init__`` (and hence as ``sampler__<name>``)."""
        return cls._get_param_names()

    @classmethod
    def from_params(cls, **params: Any) -> "Sampler":
        """Build and validate the sampler, with a clear error for unknown hyperparameters.

        Raises
        ------
        TypeError
            On a hyperparameter the sampler does not have (the message lists the valid ones).
        ValueError
            On an out-of-range value.
        """
        valid = cls.hyperparameter_names()
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise TypeError(f"sampler {cls.name!r} got unknown hyperparameter(s) {unknown}; valid ones are {valid} "
                            "(set them as sampler__<name>).")
        return cls(**params).validate()

    def validate(self) -> "Sampler":
        """Check the hyperparameters against ``_parameter_constraints`` (and :meth:`_check_params` for rules
        between them); returns ``self``.

        Raises
        ------
        ValueError
            On an out-of-range value (bools are not numbers here).
        """
        refuse_bools(type(self).__name__, self._parameter_constraints,
                     {key: getattr(self, key) for key in self._parameter_constraints})
        self._validate_params()
        step = getattr(self, "step_size", None)
        if isinstance(step, Real) and not isinstance(step, bool) and not (
                torch.finfo(torch.float32).tiny <= float(step) <= torch.finfo(torch.float32).max):
            # (before: 1e-300 became a step of 0, which stood still or raised a DivergenceError asking for a smaller
            # step; 1e300 a RuntimeError from torch that named no parameter)
            raise ValueError(f"{self.name}: step_size={step!r} is outside float32's range (1.2e-38 to 3.4e38), "
                             "in which the chains compute.")
        self._check_params()
        return self

    def _check_params(self) -> None:
        """Rules between hyperparameters (subclasses); raise ValueError."""

    def configure(self, plan: RunPlan) -> "Sampler":
        """Take the run plan (planned steps, burn-in, data size, batch size, chain layout) and resolve the
        settings that depend on it, as attributes with a trailing underscore. Returns ``self``.

        The estimators call it once per fit, before :meth:`init`; used directly, a sampler runs without it
        (each ``"auto"`` setting then takes its documented fallback).
        """
        self.plan_ = plan
        return self

    def _planned(self, attr: str, default):
        """A setting resolved by :meth:`configure`, or ``default`` without a plan."""
        return getattr(self, attr, default)

    # ------------------------------------------------------------------ #
    # what the kernel declares
    # ------------------------------------------------------------------ #
    def members_per_chain(self) -> int:
        """Position sets one chain packs on the leading axis: 1, or the tempering replicas (pt-langevin) or
        ensemble walkers (eqn) that make up one chain."""
        return 1

    def steps_per_draw(self, state: SamplerState | None = None) -> float:
        """Expected number of steps per candidate draw (``StepInfo.is_draw``); 1 unless the sampler collects
        only some of its steps, as TACT-HMC does. The estimators plan the run length with it and, when it is
        above 1, stop early once the draws are collected. ``state``: for the chains of that state, where a
        setting is resolved by :meth:`init` (tacthmc's ``wall="auto"``); without it, at most any chain's."""
        return 1.0

    def target_temperature(self) -> float | None:
        """The value the kinetic temperature should average at equilibrium (None: no momenta)."""
        return None

    #: every gradient the kernel takes after its warm-up is taken at a member's current position (a draw of the
    #: target once the chain is at equilibrium): then its configurational temperature can be measured
    gradients_at_positions = False

    def configurational_target(self) -> float | None:
        r"""The value the configurational temperature should average at equilibrium: the temperature ``T`` the
        positions are sampled at, for a kernel whose gradients are all taken at its members' positions
        (:attr:`gradients_at_positions`); None otherwise (hmc's leapfrog steps, the tempering of tacthmc and
        pt-langevin).

        The configurational temperature is the virial :math:`\theta \cdot \nabla U(\theta) / D`, with
        :math:`U` the potential at temperature 1 (its mini-batch estimate is unbiased, up to the rows an epoch
        has already used to move the chain) and ``D`` the numbers per member: for
        :math:`\theta \sim \pi \propto e^{-U/T}` integration by parts gives
        :math:`E[\theta_i \partial_i U] = T` for each coordinate (the virial theorem; TATi reports it,
        Heber et al. 2020). It needs no momenta, so it also checks sgld, and it catches what the kinetic
        temperature cannot: positions that have not reached their typical set, or that mini-batch noise has
        spread."""
        return float(getattr(self, "temperature", 1.0)) if self.gradients_at_positions else None

    def temperature_range(self, state: SamplerState | None = None) -> tuple[float, float]:
        """The lowest and highest temperature the positions are sampled at (tempering samplers heat some of
        their steps or replicas); the estimators' divergence monitor allows the potential the rise that
        heating brings. ``state``: for the chains of that state, where a setting is resolved by :meth:`init`
        (tacthmc's ``wall="auto"``); without it, the widest range any chain can have."""
        t = getattr(self, "temperature", 1.0)
        t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 1.0
        return t, t

    def untempered_prior_hint(self) -> str | None:
        """A setting of this sampler that would sample the prior at temperature 1 (named in the message that refuses
        a hierarchical prior), or None."""
        return None

    def prior_temperature_range(self) -> tuple[float, float]:
        """The lowest and highest temperature the prior is sampled at: :meth:`temperature_range` for a sampler
        that tempers the whole posterior, ``(1, 1)`` for one that tempers the likelihood only. A prior with
        hyperparameters (:class:`~bayesnet.priors.HierarchicalPrior`) is proper only at 1
        (:func:`~bayesnet.priors.make_prior` reads this)."""
        return self.temperature_range()

    def potential_changed(self, state: SamplerState, delta_value: Tensor, delta_grad: list[Tensor]) -> None:
        """The potential changed by ``delta_value`` (per member) and its gradient by ``delta_grad`` at the
        current positions (a Gibbs step on the prior's hyperparameters): samplers that cache either update
        them."""

    def reset_cache(self, state: SamplerState) -> None:
        """Forget values cached from earlier batches (called when a fit continues on new data)."""

    def state_summary(self, state: SamplerState) -> dict:
        """Run-level diagnostics kept in the state (acceptance and swap rates, ...), for ``diagnostics_``."""
        return {}

    def divergence_hint(self, state: SamplerState) -> str:
        """The settings to name when this chain diverges (the estimators put it in the error)."""
        step_size = getattr(self, "step_size", None)
        if isinstance(step_size, (int, float)) and not isinstance(step_size, bool):
            return f"sampler__step_size={step_size:g}"
        pre = getattr(state, "precond", None)
        if step_size == "auto" and pre is not None:
            return f"sampler__step_size='auto', which the warm-up set to {float(pre.step_size.min()):.3g}"
        return "sampler__step_size"

    def quota_members(self, layout: ChainLayout):
        """Bool mask ``(S,)`` of the members (trace slots) that are to keep ``n_draws`` draws by the end of a
        planned run; the others collect only part of it by design (pt-langevin's replicas above temperature 1
        collect only after the tempering phase). The estimators' "fewer draws than asked for" check reads it."""
        import numpy as np

        return np.ones(layout.chains * layout.members_per_chain, dtype=bool)

    def shortfall_hint(self, state: SamplerState, active=None) -> str:
        """Why a run may keep fewer draws than planned, and what to change (samplers that collect only some
        steps). ``active``: bool per chain, the chains still running (None: all); a retired (diverged) chain's
        figures are not the run's."""
        return ""

    # ------------------------------------------------------------------ #
    # warm-up (bayesnet.samplers.warmup): what a kernel declares
    # ------------------------------------------------------------------ #
    #: ``step_size`` used when it is "auto" and there is no warm-up to set it (a kernel used directly)
    fallback_step_size: ClassVar[float] = 1e-4
    #: whether only each step's first gradient (at the current position) feeds the mass estimate
    warmup_first_gradient_only: ClassVar[bool] = False
    #: whether the kernel tunes its own step size on its acceptance rate during the warm-up (Metropolis
    #: samplers); the warm-up's curvature estimate is then only its starting point
    tunes_step_on_acceptance: ClassVar[bool] = False
    #: settings the chains' state is built on (the mass matrix's form; tacthmc's bias table, pt-langevin's
    #: temperature ladder): a continued fit (``partial_fit``, ``warm_start``) refuses a change to any of them,
    #: which the state would otherwise keep in its old form while the sampler reported the new one
    state_settings: ClassVar[tuple[str, ...]] = ("preconditioner",)

    def changed_state_settings(self, previous: "Sampler", state: "SamplerState | None" = None) -> dict[str, tuple]:
        """The settings in :attr:`state_settings` that differ from those of ``previous`` (the sampler the chains
        ran), ``{name: (new, old)}``; a continued fit refuses them. A preconditioner given another name for the same
        mass matrix ("auto" and "diagonal" with ``step_size="auto"``) is no change. ``state``, the chains' (where
        the caller has it), lets a sampler compare a setting with the value ``init`` resolved (tacthmc's walls)."""
        out = {}
        for name in self.state_settings:
            new, old = getattr(self, name, None), getattr(previous, name, None)
            if new == old:
                continue
            if name == "preconditioner" and self.preconditioner_mode() == previous.preconditioner_mode():
                continue
            out[name] = (new, old)
        # the warm-up is built by init(): its length, and whether it adapts the step, cannot change under it (an
        # explicit step replacing an adapted one can: :meth:`adopt`)
        for name in ("adaptation_steps", "step_size"):
            new, old = getattr(self, name, None), getattr(previous, name, None)
            if new != old and (name == "adaptation_steps" or new == "auto"):
                out[name] = (new, old)
        return out

    def adopt(self, state: SamplerState) -> None:
        """Take up the hyperparameters set since ``state`` was made (or last stepped) with another setting: a
        continued chain runs the new settings. :meth:`step` calls it when the sampler's settings changed (one
        identity test per step); the estimators' continued fits call it with a new sampler.

        The per-coordinate scales derived from the old settings (noise and momentum scales hold the temperature,
        friction, noise level) are dropped, and an explicit ``step_size`` that changed replaces the adapted (or
        old) one in the preconditioner. A warm-up still running then adapts the step no more, and the mass only
        where the new settings still ask for it (with ``preconditioner="auto"`` and an explicit step it is adapted
        no further: the mass set so far stays, the coordinates the explicit step is given in). hmc's dual
        averaging restarts from the explicit step (its documented meaning: where the averaging starts);
        pt-langevin keeps the proposal scales its Robbins-Monro tuning reached (an explicit step takes effect there
        with ``adaptation_steps=0``, the paper's mode). Before, a change after :meth:`init` was silently ignored
        wherever the state held the old value (the step size, the cached noise scales).

        Raises
        ------
        ValueError
            On a change of a setting the state is built on (:meth:`changed_state_settings`: the mass matrix's
            form, the warm-up's length, a step size back to "auto", tacthmc's bias table, pt-langevin's ladder,
            the members per chain); the state is left as it was (the estimators' continued fits refuse the same
            changes before anything runs).
        """
        now = self.get_params(deep=False)
        before = state.made_with
        if before is not None and now != before:
            previous = type(self)(**before)
            refused = for_chains(self.changed_state_settings, state, previous)
            if self.members_per_chain() != previous.members_per_chain():
                refused["members per chain"] = (self.members_per_chain(), previous.members_per_chain())
            if refused:
                detail = ", ".join(f"{k}={new!r} (was {was!r})" for k, (new, was) in refused.items())
                raise ValueError(f"{self.name}: cannot take up {detail} on chains whose state was built with the old "
                                 "value(s); call init() for new chains with them.")
            step = getattr(self, "step_size", "auto")
            if step != "auto" and step != before.get("step_size", "auto"):
                pre = state.precond
                pre.step_size = torch.full_like(pre.step_size, float(step))
                pre.version += 1
                self.preconditioner_changed(state)
                warm = state.warmup
                if warm is not None:
                    warm.adapt_step = False
                    warm.adapt_mass = warm.adapt_mass and self.preconditioner_mode() is not None
        state.cache.clear()
        state.made_with, state.stamp = now, self._token()

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """The step size for a largest preconditioned curvature ``curvature`` and the gradient's mini-batch noise
        ``noise_fraction`` (its variance in preconditioned units; None: full-data gradients), per member. Samplers
        that warm up override it."""
        raise NotImplementedError(f"{self.name} has no warm-up rule for its step size.")

    def coordinate_noise_budget(self) -> float | None:
        """The most mini-batch gradient noise one coordinate may carry at the step size ``eta``: ``eta m_i Var_i``
        (its variance in preconditioned units, times the step) at most this, so that the heat it adds to that
        coordinate stays within ``HEAT`` (5 %) of the temperature. For a kernel whose friction is fixed it is also
        its step rule's noise cap on the mean over coordinates; a thermostat absorbs the mean's heat but not one
        coordinate's, and its budget follows from its injected noise alone. The warm-up gives a likelihood's own
        parameters the lightest mass it allows (:func:`~bayesnet.samplers.warmup.likelihood_mass`). None (the
        default): the sampler bounds no coordinate's noise (a step tuned on acceptance, hmc and pt-langevin's)."""
        return None

    def _stable_and_cool(self, curvature: Tensor, noise_fraction: Tensor | None, noise_budget: float) -> Tensor:
        """``min(stability / lambda, noise_budget / rho)``: the warm-up's rule for the learning-rate samplers (sgld,
        sghmc, sgnht, tacthmc), each with its own ``stability`` and noise budget (their ``step_size`` docs)."""
        step = self.stability / curvature
        if noise_fraction is not None:
            step = torch.minimum(step, noise_budget / noise_fraction.clamp_min(1e-12))
        return step

    def prepare_step_size(self, state: SamplerState):
        """Called by the warm-up at its start and at each window's end, after the new mass is set and before the
        curvature for a new step is measured (a warm-up that no longer adapts the step, after an explicit step
        replaced it in a continued fit, calls it all the same and measures nothing). A kernel whose step is
        preconditioned by more than the diagonal mass sets that preconditioner here and returns it as a symmetric
        linear map on vectors shaped like the positions, in the mass's coordinates (eqn's walkers' covariance
        ``B_i``), so that the curvature measured is the one its step meets; None (the default): the mass alone."""
        return None

    def warmup_frozen(self, state: SamplerState) -> None:
        """Called once, when the warm-up freezes (samplers that average their adapted step set it here)."""

    def momentum_std(self, state: SamplerState) -> Tensor | None:
        """Each momentum coordinate's equilibrium standard deviation as a flat buffer laid out as
        ``flat_momentum`` (None for samplers without momenta)."""
        return None

    @staticmethod
    def _scaled_momentum_std(state: SamplerState, scale) -> Tensor:
        """``scale(precond) * m^{1/2}`` per coordinate, cached until the preconditioner changes: the momenta's
        equilibrium sd, ``sqrt(T)`` for time-step samplers (baoab, hmc), ``sqrt(eta T)`` for learning-rate ones
        (sghmc, sgnht, tacthmc)."""
        return state.derived("momentum_std", lambda: state.precond.per_coordinate(
            scale(state.precond), 0.5, state.flat_momentum))

    def restart_members(self, state: SamplerState, members: Tensor, potential: Potential, batch: Any) -> None:
        """The warm-up put ``members`` (a bool mask over the member axis) back at an earlier position, with half
        their step size and fresh momenta: reset whatever else of theirs went bad with them (thermostats,
        gradients cached at the old position; ``potential`` and ``batch`` are the step's, for recomputing
        them). Only the masked members may change: a member never depends on the others (chain independence)."""

    def preconditioner_changed(self, state: SamplerState) -> None:
        """The warm-up set a new mass or step size for every member (at a window's end): cached values are
        dropped and momenta, which have a new equilibrium, are drawn from it (warm-up steps need not be exact)."""
        self.reset_cache(state)
        self.redraw_momenta(state)

    @torch.no_grad()
    def redraw_momenta(self, state: SamplerState, members: Tensor | None = None) -> None:
        """Draw the momenta afresh from their equilibrium (:meth:`momentum_std`), for all members or only where
        ``members`` is true. The noise is drawn for every member either way, so that each chain's stream does
        not depend on which of the other chains were redrawn."""
        std = self.momentum_std(state)
        if std is None:
            return
        from .integrators import normal_flat

        flat = state.flat_momentum
        fresh = normal_flat(state.rng, state.layout, flat.numel(), flat.dtype).view_as(flat) * std
        if members is None:
            flat.copy_(fresh)
        else:
            mask = members.reshape(-1, 1) if flat.ndim == 2 else members.any()
            flat.copy_(torch.where(mask, fresh, flat))

    def adaptation_length(self) -> int:
        """Steps of warm-up: ``adaptation_steps`` when set, the run plan's burn-in for "auto", 0 without a plan."""
        n = getattr(self, "adaptation_steps", "auto")
        if n != "auto":
            return int(n)
        plan = getattr(self, "plan_", None)
        return int(plan.burn_in) if plan is not None else 0

    def preconditioner_mode(self) -> str | None:
        """``preconditioner`` resolved: "auto" is "diagonal" when the step size is adapted ("auto") and None
        (the identity, as the papers run) when the user set a step size."""
        mode = getattr(self, "preconditioner", None)
        if mode == "auto":
            return "diagonal" if getattr(self, "step_size", None) == "auto" else None
        return mode

    def _initial_preconditioner(self, position: list[Tensor], layout: ChainLayout) -> Preconditioner:
        step = getattr(self, "step_size", self.fallback_step_size)
        step = self.fallback_step_size if step == "auto" else float(step)
        shape = () if layout.n_members is None else (layout.n_members,)
        return Preconditioner(torch.full(shape, step, dtype=position[0].dtype, device=position[0].device))

    def _initial_warmup(self) -> WarmUp | None:
        n = self.adaptation_length()
        mode = self.preconditioner_mode()
        adapt_step = getattr(self, "step_size", None) == "auto"
        if n <= 0 or not (adapt_step or mode is not None):
            return None
        # (the temperature the positions are sampled at, not the kinetic target: SGLD has one without the other)
        return WarmUp(n_steps=n, ends=_warmup.windows(n), adapt_mass=mode is not None, adapt_step=adapt_step,
                      layerwise=mode == "layer", first_only=self.warmup_first_gradient_only,
                      temperature=self.temperature_range()[0])

    # ------------------------------------------------------------------ #
    # the kernel
    # ------------------------------------------------------------------ #
    def init(self, position: Sequence[Tensor], rng: ChainRandom | torch.Generator | int | None = None,
             n_chains: int | None = None) -> SamplerState:
        """Start the chains at ``position`` (the tensors are used, not copied).

        Parameters
        ----------
        position : sequence of Tensor
            The parameters. With ``n_chains`` every tensor has a leading axis of
            ``S = n_chains * members_per_chain()`` packed members, chain major (member ``m`` of chain ``c``
            at index ``c * members + m``).
        rng : ChainRandom, torch.Generator, int or None
            The chains' random streams, or what to derive them from (see
            :func:`~bayesnet.samplers.random.as_chain_random`).
        n_chains : int, optional
            Number of independent chains on the leading axis; None for one chain without a chain axis
            (samplers with several members per chain then expect the leading axis of their members).

        Raises
        ------
        ValueError
            On invalid hyperparameters, or if a position tensor lacks the leading axis ``n_chains`` needs.
        """
        self.validate()
        position = list(position)
        layout = ChainLayout(n_chains, self.members_per_chain())
        self._check_chain_axis(position, layout)
        rng = as_chain_random(rng, layout.chains, position[0].device)
        state = self._init(position, rng, layout, self._initial_preconditioner(position, layout))
        state.warmup = self._initial_warmup()
        state.made_with, state.stamp = self.get_params(deep=False), self._token()
        return state

    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> SamplerState:
        raise NotImplementedError

    def _check_chain_axis(self, position: Sequence[Tensor], layout: ChainLayout) -> None:
        size = layout.n_members
        if size is None:
            return
        bad = [tuple(p.shape) for p in position if p.ndim == 0 or p.shape[0] != size]
        if bad:
            raise ValueError(
                f"{self.name}: with n_chains={layout.n_chains} and {layout.members_per_chain} member(s) per chain "
                f"every position tensor needs a leading axis of {size}; got shapes {bad}.")

    def step(self, state: SamplerState, potential: Potential, batch: Any) -> tuple[SamplerState, StepInfo]:
        """Advance the chains by one transition on ``batch`` (in place), warming up while the warm-up runs.

        During the warm-up every gradient feeds the mass estimate and, at the end of each window, the mass and
        step size are set anew (:mod:`bayesnet.samplers.warmup`); once it ends they are frozen.

        Raises
        ------
        TypeError
            If ``state`` was not made by this kind of sampler's :meth:`init` (another sampler's state: before, an
            AttributeError from inside the kernel, or, between kernels with the same fields, a silent run that
            read one kernel's momentum in the other's units).
        """
        if type(state) is not self.state_class:
            raise TypeError(f"{self.name}: the state is a {type(state).__name__}, made by another sampler's init; "
                            f"{self.name} steps the {self.state_class.__name__} its own init() makes (a state "
                            "cannot move between samplers: their momenta and auxiliary variables differ).")
        if state.stamp is not self.__dict__.get("_settings_token"):
            self.adopt(state)
        if int(state.step) == 0:
            self._check_potential_shape(state, potential, batch)
        self.gibbs_step(state, potential)
        warm = state.warmup
        if warm is None:
            return self._step(state, potential, batch)
        if not warm.started:
            _warmup.start(self, state, potential, batch)
        state, info = self._step(state, _warmup.watch(potential, warm, state.step), batch)
        warm.remember(batch)
        _warmup.guard(self, state, info, potential, batch)
        _warmup.after_step(self, state, potential, batch)
        return state, info

    #: whether the kernel reads each member's potential (a Metropolis test, a tempering force): a
    #: :class:`~bayesnet.posterior.FunctionPotential` of several members must then return one value per member
    #: (the gradient samplers also take a summed value: its gradient is every member's own)
    member_potentials: ClassVar[bool] = False

    def _check_potential_shape(self, state: SamplerState, potential: Potential, batch: Any) -> None:
        """The potential's shape for the :attr:`member_potentials` samplers, checked once, at the first step (one
        more evaluation): a scalar for one chain without a chain axis, one value per member with one. Before: hmc,
        pt-langevin and tacthmc failed inside torch on a summed (0-d) value, or on a vector for one chain."""
        from ..posterior import FunctionPotential

        size = state.layout.n_members
        if not isinstance(potential, FunctionPotential):
            return
        if not self.member_potentials:
            # the others read the gradient of the value's sum, so a sum over the members serves them too (the
            # warm-up's guard then tests temperatures only); a vector of anything else (terms of one chain) is a
            # mistake the sum would hide (before: accepted, and the guard's per-member tests silently skipped)
            value = potential.value(batch)
            if value.numel() not in (1, size or 1):
                want = "a scalar" if size is None else f"one value per member, shape ({size},), or their sum"
                raise ValueError(f"{self.name}: the potential returned a value of shape {tuple(value.shape)}; it "
                                 f"must return {want} (sum the terms).")
            return
        if size == 1:
            return
        shape = tuple(potential.value(batch).shape)
        # one chain without a member axis: a scalar (before: hmc and tacthmc failed inside torch on a vector of terms)
        if size is None and shape not in ((), (1,)):
            raise ValueError(f"{self.name}: the potential returned a value of shape {shape}; for one chain "
                             "without a chain axis it must return a scalar (sum the terms).")
        if size is not None and shape != (size,):
            chains = (f"{state.layout.n_chains} chain(s)" if state.layout.n_chains is not None else "one chain")
            raise ValueError(f"{self.name}: the potential returned a value of shape {shape}; with {chains} of "
                             f"{state.layout.members_per_chain} member(s) it must return one value per member, "
                             f"shape ({size},).")

    def gibbs_step(self, state: SamplerState, potential: Potential) -> None:
        """The prior's Gibbs step on its hyperparameters, when due (:meth:`step` calls it first)."""
        every = getattr(potential, "gibbs_interval", None)
        # the prior's hyperparameters given the positions: a Gibbs step, from the second half of the warm-up on.
        # Before, the chain first meets the data at the prior's initial scale: drawn from the starting weights
        # (a network's initialisation, not the data), the precisions can shrink a slow learner's layers before
        # the data reach them (measured: an LSTM on MNIST-1D at chance with Gibbs steps from step 0, 27 % with
        # them from step 500 of 1000, as with the fan-in prior alone). Warm-up steps are discarded, so the kept
        # draws are those of the exact Gibbs-within-sampler kernel either way.
        if every and state.step % every == 0 and state.step >= self.adaptation_length() // 2:
            # the change of the potential and its gradient, computed only for a kernel that caches them (one that
            # overrides potential_changed: baoab, eqn, pt-langevin); SGHMC's and SGLD's steps take a fresh gradient
            caches = type(self).potential_changed is not Sampler.potential_changed
            change = potential.gibbs_update(state.rng, changes=caches)
            if change is not None:
                if caches and any(part is None for part in change):
                    # a custom prior that does not report its change: the kernel forgets what it cached and
                    # evaluates the potential anew at its next step (one more gradient; with mini-batches on that
                    # step's batch, a valid chain, not bit for bit the one the reported change gives)
                    self.reset_cache(state)
                elif caches:
                    self.potential_changed(state, *change)
                if _warmup.scale_moves(self, state, potential):  # the warm-up's: positions moved
                    self.reset_cache(state)

    # ------------------------------------------------------------------ #
    # compiled transitions (bayesnet.samplers.compiled): what a kernel declares
    # ------------------------------------------------------------------ #
    #: whether the kernel writes its frozen step as a pure function (:meth:`pure_transition`)
    compiles: ClassVar[bool] = False

    def pure_transition(self, potentials, layout: ChainLayout):
        """The frozen step as a pure function of tensors, ``potentials`` the potential's
        (:meth:`~bayesnet.posterior.ChainPosterior.functional`); called with :meth:`transition_inputs`, its
        result applied by :meth:`finish_transition`."""
        raise NotImplementedError(f"{self.name} has no pure transition.")

    def run_compiled(self, state: SamplerState, potential: Potential, batch: Any, fn) -> StepInfo:
        """One frozen step through ``fn``, the compiled :meth:`pure_transition` (:class:`~bayesnet.samplers.compiled.
        CompiledTransition` calls it): by default the whole step, ``fn(*transition_inputs(...))`` finished by
        :meth:`finish_transition`. A kernel whose compiled unit is a part of its step that it repeats (hmc's
        leapfrog step) drives ``fn`` itself here."""
        return self.finish_transition(state, fn(*self.transition_inputs(state, potential, batch)))

    def transition_inputs(self, state: SamplerState, potential: Potential, batch: Any) -> tuple:
        """The arguments of :meth:`pure_transition`'s function for this step, its noise drawn from the chains'
        streams as the eager step draws it."""
        raise NotImplementedError(f"{self.name} has no pure transition.")

    def finish_transition(self, state: SamplerState, outputs) -> StepInfo:
        """Write the pure function's outputs into ``state`` (advancing its step) and return the step's info."""
        raise NotImplementedError(f"{self.name} has no pure transition.")

    def _step(self, state: SamplerState, potential: Potential, batch: Any) -> tuple[SamplerState, StepInfo]:
        """One transition of the kernel, reading ``state.precond`` for its step size and mass."""
        raise NotImplementedError


def require_data_weight(name: str, potential: Potential):
    """The potential's ``set_data_weight``, which the likelihood-tempered form of sampler ``name`` needs.

    Raises
    ------
    ValueError
        If the potential has none (a :class:`~bayesnet.posterior.FunctionPotential`, say)."""
    weigh = getattr(potential, "set_data_weight", None)
    if weigh is None:
        raise ValueError(f"{name} with tempered='likelihood' needs a potential that weights its data term per member "
                         f"(a ChainPosterior's set_data_weight); {type(potential).__name__} has none. Use "
                         "tempered='posterior'.")
    return weigh


@contextlib.contextmanager
def data_weighted(name: str, potential: Potential, weight: Tensor):
    """Inside the block, the potential's data term weighted per member by ``weight`` (S,), ``w U_D + U_P``
    (:meth:`~bayesnet.posterior.ChainPosterior.set_data_weight`, which also records the unweighted ``U_D`` as
    ``data_value``), unweighted again after it: the likelihood-tempered forms of the tempering samplers ``name``.

    Raises
    ------
    ValueError
        If the potential cannot weight its data term (no ``set_data_weight``)."""
    weigh = require_data_weight(name, potential)
    weigh(weight)
    try:
        yield
    finally:
        weigh(None)


def state_fields(state: SamplerState) -> list[str]:
    """Names of a state's fields (for tests and serialisation)."""
    return [f.name for f in fields(state)]


def for_chains(method, state: SamplerState | None, *args):
    """``method(*args, state=state)`` for a sampler's :meth:`~Sampler.steps_per_draw`,
    :meth:`~Sampler.temperature_range` or :meth:`~Sampler.changed_state_settings`, the answer for the chains of
    ``state``; ``method(*args)`` where it takes no state (a registered sampler written before the argument existed
    still runs)."""
    if state is not None and "state" in inspect.signature(method).parameters:
        return method(*args, state=state)
    return method(*args)
