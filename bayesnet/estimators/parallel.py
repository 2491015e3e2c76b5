"""Groups of chains fitted in separate processes (joblib: loky locally, dask on a cluster).

``n_jobs`` splits the ``n_chains`` chains into groups, each fitted (vectorised) by a clone of the estimator
in a joblib worker; the traces are merged afterwards. Every chain draws from its own random stream and
starts from its own seed (:mod:`bayesnet.samplers.random`), so the merged draws are those of the same fit
without ``n_jobs``: how the chains are grouped never changes a chain.

Faults cost only their own group:

* an exception inside a group (a divergence of all its chains, a ``MemoryError``) is caught in the worker,
  which returns the group with the draws it collected;
* a worker that dies (killed, out of memory at the operating-system level: loky's ``TerminatedWorkerError``)
  breaks the pool, and joblib cancels the groups still running. The groups that had finished are kept; each
  unfinished group is then run again on its own, in a fresh worker. As the chains are deterministic, a rerun
  reproduces the same draws; a group whose rerun dies again is the one at fault and is dropped, with a
  warning that names its chains.
"""

from __future__ import annotations

import warnings

import joblib
import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from ..samplers import DivergenceError
from ..trace import Trace

__all__ = ["n_groups", "fit_groups"]


def n_groups(net) -> int:
    """Groups of chains fitted in separate workers: 1 unless ``n_jobs`` is set and there are several chains."""
    if net.n_jobs is None or int(net.n_chains) < 2:
        return 1
    return max(1, min(int(net.n_chains), joblib.effective_n_jobs(net.n_jobs)))


def _indexed_fit_group(i, args):
    return i, _fit_group(*args)


def _fit_group(estimator, X, y, classes, call="partial_fit"):
    """Worker body: run one group of chains; an exception comes back with the group (and its draws so far).
    ``call``: the caller's call, as refusals name it (:data:`~bayesnet.estimators.run.CONTINUING_CALL`: a context
    variable does not reach a worker process)."""
    from .run import continuing_as

    with continuing_as(call):
        try:
            return estimator.partial_fit(X, y, classes=classes), None
        except (DivergenceError, MemoryError, FloatingPointError) as exc:
            return estimator, exc


def _is_pool_failure(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    return bool(names & {"TerminatedWorkerError", "BrokenProcessPool", "BrokenExecutor"})


def _run(tasks, n_jobs):
    """Run ``tasks`` (index -> (shard, X, y, classes)); return the finished ones and the indices lost to a pool
    failure."""
    done, order = {}, list(tasks)
    try:
        results = joblib.Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
            joblib.delayed(_indexed_fit_group)(i, tasks[i]) for i in order)
        for i, result in results:
            done[i] = result
    except Exception as exc:  # noqa: BLE001 - only a broken pool is recoverable; anything else is re-raised
        if not _is_pool_failure(exc):
            raise
    return done, [i for i in order if i not in done]


