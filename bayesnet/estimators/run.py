"""The machinery of a sampling run behind the estimators: seeds, the chains' start, continuation, the
mini-batch stream, and the end-of-call report.

Kept apart from :mod:`.base` (the scikit-learn/skorch protocol) so that each piece has one job:

* :func:`start_chains` builds the network template, every member's initialisation, the posterior, the
  sampler (configured with the :class:`~bayesnet.plan.RunPlan`), its state, the trace and the statistics;
* :func:`continue_chains` checks what changed since the chains started and applies what a running chain
  can honour;
* :class:`PlannedBatches` is the mini-batch stream: it resumes mid-epoch and stops at the plan's step
  budget, so that an interrupted fit continues exactly where it stopped;
* :func:`finish_call` writes ``diagnostics_``, ``convergence_`` and ``fit_status_`` and raises the
  warnings a user must see.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import dataclasses
import hashlib
import inspect
import math
import signal
import threading
import warnings

import numpy as np
import torch
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_random_state

from ..diagnostics import (MIN_DRAWS, bulk_effective_sample_size, bulk_effective_sample_size_many,
                           effective_sample_size, rank_normalized_split_rhat, rank_normalized_split_rhat_many,
                           tail_effective_sample_size)
from ..plan import ChainLayout, RunPlan
from ..posterior import ChainPosterior
from ..predictive import PosteriorPredictive
from ..priors import make_prior
from ..samplers import ChainRandom, DivergenceError, Sampler, Stat, make_sampler, sampler_class
from ..samplers.base import for_chains
from ..trace import StepStats, Trace
from .callbacks import DivergenceMonitor

__all__ = ["PlannedBatches", "start_chains", "continue_chains", "finish_call", "seed_base", "deferred_interrupt"]

_GLOBAL_RNG_LOCK = threading.Lock()


def seed_base(random_state) -> int:
    """The base seed every stream of a fit derives from (an int ``random_state`` always gives the same)."""
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def _derived_seed(base: int, *key: int) -> int:
    return int(np.random.SeedSequence(int(base), spawn_key=key).generate_state(1, dtype=np.uint32)[0])


def fingerprint(X: np.ndarray, y: np.ndarray) -> str:
    """A digest of the training data: a continued fit on other data drops the sampler's cached values."""
    h = hashlib.blake2b(digest_size=16)
    for a in (X, y):
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.view(np.uint8).reshape(-1) if a.size else b"")
    return h.hexdigest()


def resolve_batch_size(batch_size, n_data: int, full_batch: bool) -> int:
    """Rows per mini-batch: ``-1`` is the full batch; ``"auto"`` is 128 for the stochastic-gradient samplers
    and the full batch for samplers that declare ``full_batch`` (Metropolis tests need exact energies)."""
    if batch_size == "auto":
        batch_size = -1 if full_batch else 128
    return n_data if batch_size == -1 else min(int(batch_size), n_data)


def resolve_thinning(thinning, cls, auto_burn_in: int | None = None, n_draws: int = 1,
                     steps_per_draw: float = 1) -> int:
    """``thinning="auto"``: the sampler's ``default_thinning``, or, after a ``burn_in="auto"`` of ``auto_burn_in``
    steps, more where the ``n_draws`` draws would span fewer steps than the burn-in:
    ``floor(auto_burn_in / (n_draws * steps_per_draw))`` (``steps_per_draw`` the sampler's steps per candidate;
    rounded down, so that a run of ``max_epochs`` epochs, whose draw phase is as long as its burn-in, still has
    room for every draw).

    The burn-in counts passes over the data (:func:`resolve_burn_in`); the draws should too. A fixed 10 steps
    per draw spans 1,000 steps whatever the data: 100 passes over digits' 1,257 training rows, 32 over
    MNIST-1D's 4,000, 2 over 60,000 rows, where the 100 draws are nearly one network. Measured on the defaults
    panel's tasks (benchmarks/README.md, "Draws spaced like the burn-in"): digits (thinning 10 -> 20, eight
    seeds) accuracy 0.960 -> 0.967, NLL 0.150 -> 0.132, fits that warn 5 -> 0 of 8, at 1.35x the fit time; the
    MNIST-1D CNN (10 -> 64, four seeds) 0.914 -> 0.934, NLL 0.257 -> 0.211, at 1.6x. Up to 640 rows at the
    default batches (a 1,000-step burn-in) nothing changes."""
    if thinning != "auto":
        return int(thinning)
    floor = int(cls.default_thinning)
    if auto_burn_in is None:
        return floor
    span = int(auto_burn_in) / (max(int(n_draws), 1) * max(float(steps_per_draw), 1.0))
    return max(floor, math.floor(span + 1e-9))  # (tacthmc's 250 steps per draw are 250.00000000000003)


def net_thinning(net, cls, burn_in: int, steps_per_draw: float) -> int:
    """``net.thinning`` resolved (:func:`resolve_thinning`) for chains whose burn-in is ``burn_in`` steps and a
    sampler of class ``cls`` taking ``steps_per_draw`` steps per candidate: the burn-in counts only where
    ``net.burn_in`` is "auto". One rule for a new plan and for a continued fit's trace; an auto thinning that a
    fit doubled because its draws had not mixed (:func:`extend_unmixed`) stays doubled for those chains."""
    thinning = resolve_thinning(net.thinning, cls, burn_in if net.burn_in == "auto" else None, int(net.n_draws),
                                steps_per_draw)
    return thinning * 2 ** int(getattr(net, "thinning_doublings_", 0)) if net.thinning == "auto" else thinning


#: ``burn_in="auto"``: at least this many steps, ...
AUTO_BURN_IN_MIN = 1000
#: ... and at least this many passes over the training data (a network learns the data in passes, as
#: scikit-learn's MLP counts its iterations in epochs, 200 at most by default), ...
AUTO_BURN_IN_EPOCHS = 200
#: ... but at most this many steps
AUTO_BURN_IN_MAX = 20_000


