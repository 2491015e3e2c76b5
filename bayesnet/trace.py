"""Retained posterior draws: burn-in, thinning and a bounded store off the accelerator."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["Trace"]


class Trace:
    """Keeps at most ``n_draws`` thinned draws of a chain, on the CPU.

    Steps ``1..burn_in`` are discarded; afterwards every step whose
    ``is_draw`` flag is set is a candidate, and every ``thinning``-th
    candidate is stored. When more than ``n_draws`` have been stored the
    oldest are overwritten (a ring buffer), so memory is bounded by
    ``n_draws x D`` floats however long the run; the trace then holds the
    final stretch of the chain (paper 001 Remark 23).

    Parameters
    ----------
    n_draws : int
        Capacity (>= 1).
    burn_in : int, default=0
        Number of initial sampler steps discarded (>= 0).
    thinning : int, default=1
        Keep every ``thinning``-th candidate (>= 1).

    Attributes
    ----------
    n_stored : int
        Number of draws currently held (<= n_draws).
    n_candidates : int
        Candidates seen after burn-in (before thinning).
    n_kept : int
        Draws stored so far, including those since overwritten.
    """

    def __init__(self, n_draws: int, burn_in: int = 0, thinning: int = 1):
        if n_draws < 1 or burn_in < 0 or thinning < 1:
            raise ValueError("need n_draws >= 1, burn_in >= 0 and thinning >= 1.")
        self.n_draws = int(n_draws)
        self.burn_in = int(burn_in)
        self.thinning = int(thinning)
        self.shapes: list[torch.Size] = []
        self._buffer: Tensor | None = None
        self._steps = np.zeros(self.n_draws, dtype=np.int64)
        self._potentials = np.zeros(self.n_draws, dtype=np.float64)
        self.n_stored = 0
        self.n_candidates = 0
        self.n_kept = 0
        self._next = 0  # ring position

    @property
    def n_parameters(self) -> int:
        return sum(int(np.prod(s)) for s in self.shapes)

    def offer(self, step: int, position: Sequence[Tensor], potential: float | Tensor = float("nan"),
              is_draw: bool = True) -> bool:
        """Consider the position after sampler step ``step`` (1-based); return True if stored.

        Raises
        ------
        FloatingPointError
            If a position selected for storage is not finite (the caller turns
            this into a :class:`~bayesnet.samplers.DivergenceError`); nothing
            is stored then.
        """
        if step <= self.burn_in or not is_draw:
            return False
        self.n_candidates += 1
        if (self.n_candidates - 1) % self.thinning:
            return False
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in position])
            if not bool(torch.isfinite(flat).all()):
                raise FloatingPointError(f"non-finite parameters at step {step}")
            if self._buffer is None:
                self.shapes = [p.shape for p in position]
                self._buffer = torch.empty((self.n_draws, flat.numel()), dtype=flat.dtype, device="cpu")
            self._buffer[self._next].copy_(flat)
        self._steps[self._next] = step
        self._potentials[self._next] = float(potential)
        self._next = (self._next + 1) % self.n_draws
        self.n_stored = min(self.n_stored + 1, self.n_draws)
        self.n_kept = getattr(self, "n_kept", 0) + 1
        return True

    def _order(self) -> np.ndarray:
        if self.n_stored < self.n_draws:
            return np.arange(self.n_stored)
        return (np.arange(self.n_draws) + self._next) % self.n_draws

    def draws(self) -> Tensor:
        """Stored draws in chronological order, shape (n_stored, D), on the CPU."""
        if self._buffer is None:
            return torch.empty((0, 0))
        return self._buffer[torch.as_tensor(self._order())]

    @property
    def steps(self) -> np.ndarray:
        """Sampler step of each stored draw, shape (n_stored,)."""
        return self._steps[self._order()]

    @property
    def potentials(self) -> np.ndarray:
        """Mini-batch potential at each stored draw, shape (n_stored,)."""
        return self._potentials[self._order()]

    def unflatten(self, flat: Tensor) -> list[Tensor]:
        """Split a flat draw (D,) or a stack (n, D) into tensors shaped like the parameters."""
        lead = flat.shape[:-1]
        sizes = [int(np.prod(s)) for s in self.shapes]
        return [chunk.reshape(*lead, *s) for chunk, s in zip(flat.split(sizes, dim=-1), self.shapes)]

    def as_array(self) -> np.ndarray:
        """Draws as a NumPy array shaped (chain, draw, D) = (1, n_stored, D) for diagnostics."""
        return self.draws().numpy()[None]

    def __len__(self) -> int:
        return self.n_stored

    def __repr__(self) -> str:
        return (f"Trace(n_stored={self.n_stored}, n_draws={self.n_draws}, burn_in={self.burn_in}, "
                f"thinning={self.thinning}, n_parameters={self.n_parameters})")
