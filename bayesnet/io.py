"""Model files that hold draws, not code: :func:`save` and :func:`load`.

A fitted estimator (or a scikit-learn ``Pipeline`` of known transformers ending in one) is written as one
`safetensors <https://huggingface.co/docs/safetensors>`_ file: every array (the posterior draws, the
trace's bookkeeping, the scaler's statistics, the classes) is a named tensor, and everything else (the
estimator's class and parameters, the network's specification, the fitted data description, the
diagnostics) is JSON in the file's header metadata. Loading parses that JSON and those arrays and builds
objects only from an allowlist of classes: no pickle, so no code runs when a file is read, whoever wrote it.

Why not pickle (joblib): unpickling runs whatever the file says; a model file from someone else is then a
program. Why not skops: it does not store torch tensors without falling back to pickle's reduce protocol,
and the draws are the bulk of the file. A loaded estimator predicts, summarises and exports exactly as the
saved one (round trips give identical predictions); it holds the draws, not the chains' sampler state, so
``fit`` samples anew and ``partial_fit`` refuses. A sampler given as an instance is written as its registered
name with its hyperparameters as ``sampler__*`` parameters (what ``get_params`` of the loaded estimator
shows). The per-step statistics and skorch's history are not written: a file's size grows with the draws
kept, never with the run's length.
"""

from __future__ import annotations

import json
import os
import numpy as np
import torch

__all__ = ["save", "load", "FORMAT", "VERSION"]

FORMAT = "bayesnet-model"
VERSION = 1

# attributes of a fitted estimator written as JSON (arrays among them go to tensors)
_ESTIMATOR_FITTED = ("n_features_in_", "feature_names_in_", "input_shape_", "input_mean_", "input_scale_",
                     "n_outputs_", "classes_", "y_mean_", "y_scale_", "_y_is_1d", "n_train_", "diagnostics_",
                     "convergence_", "fit_status_")
_TRACE_ARRAYS = ("_steps", "_stored", "_next", "n_candidates", "kept_per_slot", "discarded_per_slot", "active")
# parameters that hold runtime objects and are not written (their defaults come back on load)
_RUNTIME_PARAMS = {"callbacks", "iterator_train", "iterator_valid", "module", "criterion", "optimizer", "dataset",
                   "train_split", "predict_nonlinearity", "use_caching", "torch_load_kwargs"}


def _estimator_classes() -> dict:
    from . import estimators

    return {name: getattr(estimators, name) for name in estimators.__all__ if name.startswith("Bayesian")
            and name != "BayesianNeuralNet"}


def _transformer_classes() -> dict:
    from sklearn.preprocessing import FunctionTransformer, MaxAbsScaler, MinMaxScaler, RobustScaler, StandardScaler

    from .timeseries import TakensEmbedding

    return {c.__name__: c for c in (StandardScaler, MinMaxScaler, RobustScaler, MaxAbsScaler, TakensEmbedding,
                                    FunctionTransformer)}


def _functions() -> dict:
    """The functions a saved ``FunctionTransformer`` may name (the command line's reshapes)."""
    from .cli import models

    return {f"bayesnet.cli.{fn.__name__}": fn for fn in (models.to_sequences, models.oldest_first)}


