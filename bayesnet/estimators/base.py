"""The scikit-learn/skorch protocol shared by every Bayesian estimator.

:class:`BayesianNeuralNet` is a :class:`skorch.NeuralNet` whose training step is one sampler transition
instead of an optimiser step. This module keeps only the protocol; the run's machinery lives beside it:

* :mod:`.run`: seeds, the chains' start and continuation, the mini-batch stream, the end-of-call report;
* :mod:`.callbacks`: progress bar, divergence monitor, draw quota (skorch callbacks);
* :mod:`.parallel`: groups of chains in joblib workers;
* :mod:`.results`: draws, statistics, ``summary()`` and ``to_arviz()``;
* :mod:`bayesnet.predictive`: the blocked posterior predictive.

skorch's own ``fit`` and ``fit_loop`` are used as they are; ``partial_fit`` validates in front of skorch's,
and ``run_single_epoch`` runs the steps without reading the device at every step.
"""

from __future__ import annotations

import inspect
import warnings
from numbers import Integral, Real

import numpy as np
import torch
import skorch.callbacks
import skorch.dataset
from skorch import NeuralNet
from skorch.callbacks import Callback
from sklearn.base import BaseEstimator, clone
from sklearn.utils._param_validation import Interval, Options, StrOptions, validate_parameter_constraints
from sklearn.utils.validation import validate_data

from ..predictive import PosteriorPredictive
from ..priors import make_prior
from ..samplers import (DEFAULT_SAMPLER, DivergenceError, Sampler, available_samplers, make_sampler,
                        sampler_class)
from ..samplers.base import refuse_bools
from . import run
from .callbacks import DivergenceMonitor, DrawQuota, SamplingProgressBar
from .scaling import indistinguishable_from_constant, moments, standardise
from .parallel import fit_groups, n_groups
from .results import ResultsMixin

__all__ = ["BayesianNeuralNet", "resolve_device"]

# With standardize_inputs=False, a feature whose root mean square (over the training rows) is above this warns.
UNSCALED_INPUT = 100.0


def one_dimensional(X) -> bool:
    """Whether ``X`` is one row of values (a 1-D array, or a list of scalars): the shaped estimators (CNN, RNN)
    refuse it with their own advice, where scikit-learn's "reshape(-1, 1) if your data has a single feature" would
    make as many one-value samples of the one sample or sequence a user meant."""
    return getattr(X, "ndim", None) == 1 or (isinstance(X, (list, tuple)) and len(X) > 0
                                              and all(np.ndim(x) == 0 for x in X))


def resolve_device(device) -> torch.device:
    """Turn ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``, ``"auto"`` or a torch.device into a torch.device.

    Raises
    ------
    ValueError
        If CUDA (or Apple's MPS) is requested but not available, or the string is not a device.
    """
    dev = parse_device(device)
    if dev is None:  # "auto"
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was requested but CUDA is not available; use 'cpu' or 'auto'.")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r} was requested but MPS is not available; use 'cpu' or 'auto'.")
    return dev


def parse_device(device) -> torch.device | None:
    """The form of a ``device`` setting, whether or not this machine has it: a CPU, CUDA or MPS torch.device, or
    None for ``"auto"`` (and None).

    Raises
    ------
    ValueError
        If it is not one of those forms.
    """
    if device is None or device == "auto":
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N', 'mps' or 'auto', got {device!r}.") from exc
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N', 'mps' or 'auto', got {device!r}.")
    return dev


#: per estimator class, the parameters of an instance built with no arguments (:func:`_default_params`)
_DEFAULT_PARAMS: dict = {}
#: skorch's parameters outside the concrete estimators' signatures (passed on through ``**kwargs``: skorch's plumbing,
#: which the estimators set or refuse, and callbacks, warm_start, compile)
_PLUMBING = frozenset({"module", "criterion", "optimizer", "lr", "iterator_train", "iterator_valid", "dataset",
                       "train_split", "predict_nonlinearity", "use_caching", "torch_load_kwargs", "compile",
                       "warm_start", "callbacks"})


def _default_params(cls) -> dict:
    """The parameters (``_all_params(deep=False)``: every key) of a ``cls`` built with no arguments, cached."""
    defaults = _DEFAULT_PARAMS.get(cls)
    if defaults is None:
        _DEFAULT_PARAMS[cls] = {}  # (while building: the instance's own get_params filters against nothing)
        try:
            defaults = cls()._all_params(deep=False)
        except Exception:  # (a class whose parameters have no defaults: compare against nothing)
            defaults = {}
        _DEFAULT_PARAMS[cls] = defaults
    return defaults


def _same_value(value, default) -> bool:
    """Whether a parameter holds its default, by identity, equality or, as scikit-learn's printer decides, repr."""
    if value is default:
        return True
    try:
        if bool(value == default):
            return True
    except Exception:  # (arrays, tensors: ambiguous truth values)
        pass
    return repr(value) == repr(default)


