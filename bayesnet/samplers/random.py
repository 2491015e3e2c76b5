"""Per-chain random streams.

Every chain draws its noise from a stream of its own, derived from one seed
and the chain's index, so that how chains are run (one vectorised call,
groups of chains in separate processes, one chain alone) never changes a
chain: chain ``k`` of ``n_chains=4`` fitted with ``n_jobs=2`` is chain ``k``
of the same fit without ``n_jobs``, and chain 0 is the chain of
``n_chains=1``. This is how NumPyro splits one key per chain.

Cost: a vectorised step needs one ``(C, n)`` block of noise per call, not
``C`` separate small draws. Each chain therefore fills a *pool* of its own
numbers, ``C`` generator calls per refill, and a step takes a column slice of
all the pools at once (a strided view: no copy). A pool holds at least
``pool_size`` numbers, so with small networks a refill comes every few dozen
steps; with large ones (``n`` above ``pool_size``) every request is its own
draw, whose cost is then dominated by generating the numbers anyway. The
pool's size depends on the request sizes only, never on the number of chains,
so the streams do not depend on it either.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["ChainRandom", "as_chain_random", "chain_seeds"]

_KIND_NORMAL, _KIND_UNIFORM = "normal", "uniform"


def chain_seeds(seed: int, chains: Sequence[int]) -> list[int]:
    """63-bit seeds of the streams of ``chains`` (global chain indices) derived from ``seed``.

    Uses :class:`numpy.random.SeedSequence` with the chain index as spawn key, so that chain ``k``'s seed is
    the same whichever other chains exist.
    """
    out = []
    for k in chains:
        words = np.random.SeedSequence(int(seed), spawn_key=(1, int(k))).generate_state(2, dtype=np.uint32)
        out.append(int((int(words[0]) << 31) ^ int(words[1])) & (2**63 - 1))
    return out


def _shared_seed(seed: int) -> int:
    words = np.random.SeedSequence(int(seed), spawn_key=(2,)).generate_state(2, dtype=np.uint32)
    return int((int(words[0]) << 31) ^ int(words[1])) & (2**63 - 1)


class ChainRandom:
    """Independent random streams, one per chain, plus one shared host stream.

    Parameters
    ----------
    seed : int
        Base seed; chain ``k``'s stream is derived from ``(seed, k)`` (:func:`chain_seeds`).
    n_chains : int
        Number of chains served, ``C`` >= 1.
    device : torch.device or str, default="cpu"
        Where the noise is generated (the positions' device).
    first_chain : int, default=0
        Global index of the first chain served: a group of chains fitted in another process uses the
        streams of its own chains.
    pool_size : int, default=16384
        Smallest number of values a chain's pool holds (see the module docstring).

    Notes
    -----
    :meth:`normal` and :meth:`uniform` return ``(C, n)`` blocks whose row ``k`` comes from chain ``k``'s
    stream; :meth:`shared` is a NumPy generator for decisions that all chains share (e.g. HMC's trajectory
    length), drawn on the host so that it never synchronises a GPU. Blocks are views of a pool that is
    replaced, never overwritten, when it runs out, so a block stays valid.
    """

    def __init__(self, seed: int, n_chains: int = 1, device="cpu", first_chain: int = 0, pool_size: int = 2**14):
        if int(n_chains) < 1:
            raise ValueError(f"n_chains must be >= 1, got {n_chains!r}.")
        self.seed = int(seed)
        self.n_chains = int(n_chains)
        self.first_chain = int(first_chain)
        self.device = torch.device(device)
        self.pool_size = int(pool_size)
        self._seeds = chain_seeds(self.seed, range(self.first_chain, self.first_chain + self.n_chains))
        self.generators = [torch.Generator(device=self.device).manual_seed(s) for s in self._seeds]
        self.shared = np.random.Generator(np.random.PCG64(_shared_seed(self.seed)))
        self._pools: dict[tuple[str, torch.dtype], list] = {}

    # ------------------------------------------------------------------ #
    def _fill(self, kind: str, n: int, dtype: torch.dtype) -> Tensor:
        out = torch.empty((self.n_chains, n), dtype=dtype, device=self.device)
        draw = torch.randn if kind == _KIND_NORMAL else torch.rand
        for row, gen in zip(out, self.generators):
            draw(n, generator=gen, dtype=dtype, device=self.device, out=row)
        return out

    def _draw(self, kind: str, n: int, dtype: torch.dtype) -> Tensor:
        n = int(n)
        if n > self.pool_size:  # large requests: one draw per chain each time
            return self._fill(kind, n, dtype)
        key = (kind, dtype)
        pool = self._pools.get(key)
        if pool is None or pool[1] + n > pool[0].shape[1]:
            size = n * max(1, self.pool_size // n)  # a multiple of the request: no waste for repeated sizes
            pool = self._pools[key] = [self._fill(kind, size, dtype), 0]
        block = pool[0][:, pool[1]: pool[1] + n]
        pool[1] += n
        return block

    def normal(self, n: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """Standard normal numbers, ``n`` per chain: shape ``(C, n)``."""
        return self._draw(_KIND_NORMAL, n, dtype)

    def uniform(self, n: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """Uniform numbers on [0, 1), ``n`` per chain: shape ``(C, n)``."""
        return self._draw(_KIND_UNIFORM, n, dtype)

    def gamma(self, shape: Tensor, trials: int = 16, check: bool = True) -> Tensor:
        """Gamma(``shape``, 1) numbers, ``shape`` a tensor ``(C * m, K)`` (``m`` rows per chain) or ``(K,)`` for
        one chain, every value ``>= 1``; each chain's from its own stream.

        Marsaglia and Tsang's (2000) method, vectorised: every value gets ``trials`` proposals (a normal and a
        uniform each, drawn from the pools, so a chain's stream never depends on the others' acceptances)
        and takes the first accepted one. A proposal is accepted with probability above 0.95 for shape
        ``>= 1``; the chance that all 16 fail is below ``1e-20``, and then the last proposal is taken.
        ``check=False`` skips the check below, a read of the device (for a caller whose shapes are at least 1
        by construction, such as :meth:`~bayesnet.priors.HierarchicalPrior.gibbs_update`'s).

        Raises
        ------
        ValueError
            If a shape is below 1 (with ``check``).
        """
        if check and bool((shape < 1).any()):
            raise ValueError("ChainRandom.gamma takes shapes >= 1.")
        dtype = shape.dtype
        rows = shape.reshape(self.n_chains, -1)  # chain major
        n = rows.shape[1] * trials
        x = self.normal(n, dtype).reshape(rows.shape + (trials,))
        u = self.uniform(n, dtype).reshape(rows.shape + (trials,))
        d = (rows - 1.0 / 3.0).unsqueeze(-1)
        c = 1.0 / torch.sqrt(9.0 * d)
        v = (1.0 + c * x) ** 3
        ok = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-30)))
        ok[..., -1] = True
        first = ok.to(torch.int8).argmax(dim=-1, keepdim=True)
        return (d * v).gather(-1, first).squeeze(-1).reshape(shape.shape)

    # ------------------------------------------------------------------ #
    def __getstate__(self):
        state = self.__dict__.copy()
        state["generators"] = [g.get_state() for g in self.generators]
        state["device"] = str(self.device)
        state["_pools"] = {k: [v[0].cpu(), v[1]] for k, v in self._pools.items()}
        return state

    def __setstate__(self, state):
        device = torch.device(state["device"])
        gen_states = state.pop("generators")
        pools = state.pop("_pools")
        self.__dict__.update(state)
        if device.type == "cuda" and not torch.cuda.is_available():
            # fitted on a GPU, loaded without one: fresh CPU streams from the same seeds, for a chain continued
            # on the CPU (not bit for bit the one it would have been on the GPU; the estimators refuse to
            # continue a device="cuda" fit on the CPU, and a device="auto" one continues there)
            self.device = torch.device("cpu")
            self.generators = [torch.Generator().manual_seed(s ^ 0x5DEECE66D) for s in self._seeds]
            self._pools = {}
            return
        self.device = device
        self.generators = []
        for gs in gen_states:
            gen = torch.Generator(device=device)
            gen.set_state(gs.cpu())  # skorch maps the pickled tensors to the device; states live on the CPU
            self.generators.append(gen)
        self._pools = {k: [v[0].to(device), v[1]] for k, v in pools.items()}

    def __repr__(self) -> str:
        return (f"ChainRandom(seed={self.seed}, n_chains={self.n_chains}, first_chain={self.first_chain}, "
                f"device={str(self.device)!r})")


def as_chain_random(rng, n_chains: int, device) -> ChainRandom:
    """Accept what users pass as randomness: a :class:`ChainRandom`, an int seed, a ``torch.Generator``
    (a base seed is drawn from it) or None (a seed from torch's global generator).

    Raises
    ------
    ValueError
        If a :class:`ChainRandom` serves a different number of chains.
    """
    if isinstance(rng, ChainRandom):
        if rng.n_chains != n_chains:
            raise ValueError(f"the random streams serve {rng.n_chains} chain(s), the position has {n_chains}.")
        return rng
    if isinstance(rng, torch.Generator):
        seed = int(torch.randint(0, 2**62, (1,), generator=rng, device=rng.device))
    elif rng is None:
        seed = int(torch.randint(0, 2**62, (1,)))
    else:
        seed = int(rng)
    return ChainRandom(seed, n_chains, device)