# ---------------------------------------------------------------------- #
# JSON with arrays set aside as tensors
# ---------------------------------------------------------------------- #
class _Encoder:
    def __init__(self):
        self.tensors: dict[str, torch.Tensor] = {}

    def value(self, v, key: str):
        """A JSON-able form of ``v``; arrays become references to tensors named ``key``."""
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return f if np.isfinite(f) else {"__float__": repr(f)}
        if isinstance(v, tuple):
            return {"__tuple__": [self.value(x, f"{key}.{i}") for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [self.value(x, f"{key}.{i}") for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {"__dict__": [[self.value(k, f"{key}.k{i}"), self.value(x, f"{key}.{i}")]
                                 for i, (k, x) in enumerate(v.items())]}
        if isinstance(v, (np.ndarray, torch.Tensor)):
            a = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v
            if a.dtype.kind in "OUS":  # strings (class labels, feature names)
                return {"__strings__": [str(x) for x in a.reshape(-1)], "shape": list(a.shape), "kind": a.dtype.kind}
            self.tensors[key] = torch.from_numpy(np.ascontiguousarray(a))
            return {"__array__": key}
        raise TypeError(f"cannot write {type(v).__name__} ({key}) to a model file safely")


def _decode(v, tensors):
    if isinstance(v, list):
        return [_decode(x, tensors) for x in v]
    if not isinstance(v, dict):
        return v
    if "__tuple__" in v:
        return tuple(_decode(x, tensors) for x in v["__tuple__"])
    if "__dict__" in v:
        return {_decode(k, tensors): _decode(x, tensors) for k, x in v["__dict__"]}
    if "__float__" in v:
        return float(v["__float__"])
    if "__strings__" in v:
        if not v["shape"]:
            return v["__strings__"][0]
        # NumPy strings come back as NumPy strings (predict's labels keep their dtype), others as objects
        return np.array(v["__strings__"], dtype=None if v.get("kind") == "U" else object).reshape(v["shape"])
    if "__array__" in v:
        return tensors[v["__array__"]].numpy()
    raise ValueError(f"malformed value in the model file: {v!r}")


# ---------------------------------------------------------------------- #
def _params(obj, enc: _Encoder, key: str) -> dict:
    """``get_params(deep=False)`` as JSON: runtime objects that still have their default are left out; any
    other value that is not data refuses the save."""
    from .samplers import Sampler

    params = obj.get_params(deep=False)
    defaults = type(obj)().get_params(deep=False) if hasattr(type(obj), "_get_param_names") else {}
    sampler = params.get("sampler")
    if isinstance(sampler, Sampler):  # an instance: saved by name with its hyperparameters as sampler__*
        # (settings given as sampler__* keywords override the instance's, as when it was fitted)
        params = {**params, **{f"sampler__{k}": v for k, v in sampler.get_params(deep=False).items()
                               if f"sampler__{k}" not in params}}
    out = {}
    for name, value in params.items():
        if name == "sampler" and isinstance(value, (Sampler, type)):
            value = value.name
        if name in _RUNTIME_PARAMS or (callable(value) and name != "func" and name != "inverse_func"):
            default = defaults.get(name)
            if value is None or value is default or name in ("module", "criterion", "iterator_train") \
                    or (not callable(value) and isinstance(value, (str, bool)) and value == default):
                continue
            raise ValueError(f"cannot save {type(obj).__name__}.{name}={value!r} safely: a model file holds data, "
                             "not code. Leave it at its default, or keep a pickle of a model you trust.")
        if name in ("func", "inverse_func"):
            if value is None:
                out[name] = None
                continue
            qualified = f"bayesnet.cli.{getattr(value, '__name__', '')}"
            if _functions().get(qualified) is not value:
                raise ValueError(f"cannot save a FunctionTransformer of {value!r}: only bayesnet's own reshapes "
                                 "can be named in a model file.")
            out[name] = {"__function__": qualified}
            continue
        try:
            out[name] = enc.value(value, f"{key}.params.{name}")
        except TypeError:
            raise ValueError(f"cannot save {type(obj).__name__}.{name}={value!r} safely (not plain data); a custom "
                             "prior or sampler object has to be given as numbers and a registered name to be "
                             "saved.") from None
    return out


def _estimator_spec(est, enc: _Encoder, key: str) -> dict:
    from sklearn.utils.validation import check_is_fitted

    if type(est).__name__ not in _estimator_classes():
        raise TypeError(f"save() writes bayesnet's estimators (and pipelines ending in one), not {type(est).__name__}.")
    check_is_fitted(est)
    trace = est.trace_
    fitted = {a: enc.value(getattr(est, a), f"{key}.{a}") for a in _ESTIMATOR_FITTED if hasattr(est, a)}
    trace_spec = {"n_draws": trace.n_draws, "burn_in": trace.burn_in, "thinning": trace.thinning,
                  "n_slots": trace.n_slots, "shapes": [list(s) for s in trace.shapes],
                  "arrays": {a: enc.value(getattr(trace, a), f"{key}.trace.{a}") for a in _TRACE_ARRAYS},
                  "stats": {n: enc.value(v, f"{key}.trace.stats.{n}") for n, v in trace._stats.items()},
                  "buffer": enc.value(trace._buffer, f"{key}.trace.buffer")}
    return {"class": type(est).__name__, "params": _params(est, enc, key), "fitted": fitted, "trace": trace_spec,
            "device": str(est.device_)}


def _transformer_spec(step, enc: _Encoder, key: str) -> dict:
    name = type(step).__name__
    if name not in _transformer_classes():
        raise TypeError(f"save() writes pipelines of {sorted(_transformer_classes())} and a bayesnet estimator; "
                        f"{name} is not among them.")
    fitted = {a: enc.value(v, f"{key}.{a}") for a, v in vars(step).items()
              if a.endswith("_") and not a.startswith("_")}
    return {"class": name, "params": _params(step, enc, key), "fitted": fitted}


def save(model, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write a fitted estimator, or a ``Pipeline`` of known transformers ending in one, to ``path``.

    Parameters
    ----------
    model : fitted bayesnet estimator or sklearn.pipeline.Pipeline
        Pipelines may hold ``StandardScaler``, ``MinMaxScaler``, ``RobustScaler``, ``MaxAbsScaler``,
        :class:`bayesnet.TakensEmbedding` and the command line's reshapes, then the estimator.
    path : str or PathLike
        The file to write (conventionally ``*.bayesnet``); written to a temporary file, then renamed.
    metadata : dict, optional
        Plain data (str, numbers, lists, dicts) stored with the model and returned by ``load(...,
        return_metadata=True)``.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If the estimator is not fitted.
    TypeError
        For a model, or a pipeline step, of a class the format does not hold.
    ValueError
        For a parameter that is not plain data (a callable, a custom prior object).
    """
    from safetensors.torch import save_file
    from sklearn.pipeline import Pipeline

    enc = _Encoder()
    if isinstance(model, Pipeline):
        steps = [{"name": n, **(_estimator_spec(s, enc, f"step{i}") if i == len(model.steps) - 1
                                else _transformer_spec(s, enc, f"step{i}"))}
                 for i, (n, s) in enumerate(model.steps)]
        spec = {"kind": "pipeline", "steps": steps}
    else:
        spec = {"kind": "estimator", "estimator": _estimator_spec(model, enc, "estimator")}
    spec["metadata"] = enc.value(metadata or {}, "metadata")
    header = {"format": FORMAT, "version": str(VERSION), "spec": json.dumps(spec)}
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        save_file({k: v.contiguous() for k, v in enc.tensors.items()}, tmp, metadata=header)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _read(path):
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), framework="pt") as f:
            header = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ValueError(f"{os.fspath(path)} is not a bayesnet model file ({exc}).") from None
    if header.get("format") != FORMAT:
        raise ValueError(f"{os.fspath(path)} is a safetensors file but not a bayesnet model file.")
    if int(header.get("version", 0)) > VERSION:
        raise ValueError(f"{os.fspath(path)} was written by a newer bayesnet (format version {header['version']}); "
                         "upgrade bayesnet to read it.")
    return json.loads(header["spec"]), tensors


def _params_back(spec_params: dict, tensors) -> dict:
    out = {}
    for name, value in spec_params.items():
        if isinstance(value, dict) and "__function__" in value:
            fn = _functions().get(value["__function__"])
            if fn is None:
                raise ValueError(f"the model file names an unknown function {value['__function__']!r}.")
            out[name] = fn
        else:
            out[name] = _decode(value, tensors)
    return out


def _check_input_map(est) -> None:
    """The input standardisation a model file holds, checked as data: None with ``standardize_inputs=False``
    (files from before the option hold neither), else finite float vectors of one entry per input feature, the
    scales positive. Raises ValueError otherwise."""
    flag = est.standardize_inputs
    mean, scale = getattr(est, "input_mean_", None), getattr(est, "input_scale_", None)
    if not isinstance(flag, bool):
        raise ValueError(f"malformed model file: standardize_inputs={flag!r} is not a bool.")
    if not flag:
        if mean is not None or scale is not None:
            raise ValueError("malformed model file: it holds an input map (input_mean_, input_scale_) but "
                             "standardize_inputs=False.")
        est.input_mean_ = est.input_scale_ = None
        return
    shape = getattr(est, "input_shape_", None)
    axis = est._input_feature_axis
    try:
        n = int(shape[axis - 1 if axis > 0 else axis])
    except (TypeError, IndexError, ValueError):
        raise ValueError(f"malformed model file: input_shape_={shape!r} names no input features.") from None
    for name, value in (("input_mean_", mean), ("input_scale_", scale)):
        if not (isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.shape == (n,)
                and np.isfinite(value).all()):
            raise ValueError(f"malformed model file: {name} must be {n} finite floats (one per input feature) "
                             f"with standardize_inputs=True, got {value!r}.")
    if (scale <= 0).any():
        raise ValueError("malformed model file: input_scale_ holds a scale that is not positive.")
    est.input_mean_, est.input_scale_ = mean.astype(np.float64), scale.astype(np.float64)


def _build_estimator(spec: dict, tensors):
    from .plan import ChainLayout
    from .trace import Trace
    from .estimators.base import resolve_device

    classes = _estimator_classes()
    cls = classes.get(spec["class"])
    if cls is None:
        raise ValueError(f"the model file names an unknown estimator class {spec['class']!r}.")
    params = _params_back(spec["params"], tensors)
    params.setdefault("standardize_inputs", False)  # written before the estimators standardised their inputs
    est = cls(**params)
    for attr, value in spec["fitted"].items():
        value = _decode(value, tensors)
        if attr == "input_shape_":
            if not (isinstance(value, (list, tuple)) and all(isinstance(v, int) and v > 0 for v in value)):
                raise ValueError(f"malformed model file: input_shape_={value!r} names no input features.")
            value = tuple(value)
        if attr == "fit_status_" and "diverged_chains" in value:
            value["diverged_chains"] = {int(k): v for k, v in value["diverged_chains"].items()}
        setattr(est, attr, value)
    _check_input_map(est)
    est.device_ = resolve_device(est.device) if str(est.device).startswith("cuda") and torch.cuda.is_available() \
        else torch.device("cpu")
    with torch.random.fork_rng(devices=[]):
        module, likelihood = est._build_module(), est._build_likelihood()
    with est._current_init_context("module"):
        est.module_ = module.to(est.device_)
    with est._current_init_context("criterion"):
        est.criterion_ = likelihood.to(est.device_)
    t = spec["trace"]
    trace = Trace(t["n_draws"], burn_in=t["burn_in"], thinning=t["thinning"], n_slots=t["n_slots"], chain_axis=True)
    trace.shapes = [torch.Size(s) for s in t["shapes"]]
    for attr, value in t["arrays"].items():
        setattr(trace, attr, np.array(_decode(value, tensors)))
    trace._lockstep = False  # which steps were candidates is not saved: offers take the general path
    trace._stats = {n: np.array(_decode(v, tensors)) for n, v in t["stats"].items()}
    trace._buffer = tensors[t["buffer"]["__array__"]].clone() if t["buffer"] is not None else None
    est.trace_ = trace
    est.layout_ = ChainLayout(int(est.n_chains), t["n_slots"] // max(int(est.n_chains), 1))
    est.sampler_state_ = None
    est.loaded_ = True
    from .samplers import make_sampler

    est.sampler_ = make_sampler(est.sampler, **est.get_params_for("sampler"))
    return est


def load(path: str | os.PathLike, return_metadata: bool = False):
    """Read a model written by :func:`save`, without running code from the file.

    Parameters
    ----------
    path : str or PathLike
    return_metadata : bool, default=False
        Also return the ``metadata`` dict given to :func:`save`.

    Returns
    -------
    model : estimator or Pipeline
        Predicts (on the CPU, or on a GPU when the model was fitted on one and this machine has one), and
        reports ``diagnostics_``, ``fit_status_``, ``get_draws``, ``summary`` and ``to_arviz`` as saved.
    metadata : dict
        Only with ``return_metadata=True``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not a bayesnet model file, was written by a newer version, or names a class or
        function outside the allowlist.
    """
    spec, tensors = _read(path)
    if spec.get("kind") == "pipeline":
        from sklearn.pipeline import Pipeline

        steps = []
        classes = _transformer_classes()
        for i, step in enumerate(spec["steps"]):
            if i == len(spec["steps"]) - 1:
                steps.append((step["name"], _build_estimator(step, tensors)))
                continue
            cls = classes.get(step["class"])
            if cls is None:
                raise ValueError(f"the model file names an unknown transformer class {step['class']!r}.")
            obj = cls(**_params_back(step["params"], tensors))
            for attr, value in step["fitted"].items():
                setattr(obj, attr, _decode(value, tensors))
            steps.append((step["name"], obj))
        model = Pipeline(steps)
    elif spec.get("kind") == "estimator":
        model = _build_estimator(spec["estimator"], tensors)
    else:
        raise ValueError(f"{os.fspath(path)}: unknown model kind {spec.get('kind')!r}.")
    if return_metadata:
        return model, _decode(spec.get("metadata", {}), tensors)
    return model
