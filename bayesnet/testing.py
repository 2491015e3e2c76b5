"""Faults to inject into a fit, for testing how it copes (what ``tests/test_faults.py`` and
``benchmarks/faults.py`` use).

Both are skorch callbacks that pickle, so they also run inside the worker processes that fit groups of chains
(``n_jobs``): pass them as ``callbacks=[("fault", WorkerFault(...))]``.
"""

from __future__ import annotations

import os
import signal

import torch
from skorch.callbacks import Callback

__all__ = ["PoisonChain", "WorkerFault"]


class WorkerFault(Callback):
    """A fault inside the joblib worker that fits the group of chains starting at one of ``first_chains``, once
    its sampler reaches ``at_step``: ``"kill"`` (SIGKILL, as the kernel's out-of-memory killer sends),
    ``"memory"`` (a ``MemoryError``) or ``"interrupt"`` (``KeyboardInterrupt``, as Ctrl-C).

    Only in a group's worker (``group_`` is set there); a kill only in a process other than the one that built
    the callback, so that a run with the threading backend cannot kill its own process.

    Parameters
    ----------
    first_chains : tuple of int, default=(2,)
        The first global chain index of each group to hit.
    at_step : int, default=30
        The sampler step after which the fault happens.
    how : {"kill", "memory", "interrupt"}, default="kill"
    parent_pid : int or None, default=None
        The process that must never be killed (default: the one that builds the callback).
    """

    def __init__(self, first_chains=(2,), at_step=30, how="kill", parent_pid=None):
        self.first_chains = first_chains
        self.at_step = at_step
        self.how = how
        self.parent_pid = os.getpid() if parent_pid is None else parent_pid

    def on_batch_end(self, net, training=False, step=None, **kwargs):
        group = getattr(net, "group_", None)
        if not training or group is None or group[1] not in self.first_chains or step != self.at_step:
            return
        if self.how == "kill" and os.getpid() != self.parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.how == "interrupt":
            raise KeyboardInterrupt
        raise MemoryError(f"injected at step {step}")


class PoisonChain(Callback):
    """Sets the position of global chain ``chain`` to NaN after step ``at_step``, wherever that chain runs (in
    this process or in a group's worker): the chain diverges at the next step, the others are untouched.

    Parameters
    ----------
    chain : int, default=3
        Global chain index.
    at_step : int, default=30
        The sampler step after which the chain's weights become NaN.
    """

    def __init__(self, chain=3, at_step=30):
        self.chain = chain
        self.at_step = at_step

    def on_batch_end(self, net, training=False, step=None, **kwargs):
        layout = getattr(net, "layout_", None)
        if not training or step != self.at_step or layout is None:
            return
        local, M = self.chain - net.first_chain_, layout.members_per_chain
        if 0 <= local < layout.chains:
            with torch.no_grad():
                for p in net.sampler_state_.position:
                    p[local * M:(local + 1) * M] = float("nan")
