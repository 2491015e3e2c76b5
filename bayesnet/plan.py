"""How a run is laid out: the chain layout and the run plan.

:class:`ChainLayout` is the one name for how the leading axis of every
position tensor packs chains and their members (tempering replicas,
ensemble walkers). :class:`RunPlan` holds the planning arithmetic of a fit:
batch size, steps, epochs, burn-in, thinning. The estimators build one per
fit and hand it to the sampler (:meth:`bayesnet.samplers.Sampler.configure`),
which reads what it needs (the planned steps, the burn-in as its warm-up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ._validation import is_count

__all__ = ["ChainLayout", "RunPlan"]


@dataclass(frozen=True)
class ChainLayout:
    """Chains and their members on the leading axis of the position tensors.

    Parameters
    ----------
    n_chains : int or None
        Independent chains ``C``; None for one chain whose tensors have no chain axis (the analytic tests'
        product targets, direct use of a kernel).
    members_per_chain : int, default=1
        Position sets that make up one chain ``M``: 1, or the tempering replicas (pt-langevin), or the
        ensemble walkers (eqn).

    Notes
    -----
    Members are packed chain major: member ``m`` of chain ``c`` sits at index ``c * M + m`` of the leading
    axis of size ``S = C * M`` (:attr:`n_members`).
    """

    n_chains: int | None = None
    members_per_chain: int = 1

    def __post_init__(self):
        if self.n_chains is not None and not is_count(self.n_chains):
            raise ValueError(f"n_chains must be a positive integer or None, got {self.n_chains!r}.")
        if not is_count(self.members_per_chain):
            raise ValueError(f"members_per_chain must be a positive integer, got {self.members_per_chain!r}.")

    @property
    def chains(self) -> int:
        """``C`` (1 without a chain axis)."""
        return 1 if self.n_chains is None else int(self.n_chains)

    @property
    def n_members(self) -> int | None:
        """``S = C * M``, the size of the leading axis; None when there is none (one chain, one member)."""
        if self.n_chains is None and self.members_per_chain == 1:
            return None
        return self.chains * int(self.members_per_chain)

    @property
    def has_axis(self) -> bool:
        """Whether the position tensors carry the leading member axis."""
        return self.n_members is not None

    def chain_of_member(self, member: int) -> int:
        """The chain a packed member belongs to."""
        return int(member) // int(self.members_per_chain)


@dataclass(frozen=True)
class RunPlan:
    """The planning arithmetic of one fit call.

    Parameters
    ----------
    n_data : int
        Rows of training data ``N``.
    batch_size : int
        The most rows per mini-batch (``N`` for the full batch); an epoch's rows are spread evenly over
        ``ceil(N / batch_size)`` batches.
    burn_in : int
        Steps discarded at the start of the run; the samplers' warm-up happens in them.
    n_draws : int
        Draws wanted per chain slot.
    thinning : int
        Every ``thinning``-th candidate step after burn-in is kept.
    steps_per_draw : float, default=1.0
        The sampler's expected steps per candidate draw.
    max_epochs : int or None, default=None
        A fixed number of epochs instead of the planned steps.
    layout : ChainLayout, default=ChainLayout(1)
    step_offset : int, default=0
        Steps already taken by the chain before this call (a continued fit).

    Attributes
    ----------
    batches_per_epoch, epochs, n_steps
        Derived: ``epochs`` epochs reach at least ``burn_in + n_draws * thinning * steps_per_draw`` steps (or
        ``max_epochs`` epochs); ``n_steps`` is that many steps, the last epoch cut there (or ``epochs *
        batches_per_epoch`` with ``max_epochs``).
    """

    n_data: int
    batch_size: int
    burn_in: int
    n_draws: int
    thinning: int
    steps_per_draw: float = 1.0
    max_epochs: int | None = None
    layout: ChainLayout = ChainLayout(1)
    step_offset: int = 0

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.n_data / self.batch_size)

    @property
    def wanted_steps(self) -> int:
        """Steps the draws need: ``burn_in + n_draws * thinning * steps_per_draw`` (rounded up)."""
        return int(math.ceil(self.burn_in + self.n_draws * self.thinning * self.steps_per_draw))

    @property
    def epochs(self) -> int:
        if self.max_epochs is not None:
            return int(self.max_epochs)
        return max(1, math.ceil(self.wanted_steps / self.batches_per_epoch))

    @property
    def n_steps(self) -> int:
        """Planned steps of this call: ``wanted_steps`` (the last epoch cut there), or ``max_epochs`` whole epochs."""
        if self.max_epochs is None:
            return self.wanted_steps
        return self.epochs * self.batches_per_epoch

    @property
    def total_steps(self) -> int:
        """Planned length of the whole chain: the steps before this call plus this call's."""
        return self.step_offset + self.n_steps

    def continued(self, step_offset: int, **changes) -> "RunPlan":
        """The plan of a continued fit that starts after ``step_offset`` steps."""
        return replace(self, step_offset=int(step_offset), **changes)
