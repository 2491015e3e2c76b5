"""Retained posterior draws: burn-in, thinning and a bounded store off the accelerator, per chain."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["Trace"]


class Trace:
    """Keeps at most ``n_draws`` thinned draws of each of ``n_slots`` chains, on the CPU.

    A *slot* is one packed position set that can produce draws: a chain, or
    one replica of a tempering chain, or one walker of an ensemble (the
    estimators use one slot per member of the sampler's leading axis).
    Steps ``1..burn_in`` are discarded; afterwards every step at which a
    slot's ``is_draw`` flag is set is a candidate of that slot, and every
    ``thinning``-th candidate is stored. When more than ``n_draws`` have been
    stored in a slot its oldest are overwritten (a ring buffer), so memory is
    bounded by ``n_slots x n_draws x D`` floats however long the run; the
    trace then holds the final stretch of each chain (paper 001 Remark 23).

    Parameters
    ----------
    n_draws : int
        Capacity per slot (>= 1).
    burn_in : int, default=0
        Number of initial sampler steps discarded (>= 0).
    thinning : int, default=1
        Keep every ``thinning``-th candidate (>= 1).
    n_slots : int, default=1
        Number of chains (slots) stored side by side.
    chain_axis : bool, optional
        Whether the offered positions carry a leading axis of ``n_slots``
        (default: when ``n_slots > 1``; the estimators always pass one).

    Attributes
    ----------
    n_stored : int
        Number of draws currently held, all slots together (<= n_slots * n_draws).
    n_candidates : ndarray of int, shape (n_slots,)
        Candidates seen after burn-in (before thinning), per slot.
    n_kept : int
        Draws stored so far, all slots together, including those since overwritten.
    """

    def __init__(self, n_draws: int, burn_in: int = 0, thinning: int = 1, n_slots: int = 1,
                 chain_axis: bool | None = None):
        if n_draws < 1 or burn_in < 0 or thinning < 1 or n_slots < 1:
            raise ValueError("need n_draws >= 1, burn_in >= 0, thinning >= 1 and n_slots >= 1.")
        self.n_draws = int(n_draws)
        self.burn_in = int(burn_in)
        self.thinning = int(thinning)
        self.n_slots = int(n_slots)
        self.chain_axis = self.n_slots > 1 if chain_axis is None else bool(chain_axis)
        self.shapes: list[torch.Size] = []
        self._buffer: Tensor | None = None  # (n_slots, n_draws, D)
        self._steps = np.zeros((self.n_slots, self.n_draws), dtype=np.int64)
        self._potentials = np.zeros((self.n_slots, self.n_draws), dtype=np.float64)
        self._stored = np.zeros(self.n_slots, dtype=np.int64)
        self._next = np.zeros(self.n_slots, dtype=np.int64)  # ring positions
        self.n_candidates = np.zeros(self.n_slots, dtype=np.int64)
        self.kept_per_slot = np.zeros(self.n_slots, dtype=np.int64)

    @property
    def n_parameters(self) -> int:
        return sum(int(np.prod(s)) for s in self.shapes)

    @property
    def n_stored(self) -> int:
        return int(self._stored.sum())

    @property
    def n_kept(self) -> int:
        return int(self.kept_per_slot.sum())

    @property
    def stored_per_slot(self) -> np.ndarray:
        """Draws currently held in each slot, shape (n_slots,)."""
        return self._stored.copy()

    def offer(self, step: int, position: Sequence[Tensor], potential=float("nan"), is_draw=True) -> int:
        """Consider the position after sampler step ``step`` (1-based); return the number of draws stored.

        Parameters
        ----------
        step : int
        position : sequence of Tensor
            With ``n_slots == 1`` the parameters of one chain (no chain axis);
            otherwise each tensor has a leading axis of ``n_slots``.
        potential : float or Tensor, scalar or shape (n_slots,)
        is_draw : bool or bool Tensor/array of shape (n_slots,)

        Raises
        ------
        FloatingPointError
            If a position selected for storage is not finite (the caller turns
            this into a :class:`~bayesnet.samplers.DivergenceError`); nothing
            is stored then.
        """
        if step <= self.burn_in:
            return 0
        flags = np.broadcast_to(np.asarray(is_draw.cpu() if isinstance(is_draw, Tensor) else is_draw, dtype=bool),
                                (self.n_slots,))
        if not flags.any():
            return 0
        self.n_candidates += flags
        store = flags & ((self.n_candidates - 1) % self.thinning == 0)
        slots = np.nonzero(store)[0]
        if slots.size == 0:
            return 0
        with torch.no_grad():
            if self._buffer is None:
                self.shapes = [p.shape[1:] if self.chain_axis else p.shape for p in position]
            if self.chain_axis:
                idx = torch.as_tensor(slots, device=position[0].device)
                flat = torch.cat([p.detach().index_select(0, idx).reshape(len(slots), -1) for p in position], dim=1)
            else:
                flat = torch.cat([p.detach().reshape(-1) for p in position])[None]
            flat = flat.cpu()
            if not bool(torch.isfinite(flat).all()):
                raise FloatingPointError(f"non-finite parameters at step {step}")
            if self._buffer is None:
                self._buffer = torch.empty((self.n_slots, self.n_draws, flat.shape[1]), dtype=flat.dtype)
            self._buffer[torch.as_tensor(slots), torch.as_tensor(self._next[slots])] = flat
        pot = np.broadcast_to(np.asarray(potential.detach().cpu() if isinstance(potential, Tensor) else potential,
                                         dtype=np.float64), (self.n_slots,))
        self._steps[slots, self._next[slots]] = step
        self._potentials[slots, self._next[slots]] = pot[slots]
        self._next[slots] = (self._next[slots] + 1) % self.n_draws
        self._stored[slots] = np.minimum(self._stored[slots] + 1, self.n_draws)
        self.kept_per_slot[slots] += 1
        return int(slots.size)

    def _order(self, slot: int) -> np.ndarray:
        n = int(self._stored[slot])
        if n < self.n_draws:
            return np.arange(n)
        return (np.arange(self.n_draws) + self._next[slot]) % self.n_draws

    def draws(self, per_slot: bool = False):
        """Stored draws in chronological order, slot after slot, shape (n_stored, D), on the CPU.

        With ``per_slot=True`` a list of ``(n_i, D)`` tensors, one per slot.
        """
        if self._buffer is None:
            return [torch.empty((0, 0))] * self.n_slots if per_slot else torch.empty((0, 0))
        parts = [self._buffer[s, torch.as_tensor(self._order(s))] for s in range(self.n_slots)]
        return parts if per_slot else torch.cat(parts)

    @property
    def steps(self) -> np.ndarray:
        """Sampler step of each stored draw, shape (n_stored,) (slot after slot)."""
        return np.concatenate([self._steps[s, self._order(s)] for s in range(self.n_slots)])

    @property
    def potentials(self) -> np.ndarray:
        """Mini-batch potential at each stored draw, shape (n_stored,) (slot after slot)."""
        return np.concatenate([self._potentials[s, self._order(s)] for s in range(self.n_slots)])

    def slot_of_draw(self) -> np.ndarray:
        """The slot (chain) of each stored draw, shape (n_stored,)."""
        return np.repeat(np.arange(self.n_slots), self._stored)

    def unflatten(self, flat: Tensor) -> list[Tensor]:
        """Split a flat draw (D,) or a stack (n, D) into tensors shaped like the parameters."""
        lead = flat.shape[:-1]
        sizes = [int(np.prod(s)) for s in self.shapes]
        return [chunk.reshape(*lead, *s) for chunk, s in zip(flat.split(sizes, dim=-1), self.shapes)]

    def as_array(self, potentials: bool = False) -> np.ndarray:
        """Draws shaped (chain, draw, D) for diagnostics: the slots holding draws, each cut to the last
        ``n`` draws, ``n`` the smallest count among them (chains must have equal lengths for R-hat).

        With ``potentials=True`` the potentials at those draws instead, shape (chain, draw).
        """
        full = [s for s in range(self.n_slots) if self._stored[s] > 0]
        if not full or self._buffer is None:
            return np.empty((0, 0)) if potentials else np.empty((0, 0, 0))
        n = int(min(self._stored[s] for s in full))
        if potentials:
            return np.stack([self._potentials[s, self._order(s)][-n:] for s in full])
        return np.stack([self._buffer[s, torch.as_tensor(self._order(s)[-n:])].numpy() for s in full])

    @classmethod
    def concatenate(cls, traces: Sequence["Trace"]) -> "Trace":
        """One trace holding the slots of several traces side by side (e.g. chains fitted in separate
        processes); they must share ``n_draws``, ``burn_in``, ``thinning`` and the parameter shapes.

        Raises
        ------
        ValueError
            If the traces differ in those settings.
        """
        first = traces[0]
        for t in traces[1:]:
            if (t.n_draws, t.burn_in, t.thinning) != (first.n_draws, first.burn_in, first.thinning) or \
                    (t.shapes and first.shapes and list(t.shapes) != list(first.shapes)):
                raise ValueError("traces with different n_draws, burn_in, thinning or parameter shapes.")
        out = cls(first.n_draws, first.burn_in, first.thinning, n_slots=sum(t.n_slots for t in traces),
                  chain_axis=True)
        out.shapes = next((t.shapes for t in traces if t.shapes), [])
        buffers = [t._buffer for t in traces]
        if any(b is not None for b in buffers):
            dim = next(b.shape[2] for b in buffers if b is not None)
            dtype = next(b.dtype for b in buffers if b is not None)
            out._buffer = torch.cat([b if b is not None else torch.zeros((t.n_slots, t.n_draws, dim), dtype=dtype)
                                     for b, t in zip(buffers, traces)])
        for name in ("_steps", "_potentials", "_stored", "_next", "n_candidates", "kept_per_slot"):
            setattr(out, name, np.concatenate([getattr(t, name) for t in traces]))
        return out

    def __len__(self) -> int:
        return self.n_stored

    def __repr__(self) -> str:
        return (f"Trace(n_stored={self.n_stored}, n_slots={self.n_slots}, n_draws={self.n_draws}, "
                f"burn_in={self.burn_in}, thinning={self.thinning}, n_parameters={self.n_parameters})")
