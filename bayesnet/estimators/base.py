"""skorch-based machinery shared by every Bayesian estimator.

:class:`BayesianNeuralNet` is a :class:`skorch.NeuralNet` whose training step
is one sampler transition instead of an optimiser step:

* ``initialize_module`` / ``initialize_criterion`` defer building the network
  and the likelihood until the data's shape is known (``partial_fit``);
* ``initialize_optimizer`` builds no optimiser: the sampler (``sampler_``,
  configured from the ``sampler__*`` parameters) moves the weights;
* ``train_step`` runs one transition on the mini-batch, checks for
  divergence and offers the new position to the trace;
* inference averages over the retained draws, evaluated in blocks of many
  draws at once by the network's batched ``forward_chains`` (``vmap`` over
  ``functional_call`` for networks without one).

skorch's own ``fit``, ``fit_loop`` and ``run_single_epoch`` are used as they
are; ``partial_fit`` adds input validation in front of skorch's.
"""

from __future__ import annotations

import math
import threading
import warnings
from numbers import Integral, Real

import joblib
import numpy as np
import torch
from sklearn.base import clone
from skorch import NeuralNet
from skorch.callbacks import Callback
from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from ..diagnostics import chain_summaries, split_rhat
from ..posterior import ChainPosterior, batched_outputs
from ..priors import make_prior
from ..samplers import DivergenceError, Sampler, available_samplers, get_sampler_class, make_sampler
from ..trace import Trace

__all__ = ["BayesianNeuralNet", "TensorBatchIterator", "SamplingProgressBar", "resolve_device"]


