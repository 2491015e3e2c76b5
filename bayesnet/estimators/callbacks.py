"""The skorch callbacks that watch a sampling run: progress, divergence, and the draw quota.

The estimators add them by default (:meth:`BayesianNeuralNet.get_default_callbacks`); each sees every
sampler step through skorch's ``on_batch_end`` with the step's :class:`~bayesnet.samplers.StepInfo`.
Stopping early works as skorch's ``EarlyStopping`` does: by raising ``KeyboardInterrupt``, which skorch's
``partial_fit`` catches; the callback records why in the estimator's ``fit_status_``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from skorch.callbacks import Callback

from ..diagnostics import split_rhat
from ..samplers import DivergenceError
from ..samplers.base import for_chains

__all__ = ["SamplingProgressBar", "DivergenceMonitor", "DrawQuota"]


class SamplingProgressBar(Callback):
    """A tqdm progress bar over sampler steps, showing the potential, the draws kept and the split R-hat.

    Added when ``verbose >= 1``.

    Parameters
    ----------
    update_every : int, default=20
        Steps between two refreshes (a refresh reads the device).
    """

    def __init__(self, update_every: int = 20):
        self.update_every = update_every

    def on_train_begin(self, net, X=None, y=None, **kwargs):
        from tqdm.auto import tqdm

        more = net.__dict__.get("_extending")  # (thinning="auto" running on: why)
        self._bar = tqdm(total=net.steps_expected_, desc=f"sampling ({net.sampler_.name}{f', {more}' if more else ''})",
                         unit="step", leave=True, dynamic_ncols=True)
        self._count = 0
        self._info = None

    def on_batch_end(self, net, training=False, info=None, **kwargs):
        if not training or getattr(self, "_bar", None) is None:
            return
        self._count += 1
        self._info = info  # (a reference: read at the next refresh or the end)
        if self._count % self.update_every == 0:
            self._bar.update(self._count)
            self._count = 0
            self._refresh_postfix(net)

    def _refresh_postfix(self, net) -> None:
        """The potential of the latest step, the draws kept and, with several chains, the split R-hat of their
        potentials (reads the device)."""
        info = getattr(self, "_info", None)
        postfix = {} if info is None else {"potential": f"{float(info.potential.float().mean()):.4g}"}
        postfix["draws"] = len(net.trace_)
        pots = net.trace_.as_array(potentials=True)
        if pots.ndim == 2 and pots.shape[0] > 1 and pots.shape[1] >= 8:
            postfix["rhat"] = f"{split_rhat(pots):.3f}"
        self._bar.set_postfix(refresh=False, **postfix)

    def on_train_end(self, net, X=None, y=None, **kwargs):
        bar = getattr(self, "_bar", None)
        if bar is not None and getattr(net, "trace_", None) is not None:  # the figures at the end (before: the
            self._refresh_postfix(net)  # potential and R-hat of the last refresh, up to update_every - 1 steps old)
        self._info = None
        self.close()

    def close(self):
        bar = getattr(self, "_bar", None)
        if bar is not None:
            bar.update(self._count)
            if bar.n < bar.total:  # ended early (draws collected, interrupted, diverged)
                bar.total = bar.n
                bar.refresh()
            bar.close()
            self._bar = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_bar", None)
        state.pop("_info", None)
        return state


class DivergenceMonitor(Callback):
    r"""Stops diverging chains from the first bad step, and keeps their good draws only.

    A chain diverges when, on any step, its potential, kinetic temperature or a position due for storage is
    not finite, or, once its warm-up has ended, its kinetic temperature exceeds ``temperature_tolerance``
    times the sampler's target, or its potential stays above what the warm-up saw by more than
    ``potential_tolerance`` standard deviations for ``potential_patience`` consecutive steps (a mini-batch
    potential has heavy tails: one hard batch is not a divergence; a chain leaving its typical set keeps
    climbing). The reference is scale-free: the mean and standard deviation of each member's
    potential over the last quarter of the burn-in, the standard deviation floored at ``sqrt(D / 2)``, the
    spread of ``U`` of a ``D``-parameter Gaussian at unit temperature. Under a prior with hyperparameters (the
    hierarchical prior) the potential watched is that of the positions given them, the potential plus the
    prior's :meth:`~bayesnet.priors.HierarchicalPrior.hyperparameter_terms`: the joint potential rises with
    :math:`(n_k/2)\log(1/\tau_k)` while a healthy chain's layers grow towards their posterior scale over
    thousands of steps (measured: digits, 9,000 steps, +2,000, stopped as "diverged" when the monitor
    watched it), where the conditional one stays level. During the warm-up a first kick from a
    poor start may be hot; only a kinetic temperature above ``warmup_temperature_limit`` times the target,
    held for ``warmup_patience`` steps, counts there.

    A step costs the monitor nothing on the device: it reads the per-step statistics the estimator records anyway
    (``step_stats_``, a ring buffer on the device) in blocks, every ``check_every`` steps, when a position due
    for storage was not finite, and when the run ends (its last step, or an interrupt or the draw quota
    between two reads: ``on_train_end``), and computes the flags of the block on the host, step by step as
    defined above (on a CPU the host's work on a block, not the read, is what it costs, so it does not also
    read at every stored draw). A draw stored between two reads is judged at the next: a divergence found
    there discards its chain's draws after its last good step (below). On a divergence the monitor retires the
    chain's slots in the trace, discarding the draws after the last step at which every member of the chain
    was within ``recover_tolerance`` standard deviations of the warm-up potential and below twice the
    temperature target (the stretch where it was leaving its typical set), and records it in the estimator's
    ``fit_status_``. When every chain has diverged it raises :class:`~bayesnet.samplers.DivergenceError`.

    Parameters
    ----------
    check_every : int, default=50
    potential_tolerance : float, default=30.0
    temperature_tolerance : float, default=50.0
    recover_tolerance : float, default=4.0
    warmup_temperature_limit : float, default=1000.0
    warmup_patience : int, default=200
    potential_patience : int, default=10
    """

    def __init__(self, check_every: int = 50, potential_tolerance: float = 30.0, temperature_tolerance: float = 50.0,
                 recover_tolerance: float = 4.0, warmup_temperature_limit: float = 1000.0, warmup_patience: int = 200,
                 potential_patience: int = 10):
        self.check_every = check_every
        self.potential_patience = potential_patience
        self.potential_tolerance = potential_tolerance
        self.temperature_tolerance = temperature_tolerance
        self.recover_tolerance = recover_tolerance
        self.warmup_temperature_limit = warmup_temperature_limit
        self.warmup_patience = warmup_patience

    # state kept on the estimator (``divergence_state_``) so that it survives pickling and continues with the chain
    @staticmethod
    def _state(net):
        state = getattr(net, "divergence_state_", None)
        if state is None:
            S = net.posterior_.n_members
            state = net.divergence_state_ = {
                "bad": np.zeros((3, S), dtype=bool),  # non-finite, potential, temperature
                "hot_run": np.zeros(S, dtype=np.int64),
                "high_run": np.zeros(S, dtype=np.int64),
                "ref_sum": np.zeros(S), "ref_sq": np.zeros(S),
                "ref_n": np.zeros(S),  # per member: its finite values
                "reference": None, "alive": np.ones(net.layout_.chains, dtype=bool),
                "processed": 0,  # the last step whose statistics have been read
            }
        elif "processed" not in state:  # pickled before the flags moved to the host: read on from now
            for key in ("bad", "hot_run", "high_run", "ref_sum", "ref_sq", "ref_n"):
                state[key] = torch.as_tensor(state[key]).cpu().numpy().copy()
            if state["reference"] is not None:
                state["reference"] = tuple(torch.as_tensor(t).cpu().numpy().copy() for t in state["reference"])
            state["processed"] = int(net.sampler_state_.step)
        return state

    @staticmethod
    def reset_reference(state, prior: bool = False, at_step: int | None = None, length: int = 0) -> None:
        """Forget the potential's reference (a continued fit on new data, under a new prior or at another
        temperature: the potential's level changes), and with ``prior`` the old prior's hyperparameter terms
        (the new prior's, if it has any, are remembered from its first step). A new reference is gathered over
        the ``length`` steps after the first ``length`` from ``at_step`` (the chains settle into the new
        posterior first), and the potential is checked against it from there; without ``at_step`` it stays
        unchecked (the non-finite and temperature checks go on)."""
        state["reference"] = None
        for key in ("ref_sum", "ref_sq", "ref_n"):
            state[key] = np.zeros(np.shape(state[key]))
        state["ref_window"] = None if at_step is None or length < 1 else \
            (int(at_step) + int(length), int(at_step) + 2 * int(length))
        # the steps up to here ran under the old posterior and passed its checks: a divergence under the new one
        # does not reach back past them (_last_good_steps)
        state["reset_at"] = None if at_step is None else int(at_step)
        if prior:
            state.pop("hyper", None)

    def on_batch_end(self, net, training=False, info=None, step=None, stored=None, nonfinite=None, **kwargs):
        if not training or info is None:
            return
        state = self._state(net)
        self._hyperparameter_terms(net, state, step)
        due = nonfinite is not None and len(nonfinite) > 0
        if due:
            state["bad"][0][np.asarray(nonfinite)] = True
        if (due or step % self.check_every == 0 or step == net.steps_planned_total_
                or step - state["processed"] >= net.step_stats_.capacity // 2):
            self._read(net, state, step)
            self.check(net, step)

    def on_train_end(self, net, **kwargs):
        """Judge the steps not yet read when a run ends between two reads (an interrupt, the draw quota): no draw
        of a chain that was leaving its typical set outlives the call that stored it."""
        self.judge_unread(net)

    def judge_unread(self, net) -> None:
        """Read and judge the steps recorded since the last read, now (the end of a run, or :class:`DrawQuota`
        before it counts the draws); raises :class:`~bayesnet.samplers.DivergenceError` as a read does when every
        chain has diverged."""
        sampler_state = getattr(net, "sampler_state_", None)
        state = getattr(net, "divergence_state_", None)
        if sampler_state is None or state is None or getattr(net, "step_stats_", None) is None:
            return
        step = int(sampler_state.step)
        if step > state["processed"]:
            self._read(net, state, step)
            self.check(net, step)

    def _read(self, net, state, step: int) -> None:
        """Flag the steps recorded since the last read, up to ``step``, as the class docstring defines them."""
        steps, fields = net.step_stats_.since(state["processed"])
        state["processed"] = int(step)
        if not len(steps):
            return
        S = net.posterior_.n_members
        u = fields["potential"].astype(np.float64) + _terms_at(state.get("hyper"), steps, S)  # (S, k)
        burn_in = net.plan_.burn_in
        # the reference: the last quarter of the burn-in (after the prior's precisions have started to move, at
        # half of it), during a warm-up too; after a reset (reset_reference), its own window
        low, high = state.get("ref_window") or (3 * burn_in // 4, burn_in)
        window = (steps <= high) & (steps > low)
        if window.any():
            self._accumulate(state, u[:, window])
        sampler_state = net.sampler_state_
        report = sampler_state.warmup_report
        # the sampler's warm-up guards itself: it puts back and slows a member that goes bad
        warm_end = step if sampler_state.warmup is not None else (report["n_steps"] if report is not None else 0)
        watched = steps > warm_end
        if not watched.any():
            return
        steps, u = steps[watched], u[:, watched]
        bad = state["bad"]
        target = net.sampler_.target_temperature()
        t_kin = fields.get("kinetic_temperature")
        finite = np.isfinite(u)
        if t_kin is not None:
            t_kin = t_kin[:, watched].astype(np.float64)
            finite &= np.isfinite(t_kin)
        watch_heat = t_kin is not None and bool(target)
        bad[0] |= ~finite.all(axis=1)
        during = steps <= burn_in
        with np.errstate(invalid="ignore"):  # NaN compares False; it is flagged as non-finite above
            if watch_heat and during.any():  # a first kick from a poor start may be hot: only a long hot run counts
                runs, state["hot_run"] = _runs(t_kin[:, during] > self.warmup_temperature_limit * target,
                                               state["hot_run"])
                bad[2] |= (runs >= self.warmup_patience).any(axis=1)
            after = ~during & (steps > high)  # (after a reset: once its window is complete)
            if after.any():
                ref = state["reference"]
                if ref is None:
                    ref = state["reference"] = self._reference(net, state)
                runs, state["high_run"] = _runs(u[:, after] > ref[0][:, None], state["high_run"])
                bad[1] |= (runs >= self.potential_patience).any(axis=1)
            if watch_heat and (~during).any():
                bad[2] |= (t_kin[:, ~during] > self.temperature_tolerance * target).any(axis=1)

    @staticmethod
    def _hyperparameter_terms(net, state, step) -> None:
        """Remember the prior's hyperparameter terms
        (:meth:`~bayesnet.posterior.ChainPosterior.hyperparameter_terms`, float64 ``(S,)``) with the step each
        new value came in at, for :func:`_terms_at`; nothing for a prior without."""
        terms = getattr(net.posterior_, "hyperparameter_terms", None)
        terms = None if terms is None else terms()
        if terms is None:
            return
        history = state.setdefault("hyper", [])
        if not history or history[-1][2] is not terms:
            history.append((int(step), terms.detach().reshape(-1).double(), terms))
            del history[: -_HYPER_HISTORY]

    @staticmethod
    def _accumulate(state, u) -> None:
        """Add a block of potentials ``u`` (float64, ``(S, k)``) to the reference's sums; each member counts only
        its finite values (a value the warm-up's guard put back is not part of its typical set)."""
        finite = np.isfinite(u)
        clean = np.where(finite, u, 0.0)
        state["ref_sum"] = state["ref_sum"] + clean.sum(axis=1)
        state["ref_sq"] = state["ref_sq"] + (clean * clean).sum(axis=1)
        state["ref_n"] = state["ref_n"] + finite.sum(axis=1)

    def _reference(self, net, state) -> tuple:
        """Per member: the potential above which a chain has left its typical set, and the warm-up's mean and
        floored standard deviation of the potential (the last quarter of the burn-in); all infinite without a
        warm-up.

        The limit is ``mean + (T_max / T - 1) D / 2 + tol * (T_max / T) * sd``: a tempering sampler heats the
        positions up to ``T_max`` (:meth:`~bayesnet.samplers.Sampler.temperature_range`), which raises the
        potential of a ``D``-parameter Gaussian by ``(T_max / T - 1) D / 2`` on average and widens its spread by
        ``T_max / T``."""
        S = net.posterior_.n_members
        n = np.broadcast_to(np.asarray(state["ref_n"], dtype=np.float64), (S,))
        few = n < 2  # no warm-up to speak of for that member: only non-finite values and the temperature count
        mean = state["ref_sum"] / np.maximum(n, 1.0)
        sd = np.maximum(np.sqrt(np.maximum(state["ref_sq"] / np.maximum(n, 1.0) - mean * mean, 0.0)), self._floor(net))
        limit = self._limit(net, mean, sd, self.potential_tolerance)
        return tuple(np.where(few, np.inf, v) for v in (limit, mean, sd))

    @staticmethod
    def _floor(net) -> float:
        """``sqrt(D / 2)``: the spread of the potential of a ``D``-parameter Gaussian at unit temperature."""
        return math.sqrt(max(net.posterior_.n_parameters_per_member, 1) / 2.0)

    @staticmethod
    def _limit(net, mean, sd, tol):
        t_low, t_high = for_chains(net.sampler_.temperature_range, net.sampler_state_)
        heat = t_high / t_low if t_low > 0 else 1.0
        D = max(net.posterior_.n_parameters_per_member, 1)
        return mean + (heat - 1.0) * D / 2.0 + tol * heat * sd

    def check(self, net, step: int) -> None:
        """Retire the chains whose members were flagged since the last check."""
        state = self._state(net)
        reasons = state["bad"].copy()  # (3, S)
        bad = reasons.any(axis=0)
        if not bad.any():
            return
        layout = net.layout_
        M = layout.members_per_chain
        chains = sorted({m // M for m in np.flatnonzero(bad)} & set(np.flatnonzero(state["alive"])))
        state["bad"][:] = False
        if not chains:
            return
        why = {0: "a non-finite potential, kinetic temperature or position",
               1: "a potential far above what the warm-up saw",
               2: f"a kinetic temperature far above its target ({net.sampler_.target_temperature()})"}
        last_good = self._last_good_steps(net, state, chains, step)
        status = net.fit_status_
        for c in chains:
            slots = list(range(c * M, (c + 1) * M))
            discarded = net.trace_.retire(slots, last_good[c])
            state["alive"][c] = False
            member_reasons = reasons[:, slots].any(axis=1)
            status["diverged_chains"][int(c) + net.first_chain_] = {
                "step": int(step), "last_good_step": int(last_good[c]), "draws_discarded": int(discarded),
                "draws_kept": int(net.trace_.stored_per_slot[slots].sum()),
                "reason": "; ".join(why[k] for k in range(3) if member_reasons[k])}
        if not state["alive"].any():
            status["status"] = "diverged"
            raise DivergenceError(net.divergence_message(step, chains), step)

    def _last_good_steps(self, net, state, chains, step) -> dict:
        """Per chain: the last recorded step at which all its members were within the recovery bounds. Steps before
        the reference was last reset (:meth:`reset_reference`: a continued fit on new data, under a new prior or
        temperature) count as good: they ran under another posterior, whose checks they passed, and the potential's
        level there is no measure of the new one's (before, a continuation on new data that diverged judged the
        earlier call's steps against the lowest potential since step 1, and discarded every draw of that call)."""
        steps, fields = net.step_stats_.per_step()
        since = state.get("reset_at")
        earlier = steps <= since if since is not None else np.zeros(len(steps), dtype=bool)
        ref = state["reference"]
        if ref is None:
            ref = self._reference(net, state)
        _, mean, sd = ref
        hyper = _terms_at(state.get("hyper"), steps, net.posterior_.n_members)  # what the monitor added
        M = net.layout_.members_per_chain
        target = net.sampler_.target_temperature()
        out = {}
        for c in chains:
            ok = np.ones(len(steps), dtype=bool)
            for m in range(c * M, (c + 1) * M):
                u = fields["potential"][m].astype(np.float64) + hyper[m]
                if np.isfinite(mean[m]):
                    bound = self._limit(net, mean[m], sd[m], self.recover_tolerance)
                else:  # no warm-up: within the tolerance of the lowest potential the chain had reached
                    lowest = np.fmin.accumulate(np.where(np.isfinite(u) & ~earlier, u, np.inf))
                    bound = self._limit(net, lowest, self._floor(net), self.recover_tolerance)
                good = np.isfinite(u) & (u <= bound)
                if "kinetic_temperature" in fields and target:
                    t = fields["kinetic_temperature"][m]
                    good &= np.isfinite(t) & (t <= 2.0 * target)
                ok &= good | earlier
            before = np.flatnonzero(ok & (steps <= step))
            # no good step in the recorded window: keep nothing recorded after the window's start
            out[c] = int(steps[before[-1]]) if before.size else int(steps[0] - 1 if len(steps) else 0)
        return out


#: the hyperparameter terms the divergence monitor remembers (one per Gibbs step: a window of at least the
#: per-step statistics' 4096 steps at any Gibbs interval)
_HYPER_HISTORY = 4096


def _runs(flags: np.ndarray, carry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lengths of the runs of consecutive True ending at each step: ``flags`` ``(S, k)``, ``carry`` ``(S,)`` the run
    each member was on before the block. Returns ``(runs (S, k), the runs after the block (S,))``; per step this
    is ``run = (run + 1) * flag``."""
    idx = np.arange(1, flags.shape[1] + 1)
    last_false = np.maximum.accumulate(np.where(flags, 0, idx), axis=1)  # 0: no False yet in the block
    runs = np.where(last_false == 0, carry[:, None] + idx, idx - last_false)
    return runs, runs[:, -1].copy()


def _terms_at(history, steps: np.ndarray, n_members: int) -> np.ndarray:
    """The hyperparameter terms in force at each of ``steps``, ``(S, n)`` (a step before the first remembered
    value takes that value; zeros without any)."""
    if not history or not len(steps):
        return np.zeros((n_members, len(steps)))
    starts = np.array([h[0] for h in history])
    values = torch.stack([h[1] for h in history]).cpu().numpy()  # (H, S)
    # a value remembered at step t was computed before step t's transition (the Gibbs step comes first)
    index = np.clip(np.searchsorted(starts, steps, side="right") - 1, 0, len(history) - 1)
    return values[index].T


class DrawQuota(Callback):
    """Ends the run once this call has stored ``n_draws`` draws in every active slot (a fast chain keeps its
    newest), for samplers that collect only some of their steps (``steps_per_draw() > 1``, e.g. tacthmc), whose
    planned length assumes the ideal fraction of collected steps. Stops as skorch's ``EarlyStopping`` does
    (``KeyboardInterrupt``) and records ``"draws collected"`` in the estimator's ``fit_status_``."""

    def on_batch_end(self, net, training=False, stored=None, **kwargs):
        if not training or not stored or net.sampler_.steps_per_draw() <= 1 or net.max_epochs is not None:
            return
        trace = net.trace_
        new = (trace.kept_per_slot - net.kept_at_call_start_)[trace.active]
        if new.size and new.min() >= net.n_draws:
            # only judged draws count: a chain diverging since the divergence monitor's last read is retired (its
            # draws from the bad steps discarded) before the quota is counted again
            for _, cb in net.callbacks_:
                if isinstance(cb, DivergenceMonitor):
                    cb.judge_unread(net)
            new = (trace.kept_per_slot - net.kept_at_call_start_)[trace.active]
        if new.size and new.min() >= net.n_draws:
            net.fit_status_["stopped_by"] = "draws collected"
            raise KeyboardInterrupt