class BayesianNeuralNet(ResultsMixin, NeuralNet):
    """Base class of the Bayesian estimators; see the concrete classes for parameters.

    Subclasses implement ``_build_module()``, ``_build_likelihood()`` and ``_validate_targets(y, reset)``.
    """

    prefixes_ = NeuralNet.prefixes_ + ["sampler"]
    cuda_dependent_attributes_ = NeuralNet.cuda_dependent_attributes_ + ["posterior_", "sampler_state_", "prior_"]

    _parameter_constraints = {
        "sampler": [StrOptions(set()), Sampler, type],
        "n_draws": [Interval(Integral, 1, None, closed="left")],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Interval(Integral, None, -1, closed="right"), Interval(Integral, 1, None, closed="left"), None],
        "burn_in": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "thinning": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "prior_scale": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto", "fan_in", "hierarchical"}),
                        object],
        "batch_size": [Interval(Integral, 1, None, closed="left"), Options(Integral, {-1}), StrOptions({"auto"})],
        "max_epochs": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "compile": ["boolean", StrOptions({"auto"})],
        "standardize_inputs": ["boolean"],
    }

    def __init__(self, *, sampler=DEFAULT_SAMPLER, n_draws=100, burn_in="auto", thinning="auto", n_chains=1, n_jobs=None,
                 prior_scale="auto", standardize_inputs=True, batch_size="auto", max_epochs=None, device="cpu", random_state=None, verbose=0,
                 callbacks=None, warm_start=False, **kwargs):
        kwargs.setdefault("module", None)
        kwargs.setdefault("criterion", None)
        kwargs.setdefault("train_split", None)
        kwargs.setdefault("iterator_train", run.PlannedBatches)
        kwargs.setdefault("compile", "auto")  # the sampler's transition (bayesnet.samplers.compiled), not skorch's
        super().__init__(batch_size=batch_size, max_epochs=max_epochs, device=device, verbose=verbose,
                         callbacks=callbacks, warm_start=warm_start, **kwargs)
        self.sampler = sampler
        self.n_draws = n_draws
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.burn_in = burn_in
        self.thinning = thinning
        self.prior_scale = prior_scale
        self.standardize_inputs = standardize_inputs
        self.random_state = random_state
        # skorch sets these in __init__; scikit-learn wants no fitted-looking attributes before fit, so fall
        # back to the class defaults below.
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

    #: the constraints of the parameters a head (a regressor's noise prior) adds to the architecture's
    _head_constraints: dict = {}

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        """scikit-learn's repr, by its printer: the class and the parameters set away from their defaults, e.g.
        ``BayesianMLPClassifier(n_chains=4, sampler='sgld')`` (skorch's, first in the bases, showed
        ``[uninitialized](module=None)``; the printer reads :meth:`get_params`, which leaves skorch's plumbing out
        while it holds its defaults)."""
        return BaseEstimator.__repr__(self, N_CHAR_MAX)

    def _get_param_names(self):
        # skorch lists every public attribute; keep private ones out of get_params.
        return [k for k in super()._get_param_names() if not k.startswith("_")]

    def get_params(self, deep=True, **kwargs):
        """scikit-learn's parameters. With a sampler instance as ``sampler``, a ``sampler__<name>`` set beside it
        overrides the instance's own value in the fit (:func:`~bayesnet.samplers.make_sampler`), and is what is
        reported for that name (before: the instance's value was reported, the other one fitted, so a search
        showed settings it had not used)."""
        params = self._all_params(deep=deep, **kwargs)
        if not deep:  # skorch's plumbing that holds its default (module=None, iterator_train=...): not a setting,
            # and scikit-learn's printer shows every key outside the signature as set (a pipeline's repr listed 14)
            defaults = _default_params(type(self))
            params = {k: v for k, v in params.items()
                      if k not in _PLUMBING or k not in defaults or not _same_value(v, defaults[k])}
        return params

    def _all_params(self, deep=False, **kwargs) -> dict:
        """:meth:`get_params` with every key, the plumbing at its default too (what saving, a continued fit and the
        parallel groups compare)."""
        params = super().get_params(deep=deep, **kwargs)
        if deep:
            params.update({k: v for k, v in vars(self).items() if k.startswith("sampler__")})
        return params

    def _warn_overridden_sampler_settings(self) -> None:
        """A UserWarning when a ``sampler__<name>`` overrides another value that the sampler instance passed as
        ``sampler`` holds (a grid over instances, from an estimator with ``sampler__friction`` set, fitted every
        candidate with that friction)."""
        if not isinstance(self.sampler, Sampler) or vars(self).get("_quiet_data", False):
            return
        own = self.sampler.get_params(deep=False)
        clash = {k: (v, own[k]) for k, v in self.get_params_for("sampler").items()
                 if k in own and not run._same(v, own[k])}
        if clash:
            detail = ", ".join(f"sampler__{k}={v!r} (the instance's {k}={mine!r})" for k, (v, mine) in clash.items())
            warnings.warn(f"the sampler instance's settings are overridden by {detail}: the sampler__* settings "
                          f"beside an instance win. Leave them unset to fit the instance as it is.", UserWarning,
                          stacklevel=run.user_stacklevel())

    def _validate_hyperparameters(self) -> None:
        constraints = {**self._parameter_constraints, **self._head_constraints}
        constraints["sampler"] = [StrOptions(set(available_samplers())), Sampler, type]
        params = {k: getattr(self, k) for k in constraints}
        if isinstance(self.sampler, str) and self.sampler not in available_samplers():
            raise ValueError(f"unknown sampler {self.sampler!r}; valid names are {available_samplers()}.")
        refuse_bools(type(self).__name__, constraints, params)  # (as for the samplers' settings)
        validate_parameter_constraints(constraints, params, caller_name=type(self).__name__)
        self._refuse_unused_skorch_options()
        self._warn_overridden_sampler_settings()
        # the sampler's own hyperparameters (unknown names, ranges); "auto" is resolved with the data, in fit
        run.make_plan(self, 1, burn_in=run.AUTO_BURN_IN_MAX if self.burn_in == "auto" else None)

    #: skorch ``NeuralNet`` options that a sampled network has no use for, with their defaults here: there is no
    #: optimiser or loss (the sampler moves the weights under the likelihood), no validation split, and the
    #: network, its data set and its predictions are the estimator's own
    _UNUSED_SKORCH = {"lr": 0.01, "optimizer": torch.optim.SGD, "module": None, "criterion": None, "train_split": None,
                      "predict_nonlinearity": "auto", "iterator_valid": torch.utils.data.DataLoader,
                      "dataset": skorch.dataset.Dataset, "use_caching": "auto", "torch_load_kwargs": None}
    _UNUSED_SKORCH_PREFIXES = ("optimizer__", "module__", "criterion__", "iterator_valid__", "dataset__")
    #: skorch callbacks built around an optimiser's loss, learning rate or gradients, or the per-epoch losses
    #: and scores skorch records (this estimator records none: ``step_stats_`` holds the per-step figures)
    _UNUSED_CALLBACKS = (skorch.callbacks.LRScheduler, skorch.callbacks.GradientNormClipping,
                         skorch.callbacks.EpochScoring, skorch.callbacks.BatchScoring,
                         skorch.callbacks.PassthroughScoring, skorch.callbacks.EarlyStopping,
                         skorch.callbacks.Freezer, skorch.callbacks.ParamMapper)

    def _refuse_unused_skorch_options(self) -> None:
        """A skorch option this estimator would ignore, or a callback that would fail inside the run, is refused
        with the reason (before: ``lr=100`` and ``optimizer=Adam`` were accepted and did nothing, so a grid over
        them searched nothing; ``train_split`` and ``LRScheduler`` failed deep inside skorch)."""
        name = type(self).__name__
        for key, default in self._UNUSED_SKORCH.items():
            value = getattr(self, key, default)
            if value is not default and not (isinstance(default, (str, float)) and value == default):
                raise self._unused_skorch_error(f"{key}={value!r}")
        prefixed = sorted(k for k in vars(self) if k.startswith(self._UNUSED_SKORCH_PREFIXES))
        if prefixed:
            raise self._unused_skorch_error(", ".join(prefixed))
        # the constructor's callbacks__* (skorch applies them to the callbacks it finds and ignores the others)
        settings = {k: v for k, v in vars(self).items() if k.startswith("callbacks__")}
        if self.callbacks == "disable":
            self._check_callback_settings(settings)
        else:
            names = {name for name, _ in self._uniquely_named_callbacks()} | {"progress_bar"}  # (with verbose)
            self._check_callback_settings(settings, names)
        self._check_iterator_settings()
        for entry in self.callbacks if isinstance(self.callbacks, (list, tuple)) else ():
            callback = entry[1] if isinstance(entry, tuple) else entry
            kind = callback if isinstance(callback, type) else type(callback)
            if issubclass(kind, skorch.callbacks.ProgressBar):
                raise ValueError("callbacks: skorch's ProgressBar counts the batches of epochs that skorch records "
                                 f"losses for; {name} records none. verbose=1 shows a progress bar over the sampler's "
                                 "steps.")
            if issubclass(kind, (skorch.callbacks.Checkpoint, skorch.callbacks.TrainEndCheckpoint,
                                 skorch.callbacks.LoadInitState)):
                raise ValueError(f"callbacks: skorch's {kind.__name__} saves or loads one network's weights (and an "
                                 f"optimiser), at the best validation loss; {name} has neither, and its fit is the "
                                 "draws: save it with est.save(path) (bayesnet.load reads it back) after fit.")
            if issubclass(kind, self._UNUSED_CALLBACKS):
                raise ValueError(f"callbacks: skorch's {kind.__name__} works on an optimiser's loss, learning rate "
                                 f"or gradients, or on the per-epoch losses and scores skorch records; {name} has "
                                 "none of these (its sampler moves the weights; the per-step figures are in "
                                 "step_stats_ and the draws in trace_).")

    def _check_iterator_settings(self) -> None:
        """``iterator_train__<name>``: only the keywords the batches' iterator takes (``shuffle`` for
        :class:`~bayesnet.estimators.run.PlannedBatches`); before, a DataLoader option (``num_workers``,
        ``drop_last``) failed at the first step with a TypeError and left an interrupted fit."""
        given = sorted(self.get_params_for("iterator_train"))
        iterator = self.iterator_train
        try:
            parameters = inspect.signature(iterator).parameters
        except (TypeError, ValueError):  # (no signature to read: the iterator's own error, at the first step)
            return
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return  # (a subclass that takes any keyword)
        taken = set(parameters) - {"self", "dataset", "batch_size", "net"}
        unknown = [k for k in given if k not in taken]
        if unknown:
            raise ValueError(f"{type(self).__name__} does not take iterator_train__{unknown[0]}: its mini-batches are "
                             f"rows of the in-memory data picked by index ({getattr(iterator, '__name__', iterator)}"
                             f" takes {', '.join(f'iterator_train__{k}' for k in sorted(taken)) or 'no option'}); "
                             "the batch size is the estimator's batch_size.")

    def _unused_skorch_error(self, what: str) -> ValueError:
        """The error for skorch options (``what``, as the user gave them) that this estimator has no use for."""
        return ValueError(f"{type(self).__name__} does not use skorch's {what}: it has no optimiser, loss or "
                          "validation split (its sampler moves the weights under the likelihood), and builds its own "
                          "network, data set and predictions. Leave it unset; the sampler's settings are sampler__*.")

    def _validate_params(self):
        """skorch's check of unknown arguments, with a hint when one is a sampler hyperparameter given without
        its ``sampler__`` prefix."""
        try:
            super()._validate_params()
        except ValueError as exc:
            names = set(sampler_class(self.sampler).hyperparameter_names()) if self._sampler_known() else set()
            bare = sorted(k for k in self._params_to_validate if k in names)
            if not bare:
                raise
            hint = ", ".join(f"sampler__{k}={getattr(self, k)!r}" for k in bare)
            raise ValueError(f"{', '.join(bare)} is a hyperparameter of the {self._sampler_name()} sampler: pass it "
                             f"as {hint}. ({exc})") from None

    def _sampler_known(self) -> bool:
        try:
            sampler_class(self.sampler)
            return True
        except (ValueError, TypeError):
            return False

    def _sampler_name(self) -> str:
        return sampler_class(self.sampler).name

    def set_params(self, **params):
        """Set parameters; ``sampler``, ``sampler__*``, ``compile`` and ``compile__*`` take effect at the next
        ``fit``/``partial_fit`` (skorch would re-initialise a fitted net's module for the latter two, losing its
        chains and draws). With a sampler instance as ``sampler``, ``sampler__<name>`` for one of its settings sets
        the instance's own (scikit-learn's nested parameters, as a grid search over ``sampler__friction`` from
        ``sampler=SGHMC()`` expects); one set in the constructor beside the instance overrides it instead, with a
        warning at ``fit``. skorch's ``module__*``, ``optimizer__*``, ``criterion__*``, ``iterator_valid__*`` and
        ``dataset__*`` are refused before anything changes (skorch would re-initialise a fitted net's module for
        them, and the estimator has none of these parts), as are skorch's ``lr``, ``optimizer``, ``module``, ... set
        to another value than they hold (unchanged, as in ``set_params(**get_params())``, they are passed over).
        A ``callbacks__<name>`` for a callback the estimator
        does not have is refused too, as skorch's callback settings are applied, after the other parameters
        (``callbacks__print_log=None`` is accepted: the estimator prints no epoch log anyway)."""
        # skorch's own options the estimator has no use for: unchanged (set_params(**get_params()), whose module=None
        # re-initialised a fitted net's module to None), nothing to do; another value, refused as fit refuses it
        # (also skorch's dataset and iterators: skorch re-initialises a fitted net for them, or fails)
        skorch_parts = set(self._UNUSED_SKORCH) | set(self.prefixes_)
        params = {k: v for k, v in params.items()
                  if not (k in skorch_parts and v is getattr(self, k, self._UNUSED_SKORCH.get(k)))}
        refused = sorted(k for k in params
                         if k in self._UNUSED_SKORCH or k.startswith(self._UNUSED_SKORCH_PREFIXES))
        if refused:
            raise self._unused_skorch_error(", ".join(refused))
        deferred = {k: v for k, v in params.items()
                    if k in ("sampler", "compile") or k.startswith(("sampler__", "compile__"))}
        if "sampler" in deferred:  # (scikit-learn's order: the sampler first, then the settings that address it)
            deferred = {"sampler": deferred.pop("sampler"), **deferred}
        for key, val in deferred.items():
            name = key[len("sampler__"):]
            if (key.startswith("sampler__") and isinstance(self.sampler, Sampler)
                    and name in self.sampler.get_params(deep=False)):
                # scikit-learn's nested parameter: the instance's own setting (a grid over sampler__friction from
                # sampler=SGHMC(...) warned "overridden" at every candidate the grid moved off the instance's value)
                self.sampler.set_params(**{name: val})
                vars(self).pop(key, None)  # (a value set beside the instance before would override this one)
                self._params_to_validate.discard(key)
                continue
            setattr(self, key, val)
            self._params_to_validate.add(key)
        rest = {k: v for k, v in params.items() if k not in deferred}
        if rest:
            super().set_params(**rest)
        return self

    # ------------------------------------------------------------------ #
    # skorch hooks
    # ------------------------------------------------------------------ #
    def initialize_module(self):
        self.module_ = None  # the network's shape depends on the data: built when the chains start
        return self

    def initialize_criterion(self):
        self.criterion_ = None
        return self

    def initialize_optimizer(self, *args, **kwargs):
        self.optimizer_ = None  # no optimiser: the sampler moves the weights
        return self

    #: skorch's default callbacks this estimator leaves out (no losses to record or print)
    _DROPPED_CALLBACKS = ("valid_loss", "print_log", "train_loss")

    def _set_params_callback(self, **params):
        # skorch fails with "not enough values to unpack" on a callback name it does not find; a user turning off
        # skorch's print_log (``callbacks__print_log=None``, its documented idiom) would meet that here
        if "callbacks" in params:  # a new list: the callbacks__* beside it address its callbacks (skorch kept the
            self.callbacks = params.pop("callbacks")  # old ones', and failed when they were "disable"d)
            self._initialize_callbacks()
        if self.callbacks == "disable":  # nothing runs to address: the settings are kept for when they are enabled
            self._check_callback_settings(params)
            return self
        names = {name for name, _ in getattr(self, "callbacks_", None) or ()}
        for key in self._check_callback_settings(params, names):
            del params[key]  # already off
        if not params:  # (skorch's own method fails on an empty callbacks_, e.g. callbacks="disable")
            return self
        return super()._set_params_callback(**params)

    def _check_callback_settings(self, params: dict, names: set | None = None) -> list[str]:
        """Refuse a ``callbacks__<name>...`` key of ``params`` for a callback the estimator does not have (among
        ``names``; with ``callbacks="disable"``, None: the default callbacks, which the settings wait for); return
        the keys that turn off one of skorch's callbacks this estimator leaves out (``callbacks__print_log=None``,
        skorch's idiom: nothing to do). skorch itself ignored an unknown name given to the constructor."""
        disabled = names is None
        if disabled:
            names = {name for name, _ in self._default_callbacks} | {"divergence", "draw_quota", "progress_bar"}
        off = []
        for key in [k for k in params if k.startswith("callbacks__")]:
            name = key[len("callbacks__"):]
            head = name.split("__", 1)[0]
            if head in names:
                continue
            if head in self._DROPPED_CALLBACKS and (disabled or (head == name and params[key] is None)):
                off.append(key)
                continue
            which = (f"callbacks='disable'; its default callbacks: {', '.join(sorted(names))}" if disabled else
                     f"its callbacks: {', '.join(sorted(names)) or 'none'}")
            raise ValueError(f"{type(self).__name__} has no callback named {head!r} ({which}); skorch's "
                             "valid_loss, print_log and train_loss are left out, since it records no losses.")
        return off

    @property
    def _default_callbacks(self):
        # skorch's get_params(deep=True) lists these: without the dropped ones, set_params(**get_params()) round-trips
        return [cb for cb in super()._default_callbacks if cb[0] not in self._DROPPED_CALLBACKS]

    def get_default_callbacks(self):
        callbacks = list(super().get_default_callbacks()) + [("divergence", DivergenceMonitor()),
                                                              ("draw_quota", DrawQuota())]
        if self.verbose:
            callbacks.append(("progress_bar", SamplingProgressBar()))
        return callbacks

    def initialize(self):
        super().initialize()
        for attr in ("sampler_state_", "trace_", "shards_", "group_", "compiled_step_"):
            setattr(self, attr, None)
        self.loaded_ = False
        return self

    def on_batch_begin(self, net, batch=None, training=False, **kwargs):
        pass  # no per-step record in skorch's history: it would grow with the run (see ``step_stats_``)

    # ------------------------------------------------------------------ #
    # data
    # ------------------------------------------------------------------ #
    # inputs of more than two axes (sequences, images) are accepted by estimators whose network takes them
    _allow_nd = False
    # the axis of the network's input that holds its features: columns, image channels, sequence features
    _input_feature_axis = 1

    # float64 input stays float64 until it is standardised (a feature of large offset and small spread, a
    # timestamp, would lose its spread in float32 before centring); the network then takes float32
    _input_dtypes = [np.float64, np.float32]

    def _check_samples_shape(self, X, reset: bool) -> None:
        """Input of more than two axes against the fitted per-sample shape, before scikit-learn's feature count,
        which reads only the second axis ("X has 1 features, but ... is expecting 2" for a sequence of another
        length). Complex input is refused in words shorter than scikit-learn's, which print the whole array."""
        try:
            complex_input = np.iscomplexobj(X)
        except (ValueError, TypeError):  # (ragged or odd input: scikit-learn's validation names it)
            complex_input = False
        if complex_input:  # ("Complex data not supported": the words scikit-learn's checks look for)
            raise ValueError(f"Complex data not supported: X holds complex numbers ({np.asarray(X).dtype}), and "
                             f"{type(self).__name__} takes real inputs. Pass the real and imaginary parts (or "
                             "magnitude and phase) as separate features.")
        shape, fitted = getattr(X, "shape", None), getattr(self, "input_shape_", None)
        if reset or shape is None or len(shape) <= 2 or fitted is None or len(fitted) != len(shape) - 1:
            return X
        if tuple(shape[1:]) != tuple(fitted):
            raise ValueError(f"X has samples of shape {tuple(shape[1:])}, but {type(self).__name__} was fitted with "
                             f"samples of shape {tuple(fitted)}.")
        return X

    def _validate_X(self, X, reset: bool):
        X = self._check_samples_shape(X, reset)
        X = validate_data(self, X, reset=reset, dtype=self._input_dtypes, ensure_min_samples=1,
                          allow_nd=self._allow_nd)
        return self._standardize(self._shape_input(X, reset), reset)

    def _validate_fit_data(self, X, y, reset: bool, classes=None):
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        X = self._check_samples_shape(X, reset)
        X, y = validate_data(self, X, y, reset=reset, dtype=self._input_dtypes, multi_output=True,
                             y_numeric=False, ensure_min_samples=2, allow_nd=self._allow_nd)
        X = self._standardize(self._shape_input(X, reset), reset)
        return X, self._validate_targets(y, reset=reset, classes=classes)

    def _standardize(self, X: np.ndarray, reset: bool) -> np.ndarray:
        """Centre and scale each input feature by its training mean and standard deviation (``input_mean_``,
        ``input_scale_``: recorded on ``reset`` when ``standardize_inputs``, None otherwise), as a
        StandardScaler in front would; a constant feature (constant up to the moments' rounding, by scikit-learn's
        test) is only centred. Features are the columns of tabular
        input, the channels of an image or signal, the per-step features of a sequence."""
        axis = self._input_feature_axis % X.ndim
        shape = [1] * X.ndim
        shape[axis] = -1
        if reset:
            self.input_mean_ = self.input_scale_ = None
            # (overflow-safe: before, inputs of 1e300 gave an infinite scale, a constant model and a model file
            # that load refused)
            mean, scale = moments(X, tuple(i for i in range(X.ndim) if i != axis))
            if self.standardize_inputs:
                constant = indistinguishable_from_constant(mean, scale, X.size // max(X.shape[axis], 1))
                self.input_mean_ = mean
                self.input_scale_ = np.where(constant, 1.0, scale)
            far = None if self.standardize_inputs else self._far_from_unit_scale(mean, scale, X.ndim, axis)
            self._far_inputs = far  # (for the divergence message: the cause to fix first)
            # (not from fit's probe or a worker's group of chains: the fit itself warns, once)
            if far is not None and not vars(self).get("_quiet_data", False):
                warnings.warn(f"standardize_inputs=False, but the inputs are far from unit scale: {far}. The "
                              "weights' prior and the warm-up assume inputs of order one; such fits run hot or "
                              "stall. Set standardize_inputs=True (the default), or scale the inputs.", UserWarning,
                              stacklevel=run.user_stacklevel())
        mean, scale = getattr(self, "input_mean_", None), getattr(self, "input_scale_", None)
        with np.errstate(over="ignore"):  # (an overflow to float32's inf is refused below, by name)
            out = (X if mean is None else standardise(X, mean.reshape(shape), scale.reshape(shape))).astype(
                np.float32, copy=False)
        if not np.isfinite(out).all():  # (X itself is finite: validated)
            where = ("standardised by the training mean and standard deviation" if mean is not None else
                     "as given (standardize_inputs=False)")
            raise ValueError(f"X has values beyond float32's range (about 3.4e38) {where}: the network computes in "
                             "float32." + ("" if mean is not None else " Set standardize_inputs=True, or scale "
                                           "the inputs."))
        return out

    def _far_from_unit_scale(self, mean: np.ndarray, std: np.ndarray, ndim: int, axis: int) -> str | None:
        """With ``standardize_inputs=False``: where a feature's root mean square (from its training ``mean`` and
        ``std``; input of ``ndim`` axes, features on ``axis``) is above ``UNSCALED_INPUT`` (raw areas, pixel values
        of 0-255, timestamps), words naming the largest, else None. The weights' prior, N(0, prior_scale^2), and the
        warm-up's first steps are sized for inputs of order one: such a fit came back useless under a temperature
        or convergence warning that did not name the cause."""
        with np.errstate(over="ignore"):
            rms = np.hypot(mean, std)
        worst = int(np.argmax(rms))
        if not rms[worst] > UNSCALED_INPUT:
            return None
        names = getattr(self, "feature_names_in_", None)
        kind = "feature" if ndim == 2 else "channel" if axis == 1 else "per-step feature"
        which = f"{kind} {worst}" + (f" ({names[worst]!r})" if names is not None and ndim == 2 else "")
        n_far = int((rms > UNSCALED_INPUT).sum())
        return (f"{which} has mean {mean[worst]:.4g} and standard deviation {std[worst]:.4g}; {n_far} of {len(rms)} "
                f"{kind}s {'has' if n_far == 1 else 'have'} a root mean square above {UNSCALED_INPUT:g}")

    def _shape_input(self, X: np.ndarray, reset: bool) -> np.ndarray:
        """Bring validated input to the network's layout ``(n, *input_shape_)``, recording the per-sample shape
        on ``reset`` and checking it otherwise. Tabular networks take ``(n, n_features)`` as it is."""
        return self._check_input_shape(X, reset, "n_features")

    def _check_input_shape(self, X: np.ndarray, reset: bool, layout: str) -> np.ndarray:
        """Record (``reset``) or check the per-sample shape of already reshaped input."""
        if reset:
            if min(X.shape[1:], default=1) < 1:  # (scikit-learn's minimum feature count reads 2-D input only)
                raise ValueError(f"X has samples of shape {tuple(X.shape[1:])} ({layout}): every axis needs at least "
                                 "one entry.")
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
        n = len(dataset)
        batch_size = run.resolve_batch_size(self.batch_size, n, type(self.sampler_).full_batch)
        if training:
            iterator = self.iterator_train
            if not (isinstance(iterator, type) and issubclass(iterator, run.PlannedBatches)):
                raise TypeError("iterator_train must be bayesnet.estimators.run.PlannedBatches or a subclass: the "
                                "sampler's mini-batch stream resumes mid-epoch and stops at the planned step.")
            return iterator(dataset, batch_size, net=self, **self.get_params_for("iterator_train"))
        return torch.utils.data.DataLoader(dataset, batch_size=batch_size)

    # ------------------------------------------------------------------ #
    # fitting
    # ------------------------------------------------------------------ #
    def fit(self, X, y=None, **fit_params):
        """Sample the posterior anew (``warm_start=False``) or continue (``warm_start=True``): see
        :meth:`partial_fit`. A fitted estimator keeps its draws when the new call is refused (bad data, an unknown
        fit parameter, an invalid hyperparameter): everything is checked, on a fresh copy, before skorch
        re-initialises it."""
        if self.warm_start and getattr(self, "loaded_", False):  # (partial_fit refuses: fit samples anew, as asked)
            warnings.warn(f"warm_start=True, but this {type(self).__name__} was loaded from a model file: it holds "
                          "the draws, not the chains' sampler state, so fit samples anew (new chains, a new burn-in).",
                          UserWarning, stacklevel=2)
        if not self.warm_start or not self.initialized_:
            if fit_params:
                raise TypeError(f"{type(self).__name__}.fit got unexpected fit parameter(s) {sorted(fit_params)}; "
                                "sample weights and forward arguments are not supported.")
            probe = clone(self)
            probe._quiet_data = True  # (its validation's warnings are the fit's own, given once when the fit validates)
            probe._validate_hyperparameters()
            Xv, _ = probe._validate_fit_data(X, y, reset=True)
            run.make_plan(probe, len(Xv))  # burn_in="auto" resolved from the data (a warm-up that outlasts it)
            probe.device_ = resolve_device(probe.device)  # a CUDA device that is not there
            make_prior(probe.prior_scale, make_sampler(probe.sampler, **probe.get_params_for("sampler")))
            # the architecture's and the noise model's settings; the weights' initial draw takes torch's global
            # generator, so under the lock the chains' own builds take it under (fits in threads stay
            # reproducible), and forked (the caller's generator does not move)
            with run._GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
                probe._build_module(), probe._build_likelihood()
            options = probe.get_params_for("compile")
            if probe.compile in (True, "auto") and options:  # torch.compile checks its options when called,
                # compiling nothing (with "auto", only when compile__* options say the user means to compile: a
                # default fit that will not compile imports no compiler)
                from ..samplers.compiled import compile_options

                try:
                    torch.compile(lambda x: x, **compile_options(options))
                except TypeError:
                    raise
                except Exception as exc:  # (an unknown backend or mode: torch's own exception classes)
                    raise ValueError(f"torch.compile failed on a stand-in with the compile__* options {options} (an "
                                     f"unknown backend or mode?): {type(exc).__name__}: "
                                     f"{' '.join(str(exc).split())[:300]}") from None
            return super().fit(X, y, **fit_params)
        with run.continuing_as("fit(warm_start=True)"):  # (refusals name the call the user made)
            return super().fit(X, y, **fit_params)

    def partial_fit(self, X, y=None, classes=None, **fit_params):
        """Draw (more) posterior samples of the weights from ``(X, y)``.

        A fresh estimator (or one re-initialised by :meth:`fit`) starts new chains and runs
        ``burn_in + n_draws * thinning`` steps (times the sampler's steps per draw; ``max_epochs`` epochs when
        set). Otherwise the chains continue: an interrupted run continues its planned steps exactly where it
        stopped (mid-epoch included), a completed one takes ``n_draws`` new draws per chain (after the burn-in, where a
        run that ``max_epochs`` cut ended inside it), which replace the old
        ones (the trace keeps the latest ``n_draws`` per chain: a continued run's draws come from later in the
        chain, not in addition to the earlier ones). Each call samples the posterior given its own ``(X, y)``:
        earlier calls' data shape only where the chains start (this is not incremental learning over chunks;
        fit on all the rows to condition on all of them).

        Raises
        ------
        ValueError
            For invalid data (NaN/inf, wrong shapes, a single class, a feature count that differs from an
            earlier call) or hyperparameters, or a changed setting that running chains cannot honour.
        bayesnet.samplers.DivergenceError
            If every chain diverged, in this call or an earlier one (whose chains are not continued: call
            :meth:`fit` to start new ones); the draws collected before are kept.
        """
        fit_params.pop("_routing_method", None)
        if fit_params:
            raise TypeError(f"{type(self).__name__}.fit got unexpected fit parameter(s) {sorted(fit_params)}; "
                            "sample weights and forward arguments are not supported.")
        if getattr(self, "loaded_", False):
            raise ValueError(f"this {type(self).__name__} was loaded from a model file: it holds the draws, not the "
                             "chains' sampler state, so partial_fit cannot continue them; call fit() to sample anew.")
        if not self.initialized_:
            self.initialize()
        status = getattr(self, "fit_status_", None) or {}
        if status.get("status") == "diverged" and (getattr(self, "sampler_state_", None) is not None
                                                  or getattr(self, "shards_", None)):
            diverged = status.get("diverged_chains", {})
            last = max((int(d["step"]) for d in diverged.values()), default=int(status.get("steps_taken", 0)))
            raise DivergenceError(f"every chain of this {type(self).__name__} diverged in an earlier call (the last at "
                                  f"step {last}; fit_status_['diverged_chains']): their positions are not finite, so "
                                  f"{run.continuing_call()} cannot continue them. Call fit() (with "
                                  "warm_start=False) to start new chains, with a smaller "
                                  f"step size; the {len(self.trace_) if self.trace_ is not None else 0} draws kept "
                                  "before the divergence stay usable.", last)
        running = getattr(self, "sampler_", None)
        if getattr(self, "sampler_state_", None) is not None and isinstance(self.sampler, (str, type)) \
                and running is not None and sampler_class(self.sampler) is not type(running):
            raise ValueError(f"{run.continuing_call()} cannot continue a {running.name} chain with sampler "
                             f"{self.sampler!r}; "
                             "call fit() (with warm_start=False) to start a new chain.")
        self._validate_hyperparameters()  # every path: fresh, continuing, groups of chains in workers
        # the process layout is the fit's: groups of chains in workers from a fresh fit with n_jobs (continued in
        # their groups whatever n_jobs is now); chains started in this process continue here (n_jobs set since
        # takes effect when a fit starts new chains: the chains are the same either way)
        in_process = getattr(self, "sampler_state_", None) is not None
        if getattr(self, "group_", None) is None and (getattr(self, "shards_", None)
                                                       or (n_groups(self) > 1 and not in_process)):
            fit_groups(self, X, y, classes)
            return self
        fresh = getattr(self, "sampler_state_", None) is None
        # an interrupted plan continues where it stopped: its draw quota counts from that plan's start
        resumes = (not fresh and self.fit_status_.get("status") == "interrupted"
                   and getattr(self, "kept_at_call_start_", None) is not None)
        X, y = self._validate_fit_data(X, y, reset=fresh, classes=classes)
        if fresh:
            run.start_chains(self, X, y)
        else:
            run.continue_chains(self, X, y)
        run.prepare_compiled(self)
        self.steps_this_call_ = 0
        self.nonfinite_this_call_ = {}  # slot -> due draws refused for not being finite, in this call
        if not resumes or len(self.kept_at_call_start_) != len(self.trace_.kept_per_slot):
            self.kept_at_call_start_ = self.trace_.kept_per_slot.copy()
        self.fit_status_["stopped_by"] = None
        self.fit_status_.pop("stop_requested", None)
        run.step_budget(self, resumes)
        batch_size = run.resolve_batch_size(self.batch_size, len(X), type(self.sampler_).full_batch)

        def epochs() -> int:  # (the budget ends the last one)
            return 1 + -(-self.steps_remaining_ // -(-len(X) // batch_size))

        error = None
        try:
            with run.deferred_interrupt(self), run.sampling_threads(self, X, batch_size):
                super().partial_fit(X, y, epochs=epochs())
                while run.extend_unmixed(self):  # thinning="auto": draws that have not mixed, spread further
                    if self.__dict__.get("compiled_step_") is None:  # (compile="auto" on the longer run)
                        run.prepare_compiled(self)
                    vars(self)["_extending"] = f"not mixed: draws {self.trace_.thinning} steps apart"  # (its bar's)
                    try:
                        super().partial_fit(X, y, epochs=epochs())
                    finally:
                        vars(self).pop("_extending", None)
        except Exception as exc:
            if not isinstance(exc, DivergenceError):  # skorch's on_train_end follows only an interrupt
                run.judge_unread_steps(self)
                error = exc
            raise
        finally:
            for _, cb in self.callbacks_:
                if isinstance(cb, SamplingProgressBar):
                    cb.close()
            interrupted = (self.steps_remaining_ > 0 and self.fit_status_["stopped_by"] is None
                           and self.fit_status_["status"] != "diverged")
            if len(self.history) > 100:  # keep skorch's epoch records bounded
                del self.history[:-100]
            run.finish_call(self, interrupted, error)
            self._sync_module()
        return self

    def fit_loop(self, X, y=None, epochs=None, **fit_params):
        """skorch's loop. A stop inside it other than the draw quota's (Ctrl-C, or a callback's
        ``KeyboardInterrupt``, skorch's convention for stopping early, which skorch swallows) sets
        ``interrupt_requested_``: the call then takes no further steps, also where the stop came at the planned
        run's last step and ``thinning="auto"`` would have run on (the run is then left "interrupted" at its
        extended length, for ``partial_fit`` to finish)."""
        try:
            return super().fit_loop(X, y, epochs=epochs, **fit_params)
        except KeyboardInterrupt:
            if self.fit_status_.get("stopped_by") != "draws collected":
                self.interrupt_requested_ = True
                self.fit_status_["stop_requested"] = True  # (what a group of chains in a worker reports back)
            raise

    def run_single_epoch(self, iterator, training, prefix, step_fn, **fit_params):
        """skorch's epoch without reading the device at every step: the per-step statistics stay on the
        device (``step_stats_``), and the callbacks read them only when they need to."""
        if iterator is None:
            return
        if not training:
            return super().run_single_epoch(iterator, training, prefix, step_fn, **fit_params)
        batch_count = 0
        begin, end = self._batch_hooks()
        for batch in iterator:
            for hook in begin:
                hook(self, batch=batch, training=training)
            step = step_fn(batch, **fit_params)
            for hook in end:
                hook(self, batch=batch, training=training, **step)
            batch_count += 1
            if self.interrupt_requested_:  # Ctrl-C, deferred to the end of the step
                raise KeyboardInterrupt
        self.history.record(prefix + "_batch_count", batch_count)

    def _batch_hooks(self) -> tuple[list, list]:
        """The per-step hooks ``notify`` would call, ``(on_batch_begin's, on_batch_end's)``: the net's and each
        callback's, in ``notify``'s order, leaving out those that do nothing (a class's skorch base
        :class:`~skorch.callbacks.Callback` method, the net's own ``on_batch_begin`` here and skorch's
        ``on_batch_end``; a hook set on an instance is always called). Collected once an epoch. A step of a small
        network is mostly per-call overhead; the default fit's callbacks define one hook of the two (measured: 24
        of 570 microseconds a step went to ``notify``). A net whose ``notify`` is its own (a subclass's, or one set
        on the instance) is notified through it."""
        if type(self).notify is not NeuralNet.notify or "notify" in vars(self):
            return ([lambda net, **kw: net.notify("on_batch_begin", **kw)],
                    [lambda net, **kw: net.notify("on_batch_end", **kw)])

        def idle(obj, name, base) -> bool:
            return name not in vars(obj) and getattr(type(obj), name, None) is base

        hooks = []
        idle_hooks = (("on_batch_begin", BayesianNeuralNet.on_batch_begin), ("on_batch_end", NeuralNet.on_batch_end))
        for name, own in idle_hooks:
            callbacks = [getattr(cb, name) for _, cb in self.callbacks_ if not idle(cb, name, getattr(Callback, name))]
            hooks.append(([] if idle(self, name, own) else [getattr(self, name)]) + callbacks)
        return hooks[0], hooks[1]

    def train_step(self, batch, **fit_params):
        """One sampler transition on ``batch``: record its statistics, offer the new position to the trace.

        Returns skorch's step dict with ``loss`` (the potential per data point, a device tensor), ``info``
        (the :class:`~bayesnet.samplers.StepInfo`), ``step``, ``stored`` (whether a draw was stored, after which
        the device was read) and ``nonfinite`` (slots whose due draw was not finite).
        """
        compiled = self.__dict__.get("compiled_step_")
        compiled = compiled if compiled is not None and self.sampler_state_.warmup is None else None
        posterior, trace = self.posterior_, self.trace_
        # the configurational temperature after the burn-in: measured from the eager kernel's gradient at every
        # draw step (the trace keeps steps burn_in + 1, + 1 + thinning, ...), recorded at every eager step as the
        # latest measurement (the compiled kernel does not go through value_and_grad: NaN)
        after = self.sampler_state_.step + 1 - trace.burn_in
        virial = after > 0 and "configurational_temperature" in self.step_stats_.fields
        posterior.virial_wanted = virial and compiled is None and (after - 1) % trace.thinning == 0
        try:
            if compiled is not None:  # the frozen kernel, compiled
                state, info = compiled(self.sampler_state_, posterior, batch)
            else:
                state, info = self.sampler_.step(self.sampler_state_, posterior, batch)
        finally:
            posterior.virial_wanted = False
        step = state.step
        counts = vars(self)  # (plain ints: skorch's __setattr__, which tracks modules, cost 4 microseconds each)
        counts["steps_remaining_"] -= 1
        counts["steps_this_call_"] += 1
        fields = info.fields()
        if virial:  # the latest measurement (per member, already divided by D), recorded until the next
            measured = posterior.virial if compiled is None else None
            fields["configurational_temperature"] = float("nan") if measured is None else measured
        self.step_stats_.record(step, fields)
        nonfinite = trace.offer(step, state.position, fields, info.is_draw)
        if len(nonfinite):  # not kept: the divergence monitor (when on) retires these chains; counted for the report
            refused = counts.setdefault("nonfinite_this_call_", {})
            for slot in nonfinite.tolist():
                refused[slot] = refused.get(slot, 0) + 1
        return {"loss": info.potential.mean() / self.n_train_, "y_pred": None, "info": info, "step": step,
                "stored": self.trace_.last_due > 0, "nonfinite": nonfinite}

    def validation_step(self, batch, **fit_params):
        Xi, yi = batch
        with torch.no_grad():
            loss = -self.criterion_(self.module_(Xi), yi) / len(yi)
        return {"loss": loss, "y_pred": None}

    def divergence_message(self, step: int, chains, state=None) -> str:
        """The message of the :class:`~bayesnet.samplers.DivergenceError` raised when every chain diverged;
        ``state``: the sampler state whose step size and warm-up it names (the estimator's own by default; with
        ``n_jobs``, a group's)."""
        trace = self.trace_
        state = self.sampler_state_ if state is None else state
        hint = self.sampler_.divergence_hint(state)
        diverged = self.fit_status_["diverged_chains"]
        reasons = sorted({d["reason"] for d in diverged.values()})
        which = (f"the {self.sampler_.name} chain diverged at step {step}" if len(diverged) == 1 else
                 f"all {len(diverged)} {self.sampler_.name} chains ({', '.join(map(str, sorted(diverged)))}) "
                 f"diverged, the last at step {step}")
        # inputs far from unit scale are the first thing to fix (the step the warm-up finds for them is tiny:
        # 1e-36 on raw data), then a warm-up too short to measure the step (or one that ended hot): its step is
        # a guess made at the start; unstandardised inputs of order one are suggested after the step
        far = vars(self).get("_far_inputs")
        inputs = "" if getattr(self, "input_mean_", None) is not None or far is not None else \
            ", or standardise the inputs (standardize_inputs=True)"
        first = "" if far is None else (f" The inputs are far from unit scale ({far}) and not standardised: set "
                                        "standardize_inputs=True, or scale them, first.")
        why = run.unsettled_warmup(state)
        longer = run.warmup_setting(self) or f"burn_in (now {run.burn_in_words(self)})"
        unsettled = "" if why is None else (f" The warm-up did not settle: {why}; increase {longer}"
                                            f"{'' if far else ' first'}.")
        since = vars(self).get("_new_data_at")
        moved = "" if since is None or step <= since else (
            f" The chains continued on other data than the earlier call's (from step {since}) with the step size and "
            "mass the warm-up froze on those: call fit() (with warm_start=False) to warm up on these data.")
        # (set_params(batch_size=...) before a continued run; a fit anew asked for once when the data changed too)
        smaller = run.smaller_batches(self, anew=not moved)
        reduce = f"the step size (now {hint}), e.g. by a factor of 10{inputs}."
        advice = f" Reduce {reduce}" if smaller is None else f" {smaller}; or: reduce {reduce}"
        return (f"{which}: {'; '.join(reasons)}.{first}{unsettled}{moved}{advice} {len(trace)} draws from before the "
                f"divergence are kept and usable for prediction; {int(trace.discarded_per_slot.sum())} taken while the "
                "chain left its typical set were discarded (see fit_status_).")

    def save(self, path) -> None:
        """Write the fitted estimator to ``path`` in bayesnet's model format: the draws as safetensors, the
        specification and diagnostics as JSON; :func:`bayesnet.load` reads it back without running code from the
        file (see :mod:`bayesnet.io`).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        ValueError
            For a parameter that is not plain data (a callable, a prior object of another class than bayesnet's
            own, which are saved by name with their settings).
        """
        from ..io import save

        save(self, path)

    def _sync_module(self) -> None:
        """Copy the first chain's current position into ``module_`` (and ``criterion_``)."""
        posterior = getattr(self, "posterior_", None)
        if posterior is None:
            return
        own = [p for p in self.module_.parameters() if p.requires_grad] \
            + [p for p in self.criterion_.parameters() if p.requires_grad]
        with torch.no_grad():
            for p, stacked in zip(own, posterior.parameters):
                p.copy_(stacked[0])

    # ------------------------------------------------------------------ #
    # inference over draws
    # ------------------------------------------------------------------ #
    @property
    def n_draws_(self) -> int:
        """Deprecated alias of ``n_draws_kept_`` (all chains together; ``n_draws`` is per chain)."""
        warnings.warn("n_draws_ is renamed n_draws_kept_ (the draws of all chains together; n_draws is per "
                      "chain); n_draws_ will be removed.", FutureWarning, stacklevel=2)
        return len(self.trace_)

    def _draw_parameters(self, device=None) -> list[torch.Tensor]:
        """The draws shaped like the parameters, ``(n_draws_kept_, *shape)`` each; with ``device``, moved there
        in one transfer of the flat draws (a view of the trace where they lie in order) and split there."""
        self._check_fitted()
        draws = self.trace_.draws()
        return self.trace_.unflatten(draws if device is None else draws.to(device, non_blocking=True))

    def forward_iter(self, X, training=False, device="cpu"):
        """skorch's ``forward_iter`` (and so ``forward``) on ``X`` as the estimator's own methods take it:
        validated, reshaped and standardised as for ``predict``, then ``module_``'s outputs batch by batch, moved
        to ``device``. ``module_`` holds the first chain's current position, one network: the posterior's
        predictions are :meth:`predict_draws`, ``predict_proba`` and ``predict``. A regressor's outputs are in
        the standardised target's units (``predict`` maps them back).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        ValueError
            For input the estimator's methods refuse (shape, NaN), and for a model read from a file
            (:func:`bayesnet.load`), which holds the draws but no chain position.
        """
        self._check_fitted()
        if getattr(self, "loaded_", False):
            raise ValueError(f"this {type(self).__name__} was loaded from a model file: it holds the draws, not the "
                             "chains' positions, so module_ is not a fitted network; predict_draws, predict_proba "
                             "and predict use the draws.")
        X = torch.as_tensor(self._validate_X(X, reset=False))
        batch_size = run.resolve_batch_size(self.batch_size, len(X), False)
        self.module_.train(training)
        with torch.set_grad_enabled(training):
            for xb in X.split(batch_size):
                yield self.module_(xb.to(self.device_)).to(device)

    def _predictive(self) -> PosteriorPredictive:
        self._check_fitted()  # (before device_, which an unfitted estimator does not have)
        params = self._draw_parameters(self.device_)
        names = [name for name, p in self.module_.named_parameters() if p.requires_grad]
        return PosteriorPredictive(self.module_, names, params[: len(names)], self.device_)

    def _network_outputs(self, X) -> torch.Tensor:
        """Raw network outputs for every draw, shape (n_draws, n_samples, n_outputs), CPU float32 (``predict_draws``).

        Held to the averages' rule: a row with no finite output under any draw raises the ``ValueError`` that
        ``predict``/``predict_proba`` raise, and non-finite (draw, row) outputs, returned as they are, warn."""
        predictive = self._predictive()
        X = self._validate_X(X, reset=False)
        blocks = []
        for _, out in predictive.outputs(X):
            predictive._finite(out)
            blocks.append(out.float().cpu())
        predictive.warn_nonfinite("are returned as they are", stacklevel=run.user_stacklevel() + 1)  # (+1: its frame)
        return torch.cat(blocks, dim=1)

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("interrupt_requested_", None)
        state.pop("compiled_step_", None)  # compiled code does not pickle; a continued fit compiles again
        state.pop("_convergence_at", None)  # (a run's own cache, read at its end)
        return state

    def torch_compile(self, module, name):
        """skorch's hook, left as is: ``compile`` here applies to the sampler's transition
        (:mod:`bayesnet.samplers.compiled`), which :func:`bayesnet.estimators.run.prepare_compiled` sets up."""
        return module

    def __setstate__(self, state):
        # skorch maps CUDA tensors to the available device using `device`; give it a concrete device for "auto".
        wanted = state.get("device")
        if "standardize_inputs" not in state:  # pickled before the estimators standardised their inputs
            state["standardize_inputs"] = False
            if isinstance(state.get("fit_params_"), dict):  # a continued run refuses to switch it on
                state["fit_params_"] = {**state["fit_params_"], "standardize_inputs": False}
            if "trace_" in state:
                state.setdefault("input_mean_", None)
                state.setdefault("input_scale_", None)
        shards, recorded = state.get("shards_"), state.get("fit_params_")
        if shards and isinstance(recorded, dict):  # pickled before an n_jobs fit recorded its own settings: they
            # were its first group's (n_chains of that group; its n_jobs and verbose are run settings, which save
            # takes as they are now); the chains are the groups' and the lost ones
            lost = (state.get("fit_status_") or {}).get("lost_chains", [])
            state["fit_params_"] = {**recorded, "n_chains": sum(int(vars(g)["n_chains"]) for g in shards) + len(lost)}
        if wanted == "auto":
            # a fitted model stays where it was fitted (its chains' random streams were made there): a CPU fit
            # unpickled on a GPU machine is not moved to the GPU; a GPU fit without a GPU comes to the CPU
            fitted = state.get("device_")
            if isinstance(fitted, torch.device) and (fitted.type != "cuda" or torch.cuda.is_available()):
                state["device"] = str(fitted)
            else:
                state["device"] = str(resolve_device("auto"))
        super().__setstate__(state)
        if wanted == "auto":
            self.device = wanted
        device = vars(self).get("device_")
        if device is not None and device.type == "cuda" and not torch.cuda.is_available():
            self.device_ = torch.device("cpu")  # fitted on a GPU, loaded on a machine without one: the CPU
        self.interrupt_requested_ = False