def resolve_burn_in(burn_in, n_data: int, batch_size: int, max_epochs: int | None = None) -> int:
    """Steps discarded at the start: ``burn_in`` itself, or for ``"auto"`` ``AUTO_BURN_IN_EPOCHS`` epochs of
    ``ceil(n_data / batch_size)`` mini-batches, within ``[AUTO_BURN_IN_MIN, AUTO_BURN_IN_MAX]`` steps (1000 steps
    up to 640 rows at the default 128-row batches, 6,400 for 4,000 rows, 20,000 from 12,673 rows: 100 batches).

    Measured on the defaults panel (benchmarks/README.md, "The burn-in in passes over the data"): a fixed
    1,000 steps is 32 epochs of MNIST-1D's 4,000 rows, and its CNN's and RNN's kept draws were still climbing
    (split R-hat of the training log-likelihood 1.5-2.1).

    With ``max_epochs`` (a run of that many epochs), "auto" is at most half of the run's steps: 200 epochs would
    otherwise leave no step for draws whenever ``max_epochs`` is 200 or fewer."""
    if burn_in != "auto":
        return int(burn_in)
    per_epoch = math.ceil(n_data / batch_size)
    steps = min(max(AUTO_BURN_IN_MIN, AUTO_BURN_IN_EPOCHS * per_epoch), AUTO_BURN_IN_MAX)
    if max_epochs is not None:  # a run of a fixed length: at most its first half, so that the rest gives draws
        steps = min(steps, int(max_epochs) * per_epoch // 2)
    return int(steps)


def burn_in_words(net) -> str:
    """The burn-in a message names: ``"6400 steps"``, with ``, from 'auto'`` when it was resolved (the trace holds
    the plan's number, in a model read from a file too), and with ``max_epochs`` set, that "auto" is at most half
    of that run (:func:`resolve_burn_in`), so that a larger burn-in takes a larger ``max_epochs`` (a user's
    finding: ``max_epochs=1`` read "Increase burn_in (now 1 steps, from 'auto')", where max_epochs was the
    limit)."""
    steps = net.trace_.burn_in
    if net.burn_in != "auto":
        return f"{steps} steps"
    epochs = getattr(net, "max_epochs", None)
    return f"{steps} steps, from 'auto'" if epochs is None else \
        f"{steps} steps, from 'auto', at most half of the max_epochs={epochs} run"


def make_plan(net, n_data: int, step_offset: int = 0, burn_in: int | None = None) -> RunPlan:
    """The run plan (``burn_in="auto"`` resolved by :func:`resolve_burn_in`, unless a continued fit passes the
    ``burn_in`` its chains started with); raises ValueError for a sampler whose warm-up would outlast the
    burn-in (kept draws must come from the frozen kernel)."""
    cls = sampler_class(net.sampler)
    probe = make_sampler(net.sampler, **net.get_params_for("sampler"))
    batch_size = resolve_batch_size(net.batch_size, n_data, cls.full_batch)
    burn_in = resolve_burn_in(net.burn_in, n_data, batch_size, net.max_epochs) if burn_in is None else int(burn_in)
    n = getattr(probe, "adaptation_steps", "auto")
    if n != "auto" and int(n) > burn_in:
        given = f"burn_in={burn_in} (from 'auto')" if net.burn_in == "auto" else f"burn_in={burn_in}"
        raise ValueError(f"sampler__adaptation_steps={n} is longer than {given}: the draws kept after "
                         "the burn-in would come from a kernel still adapting. Set burn_in to at least "
                         "adaptation_steps, or adaptation_steps='auto' (the burn-in).")
    steps_per_draw = probe.steps_per_draw()
    thinning = net_thinning(net, cls, burn_in, steps_per_draw)
    return RunPlan(n_data=n_data, batch_size=batch_size,
                   burn_in=burn_in, n_draws=int(net.n_draws), thinning=thinning,
                   steps_per_draw=steps_per_draw, max_epochs=net.max_epochs,
                   layout=ChainLayout(int(net.n_chains), probe.members_per_chain()), step_offset=step_offset)


#: the most bytes of rows :class:`PlannedBatches` gathers at once (a block of whole batches, at least one)
BLOCK_BYTES = 1 << 22


def batch_bounds(n: int, batch_size: int) -> np.ndarray:
    """The row offsets at which an epoch's mini-batches end, ``(0, ..., n)``: ``ceil(n / batch_size)`` batches of
    nearly equal size (the first ``n % k`` one row larger), none above ``batch_size``.

    Not ``batch_size`` rows and a remainder: a remainder of a few rows has its gradient scaled up by
    ``n / |B|``, so its step's gradient noise is many times the others' (a frozen SGHMC step ignores it), and
    the chain runs hot. Measured (a helper's user test, 2026-11-28; noise sd 0.1, defaults): 129 rows at
    128-row batches, a 1-row batch every second step, learnt a noise sd of 0.51-0.79 and a test RMSE of
    0.33-0.50 with intervals 4x as wide, without a warning; two batches of 65 and 64 rows 0.13-0.16 and
    0.16-0.32."""
    k = max(1, math.ceil(n / max(1, batch_size)))
    small, extra = divmod(n, k)
    return np.concatenate([[0], np.cumsum([small + 1] * extra + [small] * (k - extra))]).astype(np.int64)


class PlannedBatches:
    """Mini-batches of in-memory tensors by index selection, resuming mid-epoch and stopping at the budget.

    An epoch's rows are spread evenly over ``ceil(n / batch_size)`` batches (:func:`batch_bounds`: sizes differ
    by one row at most, none above ``batch_size``). The rows of several batches are gathered at once (at most
    :data:`BLOCK_BYTES`, whole batches), and the batches are slices of that block: the same rows in the same
    order as one gather per batch.

    skorch calls ``iterator(dataset, batch_size=...)`` once per ``fit_loop`` and iterates it once per epoch.
    Each epoch continues the permutation saved in ``net.batch_cursor_`` when one is unfinished, else draws a
    new one from ``net.data_generator_`` (a CPU generator); it yields batches while ``net.steps_remaining_``
    is positive. An interrupted fit thus continues with the very batches it would have seen.

    Parameters
    ----------
    dataset : TensorDataset
    batch_size : int
        The largest batch.
    net : BayesianNeuralNet
        Holds the cursor, the generator and the step budget.
    shuffle : bool, default=True
    """

    def __init__(self, dataset, batch_size: int, net=None, shuffle: bool = True):
        self.tensors = dataset.tensors
        self.n = len(self.tensors[0])
        self.batch_size = min(int(batch_size), self.n)
        self.net = net
        self.shuffle = shuffle
        self.bounds = batch_bounds(self.n, self.batch_size).tolist()

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def _end(self, row: int) -> int:
        """The end of the batch that starts at ``row`` (the next bound: a cursor saved off the bounds, by a version
        that cut batches otherwise, ends its batch there too)."""
        return self.bounds[bisect.bisect_right(self.bounds, row)]

    def __iter__(self):
        net = self.net
        device = self.tensors[0].device
        cursor = getattr(net, "batch_cursor_", None)
        if cursor is None or cursor[1] >= self.n or len(cursor[0]) != self.n:
            order = (torch.randperm(self.n, generator=net.data_generator_) if self.shuffle
                     else torch.arange(self.n))
            cursor = net.batch_cursor_ = [order, 0]
        order = cursor[0].to(device)
        # the rows of several batches gathered at once, the batches slices (views) of that block: one gather
        # per tensor per block instead of per batch (a small network's step is mostly per-operation overhead),
        # the same rows in the same order as batch-by-batch gathers, a block at most BLOCK_BYTES
        row_bytes = sum(t[:1].numel() * t.element_size() for t in self.tensors)
        per_block = max(1, BLOCK_BYTES // max(1, row_bytes * self.batch_size))
        while cursor[1] < self.n and net.steps_remaining_ > 0:
            start = stop = cursor[1]
            for _ in range(min(per_block, net.steps_remaining_)):
                stop = self._end(stop)
                if stop >= self.n:
                    break
            block = tuple(t.index_select(0, order[start:stop]) for t in self.tensors)
            while cursor[1] < stop and net.steps_remaining_ > 0:
                lo = cursor[1]
                hi = cursor[1] = self._end(lo)
                yield tuple(b[lo - start: hi - start] for b in block)


def _build_members(net, n_members_per_chain: int, chains: range):
    """Every packed member's initial parameters (network's then likelihood's), chain by chain, each chain from
    its own seed: chain ``k`` starts where it would whichever chains run beside it. Returns the template
    (module, likelihood) and the member list."""
    members, template = [], None
    # modules initialise from torch's global RNG: seed and build under a lock, so that fits running in threads
    # (joblib's threading backend, an in-process dask cluster) cannot interleave their seeds
    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
        for k in chains:
            torch.manual_seed(_derived_seed(net.seed_, 3, k))
            for _ in range(n_members_per_chain):
                module, likelihood = net._build_module(), net._build_likelihood()
                if template is None:
                    template = (module, likelihood)
                members.append([p for p in module.parameters() if p.requires_grad]
                               + [p for p in likelihood.parameters() if p.requires_grad])
    return template, members


def warn_inexact_test(net, sampler, batch_size: int, n_data: int) -> None:
    """A UserWarning when a sampler with a Metropolis-Hastings test (``full_batch``) runs on mini-batches (at each
    fit or continued fit that does)."""
    if sampler.full_batch and batch_size < n_data:
        warnings.warn(f"{sampler.name} with mini-batches (batch_size={net.batch_size} < {n_data} rows): its "
                      "Metropolis-Hastings test compares noisy energies and is no longer exact; use batch_size=-1 "
                      "for an exact test.", UserWarning, stacklevel=user_stacklevel())


def start_chains(net, X: np.ndarray, y: np.ndarray) -> None:
    """Start fresh chains on ``(X, y)`` (validated): everything a run needs, as fitted attributes."""
    from .base import resolve_device

    n_data = len(X)
    net.device_ = resolve_device(net.device)
    group = getattr(net, "group_", None)
    net.seed_, net.first_chain_ = group if group is not None else (seed_base(net.random_state), 0)
    net.thinning_doublings_ = 0  # (before the plan: a refit's auto thinning starts from the rule again)
    plan = net.plan_ = make_plan(net, n_data)
    net.layout_ = plan.layout
    sampler = make_sampler(net.sampler, **net.get_params_for("sampler")).configure(plan)
    warn_inexact_test(net, sampler, plan.batch_size, n_data)
    chains = range(net.first_chain_, net.first_chain_ + plan.layout.chains)
    (module, likelihood), members = _build_members(net, plan.layout.members_per_chain, chains)
    with net._current_init_context("module"):
        net.module_ = module.to(net.device_)
    with net._current_init_context("criterion"):
        net.criterion_ = likelihood.to(net.device_)
    net.prior_ = make_prior(net.prior_scale, sampler, likelihood)
    members = [[p.to(net.device_) for p in m] for m in members]
    net.posterior_ = ChainPosterior(net.module_, net.criterion_, net.prior_, n_data, members)
    net.data_generator_ = torch.Generator().manual_seed(_derived_seed(net.seed_, 0))
    net.batch_cursor_ = None
    rng = ChainRandom(net.seed_, plan.layout.chains, net.device_, first_chain=net.first_chain_)
    net.sampler_ = sampler
    net.sampler_state_ = sampler.init(net.posterior_.parameters, rng, n_chains=plan.layout.chains)
    # the chains' own steps per draw, where init resolved a setting it depends on (tacthmc's wall="auto": the plan,
    # made before the modules, took the widest well's), and the draws' auto spacing with it, as a continued fit's
    per_draw = for_chains(sampler.steps_per_draw, net.sampler_state_)
    if per_draw != plan.steps_per_draw:
        plan = net.plan_ = dataclasses.replace(plan, steps_per_draw=per_draw,
                                               thinning=net_thinning(net, type(sampler), plan.burn_in, per_draw))
    S = net.posterior_.n_members
    net.trace_ = Trace(net.n_draws, burn_in=plan.burn_in, thinning=plan.thinning, n_slots=S, chain_axis=True)
    stats = dict(sampler.stats)
    if sampler.configurational_target() is not None:  # measured after the burn-in (train_step)
        stats["configurational_temperature"] = Stat("mean")
    net.step_stats_ = StepStats(stats, S, plan.burn_in, net.device_)
    net.divergence_state_ = None
    net._new_data_at = None
    net.fit_status_ = {"status": "running", "diverged_chains": {}, "stopped_by": None}
    net.fit_params_ = recorded_params(net._all_params(deep=False))
    net.data_fingerprint_ = fingerprint(X, y)
    check_rows(net, X, y)
    net.n_train_ = n_data
    net.steps_planned_total_ = plan.total_steps


# settings a running chain can take, and what applying them means; any other change needs a new fit
_HONOURED = {"n_draws", "thinning", "max_epochs", "batch_size", "prior_scale", "noise_shape", "noise_scale",
             "verbose", "callbacks", "warm_start", "n_jobs", "compile"}


def recorded_params(params: dict) -> dict:
    """The settings ``params`` (an estimator's ``_all_params(deep=False)``) as ``fit_params_`` records them: a
    sampler instance copied (a later ``set_params(sampler__friction=...)`` sets the instance's own setting, which
    the record of the fit, and what ``save`` writes from it, must not follow)."""
    if isinstance(params.get("sampler"), Sampler):
        params = {**params, "sampler": clone(params["sampler"])}
    return params


def _same(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, Sampler) and isinstance(b, Sampler):  # (a recorded copy against the instance: its settings)
        if type(a) is not type(b):
            return False
        pa, pb = a.get_params(deep=False), b.get_params(deep=False)
        return pa.keys() == pb.keys() and all(_same(pa[k], pb[k]) for k in pa)
    try:
        return bool(a == b)
    except Exception:  # arrays, objects without a usable ==
        return repr(a) == repr(b)


#: the call that continues chains, as the refusals name it: ``fit(warm_start=True)`` sets it for its own call
#: (skorch's fit continues through partial_fit), so that a user who called fit is not told partial_fit refused
CONTINUING_CALL = contextvars.ContextVar("bayesnet_continuing_call", default="partial_fit")


def continuing_call() -> str:
    """``"partial_fit"``, or ``"fit(warm_start=True)"`` inside such a call (:data:`CONTINUING_CALL`)."""
    return CONTINUING_CALL.get()


@contextlib.contextmanager
def continuing_as(call: str):
    """Within the block, refusals name ``call`` as the call that continues the chains (:data:`CONTINUING_CALL`)."""
    token = CONTINUING_CALL.set(call)
    try:
        yield
    finally:
        CONTINUING_CALL.reset(token)


def refuse_changes(changes: dict) -> None:
    """Raise the ValueError that refuses to continue chains under changed settings, ``{name: (new, old)}``."""
    detail = ", ".join(f"{k}={new!r} (was {was!r})" for k, (new, was) in changes.items())
    raise ValueError(f"{continuing_call()} cannot continue the chains with changed {detail}: the chains were started "
                     f"with the old value(s); call fit() to start new chains (with warm_start=False).")


def refuse_state_changes(sampler, previous, state=None) -> None:
    """Refuse (ValueError) to continue chains of the sampler ``previous`` (their state ``state``) under ``sampler``
    when a setting their state is built on changed (:meth:`~bayesnet.samplers.Sampler.changed_state_settings`:
    before, a new preconditioner was reported and not applied). Samplers of another class are refused elsewhere."""
    if type(sampler) is not type(previous):
        return
    built_on = for_chains(sampler.changed_state_settings, state, previous)
    if built_on:
        refuse_changes({f"sampler__{k}": v for k, v in built_on.items()})


def _reference_length(net) -> int:
    """Steps the divergence monitor's new reference takes after a reset, and the steps it lets the chains settle
    first: a quarter of the burn-in, as the first reference (at least 25, at most 500: a continued run is
    usually a few hundred steps)."""
    return int(min(max(net.plan_.burn_in // 4, 25), 500))


def continue_chains(net, X: np.ndarray, y: np.ndarray) -> None:
    """Continue the chains on ``(X, y)``: apply the changed settings a running chain can honour; refuse, with
    the advice to refit, those it cannot.

    Raises
    ------
    ValueError
        On a changed architecture, ``burn_in``, ``n_chains``, ``device``, ``random_state`` or sampler class, a
        setting the sampler's state is built on (:meth:`~bayesnet.samplers.Sampler.changed_state_settings`: its
        :attr:`~bayesnet.samplers.Sampler.state_settings`, ``adaptation_steps``, a ``step_size`` back to "auto"),
        or a sampler whose chain layout changed.
    """
    now = net._all_params(deep=False)
    old = net.fit_params_
    changed = {k for k in now if k in old and not _same(now[k], old[k]) and not k.startswith("sampler__")
               and not k.startswith(("iterator_", "callbacks__", "compile__"))}
    if "sampler" in changed and sampler_class(now["sampler"]) is type(net.sampler_):
        changed.discard("sampler")
    refused = sorted(changed - _HONOURED)
    if refused:
        refuse_changes({k: (now[k], old[k]) for k in refused})
    sampler = make_sampler(net.sampler, **net.get_params_for("sampler"))
    refuse_state_changes(sampler, net.sampler_, net.sampler_state_)
    if sampler.members_per_chain() != net.layout_.members_per_chain:
        raise ValueError(f"{continuing_call()} cannot continue chains of {net.layout_.members_per_chain} member(s) "
                         f"with a sampler of {sampler.members_per_chain()}; call fit() (with warm_start=False) to "
                         "start new chains.")
    sampler = sampler.configure(net.plan_)
    # the prior under the new settings, before anything changes (a refused call leaves the fit as it was): a new
    # prior_scale, or "auto" resolved anew when the sampler's temperature moves it to another prior (the fan-in
    # prior for a sampler that now tempers, the hierarchical one for one that no longer does: what a fresh fit
    # would use); else the running prior, checked against the new sampler (a tempering sampler refuses a
    # hierarchical prior: ValueError)
    prior = None
    if "prior_scale" in changed:
        prior = make_prior(net.prior_scale, sampler, net.criterion_)
    elif isinstance(net.prior_scale, str) and net.prior_scale == "auto":
        resolved = make_prior("auto", sampler, net.criterion_)
        # (by class: a running prior of the same class is kept, with its sampled precisions, whatever settings
        # an older version gave it)
        prior = resolved if type(resolved) is not type(net.prior_) else None
    if prior is None:
        make_prior(net.prior_, sampler)
    previous, net.sampler_ = net.sampler_, sampler
    net.sampler_.adopt(net.sampler_state_)  # (the settings a running chain can honour: the new step size)
    if prior is not None:
        net.prior_ = net.posterior_.prior = prior
        net.sampler_.reset_cache(net.sampler_state_)  # cached potentials were under the old prior
    # the potential's level under the warm-up's posterior is no reference for another prior, temperature or data
    new_level = prior is not None or for_chains(previous.temperature_range, net.sampler_state_) != for_chains(
        net.sampler_.temperature_range, net.sampler_state_)
    for key in ("noise_shape", "noise_scale"):
        if key in changed:
            setattr(net.criterion_, key, float(now[key]))
    # the draws' spacing as a new plan would resolve it (make_plan, below, for a completed run): an auto thinning
    # also follows the sampler's steps per draw (tacthmc's steps_per_sample, and its chains' walls), not only n_draws
    per_draw = for_chains(net.sampler_.steps_per_draw, net.sampler_state_)
    thinning = net_thinning(net, type(net.sampler_), net.trace_.burn_in, per_draw)
    replanned = int(net.n_draws) != net.trace_.n_draws or thinning != net.trace_.thinning
    if replanned:
        net.trace_.reconfigure(n_draws=int(net.n_draws), thinning=thinning)
    new_data = fingerprint(X, y)
    net._new_data_at = None  # (this call's: a later call on the same data did not change them)
    if new_data != net.data_fingerprint_:
        net.sampler_.reset_cache(net.sampler_state_)
        net.posterior_.n_data = net.n_train_ = len(X)
        net.batch_cursor_ = None
        net.data_fingerprint_ = new_data
        net._new_data_at = int(net.sampler_state_.step)  # (a divergence from here names the frozen warm-up)
        new_level = True
    if new_level and net.divergence_state_ is not None:
        DivergenceMonitor.reset_reference(net.divergence_state_, prior=prior is not None,
                                          at_step=int(net.sampler_state_.step), length=_reference_length(net))
    if "batch_size" in changed:
        net.batch_cursor_ = None
    warn_inexact_test(net, net.sampler_, resolve_batch_size(net.batch_size, len(X), net.sampler_.full_batch), len(X))
    net.fit_params_ = recorded_params(now)  # (what the chains run under from here: the honoured changes and
    # sampler__*)
    step = int(net.sampler_state_.step)
    if step < net.steps_planned_total_:
        # an interrupted run continues to its planned length, under the new settings: a new n_draws or thinning
        # moves the end to where the plan's draws are in (max_epochs, when set, fixes the length itself)
        if replanned and net.max_epochs is None:
            net.steps_planned_total_ = _resumed_length(net, step)
        return
    # a completed run: n_draws more draws per chain (or max_epochs more epochs), no new burn-in; the draws start
    # after the chains' burn-in, as a fresh plan's do (a run that max_epochs cut inside it, then continued with
    # max_epochs=None, took its n_draws * thinning steps from where it stood, most of them still burn-in, and ended
    # short again: a helper's user test, 8 of 20 draws)
    # (the chains' burn-in, not one for the new data; their steps per draw and the trace's spacing, not the plan's,
    # made before a setting resolved by init such as tacthmc's walls: as start_chains replaces them)
    plan = dataclasses.replace(make_plan(net, len(X), burn_in=net.plan_.burn_in), steps_per_draw=per_draw,
                               thinning=thinning)
    if net.max_epochs is not None:
        net.steps_planned_total_ = step + plan.n_steps
    else:
        net.steps_planned_total_ = max(step, int(net.trace_.burn_in)) + \
            int(math.ceil(plan.n_draws * plan.thinning * plan.steps_per_draw))


def _resumed_length(net, step: int) -> int:
    """The step at which an interrupted plan has its ``n_draws`` draws under a new ``n_draws`` or thinning: the
    trace stores the candidates 1, 1 + thinning, ... after the burn-in, and a plan ends ``thinning - 1`` steps after
    its last draw, as a fresh one does (``burn_in + n_draws * thinning``). The draws count from the plan's start
    (``kept_at_call_start_``); samplers that collect only some steps (tacthmc) get a length at the ideal rate,
    which their draw quota ends or extends."""
    trace = net.trace_
    active = _quota_slots(net)  # pt-langevin: its cold replicas
    if not active.any():
        return step
    start = getattr(net, "kept_at_call_start_", None)
    kept = trace.kept_per_slot - (start if start is not None and len(start) == len(trace.kept_per_slot) else 0)
    missing = max(int(net.n_draws) - int(kept[active].min()), 0)
    per_draw = for_chains(net.sampler_.steps_per_draw, net.sampler_state_)
    if per_draw > 1:
        return max(step, trace.burn_in) + int(math.ceil(missing * trace.thinning * per_draw))
    if missing == 0:
        return step
    seen = int(trace.n_candidates[active].max())  # candidates since the burn-in: every step after it
    return trace.burn_in + seen + (-seen) % trace.thinning + missing * trace.thinning


def prepare_compiled(net) -> None:
    """Set up the compiled transition for this call (``compiled_step_``) when ``compile`` and the run ask for it
    (:func:`bayesnet.samplers.compiled.compile_decision`). Built anew at every call: a continued fit may have
    new data (its size scales the likelihood), a new sampler or prior; TorchInductor's cache makes a repeated
    compilation of the same graph quick. The decision is recorded in ``fit_status_["compiled"]`` (and, after a
    failed compilation, why the run went on eagerly). Decided again for the longer run of ``thinning="auto"``
    (:func:`extend_unmixed`; in one process, or in each group's worker with ``n_jobs``), on the steps still to
    go: where that compiles after an eager start, the record says from which step."""
    from ..samplers.compiled import CompiledTransition, compile_decision

    warm_until = max(int(net.sampler_.adaptation_length()), int(net.sampler_state_.step))
    after = max(int(net.steps_planned_total_) - warm_until, 0)
    ok, why, options = compile_decision(net.compile, net.sampler_, net.posterior_, after, net.device_,
                                        net.get_params_for("compile"))
    net.compiled_step_ = (CompiledTransition(net.sampler_, net.posterior_, net.sampler_state_.layout,
                                             options=options) if ok else None)
    before = net.fit_status_.get("compiled")
    extended = net.fit_status_.get("thinning_extended") or []
    if ok and extended and extended[-1]["at_step"] == int(net.sampler_state_.step):  # (the longer run starts)
        # compiled already (from the start, or since an earlier doubling): its record stands
        why = before if isinstance(before, str) and before.startswith("compiled") else \
            f"{why} from step {int(net.sampler_state_.step)} (thinning='auto' ran on; the steps before, eagerly)"
    net.fit_status_["compiled"] = why


#: a sampler step of fewer floating-point operations than this (forward and backward of a mini-batch, all members)
#: runs on one intra-op thread. Measured on this project's 2-core machine, busy with other work: a default
#: breast-cancer fit took 0.85 CPU-s on one thread against 1.48 on two (wall 0.85 s against 0.75 s), and a
#: digits MLP with 512 hidden units and 512-row batches 2.9 s against 61 s (the threads contended with the other
#: work); the issue's default fit took 4.3 CPU-s against 57.5. Small steps are launch overhead, which threads do
#: not share, so they only add synchronisation; larger ones (CNNs on big batches) keep the caller's setting.
THREAD_WORK = 1e8


def step_flops(net, X, batch_size: int) -> float:
    """Floating-point operations of one sampler step, estimated as three forwards (a forward and its backward)
    of one row, times the batch and the members.

    The forward's operations are those of its products, counted as :class:`torch.utils.flop_counter.FlopCounterMode`
    counts them (``2 * in * out`` per row of a linear layer, ``2 * outputs * in / groups * kernel`` for a
    convolution), by forward hooks on the linear and convolutional layers: the counter itself would import
    TorchDynamo, about a second on the first fit of a process, more than a default fit's sampling. A module with
    parameters of any other kind (a recurrent cell, a normalisation, a transposed convolution, a custom layer)
    makes the count unknown (``inf``: the caller's threads are kept). Products between activations (attention
    written with ``bmm``) are not counted."""
    counted = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    flops = [0.0]

    def linear(module, inputs, output):
        flops[0] += 2.0 * output.numel() * module.in_features

    def conv(module, inputs, output):
        flops[0] += 2.0 * output.numel() * (module.in_channels // module.groups) * math.prod(module.kernel_size)

    hooks = []
    try:
        for module in net.module_.modules():
            if isinstance(module, counted):
                hooks.append(module.register_forward_hook(linear if isinstance(module, torch.nn.Linear) else conv))
            elif any(True for _ in module.parameters(recurse=False)):
                return math.inf
        row = torch.as_tensor(np.asarray(X[:1]), dtype=torch.float32)
        with torch.no_grad():
            net.module_(row)
    except Exception:  # a module that cannot run one row here: keep the caller's threads
        return math.inf
    finally:
        for hook in hooks:
            hook.remove()
    posterior = getattr(net, "posterior_", None)
    members = posterior.n_members if posterior is not None else 1
    return 3.0 * flops[0] * batch_size * members


_THREADS_LOCK = threading.Lock()
_THREADS = {"users": 0, "saved": None}


@contextlib.contextmanager
def sampling_threads(net, X, batch_size: int):
    """Within this context, torch's intra-op threads are set for the run (:data:`THREAD_WORK`); the caller's
    setting is restored afterwards. The count used is recorded in ``fit_status_["intra_op_threads"]``."""
    small = net.device_.type == "cpu" and step_flops(net, X, batch_size) < THREAD_WORK
    with _THREADS_LOCK:  # the setting is the process's: fits in threads share it, the last one out restores it
        if _THREADS["users"] == 0:
            _THREADS["saved"] = torch.get_num_threads()
        _THREADS["users"] += 1
        if small:
            torch.set_num_threads(1)
        net.fit_status_["intra_op_threads"] = torch.get_num_threads()
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS["users"] -= 1
            if _THREADS["users"] == 0:
                torch.set_num_threads(_THREADS["saved"])


@contextlib.contextmanager
def deferred_interrupt(net):
    """Within the run, Ctrl-C ends the current sampler step before it stops the fit (so that the chain's state
    stays consistent and ``partial_fit`` continues exactly); a second Ctrl-C stops at once. Only in the main
    thread (elsewhere signals are not delivered to Python code)."""
    net.interrupt_requested_ = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if net.interrupt_requested_:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        net.interrupt_requested_ = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def alive_members(net) -> np.ndarray:
    """Bool mask ``(S,)`` of the members whose chain has not diverged (the divergence monitor's)."""
    state = getattr(net, "divergence_state_", None)
    if state is None:
        return np.ones(net.posterior_.n_members, dtype=bool)
    return np.repeat(state["alive"], net.layout_.members_per_chain)


def summarise(net) -> dict:
    """``diagnostics_``: the sampler's declared statistics reduced over the steps after burn-in (chains that
    diverged left out), its run-level state summary, the step count, and the worst R-hat and ESS."""
    summary = net.step_stats_.summaries(alive_members(net))
    summary["n_steps"] = int(net.sampler_state_.step)
    summary.update(net.sampler_.state_summary(net.sampler_state_))
    cached = net.__dict__.pop("_convergence_at", None)  # (extend_unmixed's, when the run did not go on)
    net.convergence_ = cached[1] if cached is not None and cached[0] == _trace_key(net) else convergence(net)
    summary.update(worst_convergence(net.convergence_))
    return summary


def worst_convergence(conv: dict) -> dict:
    """``max_rhat`` and ``min_ess_bulk`` over the function-space quantities of ``convergence_`` (the
    potential, a function of every weight, is reported there but left out here, as from the warnings)."""
    values = [v for name, v in conv.items() if name != "potential"]
    if not values:
        return {}
    return {"max_rhat": max(v["rhat"] for v in values), "min_ess_bulk": min(v["ess_bulk"] for v in values)}


#: training rows whose log-likelihood under every draw the convergence checks follow (a fixed random subset)
CHECK_ROWS = 256
#: of those, the rows whose own R-hat and ESS are computed (``pointwise_log_likelihood``)
POINTWISE_ROWS = 64


def check_rows(net, X: np.ndarray, y: np.ndarray) -> None:
    """Fix the training rows the convergence checks evaluate (``check_rows_``), chosen from the run's seed."""
    n = len(X)
    idx = np.sort(np.random.default_rng(_derived_seed(net.seed_, 5)).permutation(n)[:min(n, CHECK_ROWS)])
    net.check_rows_ = (X[idx], y[idx])


def pointwise_log_likelihood(net) -> np.ndarray:
    """Log-likelihood of each check row under each draw, shape ``(chain, draw, row)``: the chains (slots) with
    draws, each cut to the common length, as :meth:`Trace.as_array`."""
    trace = net.trace_
    X, y = net.check_rows_
    flat = torch.as_tensor(trace.as_array(active_only=True))  # (C, n, D)
    C, n = flat.shape[:2]
    params = trace.unflatten(flat.reshape(C * n, -1).float())
    names = [name for name, p in net.module_.named_parameters() if p.requires_grad]
    predictive = PosteriorPredictive(net.module_, names, params[: len(names)], net.device_)
    outputs = torch.cat([out.float() for _, out in predictive.outputs(X)], dim=1)  # (C n, rows, k)
    lik = [p.to(outputs.device) for p in params[len(names):]]
    target = torch.as_tensor(y, device=outputs.device)
    with torch.no_grad():
        ll = net.criterion_.pointwise_log_likelihood(outputs, target, lik)
    return ll.reshape(C, n, -1).double().cpu().numpy()


def convergence(net) -> dict:
    """Convergence summaries in function space, over the draws of all chains (the slots with draws, cut to a
    common length): rank-normalised split R-hat and bulk and tail ESS of the log-likelihood of a fixed subset
    of training rows (``log_likelihood``, with its mean over each quarter of the draws, ``quarters``, the
    number of ``rows``, and with several chains each chain's own split R-hat, ``rhat_per_chain``, mean,
    ``chain_means``, and trace slot, ``slots``), the same per row for 64 of them, summarised over the rows by :func:`pointwise_summary`
    (``pointwise_log_likelihood``), and of the potential. Quantities of the weights themselves
    are not checked: a network's posterior is symmetric under permutations of its hidden units, so chains in
    different but equivalent modes would look unconverged."""
    trace = getattr(net, "trace_", None)
    if trace is None or len(trace) == 0 or getattr(net, "check_rows_", None) is None:
        return {}
    full, n = trace.common_slots(active_only=True)
    if n < MIN_DRAWS:
        return {}
    out = {}
    ll = pointwise_log_likelihood(net)
    finite = np.all(np.isfinite(ll), axis=(0, 1))
    if finite.any():
        total = ll[:, :, finite].sum(axis=2)
        out["log_likelihood"] = {"rhat": rank_normalized_split_rhat(total), "ess_bulk": bulk_effective_sample_size(total),
                                 "ess_tail": tail_effective_sample_size(total),
                                 "quarters": quarter_means(total),
                                 "rows": int(finite.sum())}
        if total.shape[0] > 1:  # each chain on its own (its halves): does it agree with itself, if not with the others?
            # (a chain that did not move at all does not count as agreeing with itself: inf)
            out["log_likelihood"]["rhat_per_chain"] = [rank_normalized_split_rhat(c) if np.ptp(c) > 0 else float("inf")
                                                       for c in total]
            out["log_likelihood"]["chain_means"] = [float(c.mean()) for c in total]
            out["log_likelihood"]["slots"] = [int(s) for s in full]
        out["pointwise_log_likelihood"] = pointwise_summary(ll[:, :, np.flatnonzero(finite)[:POINTWISE_ROWS]])
    potentials = trace.as_array(potentials=True, active_only=True)
    if np.all(np.isfinite(potentials)):
        out["potential"] = {"rhat": rank_normalized_split_rhat(potentials),
                            "ess_bulk": bulk_effective_sample_size(potentials)}
    return out


def quarter_means(x: np.ndarray) -> list[float]:
    """The mean over each quarter of ``x``'s last axis (the draws, or the steps; all chains together), every value
    counted (``np.array_split``: the last ones, where a trend shows, too)."""
    return [float(part.mean()) for part in np.array_split(x, 4, axis=-1)]


def monotone(quarters: list[float], rising: bool) -> bool:
    """Whether the four ``quarters`` rise (``rising``) or fall every time: a trend through the kept draws (a
    stationary chain's four quarter means come out in one given order 1 time in 24, more often when it mixes
    slowly)."""
    return len(quarters) == 4 and all((a < b) if rising else (a > b) for a, b in zip(quarters, quarters[1:]))


def pointwise_summary(ll: np.ndarray) -> dict:
    """R-hat and bulk ESS of each row's log-likelihood, ``ll`` shaped (chain, draw, row), summarised over the rows:
    the median R-hat and ESS (``rhat``, ``ess_bulk``: the typical row, what the warnings read) and the 90th
    percentile of R-hat and 10th of ESS (``rhat_q90``, ``ess_bulk_q10``: the slowest rows, reported).

    The warnings read the median because the 90th percentile of 64 rows' R-hat is an extreme of noisy figures:
    rows whose chains are stationary but autocorrelated, with the 5-30 effective draws per 100 that a default
    fit's rows have, put it above 1.1 nearly every time (64 stationary AR(1) rows of coefficient 0.8, about 15
    effective draws in 100: their 90th percentile exceeds 1.1 in 100 % of runs, their median in none;
    ``tests/test_convergence.py``), and a longer run did not bring it down (the rows near 1.1 are confidently
    predicted rows whose probability wanders between 0.97 and 1.0 over thousands of steps). The median, or the
    summed log-likelihood's R-hat, stays above 1.1 on chains that are still fitting (23 of 24 of the defaults
    panel's tabular fits with a burn-in of 100 steps; benchmarks/README.md, "The per-row figure the warnings
    read")."""
    rhat = rank_normalized_split_rhat_many(ll)  # all rows at once (a loop cost 30 ms per fit)
    ess = bulk_effective_sample_size_many(ll)
    # (rows whose chains stood still have an infinite R-hat: numpy's quantile interpolated inf - inf between two of
    # them, a RuntimeWarning the user saw, and gave nan; the nearest order statistic then, interpolated otherwise)
    finite = np.isfinite(rhat).all() and np.isfinite(ess).all()
    q90 = float(np.quantile(rhat, 0.9, method="linear" if finite else "higher"))
    q10 = float(np.quantile(ess, 0.1, method="linear" if finite else "lower"))
    return {"rhat": float(np.median(rhat)), "ess_bulk": float(np.median(ess)),
            "rhat_q90": q90, "ess_bulk_q10": q10, "rows": int(ll.shape[2])}


def _quota_slots(net) -> np.ndarray:
    """Bool mask of the active trace slots among those that are to keep ``n_draws``
    (:meth:`~bayesnet.samplers.Sampler.quota_members`)."""
    trace = net.trace_
    mask = np.asarray(net.sampler_.quota_members(net.layout_), dtype=bool)
    mask = mask if mask.shape == trace.active.shape else np.ones_like(trace.active)
    return trace.active & mask


def draws_wanted(net, lost_chains: int = 0) -> int:
    """The draws the run asked for, all chains together (``fit_status_["draws_wanted"]``): ``n_draws`` for each
    member that is to keep them (:meth:`~bayesnet.samplers.Sampler.quota_members`: every member, or pt-langevin's
    replicas at temperature 1, whose hotter replicas' draws after the tempering phase come on top, in
    ``draws_kept``), for the chains of the trace (diverged ones included) and ``lost_chains`` more (groups lost
    with ``n_jobs``)."""
    layout = net.layout_
    per_chain = int(np.asarray(net.sampler_.quota_members(layout), dtype=bool).sum()) // max(int(layout.chains), 1)
    chains = int(net.trace_.n_slots) // int(layout.members_per_chain) + int(lost_chains)
    return int(net.n_draws) * per_chain * chains


def _kept_per_quota_slot(net) -> np.ndarray:
    """Draws stored per active trace slot among those that are to keep ``n_draws``."""
    return net.trace_.stored_per_slot[_quota_slots(net)]


def least_kept_per_chain(net) -> int:
    """The fewest draws any chain (its members that keep ``n_draws``) kept; 0 without a trace."""
    if getattr(net, "trace_", None) is None:
        return 0
    kept = _kept_per_quota_slot(net)
    return int(kept.min()) if kept.size else 0


def judge_unread_steps(net) -> None:
    """After a run stopped by an error (a failing callback, memory, a worker): let the divergence monitor judge the
    steps it has not read yet (:meth:`DivergenceMonitor.judge_unread`), so that no draw of a chain that was
    leaving its typical set stays in ``trace_``. A divergence found here is recorded in ``fit_status_`` and not
    raised: the run's own error propagates (a failure of the judgement itself becomes a warning, never the error
    the caller sees)."""
    for _, cb in getattr(net, "callbacks_", []):
        if isinstance(cb, DivergenceMonitor):
            try:
                cb.judge_unread(net)
            except DivergenceError:
                pass
            except Exception as exc:  # (reading the statistics after, say, a device error)
                warnings.warn(f"the divergence monitor could not judge the steps after its last read "
                              f"({type(exc).__name__}: {exc}); draws stored since step "
                              f"{getattr(net, 'divergence_state_', {}).get('processed', '?')} were not checked.",
                              ConvergenceWarning, stacklevel=2)


def finish_call(net, interrupted: bool, error: BaseException | None = None) -> None:
    """After a call: summaries and the run's status (``fit_status_``); a ConvergenceWarning for anything short
    of a complete run (groups of chains in workers leave the warning to the estimator that merges them).
    ``error``: the exception that stopped the run (recorded in ``stopped_by``; None for Ctrl-C)."""
    net.diagnostics_ = summarise(net)
    status = net.fit_status_
    compiled = net.__dict__.get("compiled_step_")
    if compiled is not None:
        if compiled.fallback is not None:  # (while compiled, the decision's own words: "compiled", with graphs)
            status["compiled"] = f"eager after: {compiled.fallback}"
        net.diagnostics_["compile_seconds"] = compiled.compile_seconds
    trace = net.trace_
    status.update(steps_taken=int(net.sampler_state_.step), steps_planned=int(net.steps_planned_total_),
                  draws_kept=int(len(trace)), draws_wanted=draws_wanted(net),
                  draws_discarded=int(trace.discarded_per_slot.sum()))
    if status["status"] != "diverged":
        quota_done = status.get("stopped_by") == "draws collected"
        status["status"] = "interrupted" if interrupted and not quota_done else "complete"
        if status["status"] == "interrupted":
            status["stopped_by"] = "interrupt" if error is None else f"{type(error).__name__}: {error}"
        kept = _kept_per_quota_slot(net)
        if status["status"] == "complete" and (kept.size == 0 or kept.min() < net.n_draws):
            status["status"] = "short"
    if getattr(net, "group_", None) is None:
        status.pop("stop_requested", None)  # (read by extend_unmixed; a group's goes back to extend_groups)
        warn_status(net)


#: ``thinning="auto"`` doubles the draws' spacing at most this many times in a fit whose draws have not mixed
#: (:func:`extend_unmixed`): the sampling phase runs at most ``2 ** MAX_THINNING_DOUBLINGS`` times its planned length
MAX_THINNING_DOUBLINGS = 2


def unmixed(net, conv: dict) -> bool:
    """Whether the function-space checks of ``conv`` (``convergence_``) fail as :func:`convergence_messages` reads
    them: a split R-hat above ``RHAT_WARN`` or a log-likelihood bulk ESS below ``ESS_WARN``, unless several chains
    most likely sit in separate modes (:func:`separate_modes`), which a longer run rarely merges."""
    ll = conv.get("log_likelihood")
    high = any(v["rhat"] > RHAT_WARN for name, v in conv.items() if name != "potential")
    few = ll is not None and ll["ess_bulk"] < ESS_WARN
    return (high or few) and not trend_or_modes(ll)[1]


def trend_or_modes(ll: dict | None) -> tuple[bool, bool]:
    """``(rising, modes)`` of the summed log-likelihood's figures (``convergence_["log_likelihood"]``): a trend
    through the kept draws (its R-hat above ``RHAT_WARN`` and its mean rising through every quarter of them: a
    stationary chain's four quarter means come out in increasing order 1 time in 24, more often when it mixes
    slowly; a chain still fitting, nearly always; a ``convergence_`` from before the quarters has none), and, where
    there is none, chains that most likely sit in separate modes (:func:`separate_modes`). What the warnings say
    and what :func:`unmixed` leaves alone."""
    if ll is None:
        return False, False
    quarters, own = ll.get("quarters"), ll.get("rhat_per_chain")
    rising = quarters is not None and ll["rhat"] > RHAT_WARN and monotone(quarters, rising=True)
    return rising, not rising and own is not None and separate_modes(ll["rhat"], own)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def extension_wanted(net, doublings: int) -> dict | None:
    """``convergence(net)`` when :func:`extend_unmixed` should go on (a complete run, ``thinning="auto"``, no
    ``max_epochs``, no chain lost, a trace that can be thinned out and holds ``n_draws`` in each slot that is to keep
    them (pt-langevin's cold replicas; the others are thinned out alike), fewer than ``MAX_THINNING_DOUBLINGS``
    ``doublings`` so far, and draws that have not mixed: :func:`unmixed`), else None. ``net``: the estimator, or
    with ``n_jobs`` the one that merged its groups' traces."""
    trace = getattr(net, "trace_", None)
    status = net.fit_status_
    if (net.thinning != "auto" or net.max_epochs is not None or trace is None or doublings >= MAX_THINNING_DOUBLINGS
            or status.get("status") == "diverged" or status.get("diverged_chains") or status.get("lost_chains")
            or not trace.can_thin_out() or (trace.stored_per_slot[_quota_slots(net)] < int(net.n_draws)).any()):
        return None
    conv = convergence(net)
    if getattr(net, "sampler_state_", None) is not None:  # (summarise reuses it when nothing moved since; not
        net.__dict__["_convergence_at"] = (_trace_key(net), conv)  # the estimator that merges groups of chains)
    return conv if conv and unmixed(net, conv) else None


def _trace_key(net) -> tuple:
    """What :func:`convergence` depends on that a run changes: the step, the draws held and the chains active."""
    trace = net.trace_
    return int(net.sampler_state_.step), trace.stored_per_slot.tobytes(), trace.active.tobytes(), trace.thinning


def thin_and_replan(net, conv: dict) -> None:
    """Thin ``net``'s trace out (:meth:`~bayesnet.trace.Trace.thin_out`) and plan the steps that refill it at the
    doubled spacing (``steps_planned_total_``, ``steps_remaining_``; the draw quota counts the refill); ``conv``:
    the figures that asked for it, recorded in ``fit_status_["thinning_extended"]``."""
    trace = net.trace_
    before = trace.thinning
    trace.thin_out()
    net.thinning_doublings_ = getattr(net, "thinning_doublings_", 0) + 1
    worst = worst_convergence(conv)
    net.fit_status_.setdefault("thinning_extended", []).append(
        {"at_step": int(net.sampler_state_.step), "thinning": [before, trace.thinning],
         "max_rhat": worst.get("max_rhat"), "min_ess_bulk": worst.get("min_ess_bulk")})
    net.kept_at_call_start_ = trace.kept_per_slot - trace.stored_per_slot
    net.steps_planned_total_ = _resumed_length(net, int(net.sampler_state_.step))
    step_budget(net)  # (a stop inside the extension resumes to its end)
    net.fit_status_["stopped_by"] = None
    net.fit_status_["steps_planned"] = int(net.steps_planned_total_)


def step_budget(net, resumes: bool = False) -> None:
    """The steps a call (or an extension of it) may take: ``steps_expected_``, those left of
    ``steps_planned_total_``; ``steps_remaining_``, the budget, 3 times that for a sampler that collects only some
    steps (tacthmc; its draw quota stops the run at ``n_draws``) unless ``max_epochs`` fixes the length, and for a
    call resuming an interrupted one (``resumes``) at least up to where that call's budget ended
    (``budget_end_``, kept here), so that it takes the draws the uninterrupted call would have."""
    step = int(net.sampler_state_.step)
    net.steps_remaining_ = net.steps_expected_ = max(int(net.steps_planned_total_) - step, 0)
    if net.sampler_.steps_per_draw() > 1 and net.max_epochs is None:
        net.steps_remaining_ *= 3
        if resumes:
            net.steps_remaining_ = max(net.steps_remaining_, int(vars(net).get("budget_end_", 0)) - step)
    net.budget_end_ = step + int(net.steps_remaining_)


def extend_unmixed(net) -> bool:
    """``thinning="auto"``: after a run that kept its draws, when they have not mixed in function space
    (:func:`unmixed`: the split R-hat or the effective draws that would raise the ConvergenceWarning), thin the
    trace out (every other draw) and plan the steps that refill it at twice the spacing: the same ``n_draws``,
    spread over twice the steps of the chain, at most ``MAX_THINNING_DOUBLINGS`` times. The kernel is the frozen
    one throughout, so the draws are those of a run planned at the larger thinning (except where the sampler's
    schedule follows the planned length: pt-langevin's tempering phase, ``n_steps="auto"``, stays as planned, and
    its extension samples without the ladder). Returns whether the run goes on; a stop at the planned run's last
    step (``interrupt_requested_``) leaves the longer plan "interrupted", for ``partial_fit`` to finish.

    Not for an explicit ``thinning`` or ``max_epochs`` (a run of the length asked for), a run that was
    interrupted, stopped short or lost a chain, or a trace that overwrote draws (a continued run). Groups of
    chains in workers (``n_jobs``) leave the decision to the estimator that merges them (:func:`extend_groups`),
    which judges every chain together, as one process does. Measured on default classifier fits
    (benchmarks/README.md, "Longer runs for draws that have not mixed"): breast cancer's seed 0 on one machine,
    the summed log-likelihood's ESS 6.1 -> 62.6 and R-hat 1.147 -> 0.991 with one doubling (which seed needs it
    depends on the CPU's rounding: seed 2 on another, 4.5 -> 21.1 and 1.163 -> 1.058)."""
    if getattr(net, "group_", None) is not None:
        return False
    if net.steps_remaining_ > 0 and net.fit_status_.get("stopped_by") != "draws collected":
        return False
    conv = extension_wanted(net, getattr(net, "thinning_doublings_", 0))
    if conv is None:
        return False
    thin_and_replan(net, conv)
    # a stop at the planned run's last step (Ctrl-C, a callback's): the longer plan stands, "interrupted", and
    # partial_fit finishes it, as it would have run
    return net.steps_remaining_ > 0 and not (net.interrupt_requested_ or net.fit_status_.get("stop_requested"))


def extend_groups(net) -> bool:
    """:func:`extend_unmixed` for the groups of chains of ``n_jobs`` (``net.shards_``, merged into ``net``): judged
    on every chain together; each group is thinned out and replanned, and left to be resumed (its status
    "interrupted") by the workers. Returns whether they go on."""
    shards = net.shards_
    if any(shard.fit_status_.get("status") != "complete" for shard in shards):
        return False
    conv = extension_wanted(net, getattr(shards[0], "thinning_doublings_", 0))
    net.__dict__.pop("_convergence_at", None)  # (merge computes its own)
    if conv is None:
        return False
    stopped = any(shard.fit_status_.get("stop_requested") for shard in shards)
    for shard in shards:
        thin_and_replan(shard, conv)
        shard.fit_status_["status"] = "interrupted"  # (resumed to its new planned length)
        if stopped:  # a stop at the planned run's last step, in a worker: the longer plan waits for partial_fit
            shard.fit_status_["stopped_by"] = "interrupt"
    return True


#: a ConvergenceWarning when the function-space split R-hat exceeds this (Gelman and Rubin 1992's threshold; Vehtari
#: et al. 2021 ask 1.01 of final results, which 100 draws of one chain cannot resolve)
RHAT_WARN = 1.1
#: ... or the log-likelihood's bulk ESS is below this many effective draws (all chains together)
ESS_WARN = 10.0
#: ... or a chain's kinetic temperature, averaged after burn-in, is off its target by more than this fraction
#: (plus the chance spread of an average of D squares, 3 sqrt(2 / D)), or its configurational temperature (plus
#: three standard errors of its mean)
HEAT_WARN = 0.15


def convergence_messages(net, state) -> list[str]:
    """The ConvergenceWarning messages of a run's diagnostics: chains that have not converged in function
    space (``convergence_``), too few effective draws, or a chain that ran hot or cold after burn-in."""
    out = []
    conv = getattr(net, "convergence_", None) or {}
    extended = net.fit_status_.get("thinning_extended") or []
    doubled = (f"; the automatic thinning already doubled it {_times(len(extended))}, "
               f"from {extended[0]['thinning'][0]}, because the draws had not mixed" if extended else "")
    fix = (f"Run longer: a larger burn_in (now {burn_in_words(net)}) lets the chains reach their typical set, more "
           f"n_draws or thinning (now {net.n_draws}, {net.trace_.thinning}{doubled}) gives more effective draws; "
           "several chains (n_chains) make R-hat sharper.")
    worst = [(name, v["rhat"]) for name, v in conv.items() if name != "potential" and v["rhat"] > RHAT_WARN]
    ll = conv.get("log_likelihood")
    modes = False
    if worst:
        labels = {"log_likelihood": f"summed over {ll['rows']} rows" if ll else "summed",
                  "pointwise_log_likelihood": f"median of {conv['pointwise_log_likelihood']['rows']} rows' own"
                  if "pointwise_log_likelihood" in conv else ""}
        figures = ", ".join(f"{labels.get(name) or name} {rhat:.3f}" for name, rhat in worst)
        # a trend, not slow mixing, or chains in separate modes: their own words; otherwise the general advice
        rising, modes = trend_or_modes(ll)
        quarters = ll.get("quarters") if ll is not None else None
        own = ll.get("rhat_per_chain") if ll is not None else None
        low, high = for_chains(net.sampler_.temperature_range, net.sampler_state_)
        tempers = high > low
        why = (f"The training log-likelihood was still rising while the draws were kept (its mean over each quarter "
               f"of the draws, summed over {ll['rows']} training rows: "
               f"{', '.join(f'{v:.4g}' for v in quarters)}): the chains were most likely still fitting. Increase "
               f"burn_in (now {burn_in_words(net)}) and fit anew." if rising else
               f"The {_units(net)} agree with themselves (each one's own split R-hat: median "
               f"{float(np.median(own)):.2f} over {len(own)}) but clearly not with each other (their mean training "
               f"log-likelihoods, summed over {ll['rows']} rows: {', '.join(f'{v:.4g}' for v in ll['chain_means'])}): "
               "they most likely sit in different modes of the posterior, which a longer run of a network's chains "
               "rarely merges. The predictions average the modes, as a deep ensemble averages its members"
               + ("." if tempers else "; to move between modes, use a tempering sampler (sampler='tacthmc' or "
                  "'pt-langevin').") + _unsettled(net, own, ll.get("slots")) if modes else fix)
        out.append(f"the chains have not converged: split R-hat of the training log-likelihood ({figures}) is above "
                   f"{RHAT_WARN}. {why}")
    if ll is not None and ll["ess_bulk"] < ESS_WARN:
        out.append(f"only {ll['ess_bulk']:.1f} effective draws of the training log-likelihood (bulk ESS, all chains; "
                   f"below {ESS_WARN:g}): predictions average few independent draws. "
                   + ("The chains most likely sit in different modes (above), which makes the pooled figure small; "
                      "more draws per mode need more n_draws or thinning (now "
                      f"{net.n_draws}, {net.trace_.thinning}{doubled})." if modes else fix))
    out += _temperature_messages(net, state)
    _, per_chain = net.trace_.common_slots(active_only=True)
    # (a short, interrupted or diverged run says why it has few draws itself, with its own advice)
    if 0 < per_chain < MIN_DRAWS and net.fit_status_["status"] == "complete":
        out.append(f"only {per_chain} draw{'s' if per_chain > 1 else ''} per chain {'were' if per_chain > 1 else 'was'}"
                   f" kept: too few to check convergence (split R-hat and the effective sample size need at least "
                   f"{MIN_DRAWS} per chain), so nothing says whether the draws come from the posterior, and "
                   f"the predictions average {len(net.trace_)} draw{'s' if len(net.trace_) > 1 else ''} in all. "
                   f"Increase n_draws (now {net.n_draws}).")
    return out


#: chains are named as sitting in separate modes only when they disagree this clearly (pooled split R-hat)
RHAT_MODES = 1.3


def separate_modes(rhat: float, own: list[float]) -> bool:
    """Whether chains whose pooled split R-hat is ``rhat`` most likely sit in separate modes: they disagree clearly
    (above ``RHAT_MODES``) while the median chain agrees with itself (its own split R-hat, ``own``, at most
    ``RHAT_WARN``); chains that mix slowly in one mode disagree with themselves too. Measured on four AR(1) chains of
    100 draws (300 replicates, two seeds): chains 3 sds apart are named separate in 74-79 % of the replicates at
    coefficient 0.8 (15 effective draws per chain, as a default fit's rows have) and 39-41 % at 0.9; chains of one
    mode in 0-2 % at 0.8 and 0.9 and 4-5 % at 0.97-0.99 (with the threshold at ``RHAT_WARN`` instead: 14-28 % at 0.8
    and 0.9, half the one-mode fits that warn). Below ``RHAT_MODES`` the warning keeps its general advice."""
    return len(own) > 1 and rhat > RHAT_MODES and float(np.median(own)) <= RHAT_WARN


def _units(net) -> str:
    """What the per-chain figures are of: chains, or the members of chains (eqn's walkers, pt-langevin's replicas)."""
    layout = getattr(net, "layout_", None)
    return "chains" if layout is None or layout.members_per_chain == 1 else "members of the chains (walkers or replicas)"


def _name_slot(net, slot: int) -> str:
    """A trace slot as the user knows it: ``chain c``, or ``chain c, member m`` with several members per chain."""
    layout = getattr(net, "layout_", None)
    m = 1 if layout is None else layout.members_per_chain
    return f"chain {slot}" if m == 1 else f"chain {slot // m}, member {slot % m}"


def _unsettled(net, own: list[float], slots: list[int] | None) -> str:
    """The sentence on the chains that do not agree with themselves either, among chains that most likely sit in
    different modes ("" when all do); ``slots`` the trace slots ``own`` follows (the active ones with draws)."""
    bad = [i for i, r in enumerate(own) if r > RHAT_WARN]
    if not bad:
        return ""
    slots = slots if slots is not None and len(slots) == len(own) else list(range(len(own)))
    figures = ", ".join(f"{_name_slot(net, slots[i])}: {own[i]:.2f}" if np.isfinite(own[i]) else
                        f"{_name_slot(net, slots[i])}: did not move" for i in bad)
    return (f" Some did not agree with themselves either (own split R-hat {figures}): a larger burn_in (now "
            f"{burn_in_words(net)}) lets such chains settle.")


def _temperature_messages(net, state) -> list[str]:
    """A chain whose mean kinetic or configurational temperature after the burn-in is off its target (the worst
    member of each, over the process groups with ``n_jobs``): the kinetic by more than ``HEAT_WARN`` plus three
    chance spreads ``sqrt(2/D)`` of a mean of ``D`` squares, the configurational by more than ``HEAT_WARN`` plus
    three standard errors of its mean (from its effective sample size over the steps after the burn-in that
    ``step_stats_`` still holds)."""
    groups = [(net, state)] if getattr(net, "step_stats_", None) is not None else \
        [(shard, shard.sampler_state_) for shard in getattr(net, "shards_", None) or []]
    worst = {}  # field -> (excess over its tolerance, message)
    for group, group_state in groups:
        for field, excess, message in _temperature_findings(group, group_state):
            if field not in worst or excess > worst[field][0]:
                worst[field] = (excess, message)
    return [worst[field][1] for field in ("kinetic_temperature", "configurational_temperature") if field in worst]


def _temperature_findings(net, state) -> list[tuple[str, float, str]]:
    """``(field, excess, message)`` for each temperature of one group's chains off its target (see
    :func:`_temperature_messages`)."""
    out = []
    stats = getattr(net, "step_stats_", None)
    if state is None or stats is None:
        return out
    D = int(net.posterior_.n_parameters_per_member) if getattr(net, "posterior_", None) is not None else 1
    alive = alive_members(net)  # the chains that finished: a diverged one is reported as such
    for field, target in (("kinetic_temperature", net.sampler_.target_temperature()),
                          ("configurational_temperature", net.sampler_.configurational_target())):
        means = stats.member_means(field)
        if not target or means is None:
            continue
        series = None
        if field == "kinetic_temperature":
            tolerance = np.full(means.shape, HEAT_WARN + 3.0 * math.sqrt(2.0 / max(D, 1)))
        else:
            series = _after_burn_in(stats, field, net.trace_.burn_in)
            tolerance = HEAT_WARN + 3.0 * np.array([_standard_error(x) for x in series]) / target
        keep = alive & np.isfinite(means) & np.isfinite(tolerance)  # (none measured on the compiled path)
        if not keep.any():
            continue
        k = int(np.flatnonzero(keep)[np.argmax((np.abs(means / target - 1.0) - tolerance)[keep])])
        excess = float(abs(means[k] / target - 1.0) - tolerance[k])
        if excess <= 0.0:
            continue
        word = "hot" if means[k] > target else "cold"
        figure = (f"averaged {means[k]:.3g} after burn-in against a target of {target:g} (more than "
                  f"{tolerance[k]:.0%} off)")
        # still relaxing towards the target: its mean over each quarter of the kept part moved towards it every time
        quarters = quarter_means(series[k]) if series is not None else []
        relaxing = monotone(quarters, rising=word == "cold")
        if field == "kinetic_temperature":
            message = (f"a chain ran {word}: its kinetic temperature {figure}, so it does not sample the posterior "
                       f"at its temperature. {_step_advice(net, state)}.")
        elif relaxing:
            message = (f"a chain ran {word}: its configurational temperature (the virial theta . grad U / D) {figure}, "
                       "and it was still moving towards its target while the draws were kept (its mean over each "
                       f"quarter of them: {', '.join(f'{q:.3g}' for q in quarters)}): the chain had not reached "
                       f"equilibrium. Increase burn_in (now {burn_in_words(net)}) and fit anew.")
        elif word == "hot":
            message = (f"a chain ran hot: its configurational temperature (the virial theta . grad U / D) {figure}: "
                       "its positions spread wider than the posterior at its temperature (too large a step for "
                       f"the mini-batch noise). {_step_advice(net, state)}.")
        else:
            step = getattr(net.sampler_, "step_size", "auto")
            larger = "" if isinstance(step, str) else f", or set a larger step size than sampler__step_size={step!r}"
            message = (f"a chain ran cold: its configurational temperature (the virial theta . grad U / D) {figure}: "
                       "its positions had not reached (or not yet explored) the posterior's typical set when the "
                       f"draws were kept. Increase burn_in (now {burn_in_words(net)}){larger}.")
        out.append((field, excess, message))
    return out


def _after_burn_in(stats, field: str, burn_in: int) -> list[np.ndarray]:
    """Per member, the finite values of ``field`` at the steps after ``burn_in`` that ``stats`` still holds."""
    _, values = stats.since(burn_in)
    return [x[np.isfinite(x)] for x in values[field].astype(np.float64)]


def _standard_error(x: np.ndarray) -> float:
    """The standard error of the mean of the series ``x``: its standard deviation over the square root of its
    effective sample size (NaN with fewer than 20 values)."""
    if x.size < 20:
        return float("nan")
    return float(np.std(x, ddof=1)) / math.sqrt(max(effective_sample_size(x), 1.0))


def no_warmup(net, state) -> bool:
    """Whether the chains of ``state`` ran without the warm-up their ``step_size="auto"`` asks for (a burn-in of
    0 steps: the step is the sampler's fallback, the mass the identity)."""
    return (state is not None and getattr(state, "warmup_report", None) is None
            and getattr(state, "warmup", None) is None and getattr(net.sampler_, "step_size", None) == "auto"
            and net.sampler_.adaptation_length() <= 0)


def warmup_setting(net) -> str | None:
    """The explicit ``sampler__adaptation_steps`` that sets the warm-up's length, as a message names it (with the
    burn-in it must fit in), or None when the warm-up is the burn-in (``"auto"``, or a sampler without the option):
    a longer burn-in does not lengthen an explicit warm-up."""
    n = getattr(net.sampler_, "adaptation_steps", "auto")
    if isinstance(n, str):
        return None
    return f"sampler__adaptation_steps (now {int(n)}; at most the burn-in, {burn_in_words(net)})"


def unsettled_warmup(state) -> str | None:
    """Why the warm-up of the sampler state ``state`` did not settle (its report's reason), or None when it settled,
    has not ended, or there was none."""
    report = getattr(state, "warmup_report", None) if state is not None else None
    if report is None or report.get("settled", True):
        return None
    return report.get("reason") or "its step size kept changing"


def refused_draws(net) -> dict:
    """Due draws refused for not being finite in this call with the divergence monitor off, per chain
    (``{chain: count}``, the most among its members; the groups' of an ``n_jobs`` fit by their global chain
    numbers)."""
    from .callbacks import DivergenceMonitor

    shards = getattr(net, "shards_", None) or [net]
    out = {}
    for shard in shards:
        if any(isinstance(cb, DivergenceMonitor) for _, cb in getattr(shard, "callbacks_", None) or ()):
            continue  # the monitor retires such a chain and reports it as diverged
        first = shard.group_[1] if getattr(shard, "group_", None) is not None else 0
        per_chain = max(int(shard.layout_.members_per_chain), 1) if getattr(shard, "layout_", None) else 1
        for slot, n in shard.__dict__.get("nonfinite_this_call_", {}).items():
            chain = first + int(slot) // per_chain  # the most refused among the chain's members (walkers, replicas)
            out[chain] = max(out.get(chain, 0), int(n))
    return out


def _step_advice(net, state) -> str:
    """What to change after a hot or diverged chain: a smaller step, and the inputs' scale unless the estimator
    standardises them already."""
    hint = net.sampler_.divergence_hint(state)
    advice = (f"Set a smaller step size (now {hint})" if getattr(net, "input_mean_", None) is not None
              else f"Standardise the inputs (standardize_inputs=True), or set a smaller step size (now {hint})")
    smaller = smaller_batches(net)
    return advice if smaller is None else f"{smaller}; or: {advice[0].lower()}{advice[1:]}"


def smaller_batches(net, anew: bool = True) -> str | None:
    """Why chains continued on smaller mini-batches than their warm-up measured may run hot or diverge, as the fix's
    first words (in the warning of a hot chain and the DivergenceError; a helper's user test:
    ``set_params(batch_size=4)`` before ``partial_fit`` ran the frozen step at kinetic temperature 1.4, and the
    warning asked for a smaller step only); None when the batches are not smaller. ``anew=False`` when the message
    has already asked for a fit anew (the chains also continued on new data): the fit it asked for warms up at this
    batch size too, said once."""
    plan = getattr(net, "plan_", None)
    n_data = getattr(net, "n_train_", None)
    if plan is None or n_data is None or net.batch_size is None:
        return None
    now = resolve_batch_size(net.batch_size, int(n_data), net.sampler_.full_batch)
    if now >= min(plan.batch_size, int(n_data)):  # (the full data has no gradient noise)
        return None
    fix = ("Fit anew (warm_start=False) to warm up at this batch size, or set batch_size back" if anew else
           "The fit anew warms up at this batch size too; or set batch_size back")
    return (f"The chains continued on mini-batches of {now} rows (batch_size={net.batch_size!r}), smaller than the "
            f"{plan.batch_size} the warm-up measured the step size with: their gradient noise is larger than the step "
            f"allows for. {fix}")


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the caller's code: the first frame outside bayesnet, skorch and
    scikit-learn (``fit`` reaches the estimator through skorch, ``GridSearchCV`` through scikit-learn).

    Walks the frames' code objects (``inspect.stack`` resolves every frame's module and source file: 20-80 ms
    of every fit that warns)."""
    import os
    import sys

    import sklearn
    import skorch

    library = tuple(os.path.dirname(f) for f in (os.path.dirname(__file__), skorch.__file__, sklearn.__file__))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(library):
        frame, level = frame.f_back, level + 1
    return level


def warn_status(net) -> None:
    """A ConvergenceWarning that names the figure and the fix, for an interrupted run, chains that diverged,
    or fewer draws than asked for."""
    status, trace = net.fit_status_, net.trace_
    step, planned = status["steps_taken"], status["steps_planned"]
    state = getattr(net, "sampler_state_", None)
    if state is None and getattr(net, "shards_", None):
        state = net.shards_[0].sampler_state_
    messages = []
    if status["status"] == "interrupted":
        cause = status.get("stopped_by")
        cause = f" ({cause})" if cause not in (None, "interrupt") else ""
        messages.append(f"the fit was interrupted at step {step} of {planned} planned{cause}, with {len(trace)} "
                        "draws kept; partial_fit continues the planned run where it stopped.")
    diverged = status["diverged_chains"]
    if diverged and status["status"] != "diverged":
        detail = "; ".join(f"chain {c} at step {d['step']} ({d['draws_kept']} draws kept, {d['draws_discarded']} "
                           f"discarded)" for c, d in sorted(diverged.items()))
        messages.append(f"{len(diverged)} of {net.n_chains} chains diverged and stopped taking draws: {detail}. "
                        f"The other chains finished. {_step_advice(net, state)}.")
    # with n_jobs, each group of chains warmed up on its own: the first whose warm-up did not settle (before:
    # group 0's only, so another group's went unreported)
    groups = [shard for shard in getattr(net, "shards_", None) or [] if shard.sampler_state_ is not None]
    unsettled_state = next((g.sampler_state_ for g in groups if unsettled_warmup(g.sampler_state_) is not None),
                           state) if groups else state
    unsettled = unsettled_warmup(unsettled_state)
    explicit = warmup_setting(net) if state is not None else None
    if unsettled is not None:
        state_report = unsettled_state.warmup_report
        length = "sampler__adaptation_steps" if explicit else "the burn-in"
        messages.append(f"the warm-up ({state_report['n_steps']} steps, {length}) did not settle: "
                        f"{unsettled}. Increase {explicit or f'burn_in (now {burn_in_words(net)})'}.")
    elif no_warmup(net, state):
        from ..samplers.warmup import MIN_SETTLED

        short = net.trace_.burn_in < MIN_SETTLED  # (adaptation_steps may not outlast the burn-in)
        longer = (f"Set sampler__adaptation_steps (now {net.sampler_.adaptation_steps}) to 'auto' or at least "
                  f"{MIN_SETTLED}" + (f", with a burn_in of at least {MIN_SETTLED} (now {burn_in_words(net)})"
                                       if short else "") if explicit else
                  f"Increase burn_in (now {burn_in_words(net)}; the warm-up needs at least {MIN_SETTLED})")
        messages.append(f"no warm-up ran, so nothing set the step size: the chains ran at the fallback step "
                        f"{net.sampler_.fallback_step_size:g} with a unit mass. {longer}, or set "
                        "sampler__step_size.")
    if status["status"] != "diverged":  # (the DivergenceError is the report: the mixing figures of the draws kept
        # before it, in convergence_, warned ahead of it, about a run it declares failed; a user-test find)
        messages += convergence_messages(net, state)
    if status["status"] == "short" and not status.get("lost_chains"):  # (lost groups have their own warning)
        least = least_kept_per_chain(net)
        # max_epochs sets the run's length: it, not the sampler, is why a run it ends is short (tacthmc's plateau
        # figure over a run cut before its burn-in ended said nothing)
        hint = ""
        if state is not None and net.max_epochs is None:  # (the running chains: a retired one is not waited for)
            # with n_jobs, the group of chains that kept the fewest draws: the one the run waited for
            short = min(groups, key=least_kept_per_chain) if groups else net
            active = short.trace_.active.reshape(short.layout_.chains, -1).any(1)
            takes = "active" in inspect.signature(net.sampler_.shortfall_hint).parameters  # (a registered sampler
            # written to the one-argument form still runs)
            hint = net.sampler_.shortfall_hint(short.sampler_state_, active) if takes else \
                net.sampler_.shortfall_hint(short.sampler_state_)
        refused = refused_draws(net)
        if refused:  # a chain gone non-finite that nothing stopped (the divergence monitor off): its draws refused
            detail = ", ".join(f"chain {c}: {n}" for c, n in sorted(refused.items()))
            reason = (f" Draws that were due but not finite were not kept ({detail}); the divergence monitor, which "
                      f"stops such chains and says when they diverged, is off (callbacks__divergence=None). "
                      f"{_step_advice(net, state)}.")
        elif net.max_epochs is not None:
            reason = (f" max_epochs={net.max_epochs} is shorter than burn_in ({burn_in_words(net)}) + n_draws * "
                      "thinning steps: run longer, or call partial_fit to continue the chains.")
        else:
            reason = (f" {net.sampler_.name}: {hint}" if hint else
                      " Run longer: partial_fit continues the chains.")
        unfitted = " No draw was kept, so the estimator is not fitted." if len(trace) == 0 else ""
        kept = _kept_per_quota_slot(net)  # (with n_jobs, the merged trace: every group's chains)
        fewest = f" (the fewest of any chain; {len(trace)} in all)" if kept.size and kept.max() > least else ""
        messages.append(f"{least} of n_draws={net.n_draws} draws were kept per chain in {step} steps{fewest}.{reason}"
                        f"{unfitted}")
    for message in messages:
        warnings.warn(message, ConvergenceWarning, stacklevel=user_stacklevel())
