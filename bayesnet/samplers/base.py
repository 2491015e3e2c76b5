"""Kernel interface shared by all samplers, and the sampler registry.

A sampler is a small object that holds only hyperparameters. Its chain lives
in an explicit :class:`SamplerState`; one call of :meth:`Sampler.step`
advances it by one transition and returns diagnostics in a :class:`StepInfo`.
Randomness comes only from the ``torch.Generator`` passed in, so the same
generator seed reproduces the same chain.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, ClassVar, Protocol, Sequence

import torch
from torch import Tensor

__all__ = [
    "Potential",
    "SamplerState",
    "StepInfo",
    "Sampler",
    "DivergenceError",
    "register_sampler",
    "get_sampler_class",
    "make_sampler",
    "available_samplers",
]


class Potential(Protocol):
    """What a sampler needs from the target: ``U`` and ``grad U`` on a batch.

    ``parameters`` are the position tensors the sampler moves (leaf tensors,
    updated in place); ``value_and_grad(batch)`` returns the (mini-batch
    estimate of the) potential ``U(theta) = -log posterior`` as a 0-d tensor
    and its gradient, one tensor per parameter; ``value(batch)`` returns the
    potential alone, without building a graph (Metropolis tests on proposals).
    See :class:`bayesnet.posterior.Posterior` for the network posterior.

    The chain axis: when the position tensors carry a leading axis of ``S``
    packed members (chains, tempering replicas or ensemble walkers; see
    :meth:`Sampler.init`), both methods return one potential per member,
    shape ``(S,)``, and the gradients are those of their sum, i.e. every
    member's own gradient.
    """

    parameters: list[Tensor]

    def value_and_grad(self, batch: Any) -> tuple[Tensor, list[Tensor]]: ...

    def value(self, batch: Any) -> Tensor: ...


def is_integer(value: Any, low: int) -> bool:
    """Whether ``value`` is an integer (not a bool) of at least ``low``."""
    return not isinstance(value, bool) and isinstance(value, Integral) and value >= low


def per_chain_mean(value: Any) -> float:
    """A diagnostic as one float (for skorch's history).

    Parameters
    ----------
    value : float, bool or Tensor of shape () or (S,)

    Returns
    -------
    float
        The mean over the chain axis for a per-member tensor, else the value.
    """
    if isinstance(value, Tensor):
        return float(value.float().mean()) if value.numel() != 1 else float(value.reshape(()))
    return float(value)


class DivergenceError(FloatingPointError):
    """A chain produced a non-finite potential or position.

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


@dataclass
class SamplerState:
    """Explicit state of a chain.

    Attributes
    ----------
    position : list of Tensor
        ``theta``, one tensor per parameter; these are the potential's own
        parameter tensors, updated in place.
    momentum : list of Tensor or None
        ``r`` in velocity-per-step units (see :mod:`.integrators`), or None for
        first-order samplers such as SGLD.
    step : int
        Number of transitions taken so far.
    extra : dict
        Sampler-specific variables (thermostats, tempering variable, ...).
    """

    position: list[Tensor]
    momentum: list[Tensor] | None = None
    step: int = 0
    extra: dict = field(default_factory=dict)

    def __setstate__(self, state):
        # pickle does not keep views sharing storage: make the momenta views of
        # the flat buffer again, as the kernels update one through the other.
        from .integrators import momentum_views

        self.__dict__.update(state)
        flat = self.extra.get("flat_momentum")
        if flat is not None and self.momentum is not None:
            self.momentum = momentum_views(flat, self.momentum)


@dataclass
class StepInfo:
    """Diagnostics of one transition.

    Attributes
    ----------
    potential : Tensor
        0-d tensor, or ``(S,)`` with a chain axis: the (mini-batch) potential ``U`` evaluated during the step
        (SGHMC: at the position the step returns; SGLD: at the position it
        started from, where its gradient is taken).
    kinetic_energy : Tensor or None
        ``K = sum(r**2) / (2 eta)`` after the step, for samplers with momentum
        (sgnht: at the start of the step, the value its thermostat uses).
    kinetic_temperature : Tensor or None
        ``2 K / D``; its long-run average should equal ``temperature``.
    is_draw : bool or Tensor
        Whether the new position counts as a sample (TACT-HMC collects only
        at unit temperature; HMC counts each trajectory; parallel tempering
        only the replicas at temperature 1). With a chain axis a bool
        tensor of shape ``(S,)``, one flag per packed member.
    extra : dict
        Further diagnostics (acceptance, thermostat value, ...): floats, or
        ``(S,)`` tensors with a chain axis.
    """

    potential: Tensor
    kinetic_energy: Tensor | None = None
    kinetic_temperature: Tensor | None = None
    is_draw: bool = True
    extra: dict = field(default_factory=dict)

    def scalars(self) -> dict[str, float]:
        """All diagnostics as Python floats (for skorch's history); per-chain values are averaged over
        the chain axis."""
        out = {"potential": per_chain_mean(self.potential)}
        if self.kinetic_energy is not None:
            out["kinetic_energy"] = per_chain_mean(self.kinetic_energy)
        if self.kinetic_temperature is not None:
            out["kinetic_temperature"] = per_chain_mean(self.kinetic_temperature)
        for key, val in self.extra.items():
            out[key] = per_chain_mean(val)
        return out


class Sampler:
    """Base class of the sampling kernels.

    Subclasses declare their hyperparameters as keyword arguments of
    ``__init__`` with defaults, list the strictly positive ones in
    ``_positive``, the non-negative ones in ``_non_negative`` and the
    integer ones with their minimum in ``_integers``, and implement
    :meth:`init` and :meth:`step`.

    Raises
    ------
    TypeError
        On a hyperparameter the sampler does not have (the message lists the
        valid ones).
    ValueError
        On a non-finite or out-of-range hyperparameter.
    """

    name: ClassVar[str] = ""
    #: thinning the estimators use for ``thinning="auto"`` (samplers that thin themselves use 1)
    default_thinning: ClassVar[int] = 10
    #: whether the kernel's Metropolis test needs the exact (full-batch) potential (estimators then default to it)
    exact_potential: ClassVar[bool] = False
    _positive: ClassVar[tuple[str, ...]] = ()
    _non_negative: ClassVar[tuple[str, ...]] = ()
    #: integer hyperparameters and their smallest allowed value
    _integers: ClassVar[dict[str, int]] = {}

    @classmethod
    def hyperparameter_names(cls) -> list[str]:
        """Names accepted by ``__init__`` (and hence as ``sampler__<name>``)."""
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    @classmethod
    def from_params(cls, **params: Any) -> "Sampler":
        """Build the sampler, with a clear error for unknown hyperparameters."""
        valid = cls.hyperparameter_names()
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise TypeError(
                f"sampler {cls.name!r} got unknown hyperparameter(s) {unknown}; "
                f"valid ones are {valid} (set them as sampler__<name>)."
            )
        return cls(**params)

    def _validate(self) -> None:
        for key in self._positive + self._non_negative:
            val = getattr(self, key)
            if isinstance(val, bool) or not isinstance(val, Real) or not math.isfinite(val):
                raise ValueError(f"{self.name}: {key} must be a finite number, got {val!r}.")
            if key in self._positive and val <= 0:
                raise ValueError(f"{self.name}: {key} must be > 0, got {val!r}.")
            if key in self._non_negative and val < 0:
                raise ValueError(f"{self.name}: {key} must be >= 0, got {val!r}.")
        for key, low in self._integers.items():
            val = getattr(self, key)
            if not is_integer(val, low):
                raise ValueError(f"{self.name}: {key} must be an integer >= {low}, got {val!r}.")

    def members_per_chain(self) -> int:
        """Position sets one chain packs on the leading axis: 1, or the tempering replicas (pt-langevin) or
        ensemble walkers (eqn) that make up one chain. ``init(..., n_chains=C)`` expects ``C * members``."""
        return 1

    def steps_per_draw(self) -> float:
        """Expected number of steps per candidate draw (``StepInfo.is_draw``); 1 unless the sampler
        collects only some of its steps, as TACT-HMC does. The estimators plan their run length with it."""
        return 1.0

    def reset_cache(self, state: SamplerState) -> None:
        """Forget values cached from earlier batches (called when ``partial_fit`` continues on new data)."""

    def state_summary(self, state: SamplerState) -> dict:
        """Run-level diagnostics kept in the state (acceptance and swap rates, ...), for ``diagnostics_``."""
        return {}

    def divergence_hint(self, state: SamplerState) -> str:
        """The settings to name when this chain diverges (the estimators put it in ``DivergenceError``)."""
        step_size = getattr(self, "step_size", None)
        return f"sampler__step_size={step_size:g}" if step_size is not None else "the step size"

    def get_params(self) -> dict[str, Any]:
        """Current hyperparameters."""
        return {k: getattr(self, k) for k in self.hyperparameter_names()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def init(self, position: Sequence[Tensor], generator: torch.Generator | None,
             n_chains: int | None = None) -> SamplerState:
        """Start a chain at ``position`` (the tensors are used, not copied).

        Parameters
        ----------
        position : sequence of Tensor
            The parameters. With ``n_chains`` every tensor has a leading axis
            of ``S = n_chains * members_per_chain()`` packed members, chain
            major (member ``m`` of chain ``c`` at index ``c * members + m``).
        generator : torch.Generator or None
            Source of all randomness, on the position's device.
        n_chains : int, optional
            Number of independent chains on the leading axis; None for one
            chain without a chain axis (samplers with several members per
            chain then expect the leading axis of their members).

        Raises
        ------
        ValueError
            If a position tensor lacks the leading axis ``n_chains`` needs.
        """
        raise NotImplementedError

    def _check_chain_axis(self, position: Sequence[Tensor], n_chains: int | None) -> int | None:
        """Validate the leading axis; return the number of packed members S (None without a chain axis)."""
        members = self.members_per_chain()
        if n_chains is None and members == 1:
            return None
        size = (1 if n_chains is None else int(n_chains)) * members
        bad = [tuple(p.shape) for p in position if p.ndim == 0 or p.shape[0] != size]
        if bad:
            raise ValueError(
                f"{self.name}: with n_chains={n_chains} and {members} member(s) per chain every position tensor "
                f"needs a leading axis of {size}; got shapes {bad}.")
        return size

    def step(
        self, state: SamplerState, potential: Potential, batch: Any, generator: torch.Generator | None
    ) -> tuple[SamplerState, StepInfo]:
        """Advance the chain by one transition on ``batch`` (in place)."""
        raise NotImplementedError


_REGISTRY: dict[str, type[Sampler]] = {}


def register_sampler(cls: type[Sampler]) -> type[Sampler]:
    """Class decorator that makes a sampler available under ``cls.name``."""
    if not cls.name:
        raise ValueError("a registered sampler needs a non-empty `name`")
    _REGISTRY[cls.name] = cls
    return cls


def available_samplers() -> list[str]:
    """Names of the registered samplers, sorted."""
    return sorted(_REGISTRY)


def get_sampler_class(name: str) -> type[Sampler]:
    """Look up a sampler class by name.

    Raises
    ------
    ValueError
        If ``name`` is not registered; the message lists the valid names.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown sampler {name!r}; valid names are {available_samplers()}."
        ) from None


def make_sampler(sampler: "str | Sampler | type[Sampler]", **params: Any) -> Sampler:
    """Resolve ``sampler`` (a name, class or instance) into a configured instance.

    ``params`` override an instance's hyperparameters.
    """
    if isinstance(sampler, Sampler):
        merged = {**sampler.get_params(), **params}
        return type(sampler).from_params(**merged)
    if isinstance(sampler, type) and issubclass(sampler, Sampler):
        return sampler.from_params(**params)
    return get_sampler_class(sampler).from_params(**params)
