"""What a run keeps: the retained draws (:class:`Trace`) and the per-step sampler statistics (:class:`StepStats`).

Both are bounded whatever the run's length: the trace holds at most
``n_draws`` draws per slot (a ring buffer, on the CPU), the statistics the
last ``capacity`` steps (a ring buffer on the sampling device) plus running
summaries of the steps after burn-in. Neither synchronises the device on a
step that stores nothing.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from ._validation import is_count

__all__ = ["Trace", "StepStats"]


def _host(value, n: int, dtype=np.float64) -> np.ndarray:
    """A per-slot value (tensor, array or scalar) as a host array of shape (n,)."""
    if isinstance(value, Tensor):
        value = value.detach().to("cpu", torch.float64 if dtype == np.float64 else None).numpy()
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


class Trace:
    """Keeps at most ``n_draws`` thinned draws of each of ``n_slots`` slots, on the CPU.

    A *slot* is one packed position set that can produce draws: a chain, or
    one replica of a tempering chain, or one walker of an ensemble (the
    estimators use one slot per member of the chain layout). Steps
    ``1..burn_in`` are discarded; afterwards every step at which a slot's
    ``is_draw`` flag is set is a candidate of that slot, and every
    ``thinning``-th candidate is stored, together with the step's statistics
    (the potential and the sampler's declared fields). When more than
    ``n_draws`` have been stored in a slot its oldest are overwritten (a ring
    buffer), so memory is bounded by ``n_slots x n_draws x D`` floats however
    long the run; the trace then holds the final stretch of each chain
    (Karagiannis, SGLD handout, Remark 23).

    A draw whose position is not finite is never stored (:meth:`offer`
    reports its slot); :meth:`retire` stops a slot and discards its draws
    after a given step (a chain that diverged).

    Parameters
    ----------
    n_draws : int
        Capacity per slot (>= 1).
    burn_in : int, default=0
        Number of initial sampler steps discarded (>= 0).
    thinning : int, default=1
        Keep every ``thinning``-th candidate (>= 1).
    n_slots : int, default=1
        Number of slots stored side by side.
    chain_axis : bool, optional
        Whether the offered positions carry a leading axis of ``n_slots``
        (default: when ``n_slots > 1``; the estimators always pass one).

    Attributes
    ----------
    n_stored : int
        Number of draws currently held, all slots together (<= n_slots * n_draws).
    n_candidates : ndarray of int, shape (n_slots,)
        Candidates seen after burn-in (before thinning), per slot.
    kept_per_slot : ndarray of int, shape (n_slots,)
        Draws stored so far per slot, including those since overwritten, less those discarded.
    active : ndarray of bool, shape (n_slots,)
        Slots that still accept draws (False once retired).
    discarded_per_slot : ndarray of int, shape (n_slots,)
        Draws removed by :meth:`retire`.
    last_due : int
        Slots that were due for storage at the last :meth:`offer` (stored, or refused as not finite): 0 when
        it stored nothing, which an estimator's step reads instead of counting the kept draws.
    """

    def __init__(self, n_draws: int, burn_in: int = 0, thinning: int = 1, n_slots: int = 1,
                 chain_axis: bool | None = None):
        for name, value, low in (("n_draws", n_draws, 1), ("burn_in", burn_in, 0), ("thinning", thinning, 1),
                                 ("n_slots", n_slots, 1)):
            # (before: 5.5 draws were 5, True one)
            if not is_count(value, low):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
        self.n_draws = int(n_draws)
        self.burn_in = int(burn_in)
        self.thinning = int(thinning)
        self.n_slots = int(n_slots)
        self.chain_axis = self.n_slots > 1 if chain_axis is None else bool(chain_axis)
        self.shapes: list[torch.Size] = []
        self._buffer: Tensor | None = None  # (n_slots, n_draws, D)
        self._steps = np.zeros((self.n_slots, self.n_draws), dtype=np.int64)
        # (NaN until a draw is offered with its potential: a draw offered without statistics has no potential, not
        # one of 0.0, which a diagnostic would have read as a value)
        self._stats: dict[str, np.ndarray] = {"potential": np.full((self.n_slots, self.n_draws), np.nan)}
        self._stored = np.zeros(self.n_slots, dtype=np.int64)
        self._next = np.zeros(self.n_slots, dtype=np.int64)  # ring positions
        self.n_candidates = np.zeros(self.n_slots, dtype=np.int64)
        self.kept_per_slot = np.zeros(self.n_slots, dtype=np.int64)
        self.discarded_per_slot = np.zeros(self.n_slots, dtype=np.int64)
        self.active = np.ones(self.n_slots, dtype=bool)
        self.last_due = 0
        # every slot active and a candidate at every step so far: n_candidates are all equal, and a step that
        # stores nothing costs one increment (a step is mostly overhead on small networks)
        self._lockstep = True

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

    @property
    def stat_names(self) -> list[str]:
        """The statistics stored with every draw (``potential`` first)."""
        return list(self._stats)

    # ------------------------------------------------------------------ #
    def offer(self, step: int, position: Sequence[Tensor], stats: Mapping | None = None, is_draw=True) -> np.ndarray:
        """Consider the position after sampler step ``step`` (1-based).

        Parameters
        ----------
        step : int
        position : sequence of Tensor
            With a chain axis each tensor has a leading axis of ``n_slots``; otherwise one chain's parameters.
        stats : mapping of str to Tensor, array or float, optional
            The step's statistics, scalars or shape ``(n_slots,)``: stored with the draws (``potential``
            among them). Only the slots that store a draw are copied to the host. A statistic not given is NaN at
            that draw (the potential too: ``as_array(potentials=True)`` reads NaN, which the diagnostics skip).
        is_draw : bool, ndarray or Tensor of bool, shape (n_slots,)
            The sampler's candidate flags; retired slots are never candidates.

        Returns
        -------
        ndarray of int
            The slots whose position was due for storage but not finite (nothing stored for them; the caller
            decides what a diverged chain means). Empty normally.
        """
        self.last_due = 0
        if step <= self.burn_in:
            return np.empty(0, dtype=np.int64)
        if is_draw is True and self.__dict__.get("_lockstep", False):
            self.n_candidates += 1
            if (int(self.n_candidates[0]) - 1) % self.thinning:
                return np.empty(0, dtype=np.int64)
            slots = np.arange(self.n_slots)
        else:
            self._lockstep = False
            if isinstance(is_draw, Tensor):
                is_draw = is_draw.cpu().numpy()
            flags = np.broadcast_to(np.asarray(is_draw, dtype=bool), (self.n_slots,)) & self.active
            if not flags.any():
                return np.empty(0, dtype=np.int64)
            self.n_candidates += flags
            store = flags & ((self.n_candidates - 1) % self.thinning == 0)
            slots = np.nonzero(store)[0]
            if slots.size == 0:
                return np.empty(0, dtype=np.int64)
        self.last_due = int(slots.size)
        stats = dict(stats or {})
        carried = {}
        with torch.no_grad():
            if not self.shapes:
                self.shapes = [p.shape[1:] if self.chain_axis else p.shape for p in position]
            if self.chain_axis and slots.size == self.n_slots:  # every slot (the usual): no gather
                flat = torch.cat([p.detach().reshape(self.n_slots, -1) for p in position], dim=1)
            elif self.chain_axis:
                idx = torch.as_tensor(slots, device=position[0].device)
                flat = torch.cat([p.detach().index_select(0, idx).reshape(len(slots), -1) for p in position], dim=1)
            else:
                flat = torch.cat([p.detach().reshape(-1) for p in position])[None]
            if slots.size == self.n_slots and flat.shape[0] == self.n_slots:  # the statistics of the position's
                # dtype and device travel with it: one copy to the host per draw (on a GPU every read waits for the
                # device), not one per statistic; any other goes on its own, as does every one of a partial store
                carried = {name: value for name, value in stats.items() if isinstance(value, Tensor)
                           and value.dtype == flat.dtype and value.device == flat.device and value.dim() <= 1
                           and value.numel() in (1, self.n_slots)}
            if carried:
                D = flat.shape[1]
                columns = [value.detach().reshape(-1, 1).expand(self.n_slots, 1) for value in carried.values()]
                host = torch.cat([flat, *columns], dim=1).cpu()
                flat = host[:, :D]
                carried = {name: _host(host[:, D + j], self.n_slots) for j, name in enumerate(carried)}
            else:
                flat = flat.cpu()
        finite = torch.isfinite(flat).all(dim=1).numpy()
        if finite.all():
            bad = np.empty(0, dtype=np.int64)
        else:
            bad = slots[~finite]
            slots, flat = slots[finite], flat[torch.as_tensor(finite)]
            if slots.size == 0:
                return bad
        if self._buffer is None:
            self._buffer = torch.empty((self.n_slots, self.n_draws, flat.shape[1]), dtype=flat.dtype)
        at = self._next[slots]
        if slots.size == self.n_slots and (at == at[0]).all():  # every slot at one ring position (the usual)
            self._buffer[:, int(at[0])] = flat
        else:
            self._buffer[torch.as_tensor(slots), torch.as_tensor(at)] = flat
        self._steps[slots, at] = step
        for name, value in stats.items():
            if name not in self._stats:
                self._stats[name] = np.full((self.n_slots, self.n_draws), np.nan)
            self._stats[name][slots, at] = (carried[name] if name in carried else _host(value, self.n_slots))[slots]
        self._next[slots] = (at + 1) % self.n_draws
        self._stored[slots] = np.minimum(self._stored[slots] + 1, self.n_draws)
        self.kept_per_slot[slots] += 1
        return bad

    def retire(self, slots: Sequence[int], after_step: int) -> int:
        """Stop ``slots`` from taking draws and discard their stored draws of steps after ``after_step``.

        Returns
        -------
        int
            The number of draws discarded.
        """
        removed = 0
        self._lockstep = False
        for s in np.asarray(slots, dtype=np.int64).reshape(-1):
            self.active[s] = False
            order = self._order(s)
            late = int((self._steps[s, order] > after_step).sum())  # chronological: the newest draws
            if late:
                self._next[s] = (self._next[s] - late) % self.n_draws
                self._stored[s] -= late
                self.kept_per_slot[s] -= late
                self.discarded_per_slot[s] += late
                removed += late
        return removed

    def reconfigure(self, n_draws: int | None = None, thinning: int | None = None) -> None:
        """Change the capacity per slot (keeping each slot's newest draws) or the thinning, for a continued run."""
        if thinning is not None:
            self.thinning = int(thinning)
        if n_draws is None or int(n_draws) == self.n_draws:
            return
        n_new = int(n_draws)
        keep = [self._order(s)[-n_new:] for s in range(self.n_slots)]
        counts = np.array([len(k) for k in keep], dtype=np.int64)

        def remap(old: np.ndarray, fill) -> np.ndarray:
            new = np.full((self.n_slots, n_new), fill, dtype=old.dtype)
            for s, k in enumerate(keep):
                new[s, : len(k)] = old[s, k]
            return new

        if self._buffer is not None:
            buffer = torch.empty((self.n_slots, n_new, self._buffer.shape[2]), dtype=self._buffer.dtype)
            for s, k in enumerate(keep):
                buffer[s, : len(k)] = self._buffer[s, torch.as_tensor(k, dtype=torch.long)]
            self._buffer = buffer
        self._steps = remap(self._steps, 0)
        self._stats = {name: remap(v, np.nan) for name, v in self._stats.items()}
        self._stored = counts
        self._next = counts % n_new
        self.n_draws = n_new

    def can_thin_out(self) -> bool:
        """Whether :meth:`thin_out` applies: every slot active and holding each draw it stored, oldest first from
        the ring's start (nothing overwritten or discarded), so that its ``i``-th draw is its candidate
        ``1 + i * thinning``."""
        return bool(self._buffer is not None and self.active.all() and (self._stored > 0).all()
                    and (self.kept_per_slot == self._stored).all() and (self._next == self._stored % self.n_draws).all())

    def thin_out(self) -> None:
        """Keep every other stored draw of each slot (the first, third, ...) and double the thinning.

        The draws kept are the candidates ``1, 1 + 2 thinning, ...``: those a run at twice the thinning would
        have stored, so that offering the chain's later steps goes on with the same spacing (the next draw due
        is the candidate after the last one kept by ``2 thinning``). A run extended this way spans twice the
        steps with the same number of draws (``thinning="auto"`` in the estimators, when the draws have not
        mixed).

        Raises
        ------
        ValueError
            Where :meth:`can_thin_out` is False.
        """
        if not self.can_thin_out():
            raise ValueError("thin_out needs every slot active, holding every draw it stored in order.")
        keep = [np.arange(0, int(n), 2) for n in self._stored]
        counts = np.array([len(k) for k in keep], dtype=np.int64)
        for s, k in enumerate(keep):
            index = torch.as_tensor(k, dtype=torch.long)
            self._buffer[s, : len(k)] = self._buffer[s, index]
            self._steps[s, : len(k)] = self._steps[s, k]
            self._steps[s, len(k):] = 0
            for values in self._stats.values():
                values[s, : len(k)] = values[s, k]
                values[s, len(k):] = np.nan
        self._stored = counts
        self._next = counts % self.n_draws
        self.kept_per_slot = counts.copy()
        self.thinning *= 2

    # ------------------------------------------------------------------ #
    def _order(self, slot: int) -> np.ndarray:
        """Ring positions of ``slot``'s stored draws, oldest first."""
        n = int(self._stored[slot])
        return (np.arange(n) + self._next[slot] - n) % self.n_draws

    def draws(self, per_slot: bool = False):
        """Stored draws in chronological order, slot after slot, shape (n_stored, D), on the CPU.

        With ``per_slot=True`` a list of ``(n_i, D)`` tensors, one per slot. A slot whose draws lie in order in
        the ring (and the whole result, when one slot holds draws or every slot's ring is full and in order)
        comes back as a view of the buffer, without a copy (prediction reads every draw at each call): read it,
        and copy before writing to it.
        """
        if self._buffer is None:
            return [torch.empty((0, 0))] * self.n_slots if per_slot else torch.empty((0, 0))
        parts = [self._slot_draws(s) for s in range(self.n_slots)]
        if per_slot:
            return parts
        held = [p for p in parts if len(p)]
        if len(held) == 1:
            return held[0]  # one slot's draws: its view, not a copy
        if (self._stored == self.n_draws).all() and (self._next == 0).all():  # every ring full and in order
            return self._buffer.reshape(-1, self._buffer.shape[2])  # one view
        return torch.cat(parts)

    def _slot_draws(self, slot: int) -> Tensor:
        """``slot``'s stored draws, oldest first: a view of the buffer when they lie in order (no wrap around
        the ring), a gathered copy otherwise."""
        n = int(self._stored[slot])
        start = (int(self._next[slot]) - n) % self.n_draws
        if start + n <= self.n_draws:
            return self._buffer[slot, start: start + n]
        return self._buffer[slot, torch.as_tensor(self._order(slot), dtype=torch.long)]

    @property
    def steps(self) -> np.ndarray:
        """Sampler step of each stored draw, shape (n_stored,) (slot after slot)."""
        return np.concatenate([self._steps[s, self._order(s)] for s in range(self.n_slots)])

    @property
    def potentials(self) -> np.ndarray:
        """Mini-batch potential at each stored draw, shape (n_stored,) (slot after slot)."""
        return self.stat("potential")

    def stat(self, name: str) -> np.ndarray:
        """A statistic at each stored draw, shape (n_stored,) (slot after slot).

        Raises
        ------
        KeyError
            If the statistic was not stored.
        """
        values = self._stats[name]
        return np.concatenate([values[s, self._order(s)] for s in range(self.n_slots)])

    def slot_of_draw(self) -> np.ndarray:
        """The slot of each stored draw, shape (n_stored,)."""
        return np.repeat(np.arange(self.n_slots), self._stored)

    def unflatten(self, flat: Tensor) -> list[Tensor]:
        """Split a flat draw (D,) or a stack (..., D) into tensors shaped like the parameters."""
        lead = flat.shape[:-1]
        sizes = [int(np.prod(s)) for s in self.shapes]
        return [chunk.reshape(*lead, *s) for chunk, s in zip(flat.split(sizes, dim=-1), self.shapes)]

    def common_slots(self, active_only: bool = False) -> tuple[list[int], int]:
        """The slots that hold draws and the length they share (the smallest count among them); with
        ``active_only``, only the slots still running (a diverged chain's earlier draws left out), unless none
        is."""
        full = [s for s in range(self.n_slots) if self._stored[s] > 0]
        if active_only and any(self.active[s] for s in full):
            full = [s for s in full if self.active[s]]
        return full, (int(min(self._stored[s] for s in full)) if full else 0)

    def as_array(self, potentials: bool = False, stat: str | None = None, active_only: bool = False) -> np.ndarray:
        """Draws shaped (chain, draw, D) for diagnostics: the slots holding draws, each cut to its last ``n``
        draws, ``n`` the smallest count among them (chains must have equal lengths for R-hat).

        With ``potentials=True`` (or ``stat=name``) that statistic at those draws instead, shape (chain, draw).
        ``active_only``: as :meth:`common_slots` (the convergence checks judge the chains that finished).
        """
        full, n = self.common_slots(active_only)
        if potentials:
            stat = "potential"
        if not full or self._buffer is None:
            return np.empty((0, 0)) if stat else np.empty((0, 0, 0))
        if stat is not None:
            return np.stack([self._stats[stat][s, self._order(s)][-n:] for s in full])
        return np.stack([self._buffer[s, torch.as_tensor(self._order(s)[-n:], dtype=torch.long)].numpy()
                         for s in full])

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
        for name in ("_steps", "_stored", "_next", "n_candidates", "kept_per_slot", "discarded_per_slot", "active"):
            setattr(out, name, np.concatenate([getattr(t, name) for t in traces]))
        out._lockstep = bool(out.active.all() and (out.n_candidates == out.n_candidates[0]).all()
                             and all(t.__dict__.get("_lockstep", False) for t in traces))
        names = list(dict.fromkeys(k for t in traces for k in t._stats))
        out._stats = {k: np.concatenate([t._stats.get(k, np.full((t.n_slots, t.n_draws), np.nan)) for t in traces])
                      for k in names}
        return out

    def __setstate__(self, state):
        # traces pickled before the statistics were stored with the draws
        if "_potentials" in state:
            state["_stats"] = {"potential": state.pop("_potentials")}
        n_slots = state["n_slots"]
        state.setdefault("active", np.ones(n_slots, dtype=bool))
        state.setdefault("discarded_per_slot", np.zeros(n_slots, dtype=np.int64))
        state.setdefault("last_due", 0)
        self.__dict__.update(state)

    def __len__(self) -> int:
        return self.n_stored

    def __repr__(self) -> str:
        return (f"Trace(n_stored={self.n_stored}, n_slots={self.n_slots}, n_draws={self.n_draws}, "
                f"burn_in={self.burn_in}, thinning={self.thinning}, n_parameters={self.n_parameters})")


class StepStats:
    """Per-step sampler statistics of ``S`` members, kept on the sampling device.

    Every step's declared fields go into a ring buffer of the last ``capacity`` steps, shape
    ``(capacity, F, S)``, without a host synchronisation (one launch per step); the steps after ``burn_in``
    also count towards running sums, maxima and last values, folded in a block at a time (before the ring
    would overwrite a step not yet counted, and whenever they are read or pickled), from which
    :meth:`summaries` reduces every field as its :class:`~bayesnet.samplers.Stat` declares. Memory is bounded
    by ``capacity x F x S`` floats.

    Parameters
    ----------
    fields : mapping of str to Stat
        The sampler's declared statistics (:attr:`bayesnet.samplers.Sampler.stats`).
    n_members : int
        ``S`` (1 without a chain axis).
    burn_in : int
        Steps ``1..burn_in`` enter the ring buffer only, not the summaries.
    device : torch.device
    capacity : int, default=4096
    """

    def __init__(self, fields: Mapping, n_members: int, burn_in: int, device, capacity: int = 4096):
        self.fields = dict(fields)
        self.names = list(self.fields)
        self.n_members = int(n_members)
        self.burn_in = int(burn_in)
        self.capacity = int(capacity)
        self.device = torch.device(device)
        F, S = len(self.names), self.n_members
        self._ring = torch.full((self.capacity, F, S), float("nan"), dtype=torch.float32, device=self.device)
        self._ring_steps = np.zeros(self.capacity, dtype=np.int64)
        self._sum = torch.zeros(F, S, dtype=torch.float64, device=self.device)
        self._max = torch.full((F, S), -float("inf"), dtype=torch.float64, device=self.device)
        self._last = torch.full((F, S), float("nan"), dtype=torch.float64, device=self.device)
        self.n_recorded = 0
        self.n_summarised = 0
        self._unfolded = 0  # the latest recorded steps that count towards the summaries but are not yet summed

    def _rows(self, values: Mapping) -> list[Tensor]:
        rows, shape = [], (self.n_members,)
        for name in self.names:
            v = values.get(name, float("nan"))
            if isinstance(v, Tensor):  # the usual (S,) float32 statistic on the device goes in as it is: no
                # launches for conversions that would not change it (a step is mostly launch overhead)
                v = v.detach() if v.requires_grad else v
                if v.dtype != torch.float32 or v.device != self.device:
                    v = v.to(self.device, torch.float32)
                rows.append(v if v.shape == shape else v.reshape(-1).expand(self.n_members))
            else:
                rows.append(self._constant(float(v)))
        return rows

    def _constant(self, value: float) -> Tensor:
        """A row of ``value`` for a statistic given as a number (made once per value: no launch per step)."""
        cache = self.__dict__.setdefault("_constants", {})
        key = repr(value)  # nan == nan is False: key by its text
        if key not in cache:
            cache[key] = torch.full((self.n_members,), value, device=self.device)
        return cache[key]

    def record(self, step: int, values: Mapping) -> None:
        """Store step ``step``'s statistics (tensors of shape () or (S,), or floats)."""
        k = self.n_recorded % self.capacity
        torch.stack(self._rows(values), out=self._ring[k])
        self._ring_steps[k] = step
        self.n_recorded += 1
        if step > self.burn_in:  # summed later, a block at a time (_fold): a step is one launch here
            self._unfolded += 1
            if self._unfolded == self.capacity:  # before the ring overwrites a step not yet summed
                self._fold()

    def _fold(self) -> None:
        """Add the recorded steps not yet summarised (the latest ``_unfolded`` rows of the ring) to the running
        sums, maxima and last values."""
        n = self.__dict__.get("_unfolded", 0)
        if not n:
            return
        rows = self._ring_rows(self._latest(n)).double()  # (n, F, S)
        self._sum += rows.sum(0)
        torch.maximum(self._max, rows.amax(0), out=self._max)
        self._last = rows[-1].clone()
        self.n_summarised += n
        self._unfolded = 0

    def _latest(self, n: int) -> np.ndarray:
        """Ring positions of the latest ``n`` recorded steps, oldest first."""
        return (np.arange(n) + self.n_recorded - n) % self.capacity

    def _ring_rows(self, order: np.ndarray) -> Tensor:
        """The ring's rows at positions ``order`` (non-empty), ``(n, F, S)``: a view when they are contiguous, else
        a gather."""
        lo = int(order[0])
        if order[-1] == lo + order.size - 1:
            return self._ring[lo: lo + order.size]
        return self._ring[torch.as_tensor(order, device=self.device)]

    def per_step(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The recorded window: ``steps`` (n,) and each field as ``(S, n)``, oldest first (synchronises)."""
        return self.since(None)

    def since(self, step: int | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """As :meth:`per_step`, only the recorded steps after ``step`` (all with None); synchronises only when
        there are some."""
        order = self._latest(min(self.n_recorded, self.capacity))
        steps = self._ring_steps[order]
        if step is not None:
            order = order[steps > step]
            steps = steps[steps > step]
        if not order.size:
            return steps.copy(), {name: np.empty((self.n_members, 0), dtype=np.float32) for name in self.names}
        ring = self._ring_rows(order).cpu().numpy()  # (n, F, S)
        return steps.copy(), {name: ring[:, i, :].T.copy() for i, name in enumerate(self.names)}

    def summaries(self, members: np.ndarray | None = None) -> dict[str, float]:
        """Each field reduced over the summarised steps as its Stat declares, then averaged over ``members``
        (a boolean mask of the members to include; all by default), under its summary name."""
        self._fold()
        if self.n_summarised == 0:
            return {}
        mask = np.ones(self.n_members, dtype=bool) if members is None else np.asarray(members, dtype=bool)
        if not mask.any():
            return {}
        sums, maxima, last = (t.cpu().numpy()[:, mask] for t in (self._sum, self._max, self._last))
        out = {}
        for i, name in enumerate(self.names):
            stat = self.fields[name]
            key = stat.summary or name
            if stat.reduce == "mean":
                value = float(np.mean(sums[i])) / self.n_summarised
            elif stat.reduce == "sum":
                value = float(np.sum(sums[i]))
            elif stat.reduce == "max":
                value = float(np.max(maxima[i]))
            else:
                value = float(np.mean(last[i]))
            if np.isfinite(value) or stat.reduce != "mean":
                out[key] = int(round(value)) if stat.reduce == "sum" and np.isfinite(value) else value
        return out

    def member_means(self, name: str) -> np.ndarray | None:
        """The mean of field ``name`` over the summarised steps, per member, shape ``(S,)`` (None before any)."""
        self._fold()
        if self.n_summarised == 0 or name not in self.names:
            return None
        return self._sum[self.names.index(name)].cpu().numpy() / self.n_summarised

    def __getstate__(self):
        self._fold()
        state = self.__dict__.copy()
        state.pop("_constants", None)  # on the device: made again where the copy lands
        for key in ("_ring", "_sum", "_max", "_last"):
            state[key] = state[key].cpu()
        state["device"] = str(self.device)
        return state

    def __setstate__(self, state):
        device = torch.device(state["device"])
        if device.type == "cuda" and not torch.cuda.is_available():
            device = torch.device("cpu")
        for key in ("_ring", "_sum", "_max", "_last"):
            state[key] = state[key].to(device)
        state["device"] = device
        state.setdefault("_unfolded", 0)  # pickled when every recorded step was summed at once
        self.__dict__.update(state)
