"""What a fitted estimator hands back besides predictions: its draws, the sampler's statistics, a summary
table and an ArviZ export (NumPyro's ``get_samples`` / ``print_summary``, ArviZ's ``InferenceData``).

Chains here are the trace's slots that hold draws: one per chain, or per tempering replica (pt-langevin) or
ensemble walker (eqn). Arrays grouped by chain are cut to the length all of them share (their newest draws),
as R-hat and ArviZ need equal lengths.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..diagnostics import (bulk_effective_sample_size, rank_normalized_split_rhat, tail_effective_sample_size)

__all__ = ["ResultsMixin"]


class ResultsMixin:
    """``get_draws``, ``get_sample_stats``, ``get_step_stats``, ``summary`` and ``to_arviz`` for the estimators."""

    def _check_fitted(self) -> None:
        """scikit-learn's ``check_is_fitted``; after a fit that kept no draw (interrupted or diverged before its
        first draw), its ``NotFittedError`` says so and what continues it, not "call fit"."""
        status = getattr(self, "fit_status_", None)
        msg = None
        if status is not None and not self.__sklearn_is_fitted__():
            how = {"interrupted": "partial_fit continues the planned run where it stopped",
                   "diverged": "fit again with a smaller step_size (see the fit's warning)",
                   "short": "run longer (max_epochs), or call partial_fit to continue the chains",
                   "running": "the fit is still in its burn-in"}.get(status.get("status"), "fit again")
            where = (f" at step {status['steps_taken']} of {status['steps_planned']}"
                     if "steps_taken" in status and "steps_planned" in status else "")
            msg = (f"This {type(self).__name__} holds no posterior draws: its fit ended {status.get('status')!r}"
                   f"{where} before its first draw was kept (fit_status_); {how}.").replace("%", "%%")  # (a format)
        check_is_fitted(self, msg=msg)

    @property
    def n_draws_kept_(self) -> int:
        """Posterior draws kept, all chains together (``n_draws`` is per chain)."""
        self._check_fitted()
        return len(self.trace_)

    def parameter_names(self) -> list[str]:
        """Names of the sampled parameters: the network's (``named_parameters``), then the likelihood's
        prefixed ``likelihood.`` (the regressors' ``likelihood.log_noise_variance``)."""
        self._check_fitted()
        return ([n for n, p in self.module_.named_parameters() if p.requires_grad]
                + [f"likelihood.{n}" for n, p in self.criterion_.named_parameters() if p.requires_grad])

    def get_draws(self, group_by_chain: bool = True) -> dict[str, np.ndarray]:
        """The posterior draws by parameter name.

        Parameters
        ----------
        group_by_chain : bool, default=True
            True: each array shaped ``(chain, draw, *shape)``, the chains that finished cut to their shared
            length (a chain that diverged is left out, as the convergence checks leave it out, unless every chain
            did: its draws from before stay in ``trace_`` and in the predictions). False: every draw of every
            chain on one axis, ``(n_draws_kept_, *shape)`` (NumPyro's ``get_samples``), as the predictions use
            them.

        Returns
        -------
        dict of str to ndarray (float32)

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        """
        self._check_fitted()
        flat = (self.trace_.as_array(active_only=True) if group_by_chain
                else self.trace_.draws().numpy().copy())  # (not a view)
        import torch

        parts = self.trace_.unflatten(torch.as_tensor(flat))
        return {name: part.numpy() for name, part in zip(self.parameter_names(), parts)}

    def get_sample_stats(self, group_by_chain: bool = True) -> dict[str, np.ndarray]:
        """The sampler's statistics at each draw (potential, kinetic energy and temperature, acceptance, ...).

        Returns
        -------
        dict of str to ndarray, each ``(chain, draw)`` (the chains of :meth:`get_draws`), or ``(n_draws_kept_,)``
        with ``group_by_chain=False``

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        """
        self._check_fitted()
        trace = self.trace_
        return {name: (trace.as_array(stat=name, active_only=True) if group_by_chain else trace.stat(name))
                for name in trace.stat_names}

    def get_step_stats(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The sampler's statistics at every step of the recorded window (the last 4096 steps), per member.

        Returns
        -------
        steps : ndarray, shape (n_steps,)
        stats : dict of str to ndarray, each ``(member, n_steps)``: one row per chain (per replica or walker
            for pt-langevin and eqn); with ``n_jobs``, the groups' rows one after another.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        ValueError
            For a model read from a file (:func:`bayesnet.load`).
        """
        self._check_fitted()
        if getattr(self, "loaded_", False):
            raise ValueError(f"this {type(self).__name__} was loaded from a model file, which holds the draws and "
                             "their statistics (summary, to_arviz), not the per-step statistics of the run.")
        shards = getattr(self, "shards_", None) or [self]
        parts = [shard.step_stats_.per_step() for shard in shards]
        n = min(len(p[0]) for p in parts)
        steps = parts[0][0][-n:]
        return steps, {k: np.concatenate([p[1][k][:, -n:] for p in parts]) for k in parts[0][1]}

    def _scalar_series(self) -> dict[str, np.ndarray]:
        """The scalar quantities the summary reports, each ``(chain, draw)``."""
        trace = self.trace_
        series = {"potential": trace.as_array(potentials=True, active_only=True)}
        draws = trace.as_array(active_only=True)
        if draws.shape[1] >= 1:
            directions = np.random.default_rng(0).normal(size=(3, draws.shape[2]))
            directions /= np.linalg.norm(directions, axis=1, keepdims=True)
            for k, proj in enumerate(np.einsum("cnd,kd->kcn", draws.astype(np.float64), directions)):
                series[f"projection_{k}"] = proj
        log_var = self.get_draws().get("likelihood.log_noise_variance")
        if log_var is not None:  # the regressors' observation noise, in the units of y
            std = np.exp(0.5 * log_var.astype(np.float64)) * np.asarray(self.y_scale_)
            for k in range(std.shape[-1]):
                series[f"noise_std[{k}]" if std.shape[-1] > 1 else "noise_std"] = std[..., k]
        return series

    def summary(self, prob: float = 0.9):
        """A table of the run's scalar summaries, as NumPyro's ``print_summary``: mean, sd, the central ``prob``
        interval's ends and median, bulk and tail ESS and rank-normalised split R-hat (Vehtari et al. 2021).

        Rows: the potential, three fixed random projections of the parameters (network weights are
        permutation-symmetric, so single weights say little), and for the regressors the noise sd.

        Returns
        -------
        pandas.DataFrame
            One row per quantity. ESS and R-hat are NaN with fewer than 8 draws per chain.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        ValueError
            If ``prob`` is not in (0, 1).
        """
        import pandas as pd

        if isinstance(prob, bool) or not isinstance(prob, Real) or not 0 < prob < 1:  # (None: a TypeError before)
            raise ValueError(f"prob must be in (0, 1), got {prob!r}.")
        self._check_fitted()
        lo_q, hi_q = (1 - prob) / 2, (1 + prob) / 2
        rows = {}
        for name, x in self._scalar_series().items():
            enough = x.ndim == 2 and x.shape[1] >= 8 and np.all(np.isfinite(x))
            rows[name] = {
                "mean": float(np.mean(x)), "sd": float(np.std(x, ddof=1)) if x.size > 1 else float("nan"),
                f"{lo_q:.1%}": float(np.quantile(x, lo_q)), "median": float(np.median(x)),
                f"{hi_q:.1%}": float(np.quantile(x, hi_q)),
                "ess_bulk": bulk_effective_sample_size(x) if enough else float("nan"),
                "ess_tail": tail_effective_sample_size(x) if enough else float("nan"),
                "r_hat": rank_normalized_split_rhat(x) if enough else float("nan")}
        return pd.DataFrame.from_dict(rows, orient="index")

    def to_arviz(self):
        """The fit as an ArviZ ``InferenceData``: the ``posterior`` group holds every parameter with dims
        ``(chain, draw, ...)``; ``sample_stats`` the sampler's statistics at each draw, named as ArviZ expects
        (``lp`` = minus the potential, ``energy`` = potential plus kinetic energy for samplers with momenta,
        ``acceptance_rate``, ``diverging``, ``step_size``, ...), so that ``arviz.summary``, ``plot_trace``,
        ``plot_rank`` and ``plot_ess`` work on a fitted estimator. The chains are those of :meth:`get_draws`
        (a chain that diverged left out), the ``chain`` coordinate numbering them as ``trace_``'s slots do (a
        chain, or a walker or replica for eqn and pt-langevin), with the fit's own numbers after a lost worker
        group (``n_jobs``: the surviving chains keep theirs).

        Raises
        ------
        ImportError
            Without ArviZ: ``pip install "bayesnet[arviz]"``.
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        """
        try:
            import arviz as az
        except ImportError as exc:
            raise ImportError("to_arviz needs ArviZ, an optional dependency: pip install \"bayesnet[arviz]\" "
                              "(or pip install arviz).") from exc
        self._check_fitted()
        posterior = {name.replace(".", "_"): v for name, v in self.get_draws().items()}
        stats = self.get_sample_stats()
        sample_stats = {}
        if "potential" in stats:
            sample_stats["lp"] = -stats["potential"]
            if "kinetic_energy" in stats:
                sample_stats["energy"] = stats["potential"] + stats["kinetic_energy"]
        declared = type(self.sampler_).stats  # each field under the name its sampler gives ArviZ
        for name, value in stats.items():
            if name == "potential":
                continue
            key = (declared[name].arviz if name in declared else None) or name
            sample_stats[key] = value.astype(bool) if key == "diverging" else value
        chains, _ = self.trace_.common_slots(active_only=True)
        numbers = self._slot_numbers()
        return az.from_dict(posterior=posterior, sample_stats=sample_stats,
                            coords={"chain": [numbers[s] for s in chains]})

    def _slot_numbers(self) -> list[int]:
        """The fit's number of each of ``trace_``'s slots: the slot itself, except after worker groups (``n_jobs``)
        were lost, when the merged trace holds only the surviving groups' slots and each keeps its chain's number
        (``fit_status_["lost_chains"]`` those of the lost ones). Read from ``fit_status_``, which a model file keeps:
        before, a loaded fit numbered the survivors 0, 1, ... again."""
        n = self.trace_.n_slots
        lost = set((getattr(self, "fit_status_", None) or {}).get("lost_chains", ()))
        members = getattr(self, "layout_", None)
        members = None if members is None else members.members_per_chain
        if not lost or not members or n % members:
            return list(range(n))
        numbers = [c * members + j for c in range(n // members + len(lost)) if c not in lost for j in range(members)]
        return numbers if len(numbers) == n else list(range(n))