def fit_groups(net, X, y, classes) -> None:
    """Fit (or continue) the chains in ``n_groups(net)`` joblib workers and merge them into ``net``.

    Raises
    ------
    DivergenceError
        If every chain of every group diverged (the draws kept before are merged first).
    RuntimeError
        If every group was lost to dead workers.
    """
    from .run import continuing_call, seed_base

    fresh = not getattr(net, "shards_", None)
    resuming = []  # the groups a continued fit resumes (the others wait for them); none for a fresh fit
    net._validate_fit_data(X, y, reset=fresh, classes=classes)  # bad data fails here, before any worker starts
    if fresh:
        base = seed_base(net.random_state)
        groups = np.array_split(np.arange(int(net.n_chains)), n_groups(net))
        shards = []
        for g in groups:
            shard = clone(net).set_params(n_chains=len(g), n_jobs=None, verbose=0)
            shard.initialize()
            shard.group_ = (base, int(g[0]))  # the chains' global indices: their seeds and streams
            shards.append(shard)
    else:
        from .run import _same, refuse_changes

        running = sum(int(shard.n_chains) for shard in net.shards_) + len(net.fit_status_.get("lost_chains", []))
        if int(net.n_chains) != running:  # the groups carry the chains (and lost groups stay counted)
            refuse_changes({"n_chains": (net.n_chains, running)})
        # groups stopped early (an interrupt, a MemoryError) resume to their planned length, as one process's
        # interrupted run does; the groups that finished wait for them (running them too would take n_draws
        # more draws in some groups only, leaving chains of different lengths)
        resuming = [i for i, shard in enumerate(net.shards_) if shard.fit_status_.get("status") == "interrupted"]
        changes = []
        for shard in net.shards_:  # only what changed: skorch re-initialises the module on some settings
            mine = shard._all_params(deep=False)
            changes.append({k: (v, mine.get(k)) for k, v in net._all_params(deep=False).items()
                            if k not in ("n_chains", "n_jobs", "verbose", "callbacks") and not _same(v, mine.get(k))})
        if any(changes):  # a setting a group's sampler state is built on: refused before any group changes
            from ..samplers import make_sampler
            from .run import refuse_state_changes

            sampler = make_sampler(net.sampler, **net.get_params_for("sampler"))
            for shard in net.shards_:
                refuse_state_changes(sampler, shard.sampler_, shard.sampler_state_)
        plan = {k: c[k] for c in changes for k in ("n_draws", "thinning", "max_epochs") if k in c}
        if resuming and plan:  # refused before any group changes, so the fit stays as it was
            detail = ", ".join(f"{k}={new!r} (was {was!r})" for k, (new, was) in plan.items())
            raise ValueError(f"{continuing_call()} first resumes the groups of chains that stopped early (chains "
                             f"{[c for i in resuming for c in _chains(net.shards_[i])]}) to their planned run; "
                             f"change {detail} in a later call, once every group has finished.")
        shards = [shard.set_params(**{k: new for k, (new, _) in c.items()}) if c else shard
                  for shard, c in zip(net.shards_, changes)]
    for shard in shards:  # the data's warnings (a column-vector y, a constant target, unscaled inputs) came from
        shard._quiet_data = True  # net's own validation above: not again from every worker
    from .run import MAX_THINNING_DOUBLINGS, extend_groups

    tasks = {i: (shard, X, y, classes, continuing_call()) for i, shard in enumerate(shards)
             if not resuming or i in resuming}
    for extensions in range(MAX_THINNING_DOUBLINGS + 1):  # (the groups' own count bounds it too)
        done, lost = _run(tasks, net.n_jobs)
        for i in lost:  # a dead worker cancelled these: rerun each alone, so that only the culprit is lost
            more, _ = _run({i: tasks[i]}, 2)
            done.update(more)
        lost = [i for i in sorted(tasks) if i not in done]
        for i in set(range(len(shards))) - set(tasks):  # waited for the others: nothing of theirs to report
            shards[i].nonfinite_this_call_ = {}
            done[i] = (shards[i], None)
        if len(lost) == len(shards):
            raise RuntimeError("every group of chains was lost: their worker processes died (killed, or out of "
                               "memory); lower n_jobs, or fit fewer chains per process.")
        kept = [done[i] for i in sorted(done)]
        lost_now = {c for i in lost for c in _chains(shards[i])}
        lost_chains = sorted(set(getattr(net, "fit_status_", {}).get("lost_chains", []) if not fresh else [])
                             | lost_now)  # lost earlier stay lost (and were reported when they were)
        errors = [(shard, err) for shard, err in kept if err is not None]
        merge(net, [shard for shard, _ in kept], lost_chains=lost_chains, lost_now=sorted(lost_now),
              faults=[f"{type(err).__name__} in chains {_chains(shard)}" for shard, err in errors
                      if not isinstance(err, DivergenceError)])
        # thinning="auto" and draws that have not mixed: every group goes on at twice the spacing, judged on all
        # the chains together (as in one process: n_jobs never changes a chain's draws)
        if errors or lost or extensions == MAX_THINNING_DOUBLINGS or not extend_groups(net):
            break
        if any(shard.fit_status_.get("stop_requested") for shard in net.shards_):  # (stopped at the planned end:
            merge(net, net.shards_, lost_chains=lost_chains)  # the longer plan, "interrupted", for partial_fit)
            break
        shards = net.shards_
        tasks = {i: (shard, X, y, classes, continuing_call()) for i, shard in enumerate(shards)}
    for shard in net.shards_:
        shard.fit_status_.pop("stop_requested", None)  # (read above)
    from .run import user_stacklevel, warn_status

    for shard, err in errors:
        if not isinstance(err, DivergenceError):
            after = ("its chains had diverged by then (fit_status_['diverged_chains']): their draws from before "
                     "are kept" if shard.fit_status_.get("status") == "diverged" else
                     "its draws so far are kept, and partial_fit continues it")
            warnings.warn(f"the group of chains {_chains(shard)} stopped early with {type(err).__name__}: {err}; "
                          f"{after}.", ConvergenceWarning, stacklevel=user_stacklevel())
    if errors and len(errors) == len(kept):
        if all(isinstance(e, DivergenceError) for _, e in errors):
            # every chain diverged: the message of the merged fit, every group's chains and draws (before: the
            # first group's error, "all 2 chains (0, 1)" of 4), with the last group to diverge's step size
            shard, err = max(errors, key=lambda pair: pair[1].step)
            raise DivergenceError(net.divergence_message(err.step, None, state=shard.sampler_state_), err.step)
        first = next(e for _, e in errors if not isinstance(e, DivergenceError))
        raise type(first)(f"every group of chains stopped with an error: {first}") from first
    warn_status(net)