def resolve_device(device) -> torch.device:
    """Turn ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` or a torch.device into a torch.device.

    Raises
    ------
    ValueError
        If CUDA is requested but not available, or the string is not a device.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}.") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was requested but CUDA is not available; use 'cpu' or 'auto'.")
    return dev


class TensorBatchIterator:
    """Mini-batches of in-memory tensors by index selection (no per-row collation).

    skorch calls ``iterator(dataset, batch_size=..., **iterator_train__*)``;
    ``dataset`` must be a ``torch.utils.data.TensorDataset``.

    Parameters
    ----------
    dataset : TensorDataset
    batch_size : int
    shuffle : bool, default=False
    generator : torch.Generator, optional
        CPU generator for the permutation (reproducibility).
    drop_last : bool, default=False
    """

    def __init__(self, dataset, batch_size: int, shuffle: bool = False, generator=None, drop_last: bool = False):
        self.tensors = dataset.tensors
        self.n = len(self.tensors[0])
        self.batch_size = min(int(batch_size), self.n)
        self.shuffle = shuffle
        self.generator = generator
        self.drop_last = drop_last

    def __len__(self) -> int:
        if self.drop_last:
            return self.n // self.batch_size
        return math.ceil(self.n / self.batch_size)

    def __iter__(self):
        device = self.tensors[0].device
        if self.shuffle:
            order = torch.randperm(self.n, generator=self.generator).to(device)
        for i in range(len(self)):
            lo, hi = i * self.batch_size, min((i + 1) * self.batch_size, self.n)
            if self.shuffle:
                idx = order[lo:hi]
                yield tuple(t.index_select(0, idx) for t in self.tensors)
            else:
                yield tuple(t[lo:hi] for t in self.tensors)


class SamplingProgressBar(Callback):
    """A tqdm progress bar over sampler steps, showing the potential and draws kept.

    Added automatically when ``verbose >= 1``.
    """

    def __init__(self, update_every: int = 20):
        self.update_every = update_every

    def on_train_begin(self, net, X=None, y=None, **kwargs):
        from tqdm.auto import tqdm

        self._bar = tqdm(total=net.n_steps_planned_, desc=f"sampling ({net.sampler_.name})", unit="step",
                         leave=True, dynamic_ncols=True)
        self._count = 0

    def on_batch_end(self, net, training=False, **kwargs):
        if not training or getattr(self, "_bar", None) is None:
            return
        self._count += 1
        if self._count % self.update_every == 0:
            self._bar.update(self._count)
            self._count = 0
            postfix = dict(potential=f"{net.last_info_['potential']:.4g}", draws=len(net.trace_))
            rhat = self._rhat(net)
            if rhat is not None:
                postfix["rhat"] = f"{rhat:.3f}"
            self._bar.set_postfix(refresh=False, **postfix)

    def on_train_end(self, net, X=None, y=None, **kwargs):
        self.close()

    @staticmethod
    def _rhat(net):
        """Split R-hat of the potential at the stored draws (all chains), once there are 8 per chain."""
        pots = net.trace_.as_array(potentials=True)
        if pots.ndim != 2 or pots.shape[1] < 8:
            return None
        return split_rhat(pots)

    def close(self):
        bar = getattr(self, "_bar", None)
        if bar is not None:
            bar.update(self._count)
            if bar.n < bar.total:  # ended early (tacthmc with its draws collected, or interrupted)
                bar.total = bar.n
                bar.refresh()
            bar.close()
            self._bar = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_bar", None)
        return state


_GLOBAL_RNG_LOCK = threading.Lock()


def _partial_fit_shard(estimator, X, y, classes):
    """Worker body of :meth:`BayesianNeuralNet._partial_fit_shards`: run one group of chains; a divergence
    comes back with the group (and its draws so far) instead of losing them."""
    try:
        return estimator.partial_fit(X, y, classes=classes), None
    except DivergenceError as exc:
        return estimator, exc


class BayesianNeuralNet(NeuralNet):
    """Base class of the Bayesian estimators; see the concrete classes for parameters.

    Subclasses implement ``_build_module()``, ``_build_likelihood()`` and
    ``_validate_targets(y, reset)``.
    """

    prefixes_ = NeuralNet.prefixes_ + ["sampler"]
    cuda_dependent_attributes_ = NeuralNet.cuda_dependent_attributes_ + ["posterior_", "sampler_state_"]

    _parameter_constraints = {
        "sampler": [StrOptions(set()), Sampler, type],
        "n_draws": [Interval(Integral, 1, None, closed="left")],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Integral, None],
        "burn_in": [Interval(Integral, 0, None, closed="left")],
        "thinning": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "prior_scale": [Interval(Real, 0, None, closed="neither"), object],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "max_epochs": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, sampler="sghmc", n_draws=100, burn_in=1000, thinning="auto", n_chains=1, n_jobs=None,
                 prior_scale=1.0, batch_size="auto", max_epochs=None, device="cpu", random_state=None, verbose=0,
                 callbacks=None, warm_start=False, **kwargs):
        kwargs.setdefault("module", None)
        kwargs.setdefault("criterion", None)
        kwargs.setdefault("train_split", None)
        kwargs.setdefault("iterator_train", TensorBatchIterator)
        kwargs.setdefault("iterator_valid", TensorBatchIterator)
        super().__init__(batch_size=batch_size, max_epochs=max_epochs, device=device, verbose=verbose,
                         callbacks=callbacks, warm_start=warm_start, **kwargs)
        self.sampler = sampler
        self.n_draws = n_draws
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.burn_in = burn_in
        self.thinning = thinning
        self.prior_scale = prior_scale
        self.random_state = random_state
        # skorch sets these in __init__; scikit-learn wants no fitted-looking
        # attributes before fit, so fall back to the class defaults below.
        for attr in ("history_", "initialized_", "virtual_params_"):
            vars(self).pop(attr, None)

    initialized_ = False
    history_ = None
    virtual_params_: dict = {}

    # ------------------------------------------------------------------ #
    # scikit-learn protocol
    # ------------------------------------------------------------------ #
    def __sklearn_is_fitted__(self) -> bool:
        trace = getattr(self, "trace_", None)
        return trace is not None and len(trace) > 0

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        tags.input_tags.allow_nan = False
        return tags

    def _get_param_names(self):
        # skorch lists every public attribute; keep private ones out of get_params.
        return [k for k in super()._get_param_names() if not k.startswith("_")]

    def _validate_hyperparameters(self) -> None:
        constraints = dict(self._parameter_constraints)
        constraints["sampler"] = [StrOptions(set(available_samplers())), Sampler, type]
        params = {k: getattr(self, k) for k in constraints}
        if isinstance(self.sampler, str) and self.sampler not in available_samplers():
            raise ValueError(f"unknown sampler {self.sampler!r}; valid names are {available_samplers()}.")
        if self.batch_size == -1:
            params.pop("batch_size")
        validate_parameter_constraints(constraints, params, caller_name=type(self).__name__)

    # ------------------------------------------------------------------ #
    # skorch initialisation hooks
    # ------------------------------------------------------------------ #
    def initialize_module(self):
        # The network's shape depends on the data; built in `_initialize_sampling`.
        self.module_ = None
        return self

    def initialize_criterion(self):
        self.criterion_ = None
        return self

    def initialize_optimizer(self, *args, **kwargs):
        # No optimiser: the sampler moves the weights.
        self.optimizer_ = None
        return self

    def get_default_callbacks(self):
        callbacks = [cb for cb in super().get_default_callbacks() if cb[0] not in ("valid_loss", "print_log")]
        if self.verbose:
            callbacks.append(("progress_bar", SamplingProgressBar()))
        return callbacks

    def initialize(self):
        super().initialize()
        self.sampler_state_ = None
        self.trace_ = None
        self.shards_ = None
        return self

    # ------------------------------------------------------------------ #
    # data
    # ------------------------------------------------------------------ #
    # inputs of more than two axes (sequences, images) are accepted by estimators whose network takes them
    _allow_nd = False

    def _validate_X(self, X, reset: bool):
        X = validate_data(self, X, reset=reset, dtype=np.float32, ensure_min_samples=1, allow_nd=self._allow_nd)
        return self._shape_input(X, reset)

    def _validate_fit_data(self, X, y, reset: bool, classes=None):
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        X, y = validate_data(self, X, y, reset=reset, dtype=np.float32, multi_output=True,
                             y_numeric=False, ensure_min_samples=2, allow_nd=self._allow_nd)
        return self._shape_input(X, reset), self._validate_targets(y, reset=reset, classes=classes)

    def _shape_input(self, X: np.ndarray, reset: bool) -> np.ndarray:
        """Bring validated input to the network's layout ``(n, *input_shape_)``, recording the per-sample shape
        on ``reset`` and checking it otherwise. Tabular networks take ``(n, n_features)`` as it is."""
        return self._check_input_shape(X, reset, "n_features")

    def _check_input_shape(self, X: np.ndarray, reset: bool, layout: str) -> np.ndarray:
        """Record (``reset``) or check the per-sample shape of already reshaped input."""
        if reset:
            self.input_shape_ = tuple(X.shape[1:])
        elif tuple(X.shape[1:]) != tuple(self.input_shape_):
            raise ValueError(f"X has samples of shape {tuple(X.shape[1:])} ({layout}), but {type(self).__name__} "
                             f"was fitted with samples of shape {tuple(self.input_shape_)}.")
        return X

    def get_dataset(self, X, y=None):
        tensors = [torch.as_tensor(X, device=self.device_)]
        if y is not None:
            tensors.append(torch.as_tensor(y, device=self.device_))
        return torch.utils.data.TensorDataset(*tensors)

    def get_iterator(self, dataset, training=False):
        if training:
            kwargs = self.get_params_for("iterator_train")
            kwargs.setdefault("shuffle", True)
            if isinstance(self.iterator_train, type) and issubclass(self.iterator_train, TensorBatchIterator):
                kwargs.setdefault("generator", self.data_generator_)
            iterator = self.iterator_train
        else:
            kwargs = self.get_params_for("iterator_valid")
            iterator = self.iterator_valid
        bs = kwargs.pop("batch_size", self.batch_size)
        kwargs["batch_size"] = self._resolve_batch_size(len(dataset), bs)
        return iterator(dataset, **kwargs)

    # ------------------------------------------------------------------ #
    # fitting
    # ------------------------------------------------------------------ #
    def _initialize_sampling(self, n_data: int) -> None:
        self.device_ = resolve_device(self.device)
        rng = check_random_state(self.random_state)
        seed_module, seed_data, seed_noise = (int(s) for s in rng.randint(0, 2**31 - 1, size=3))
        sampler_params = self.get_params_for("sampler")
        sampler_cls = self._sampler_class()
        explicit = isinstance(self.sampler, Sampler)
        if "adaptation_steps" in sampler_cls.hyperparameter_names() and "adaptation_steps" not in sampler_params \
                and not explicit:
            sampler_params["adaptation_steps"] = self.burn_in  # tune during burn-in only
        self.sampler_ = make_sampler(self.sampler, **sampler_params)
        if "n_steps" in sampler_cls.hyperparameter_names() and "n_steps" not in sampler_params and not explicit:
            # samplers whose schedule spans the run (pt-langevin's tempering phase) get the planned length
            steps = self._planned_epochs(n_data) * self._batches_per_epoch(n_data)
            self.sampler_ = make_sampler(self.sampler, **{**sampler_params, "n_steps": steps})
        if getattr(self.sampler_, "exact_potential", False) and self._resolve_batch_size(n_data) < n_data:
            warnings.warn(
                f"{self.sampler_.name} with mini-batches (batch_size={self.batch_size} < {n_data} rows): the "
                "Metropolis-Hastings test compares noisy energies and is no longer exact; use batch_size=-1 for an "
                "exact test.", UserWarning, stacklevel=3)
        # every packed member (chain, tempering replica, ensemble walker) starts from its own initialisation
        n_members = int(self.n_chains) * self.sampler_.members_per_chain()
        members = []
        # modules initialise from torch's global RNG: seed and build under a lock, so that fits running in
        # threads (joblib's threading backend, an in-process dask cluster) cannot interleave their seeds
        with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_module)
            for _ in range(n_members):
                module, likelihood = self._build_module(), self._build_likelihood()
                members.append([p for p in module.parameters() if p.requires_grad]
                               + [p for p in likelihood.parameters() if p.requires_grad])
                if not members[1:]:
                    template = (module, likelihood)
        with self._current_init_context("module"):
            self.module_ = template[0].to(self.device_)
        with self._current_init_context("criterion"):
            self.criterion_ = template[1].to(self.device_)
        self.prior_ = make_prior(self.prior_scale)
        members = [[p.to(self.device_) for p in m] for m in members]
        self.posterior_ = ChainPosterior(self.module_, self.criterion_, self.prior_, n_data, members)
        self.data_generator_ = torch.Generator().manual_seed(seed_data)
        self.noise_generator_ = torch.Generator(device=self.device_).manual_seed(seed_noise)
        self.sampler_state_ = self.sampler_.init(self.posterior_.parameters, self.noise_generator_,
                                                 n_chains=int(self.n_chains))
        self.trace_ = Trace(self.n_draws, burn_in=self.burn_in, thinning=self._resolve_thinning(),
                            n_slots=n_members, chain_axis=True)
        self.n_train_ = n_data
        self.last_info_ = {}

    def _resolve_batch_size(self, n_data: int, batch_size=None) -> int:
        """Rows per mini-batch: ``-1`` is the full batch; ``"auto"`` is 128 for the stochastic-gradient
        samplers and the full batch for ``hmc``, whose Metropolis test needs exact energies."""
        bs = self.batch_size if batch_size is None else batch_size
        if bs == "auto":
            bs = -1 if getattr(self._sampler_class(), "exact_potential", False) else 128
        return n_data if bs == -1 else min(int(bs), n_data)

    def _resolve_thinning(self) -> int:
        """``thinning="auto"`` is the sampler's ``default_thinning``: 10, or 1 for tacthmc, whose samples are
        already ``steps_per_sample`` steps apart."""
        if self.thinning == "auto":
            return int(self._sampler_class().default_thinning)
        return int(self.thinning)

    def _sampler_class(self) -> type[Sampler]:
        if isinstance(self.sampler, Sampler):
            return type(self.sampler)
        return self.sampler if isinstance(self.sampler, type) else get_sampler_class(self.sampler)

    def _refresh_sampler(self) -> None:
        """Apply ``sampler__*`` changes made with ``set_params`` to a continuing chain."""
        params = self.get_params_for("sampler")
        for run_setting in ("adaptation_steps", "n_steps"):  # set from the first call's plan: keep them
            if run_setting in self.sampler_.hyperparameter_names() and run_setting not in params:
                params[run_setting] = getattr(self.sampler_, run_setting)
        cls = self._sampler_class()
        if cls is not type(self.sampler_):
            raise ValueError(
                f"partial_fit cannot continue a {self.sampler_.name} chain with sampler {cls.name!r}; call fit() "
                "to start a new chain.")
        self.sampler_ = make_sampler(self.sampler, **params)
        members = int(self.n_chains) * self.sampler_.members_per_chain()
        if members != self.posterior_.n_members:
            raise ValueError(
                f"partial_fit cannot continue {self.posterior_.n_members} packed chain members with n_chains="
                f"{self.n_chains} and {self.sampler_.members_per_chain()} member(s) per chain; call fit() to start "
                "new chains.")

    def set_params(self, **params):
        """Set parameters; ``sampler`` and ``sampler__*`` take effect at the next ``fit``/``partial_fit``."""
        sampler_params = {k: v for k, v in params.items() if k == "sampler" or k.startswith("sampler__")}
        for key, val in sampler_params.items():
            setattr(self, key, val)
            self._params_to_validate.add(key)
        rest = {k: v for k, v in params.items() if k not in sampler_params}
        if rest:
            super().set_params(**rest)
        return self

    def _batches_per_epoch(self, n_data: int) -> int:
        bs = self._resolve_batch_size(n_data)
        return math.ceil(n_data / bs)

    def _planned_epochs(self, n_data: int) -> int:
        if self.max_epochs is not None:
            return int(self.max_epochs)
        steps = self.burn_in + self.n_draws * self._resolve_thinning() * self.sampler_.steps_per_draw()
        return max(1, math.ceil(steps / self._batches_per_epoch(n_data)))

    def partial_fit(self, X, y=None, classes=None, **fit_params):
        """Draw (more) posterior samples of the weights from ``(X, y)``.

        A fresh estimator (or one re-initialised by :meth:`fit`) starts a new
        chain; otherwise the chain continues from where it stopped and the
        trace keeps filling. Runs ``max_epochs`` epochs, or when that is None,
        enough epochs for ``burn_in + n_draws * thinning`` sampler steps (times the sampler's expected
        steps per candidate draw, ``K / plateau fraction`` = 250 for tacthmc's defaults).

        Raises
        ------
        ValueError
            For invalid data (NaN/inf, wrong shapes, a single class, a feature
            count that differs from an earlier call) or hyperparameters
            (unknown sampler name, non-positive step size, ...).
        bayesnet.samplers.DivergenceError
            If the chain diverges; the draws collected before are kept.
        """
        fit_params.pop("_routing_method", None)
        if fit_params:
            raise TypeError(
                f"{type(self).__name__}.fit got unexpected fit parameter(s) {sorted(fit_params)}; "
                "sample weights and forward arguments are not supported."
            )
        if not self.initialized_:
            self.initialize()
        self._validate_hyperparameters()  # every path: fresh, continuing, groups of chains in workers
        if self._n_shards() > 1 or getattr(self, "shards_", None):
            return self._partial_fit_shards(X, y, classes)
        fresh = getattr(self, "sampler_state_", None) is None
        X, y = self._validate_fit_data(X, y, reset=fresh, classes=classes)
        if fresh:
            self._initialize_sampling(len(X))
        else:
            self._refresh_sampler()
            self.sampler_.reset_cache(self.sampler_state_)
            self.posterior_.n_data = self.n_train_ = len(X)
        epochs = self._planned_epochs(len(X))
        self.n_steps_planned_ = epochs * self._batches_per_epoch(len(X))
        # samplers that collect only some steps (tacthmc) stop once this call has stored n_draws draws:
        # the planned length assumes the ideal fraction of collected steps, which may be exceeded
        self._kept_at_start = getattr(self.trace_, "n_kept", 0)
        self._hot_steps = 0  # consecutive steps above the kinetic-temperature limit
        self._stop_when_full = self.max_epochs is None and self.sampler_.steps_per_draw() > 1
        self._trace_full = False
        self._steps_at_call = self.sampler_state_.step
        try:
            super().partial_fit(X, y, epochs=epochs)
            self._collect_missing_draws(X, y, epochs)
        finally:
            for _, cb in self.callbacks_:
                if isinstance(cb, SamplingProgressBar):
                    cb.close()
            self.diagnostics_ = self._summarise_diagnostics()
            self._sync_module()
        return self

    # ------------------------------------------------------------------ #
    # chains in separate processes (joblib: loky locally, dask on a cluster)
    # ------------------------------------------------------------------ #
    def _n_shards(self) -> int:
        """Groups of chains fitted in separate joblib workers: 1 unless ``n_jobs`` is set and there are
        several chains."""
        if self.n_jobs is None or int(self.n_chains) < 2:
            return 1
        return max(1, min(int(self.n_chains), joblib.effective_n_jobs(self.n_jobs)))

    def _partial_fit_shards(self, X, y, classes):
        """Split the ``n_chains`` chains into ``n_jobs`` groups, each fitted (vectorised) by a clone of this
        estimator in a joblib worker, then merge their traces. The groups are independent until the end of
        the call, their only synchronisation point; tempering replicas and ensemble walkers stay with their
        chain, vectorised in one worker. A later ``partial_fit`` continues every group where it stopped."""
        fresh = not getattr(self, "shards_", None)
        self._validate_fit_data(X, y, reset=fresh, classes=classes)  # bad data fails here, before any worker starts
        if fresh:
            rng = check_random_state(self.random_state)
            groups = np.array_split(np.arange(int(self.n_chains)), self._n_shards())
            shards = [clone(self).set_params(n_chains=len(g), n_jobs=None, verbose=0,
                                             random_state=int(rng.randint(0, 2**31 - 1))) for g in groups]
        else:
            # settings a continuing chain can take: the sampler's and the run length (as partial_fit without n_jobs)
            params = {k: v for k, v in self.get_params(deep=False).items()
                      if k.startswith("sampler") or k in ("max_epochs", "batch_size")}
            shards = [shard.set_params(**params) for shard in self.shards_]
        results = joblib.Parallel(n_jobs=self.n_jobs)(
            joblib.delayed(_partial_fit_shard)(shard, X, y, classes) for shard in shards)
        shards = [shard for shard, _ in results]
        for shard, error in results:
            if error is not None and getattr(shard, "diagnostics_", None) is None:
                shard.diagnostics_ = shard._summarise_diagnostics()
        self._merge_shards(shards)
        errors = [error for _, error in results if error is not None]
        if errors:
            raise errors[0]  # every group's draws are merged into trace_ first
        return self

    def _merge_shards(self, shards) -> None:
        self.shards_ = list(shards)
        first = shards[0]
        for attr in ("classes_", "n_outputs_", "y_mean_", "y_scale_", "_y_is_1d", "n_features_in_",
                     "feature_names_in_", "input_shape_", "device_", "prior_", "sampler_", "n_train_", "history_"):
            if attr in vars(first):
                setattr(self, attr, getattr(first, attr))
        with self._current_init_context("module"):
            self.module_ = first.module_
        with self._current_init_context("criterion"):
            self.criterion_ = first.criterion_
        self.trace_ = Trace.concatenate([shard.trace_ for shard in shards])
        self.n_steps_planned_ = first.n_steps_planned_
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
        summary["n_steps"] = first.diagnostics_["n_steps"]
        self.convergence_ = self._convergence()
        summary.pop("max_rhat", None), summary.pop("min_ess_bulk", None)
        if self.convergence_:
            summary["max_rhat"] = max(v["rhat"] for v in self.convergence_.values())
            summary["min_ess_bulk"] = min(v["ess_bulk"] for v in self.convergence_.values())
        self.diagnostics_ = summary

    def _sync_module(self) -> None:
        """Copy the first chain's current position into ``module_`` (and ``criterion_``), so that the
        network object shows where sampling stopped."""
        posterior = getattr(self, "posterior_", None)
        if posterior is None:
            return
        own = [p for p in self.module_.parameters() if p.requires_grad] \
            + [p for p in self.criterion_.parameters() if p.requires_grad]
        with torch.no_grad():
            for p, stacked in zip(own, posterior.parameters):
                p.copy_(stacked[0])

    def _draws_this_call(self) -> float:
        """Draws stored since this call began, per slot (chain) on average."""
        kept = getattr(self.trace_, "n_kept", 0) - getattr(self, "_kept_at_start", 0)
        return kept / getattr(self.trace_, "n_slots", 1)

    def _collect_missing_draws(self, X, y, epochs: int) -> None:
        """For samplers that collect only some steps (tacthmc: at unit temperature), the planned run can
        end short of ``n_draws``; keep sampling, up to twice the planned epochs more, then warn. (It ends
        early, in ``train_step``, once ``n_draws`` draws are stored.)"""
        if not self._stop_when_full:
            return
        budget = 2 * epochs
        while self._draws_this_call() < self.n_draws and budget > 0:
            if self._interrupted():
                return  # a user's Ctrl-C (or a callback's stop), which skorch swallows: do not resume
            more = min(budget, max(1, epochs // 4))
            self._steps_at_call = self.sampler_state_.step
            self.n_steps_planned_ = more * self._batches_per_epoch(len(X))
            super().partial_fit(X, y, epochs=more)
            budget -= more
        if self._draws_this_call() < self.n_draws and not self._interrupted():
            frac = self.sampler_.plateau_fraction(self.sampler_state_)
            unfitted = " No draw was kept, so the estimator is not fitted." if len(self.trace_) == 0 else ""
            warnings.warn(
                f"{self.sampler_.name} collected {self._draws_this_call()} of n_draws={self.n_draws} draws in "
                f"{self.sampler_state_.step} steps: the tempering variable spent {float(frac.mean()):.1%} of the "
                f"steps at unit temperature (the ideal is {self.sampler_.expected_plateau_fraction:.0%}).{unfitted} "
                "Run longer (partial_fit continues the chain), narrow the temperature range (sampler__wall), or "
                "lower sampler__tempering_step_size: a tempering variable that moves faster than the network "
                "can follow gets stuck at high temperature.", UserWarning, stacklevel=3)

    def _interrupted(self) -> bool:
        """Whether the last skorch call ended before its planned steps without the trace being full."""
        taken = self.sampler_state_.step - getattr(self, "_steps_at_call", self.sampler_state_.step)
        return not getattr(self, "_trace_full", False) and taken < self.n_steps_planned_

    def _summarise_diagnostics(self) -> dict:
        """Means of the per-step diagnostics after burn-in (all steps if the run was shorter)."""
        steps = [b for epoch in self.history for b in epoch["batches"]]
        kept = steps[self.burn_in:] or steps
        summary = {}
        for key in ("potential", "kinetic_energy", "kinetic_temperature", "thermostat", "accept_prob", "divergent",
                    "effective_temperature", "tempering_thermostat", "on_plateau"):
            values = [b[key] for b in kept if key in b]
            if values:
                summary[key] = float(np.mean(values))
        if "accept_prob" in summary:
            summary["acceptance_rate"] = summary.pop("accept_prob")
        if "on_plateau" in summary:  # tacthmc: Appendix A's efficiency
            summary["plateau_fraction"] = summary.pop("on_plateau")
        if "divergent" in summary:
            summary["n_divergent"] = int(round(summary.pop("divergent") * len(kept)))
        summary["n_steps"] = len(steps)
        for key, val in self.sampler_.state_summary(self.sampler_state_).items():
            summary[key] = val
        self.convergence_ = self._convergence()
        if self.convergence_:
            summary["max_rhat"] = max(v["rhat"] for v in self.convergence_.values())
            summary["min_ess_bulk"] = min(v["ess_bulk"] for v in self.convergence_.values())
        return summary

    def _convergence(self) -> dict:
        """Rank-normalised split R-hat and bulk ESS of the potential and three fixed random projections of the
        weights, over the draws of all chains (the slots with draws, cut to a common length)."""
        trace = getattr(self, "trace_", None)
        if trace is None or len(trace) == 0:
            return {}
        return chain_summaries(trace.as_array(), trace.as_array(potentials=True))

    # kinetic temperatures above this multiple of the target for this many consecutive steps stop the fit
    _kinetic_limit = 1000.0
    _kinetic_patience = 200
    _hot_steps = 0

    def train_step(self, batch, **fit_params):
        """One sampler transition on ``batch``; returns skorch's step dict.

        ``loss`` is the mini-batch potential per data point, ``U / N``.
        """
        state, info = self.sampler_.step(self.sampler_state_, self.posterior_, batch, self.noise_generator_)
        step = state.step
        finite = torch.isfinite(info.potential)
        if not bool(finite.all()):
            bad = (~finite).reshape(-1).nonzero().reshape(-1).tolist()
            where = f" in chain axis member(s) {bad}" if finite.numel() > 1 else ""
            self._raise_divergence(step, f"potential became {info.potential.reshape(-1)[bad[0]].item()}{where}")
        if info.kinetic_temperature is not None:
            # a finite but exploding chain: the momenta's temperature should average `temperature`; a
            # thousandfold, held for `_kinetic_patience` steps, is an unstable integrator whose potential climbs
            # for many steps before it overflows. (The first kicks from a poor start can pass 1e6 and then
            # decay: the friction damps them within a few dozen steps.)
            temperature = float(getattr(self.sampler_, "temperature", 1.0))
            limit = self._kinetic_limit * temperature
            hot = info.kinetic_temperature.reshape(-1) > limit
            self._hot_steps = self._hot_steps + 1 if bool(hot.any()) else 0
            if self._hot_steps >= self._kinetic_patience:
                bad = hot.nonzero().reshape(-1).tolist()
                where = f" in chain axis member(s) {bad}" if hot.numel() > 1 else ""
                self._raise_divergence(
                    step, f"kinetic temperature stayed above {limit:g} for {self._hot_steps} steps, reaching "
                          f"{info.kinetic_temperature.reshape(-1)[bad[0]].item():.3g}{where} (it should average the "
                          f"sampler's temperature, {temperature:g})")
        try:
            self.trace_.offer(step, state.position, info.potential, info.is_draw)
        except FloatingPointError:
            self._raise_divergence(step, "parameters became non-finite")
        scalars = info.scalars()
        self.last_info_ = scalars
        for key, val in scalars.items():
            self.history.record_batch(key, val)
        if getattr(self, "_stop_when_full", False) and self._draws_this_call() >= self.n_draws:
            self._trace_full = True
            raise KeyboardInterrupt  # skorch's way to end training early; partial_fit catches it
        return {"loss": info.potential.mean() / self.n_train_, "y_pred": None}

    def _raise_divergence(self, step: int, what: str):
        hint = self.sampler_.divergence_hint(self.sampler_state_)
        raise DivergenceError(
            f"the {self.sampler_.name} chain diverged at step {step}: the {what}. Reduce the step size "
            f"(now {hint}), e.g. by a factor of 10, or standardise the inputs. The {len(self.trace_)} draws "
            f"collected before step {step} are kept in `trace_` and can be used for prediction.",
            step,
        )

    def validation_step(self, batch, **fit_params):
        Xi, yi = batch
        with torch.no_grad():
            loss = -self.criterion_(self.module_(Xi), yi) / len(yi)
        return {"loss": loss, "y_pred": None}

    # ------------------------------------------------------------------ #
    # inference over draws
    # ------------------------------------------------------------------ #
    @property
    def n_draws_(self) -> int:
        """Number of retained posterior draws."""
        return len(self.trace_)

    def _draw_parameters(self) -> list[torch.Tensor]:
        check_is_fitted(self)
        return self.trace_.unflatten(self.trace_.draws())

    def _output_chunks(self, X):
        """Raw network outputs for every draw, one row chunk at a time.

        Yields tensors of shape (n_draws, rows, n_outputs) on ``device_``. The
        draws are copied to the device once per call and evaluated in blocks
        of ``draws x rows`` by the module's batched ``forward_chains`` (else
        ``vmap`` over ``functional_call``), never by one ``load_state_dict``
        per draw. A block's activations stay within ``_prediction_budget()``
        (see :meth:`_block_shape`)."""
        params = self._draw_parameters()
        X = self._validate_X(X, reset=False)
        names = [name for name, p in self.module_.named_parameters() if p.requires_grad]
        net_params = [p.to(self.device_, non_blocking=True) for p in params[: len(names)]]
        n_draws = net_params[0].shape[0]
        draws, rows = self._block_shape(n_draws, len(X), self._activations_per_row(X.shape[1:]))
        self.module_.eval()
        with torch.no_grad():
            for lo in range(0, len(X), rows):
                xb = torch.as_tensor(X[lo: lo + rows]).to(self.device_, non_blocking=True)
                yield torch.cat([batched_outputs(self.module_, names, [p[d: d + draws] for p in net_params], xb)
                                 for d in range(0, n_draws, draws)])

    # at least this many rows per block (when there are as many): products over fewer rows run far below the
    # processor's speed, and recurrent nets pay Python per time step and block
    _min_chunk_rows = 1024

    def _block_shape(self, n_draws: int, n_rows: int, per_row: int) -> tuple[int, int]:
        """``(draws, rows)`` per evaluated block: as many draws as fit the activation budget with at least
        ``_min_chunk_rows`` rows, and as many rows as fit with all draws. On a GPU the budget usually holds
        every draw (one batched call per row chunk: few, large kernels); on a CPU it is cache-sized, so the
        activations of a block stay in cache, which for large networks means a few draws per block."""
        budget = self._prediction_budget()
        rows = min(n_rows, max(self._min_chunk_rows, budget // max(1, n_draws * per_row)))
        draws = int(min(n_draws, max(1, budget // max(1, rows * per_row))))
        rows = min(n_rows, max(rows, budget // max(1, draws * per_row)))  # what the draw count leaves over
        return draws, max(1, int(rows))

    def _network_outputs(self, X) -> torch.Tensor:
        """Raw network outputs for every draw, shape (n_draws, n_samples, n_outputs), CPU float32."""
        return torch.cat([out.float().cpu() for out in self._output_chunks(X)], dim=1)

    _cpu_prediction_budget = 2**20

    def _prediction_budget(self) -> int:
        """Activations (float32 numbers) a prediction block may hold: on a GPU a 32nd of the free memory's
        bytes (an eighth of it in float32 activations); on a CPU ``_cpu_prediction_budget`` (2**20, 4 MiB:
        about a core's cache), measured fastest by benchmarks/predict_throughput.py."""
        if self.device_.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device_)
            return max(2**24, free // 32)
        return self._cpu_prediction_budget

    def _activations_per_row(self, sample_shape) -> int:
        """Activations the network holds at once for one input row (its ``activations_per_row`` when it has
        one, else its widest layer)."""
        per_row = getattr(self.module_, "activations_per_row", None)
        if per_row is not None:
            return int(per_row(tuple(sample_shape)))
        return max((p.shape[0] for p in self.module_.parameters() if p.ndim >= 1), default=1)

    def __getstate__(self):
        state = super().__getstate__()
        gen = state.get("noise_generator_")
        if isinstance(gen, torch.Generator):
            # a CUDA generator cannot be unpickled without CUDA: keep its device and state instead
            state["noise_generator_"] = ("torch.Generator", str(gen.device), gen.get_state())
        return state

    def __setstate__(self, state):
        # skorch maps CUDA tensors to the available device using `device`;
        # give it a concrete device for "auto".
        wanted = state.get("device")
        if wanted == "auto":
            state["device"] = str(resolve_device("auto"))
        gen = state.pop("noise_generator_", None)
        super().__setstate__(state)
        if wanted == "auto":
            self.device = wanted
        device = vars(self).get("device_")
        if device is not None and device.type == "cuda" and not torch.cuda.is_available():
            # fitted on a GPU, loaded on a machine without one: predict (and continue) on the CPU
            self.device_ = torch.device("cpu")
        if isinstance(gen, tuple) and gen and gen[0] == "torch.Generator":
            _, gen_device, gen_state = gen
            if torch.device(gen_device).type == "cuda" and not torch.cuda.is_available():
                seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.data_generator_))
                gen = torch.Generator().manual_seed(seed)
            else:
                restored = torch.Generator(device=gen_device)
                restored.set_state(gen_state)
                gen = restored
        if gen is not None:
            self.noise_generator_ = gen