def _chains(shard) -> list[int]:
    base, first = shard.group_
    return list(range(first, first + int(shard.n_chains)))


def merge(net, shards, lost_chains=(), faults=(), lost_now=()) -> None:
    """Merge the groups' traces, statistics and reports into ``net``; warn about the chains lost in this call
    (``lost_now``; ``lost_chains`` holds those lost in earlier calls too)."""
    net.shards_ = list(shards)
    first = shards[0]
    for attr in ("classes_", "n_outputs_", "y_mean_", "y_scale_", "_y_is_1d", "n_features_in_", "feature_names_in_",
                 "input_shape_", "input_mean_", "input_scale_", "device_", "prior_", "sampler_", "n_train_", "history_", "plan_", "seed_",
                 "data_fingerprint_", "check_rows_", "_new_data_at",
                 "thinning_doublings_"):
        if attr in vars(first):
            setattr(net, attr, getattr(first, attr))
    from .run import recorded_params

    # (the groups' own are theirs: their n_chains, n_jobs=None)
    net.fit_params_ = recorded_params(net._all_params(deep=False))
    with net._current_init_context("module"):
        net.module_ = first.module_
    with net._current_init_context("criterion"):
        net.criterion_ = first.criterion_
    net.layout_ = type(first.layout_)(int(net.n_chains), first.layout_.members_per_chain)
    net.first_chain_ = 0
    net.trace_ = Trace.concatenate([shard.trace_ for shard in shards])
    net.steps_planned_total_ = first.steps_planned_total_
    # run-level diagnostics: means weighted by each group's number of chains (lists element-wise)
    weights = np.array([shard.n_chains for shard in shards], dtype=float)
    weights /= weights.sum()
    summary = {}
    for key, val in first.diagnostics_.items():
        values = [shard.diagnostics_.get(key) for shard in shards]
        if all(isinstance(v, (bool, np.bool_)) for v in values):
            summary[key] = bool(any(values))
        elif all(isinstance(v, (int, float, np.floating, np.integer)) for v in values):
            mean = float(np.dot(weights, values))
            summary[key] = int(round(mean)) if isinstance(val, (int, np.integer)) else mean
        elif all(isinstance(v, (list, np.ndarray)) and len(v) == len(val) for v in values):
            summary[key] = (weights @ np.asarray(values, dtype=float)).tolist()
    from .run import convergence, worst_convergence

    net.convergence_ = convergence(net)
    summary.pop("max_rhat", None), summary.pop("min_ess_bulk", None)
    summary.update(worst_convergence(net.convergence_))
    net.diagnostics_ = summary
    statuses = [shard.fit_status_ for shard in shards]
    diverged = {c: d for s in statuses for c, d in s["diverged_chains"].items()}
    rank = ["complete", "short", "interrupted", "diverged"]
    # "diverged" only when every group diverged: otherwise the others' status, and the diverged chains are
    # reported as such (warn_status), as without n_jobs
    running = [s for s in statuses if s["status"] != "diverged"] or statuses
    status = max((s["status"] for s in running), key=rank.index)
    if (lost_chains or faults) and status == "complete":
        status = "short"  # fewer draws than asked for: a group was lost or stopped by an error
    from .run import draws_wanted

    wanted = draws_wanted(net, len(lost_chains))  # every chain asked for, lost ones included
    net.fit_status_ = {
        "status": status, "diverged_chains": diverged,
        "stopped_by": ("; ".join(faults) if faults else
                       next((s["stopped_by"] for s in statuses if s["stopped_by"]), None)),
        "lost_chains": list(lost_chains),
        **{k: sum(s.get(k, 0) for s in statuses) for k in ("draws_kept", "draws_discarded")},
        "draws_wanted": wanted,
        # the step the run reached: the group that stopped first (the others went further)
        "steps_taken": min(s.get("steps_taken", 0) for s in running),
        "steps_planned": max(s.get("steps_planned", 0) for s in statuses),
        "intra_op_threads": first.fit_status_.get("intra_op_threads"),
        "compiled": first.fit_status_.get("compiled")}
    if "thinning_extended" in first.fit_status_:  # (every group's, the same: extend_groups judged them together)
        net.fit_status_["thinning_extended"] = first.fit_status_["thinning_extended"]
    if lost_now:
        from .run import user_stacklevel
        warnings.warn(f"the worker process fitting chains {list(lost_now)} died (killed, or out of memory): "
                      "their draws are lost; the other chains' draws are kept.", ConvergenceWarning,
                      stacklevel=user_stacklevel())
