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

The header holds a SHA-256 checksum of the specification and of every tensor (its name, dtype, shape and bytes),
which :func:`load` checks before it believes anything: a file damaged on a disk or in a transfer (a flipped bit
that leaves a weight finite, which no other check would see) is refused. It is a checksum, not a signature: whoever
edits a file can write a new one, so the checks of the contents below still stand on their own. Files written
before the checksum (no ``sha256`` entry) load without it.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import math
import os
import warnings
import numpy as np
import torch

__all__ = ["save", "load", "FORMAT", "VERSION"]

FORMAT = "bayesnet-model"
#: the format's version: 2 since tacthmc's ``wall`` and ``tempering_noise`` default to "auto" (sized to the network,
#: 2026-11-29); a file of version 1 whose tacthmc fit left them at their defaults ran the paper's 5/3 and 0.05
VERSION = 2

# attributes of a fitted estimator written as JSON (arrays among them go to tensors)
_ESTIMATOR_FITTED = ("n_features_in_", "feature_names_in_", "input_shape_", "input_mean_", "input_scale_",
                     "n_outputs_", "classes_", "y_mean_", "y_scale_", "_y_is_1d", "n_train_", "diagnostics_",
                     "convergence_", "fit_status_")
_TRACE_ARRAYS = ("_steps", "_stored", "_next", "n_candidates", "kept_per_slot", "discarded_per_slot", "active")
#: the most memory the string arrays of one model file (class labels, feature names) may take in NumPy's form
_MAX_STRING_BYTES = 2 ** 26
#: what is left of it while a file is read (a list, so that every decode of one load shares it)
_STRING_BUDGET = contextvars.ContextVar("bayesnet_io_string_budget", default=None)
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

    def value(self, v, key: str, where: str | None = None):
        """A JSON-able form of ``v``; arrays become references to tensors named ``key``. ``where`` names ``v`` in
        an error, as the user wrote it (``metadata['notes'][1]``; by default ``key``, whose entries are numbered
        for the tensors' names)."""
        where = key if where is None else where
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return f if np.isfinite(f) else {"__float__": repr(f)}
        if isinstance(v, tuple):
            return {"__tuple__": [self.value(x, f"{key}.{i}", f"{where}[{i}]") for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [self.value(x, f"{key}.{i}", f"{where}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {"__dict__": [[self.value(k, f"{key}.k{i}", f"a key of {where}"),
                                  self.value(x, f"{key}.{i}", f"{where}[{k!r}]")]
                                 for i, (k, x) in enumerate(v.items())]}
        if isinstance(v, (np.ndarray, torch.Tensor)):
            a = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v
            if a.dtype.kind in "OUS":  # strings (class labels, feature names)
                return {"__strings__": [str(x) for x in a.reshape(-1)], "shape": list(a.shape), "kind": a.dtype.kind}
            self.tensors[key] = torch.from_numpy(np.ascontiguousarray(a))
            return {"__array__": key}
        raise TypeError(f"cannot write {type(v).__name__} ({where}) to a model file safely: it holds plain data (None, "
                        "bool, int, float, str, lists, tuples and dicts of these, NumPy arrays and tensors).")


def _decode(v, tensors):
    if isinstance(v, list):
        return [_decode(x, tensors) for x in v]
    if not isinstance(v, dict):
        return v
    if "__tuple__" in v:
        return tuple(_decode(x, tensors) for x in v["__tuple__"])
    if "__dict__" in v:
        return {_decode(k, tensors): _decode(x, tensors) for k, x in v["__dict__"]}
    if "__float__" in v:  # (save writes repr() of inf, -inf and nan there)
        if v["__float__"] not in ("inf", "-inf", "nan"):
            raise ValueError(f"malformed model file: {v['__float__']!r} is not a non-finite float's name.")
        return float(v["__float__"])
    if "__strings__" in v:
        strings = v["__strings__"]
        shape = v.get("shape")
        if not (isinstance(strings, list) and all(isinstance(x, str) for x in strings)
                and isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)
                and math.prod(shape) == len(strings)):  # (exact: a product of huge axes does not wrap)
            raise ValueError("malformed model file: a string array that is not a list of strings of its shape.")
        if not shape:
            return strings[0]
        # NumPy strings come back as NumPy strings (predict's labels keep their dtype), others as objects. A
        # NumPy string array takes rows x longest x 4 bytes: one long string among many short ones would make a
        # small file allocate gigabytes
        kind = "U" if v.get("kind") == "U" else "O"
        longest = max(map(len, strings), default=0)  # (an empty array, e.g. metadata: save writes those too)
        need = 4 * len(strings) * longest if kind == "U" else 0
        budget = _STRING_BUDGET.get() or [_MAX_STRING_BYTES]
        if need > budget[0]:
            raise ValueError(f"malformed model file: its string arrays (here {len(strings)} entries up to {longest} "
                             "characters long) would take more than "
                             f"{_MAX_STRING_BYTES // 2 ** 20} MiB in NumPy's form.")
        budget[0] -= need
        return np.array(strings, dtype=str if kind == "U" else object).reshape(shape)
    if "__array__" in v:
        return tensors[v["__array__"]].numpy()
    raise ValueError(f"malformed value in the model file: {v!r}")


# ---------------------------------------------------------------------- #
#: settings of how a fit runs, not of what it fitted: a model file takes their current values (the others are those
#: the model was fitted with, :func:`_fitted_params`)
_RUN_SETTINGS = {"callbacks", "verbose", "n_jobs", "warm_start", "compile"}
_RUN_PREFIXES = ("callbacks__", "compile__")


def _fitted_params(est) -> dict:
    """The estimator's settings as fitted (``fit_params_``, which a continued fit brings up to date), with the
    current values of :data:`_RUN_SETTINGS`. A setting changed by ``set_params`` since (for the next fit) is not
    what the draws were fitted under: before, save wrote it, and the file predicted with another network (a new
    ``activation``: digits' accuracy 0.90 -> 0.74, silently) or did not load (a new ``hidden_layer_sizes``, or
    ``n_draws=0``). Warns (UserWarning) naming those settings."""
    from .estimators.run import _same, user_stacklevel

    now = est._all_params(deep=False)
    fitted = vars(est).get("fit_params_")
    if not isinstance(fitted, dict):
        return now
    # the sampler's settings as its chains ran them (the fitted sampler_'s: a pickle from before continued fits
    # recorded sampler__* in fit_params_ had a continued fit's new value there only)
    sampler = vars(est).get("sampler_")
    used = sampler.get_params(deep=False) if sampler is not None else {}
    fitted = {**fitted, **{k: used[k[9:]] for k in {*fitted, *now} if k.startswith("sampler__") and k[9:] in used
                           and (k in fitted or _same(now[k], used[k[9:]]))}}

    def run_setting(name):
        return name in _RUN_SETTINGS or name.startswith(_RUN_PREFIXES)

    params = {k: (now[k] if run_setting(k) and k in now else v) for k, v in fitted.items()}
    params.update({k: v for k, v in now.items() if run_setting(k)})
    stale = [f"{k}={now[k]!r} (fitted with {fitted[k]!r})" if k in fitted else f"{k}={now[k]!r} (not set at the fit)"
             for k in now if not run_setting(k) and (k not in fitted or not _same(now[k], fitted[k]))]
    if stale:
        warnings.warn(f"{type(est).__name__} has settings changed by set_params since it was fitted: "
                      f"{', '.join(stale)}. save() writes the settings its draws were fitted with; the new ones take "
                      "effect at the next fit and are not saved.", UserWarning, stacklevel=user_stacklevel())
    return params


def _params(obj, enc: _Encoder, key: str, params: dict | None = None) -> dict:
    """``get_params(deep=False)`` (or ``params``) as JSON: runtime objects that still have their default are left
    out; any other value that is not data refuses the save."""
    from .samplers import Sampler

    def every_param(est) -> dict:  # (the estimators' plumbing at its default too: _all_params)
        return getattr(est, "_all_params", est.get_params)(deep=False)

    params = every_param(obj) if params is None else params
    defaults = every_param(type(obj)()) if hasattr(type(obj), "_get_param_names") else {}
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
            fix = ("Save a copy without them (copy.deepcopy(model).set_params(callbacks=None): what a callback "
                   "did, such as stopping the run, stays in the draws and fit_status_)" if name == "callbacks" else
                   "Leave it at its default")
            raise ValueError(f"cannot save {type(obj).__name__}.{name}={value!r} safely: a model file holds data, "
                             f"not code. {fix}, or keep a pickle of a model you trust.")
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
        if name == "prior_scale" and type(value) in _prior_classes().values():  # (exactly: not a subclass)
            out[name] = {"__prior__": type(value).__name__,
                         "params": enc.value(_prior_arguments(value), f"{key}.params.{name}")}
            continue
        try:
            out[name] = enc.value(value, f"{key}.params.{name}")
        except TypeError:
            raise ValueError(f"cannot save {type(obj).__name__}.{name}={value!r} safely (not plain data); a custom "
                             "prior or sampler object has to be given as numbers and a registered name to be "
                             "saved (bayesnet's own priors, GaussianPrior, FanInPrior and HierarchicalPrior, are "
                             "saved by name with their settings).") from None
    return out


def _estimator_spec(est, enc: _Encoder, key: str) -> dict:
    if type(est).__name__ not in _estimator_classes():
        raise TypeError(f"save() writes bayesnet's estimators (and pipelines ending in one), not {type(est).__name__}.")
    est._check_fitted()  # (scikit-learn's NotFittedError; after a fit that kept no draw, it says so)
    trace = est.trace_
    fitted = {a: enc.value(getattr(est, a), f"{key}.{a}") for a in _ESTIMATOR_FITTED if hasattr(est, a)}
    trace_spec = {"n_draws": trace.n_draws, "burn_in": trace.burn_in, "thinning": trace.thinning,
                  "n_slots": trace.n_slots, "shapes": [list(s) for s in trace.shapes],
                  "arrays": {a: enc.value(getattr(trace, a), f"{key}.trace.{a}") for a in _TRACE_ARRAYS},
                  "stats": {n: enc.value(v, f"{key}.trace.stats.{n}") for n, v in trace._stats.items()},
                  "buffer": enc.value(trace._buffer, f"{key}.trace.buffer")}
    return {"class": type(est).__name__, "params": _params(est, enc, key, _fitted_params(est)), "fitted": fitted,
            "trace": trace_spec,
            "device": str(est.device_)}


#: a pipeline step that passes its input through (scikit-learn's ``"passthrough"`` or None), as a model file names it
_PASSTHROUGH = "passthrough"


def _passes_through(step) -> bool:
    return step is None or (isinstance(step, str) and step == _PASSTHROUGH)


def _transformer_spec(step, enc: _Encoder, key: str) -> dict:
    name = type(step).__name__
    if name not in _transformer_classes():
        known = sorted(set(_transformer_classes()) - {"FunctionTransformer"})
        raise TypeError(f"save() writes pipelines of {known}, the command line's reshapes (FunctionTransformers of "
                        f"{sorted(_functions())}) and a bayesnet estimator; {name} is not among them.")
    fitted = {a: enc.value(v, f"{key}.{a}") for a, v in vars(step).items()
              if a.endswith("_") and not a.startswith("_")}
    return {"class": name, "params": _params(step, enc, key), "fitted": fitted}


def save(model, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write a fitted estimator, or a ``Pipeline`` of known transformers ending in one, to ``path``.

    Parameters
    ----------
    model : fitted bayesnet estimator or sklearn.pipeline.Pipeline
        Pipelines may hold ``StandardScaler``, ``MinMaxScaler``, ``RobustScaler``, ``MaxAbsScaler``,
        :class:`bayesnet.TakensEmbedding`, the command line's reshapes and ``"passthrough"`` (or None) steps, then
        the estimator (a None step comes back as ``"passthrough"``).
    path : str or PathLike
        The file to write (conventionally ``*.bayesnet``); written to a temporary file, then renamed.
    metadata : dict, optional
        Plain data (None, bool, str, numbers, lists, tuples, dicts, NumPy arrays, tensors) stored with the model
        and returned by ``load(..., return_metadata=True)``.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If the estimator is not fitted.
    TypeError
        For a model, or a pipeline step, of a class the format does not hold, or a ``metadata`` value that is not
        plain data (the message names it: ``metadata['notes'][1]``).
    ValueError
        For a parameter that is not plain data (a callable, a prior object of another class than bayesnet's own
        ``GaussianPrior``, ``FanInPrior`` and ``HierarchicalPrior``, which are saved by name with their settings).
    OSError
        If the file cannot be written (``FileNotFoundError`` when the folder ``path`` names does not exist; a full
        disk, a file-size limit, no permission); nothing is left at ``path`` then, nor a temporary file.
    """
    from safetensors.torch import save as serialise
    from sklearn.pipeline import Pipeline

    enc = _Encoder()
    if isinstance(model, Pipeline):
        steps = [{"name": n, **(_estimator_spec(s, enc, f"step{i}") if i == len(model.steps) - 1
                                else {"class": _PASSTHROUGH} if _passes_through(s)
                                else _transformer_spec(s, enc, f"step{i}"))}
                 for i, (n, s) in enumerate(model.steps)]
        spec = {"kind": "pipeline", "steps": steps}
    else:
        spec = {"kind": "estimator", "estimator": _estimator_spec(model, enc, "estimator")}
    spec["metadata"] = enc.value(metadata or {}, "metadata")
    tensors = {k: v.contiguous() for k, v in enc.tensors.items()}
    text = json.dumps(spec)
    header = {"format": FORMAT, "version": str(VERSION), "spec": text, "sha256": _checksum(text, tensors)}
    path = os.fsdecode(path)  # (a bytes path: its text, not "b'...'")
    if not path:
        raise FileNotFoundError(errno.ENOENT, "an empty path: give the model file's name", path)
    if os.path.isdir(path):  # (else the rename's error, naming the temporary file)
        raise IsADirectoryError(errno.EISDIR, "a folder: give the model file's name", path)
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):  # (else safetensors' own error, naming the temporary file)
        raise FileNotFoundError(errno.ENOENT, "no such folder to write the model file in", folder)
    tmp = f"{path}.tmp-{os.getpid()}"
    data = serialise(tensors, metadata=header)
    try:  # our own file (safetensors' save_file writes a private temporary file, mode 0600 whatever the umask,
        # and reports a failed write as its own error, not an OSError)
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class _NotAModelFile(ValueError):
    """A file that is not a bayesnet model file at all (not safetensors, or another safetensors file), as against
    a model file that is damaged, crafted or from a newer version (plain ValueError): the CLI words them apart."""


def _checksum(spec: str, tensors: dict) -> str:
    """SHA-256 over the specification's JSON text and every tensor by name: its name, dtype, shape and bytes."""
    digest = hashlib.sha256(spec.encode("utf-8"))
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        digest.update(f"\0{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode("utf-8"))
        digest.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


def _names_the_format(path) -> bool:
    """Whether a file that safetensors cannot read is laid out as a bayesnet model file up to where it breaks: an
    8-byte header length (within safetensors' 100 MB limit), then a JSON header that says ``"format":
    "bayesnet-model"`` (parsed when it is whole). A header cut short is recognised by that compact key-value pair
    as safetensors writes it (which the specification's escaped JSON inside the header cannot spell), or, where the
    cut came before it (safetensors writes the entries in any order), by the metadata's opening followed by the
    specification's escaped beginning. A cut within the first few dozen bytes is not recognised."""
    try:
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if not 2 <= n <= 100_000_000:
                return False
            header = fh.read(n)
    except OSError:
        return False
    if not header.startswith(b"{"):
        return False
    try:
        return json.loads(header)["__metadata__"]["format"] == FORMAT
    except (ValueError, KeyError, TypeError, RecursionError):
        return (f'"format":"{FORMAT}"'.encode() in header
                or header.startswith(b'{"__metadata__":{') and b'"spec":"{\\"kind\\": \\"' in header)


def _header_problem(path, header: dict) -> ValueError | None:
    """Why the safetensors header of ``path`` is not one of a model file this version reads (not this format, a
    version that is not a number, or a newer one), as the error to raise; None when it is."""
    if header.get("format") != FORMAT:
        return _NotAModelFile(f"{os.fspath(path)} is a safetensors file but not a bayesnet model file.")
    try:
        version = int(header.get("version", 0))
    except (TypeError, ValueError):
        return ValueError(f"{os.fspath(path)} is a malformed bayesnet model file (its format version "
                          f"{str(header.get('version'))[:20]!r} is not a number).")
    if version < 1:  # (save writes 1 and up)
        return ValueError(f"{os.fspath(path)} is a malformed bayesnet model file (format version {version}; "
                          "versions start at 1).")
    if version > VERSION:
        return ValueError(f"{os.fspath(path)} was written by a newer bayesnet (format version {header['version']}); "
                          "upgrade bayesnet to read it.")
    return None


def _read(path):
    from safetensors import SafetensorError, safe_open

    open(path, "rb").close()  # the real error for a directory or an unreadable file (safetensors calls both missing)
    if not os.path.isfile(path):  # (safetensors maps the file into memory: "No such device" for a pipe)
        raise OSError(errno.ESPIPE, "a model file is read from a file on disk, not from a pipe or device",
                      os.fspath(path))
    try:
        with safe_open(os.fspath(path), framework="pt") as f:
            header = f.metadata() or {}
            problem = _header_problem(path, header)
            # the tensors only of a model file this version reads (a foreign file's, of any size, stay unread)
            tensors = {k: f.get_tensor(k) for k in f.keys()} if problem is None else None
    except (SafetensorError, OSError, ValueError) as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError)):
            raise
        if not isinstance(exc, OSError) and _names_the_format(path):  # a model file cut short, or its layout broken
            raise ValueError(f"{os.fspath(path)} is a damaged bayesnet model file: it cannot be read as safetensors "
                             f"({exc}; cut short, or with bytes added, in a transfer?).") from None
        raise _NotAModelFile(f"{os.fspath(path)} is not a bayesnet model file ({exc}).") from None
    if problem is not None:
        raise problem
    if "sha256" in header and (not isinstance(header.get("spec"), str)
                               or _checksum(header["spec"], tensors) != header["sha256"]):
        raise ValueError(f"{os.fspath(path)} is a damaged bayesnet model file: its contents do not match the "
                         "checksum written with them (changed on a disk or in a transfer, or edited).")
    try:
        return json.loads(header["spec"]), tensors, int(header["version"])
    except (KeyError, ValueError, RecursionError) as exc:
        raise ValueError(f"{os.fspath(path)} is a malformed bayesnet model file (its specification: "
                         f"{type(exc).__name__}).") from None


def _prior_classes() -> dict:
    """The priors a model file may name (bayesnet's own, built from their plain constructor arguments)."""
    from .priors import FanInPrior, GaussianPrior, HierarchicalPrior

    return {cls.__name__: cls for cls in (GaussianPrior, FanInPrior, HierarchicalPrior)}


def _prior_settings(cls) -> list[str]:
    """The names of a built-in prior class's constructor arguments, which it keeps as attributes of the same names."""
    import inspect

    return [n for n in inspect.signature(cls.__init__).parameters if n != "self"]


def _prior_arguments(prior) -> dict:
    """A built-in prior's constructor arguments as it holds them (the per-chain state it gathers in a fit, such as
    the hierarchical prior's precisions, is not a setting: the estimators copy ``prior_scale`` before using it)."""
    return {n: getattr(prior, n) for n in _prior_settings(type(prior))}


def _prior_back(value: dict, tensors):
    """A prior a model file names: one of :func:`_prior_classes`, from plain numbers and flags checked by its
    constructor (ValueError otherwise)."""
    cls = _prior_classes().get(value.get("__prior__"))
    arguments = _decode(value.get("params"), tensors)
    if cls is None or not isinstance(arguments, dict) or set(arguments) - set(_prior_settings(cls)) \
            or not all(isinstance(v, (bool, int, float)) for v in arguments.values()):
        raise ValueError(f"malformed model file: prior_scale names {value.get('__prior__')!r} with "
                         f"{arguments!r}, not one of bayesnet's priors ({', '.join(_prior_classes())}) with its "
                         "settings.")
    try:
        return cls(**arguments)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed model file: prior_scale: {exc}") from None


def _params_back(spec_params: dict, tensors) -> dict:
    out = {}
    for name, value in spec_params.items():
        if name == "prior_scale" and isinstance(value, dict) and "__prior__" in value:
            out[name] = _prior_back(value, tensors)
        elif isinstance(value, dict) and "__function__" in value:
            fn = _functions().get(value["__function__"])
            if fn is None:
                raise ValueError(f"the model file names an unknown function {value['__function__']!r}.")
            out[name] = fn
        else:
            out[name] = _decode(value, tensors)
    return out


def _check_floats(value, n, name: str, per: str, positive: bool = False, note: str = "") -> None:
    """``value`` checked as ``n`` finite floats, one per ``per`` (and positive with ``positive``: a scale), else
    ValueError naming ``name``; ``note`` follows the expectation in the message."""
    if not (isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.shape == (n,)
            and np.isfinite(value).all()):
        raise ValueError(f"malformed model file: {name} must be {n} finite floats (one per {per}){note}, got "
                         f"{value!r}.")
    if positive and (value <= 0).any():
        raise ValueError(f"malformed model file: {name} holds a scale that is not positive.")


@contextlib.contextmanager
def _malformed():
    """Report a check's ValueError or TypeError (scikit-learn's parameter constraints raise both) as a
    malformed model file's."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise ValueError(f"malformed model file: {exc}") from None


def _check_pipeline_row(pipe) -> None:
    """One row of zeros through the pipeline's transformers and the estimator's input checks: the steps must fit
    together as ``predict`` chains them (a crafted reshape's arguments loaded, then failed at predict with a
    traceback). Runs only the allowlisted steps' own code, on this row."""
    transformers = [step for _, step in pipe.steps[:-1] if not _passes_through(step)]
    first = transformers[0] if transformers else pipe[-1]
    if first is pipe[-1] or getattr(first, "func", 0) is None:  # (a pass-through first step takes any shape:
        # the estimator's own checks cover input of 3 or 4 axes, whose n_features_in_ counts the second axis only)
        return
    n = getattr(first, "n_features_in_", None)
    if not isinstance(n, (int, np.integer)):
        return
    row = np.zeros((1, int(n)))
    with _malformed(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (feature-name notes: the row has none)
        for step in transformers:
            row = step.transform(row)
        pipe[-1]._validate_X(row, reset=False)


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
        _check_floats(value, n, name, "input feature", positive=name == "input_scale_",
                      note=" with standardize_inputs=True")
    est.input_mean_, est.input_scale_ = mean.astype(np.float64), scale.astype(np.float64)


def _count(value, name: str, low: int = 0) -> int:
    """``value`` checked as an integer of at least ``low`` (not a bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"malformed model file: {name}={value!r} is not an integer >= {low}.")
    return value


def _check_outputs(est) -> None:
    """What predictions read besides the draws, checked as data: a positive number of outputs; a classifier's
    labels, one per output and distinct; a regressor's target map, finite, one entry per output, its scales
    positive, and ``_y_is_1d`` only with one output. Raises ValueError otherwise (a crafted file gave silently
    dropped classes or inverted intervals)."""
    from sklearn.base import is_classifier

    n = _count(getattr(est, "n_outputs_", None), "n_outputs_", 1)
    if is_classifier(est):
        classes = getattr(est, "classes_", None)
        if not (isinstance(classes, np.ndarray) and classes.shape == (n,) and len(set(classes.tolist())) == n):
            raise ValueError(f"malformed model file: classes_ must be {n} distinct labels (one per output), got "
                             f"{classes!r}.")
        return
    for name in ("y_mean_", "y_scale_"):
        _check_floats(getattr(est, name, None), n, name, "output", positive=name == "y_scale_")
    if not isinstance(getattr(est, "_y_is_1d", None), bool) or (est._y_is_1d and n != 1):
        raise ValueError(f"malformed model file: _y_is_1d={getattr(est, '_y_is_1d', None)!r} with {n} outputs.")


def _trace_arrays(t: dict, tensors, n_slots: int, n_draws: int) -> tuple[dict, dict]:
    """The trace's bookkeeping arrays and statistics, checked against its shape: one entry per slot (the steps
    and statistics one per slot and draw), counts that are non-negative integers, ring positions and stored
    counts within the capacity. Raises ValueError otherwise."""
    refs = [v.get("__array__") for v in [*t["arrays"].values(), *t["stats"].values()] if isinstance(v, dict)]
    if len(set(refs)) != len(refs):  # (one tensor named by many statistics would be copied once per name)
        raise ValueError("malformed model file: two of the trace's arrays name the same tensor.")
    arrays = {}
    for attr in _TRACE_ARRAYS:
        a = np.array(_decode(t["arrays"][attr], tensors))
        shape = (n_slots, n_draws) if attr == "_steps" else (n_slots,)
        kinds = "b" if attr == "active" else "iu"
        if a.shape != shape or a.dtype.kind not in kinds or (kinds == "iu" and (a < 0).any()):
            raise ValueError(f"malformed model file: the trace's {attr.lstrip('_')} must be {shape} "
                             f"{'flags' if kinds == 'b' else 'non-negative integers'}, got {a!r}.")
        arrays[attr] = a
    if (arrays["_stored"] > n_draws).any() or (arrays["_next"] >= n_draws).any() or arrays["_stored"].sum() < 1:
        raise ValueError(f"malformed model file: the trace's stored counts {arrays['_stored']!r} and ring positions "
                         f"{arrays['_next']!r} do not fit its {n_draws} draws per slot (or it holds none).")
    stats = {}
    for name, value in t["stats"].items():
        a = np.array(_decode(value, tensors))
        if not isinstance(name, str) or a.shape != (n_slots, n_draws) or a.dtype.kind not in "fiu":
            raise ValueError(f"malformed model file: the trace's statistic {name!r} must be {(n_slots, n_draws)} "
                             "numbers.")
        stats[name] = a
    return arrays, stats


def _draws_buffer(est, t: dict, tensors) -> tuple[torch.Tensor, list]:
    """The file's draws, ``(n_slots, n_draws, D)``, checked before any array is built from the file's sizes:
    float32 (what a fit stores), ``D`` the number of parameters of the network the file describes
    (built on PyTorch's meta device, which allocates nothing, so a crafted architecture cannot take memory),
    each stored tensor's shape that network's. Returns it with the shapes. Raises ValueError otherwise."""
    n_draws, n_slots = _count(t["n_draws"], "the trace's n_draws", 1), _count(t["n_slots"], "the trace's n_slots", 1)
    _count(t["burn_in"], "the trace's burn_in"), _count(t["thinning"], "the trace's thinning", 1)
    ref = t["buffer"]
    if not (isinstance(ref, dict) and ref.get("__array__") in tensors):
        raise ValueError("malformed model file: it holds no posterior draws.")
    buffer = tensors[ref["__array__"]]
    shapes = t["shapes"]
    if not (isinstance(shapes, list) and all(isinstance(s, list) and all(isinstance(d, int) and not isinstance(
            d, bool) and d >= 0 for d in s) for s in shapes)):
        raise ValueError(f"malformed model file: the draws' shapes {shapes!r} are not lists of sizes.")
    with torch.device("meta"):  # (initialising meta tensors draws nothing: the global stream is untouched)
        module, likelihood = est._build_module(), est._build_likelihood()
    trainable = [p for m in (module, likelihood) for p in m.parameters() if p.requires_grad]
    if [list(p.shape) for p in trainable] != shapes:
        raise ValueError(f"malformed model file: the draws' shapes {shapes} are not those of the network it "
                         f"describes ({[list(p.shape) for p in trainable]}).")
    width = sum(p.numel() for p in trainable)
    if tuple(buffer.shape) != (n_slots, n_draws, width) or buffer.dtype != torch.float32:  # (what a fit stores,
        # whatever torch's default dtype is when the file is read)
        raise ValueError(f"malformed model file: the draws are {tuple(buffer.shape)} {buffer.dtype}, not "
                         f"{(n_slots, n_draws, width)} torch.float32 (slots, draws per slot, parameters).")
    return buffer, shapes


#: the statistics each scaler's transform reads, and the parameter without which it may be None
_SCALER_STATISTICS = {"StandardScaler": {"mean_": "with_mean", "scale_": "with_std"},
                      "RobustScaler": {"center_": "with_centering", "scale_": "with_scaling"},
                      "MinMaxScaler": {"min_": None, "scale_": None}, "MaxAbsScaler": {"scale_": None}}


def _check_feature_names(obj) -> None:
    """``feature_names_in_``, where a model file sets it: one string per input feature (``n_features_in_``), as
    scikit-learn's fit leaves it; ValueError otherwise (a crafted file's names would be compared with a
    DataFrame's columns at predict, and name the wrong columns in the command line's output)."""
    names = getattr(obj, "feature_names_in_", None)
    if names is None:
        return
    n = getattr(obj, "n_features_in_", None)
    if not (isinstance(names, np.ndarray) and names.ndim == 1 and all(isinstance(x, str) for x in names)
            and (n is None or len(names) == n)):
        raise ValueError(f"malformed model file: {type(obj).__name__}.feature_names_in_ must be one string per "
                         f"input feature ({n}), got {names!r:.200}.")


def _check_transformer(obj) -> None:
    """A pipeline step's fitted state, checked as data: ``n_features_in_`` a positive integer, every fitted numeric
    array finite floats of one entry per input feature (a scaler's statistics), a scale positive, a Takens
    embedding's span within its lag columns. Raises ValueError otherwise (a crafted file broadcast a one-entry
    mean over every feature, or asked a 44 GiB index at predict)."""
    name = type(obj).__name__
    n = getattr(obj, "n_features_in_", None)
    if n is not None:
        _count(n, f"{name}.n_features_in_", 1)
    for attr, value in vars(obj).items():
        if not attr.endswith("_") or attr.startswith("_") or attr == "n_samples_seen_":
            continue
        if isinstance(value, (float, np.floating)):  # (a statistic is an array: a number would broadcast)
            raise ValueError(f"malformed model file: {name}.{attr} must be {n} finite floats, got {value!r}.")
        if attr == "feature_names_in_" or not isinstance(value, np.ndarray):
            continue
        _check_floats(value, n, f"{name}.{attr}", "input feature", positive=attr == "scale_")
    for attr, flag in _SCALER_STATISTICS.get(name, {}).items():
        if not isinstance(getattr(obj, attr, None), np.ndarray) and (flag is None or getattr(obj, flag)):
            raise ValueError(f"malformed model file: the {name} lacks its {attr}.")
    _check_feature_names(obj)
    if hasattr(obj, "_check_span"):
        if n is None:
            raise ValueError(f"malformed model file: the {name} has no n_features_in_.")
        with _malformed():
            obj._check_span(n)


def _load_device(saved) -> torch.device:
    """Where a loaded model predicts: on a GPU when it was fitted on one (the file's device, also for
    ``device="auto"``) and this machine has one, the saved index or else the first; otherwise on the CPU."""
    if not (isinstance(saved, str) and saved.startswith("cuda") and torch.cuda.is_available()):
        return torch.device("cpu")
    try:
        index = torch.device(saved).index
    except RuntimeError:
        index = None
    return torch.device("cuda", index if index is not None and index < torch.cuda.device_count() else 0)


def _build_estimator(spec: dict, tensors, version: int = VERSION):
    from .plan import ChainLayout
    from .trace import Trace

    classes = _estimator_classes()
    cls = classes.get(spec["class"])
    if cls is None:
        raise ValueError(f"the model file names an unknown estimator class {spec['class']!r}.")
    params = _params_back(spec["params"], tensors)
    runtime = sorted(n for n in params if n in _RUNTIME_PARAMS)
    if runtime:  # (save never writes them: runtime objects, whose defaults come back on load; their plain settings,
        # such as callbacks__divergence=None or iterator_train__shuffle=False, are written and read back)
        raise ValueError(f"malformed model file: it sets {', '.join(map(repr, runtime))}, which a model file does "
                         "not hold (save writes plain settings only).")
    params.setdefault("standardize_inputs", False)  # written before the estimators standardised their inputs
    if version < 2 and params.get("sampler") == "tacthmc":  # (its defaults then: the paper's well and friction)
        from .samplers.tacthmc import PAPER_TEMPERING

        for key, value in PAPER_TEMPERING.items():
            params.setdefault(f"sampler__{key}", value)
    est = cls(**params)
    with _malformed():  # the parameters as fit checks them (names, ranges, the sampler's hyperparameters, the
        # prior's name, the device's form: not whether this machine has it, the file predicts on the CPU then)
        est._validate_params()
        est._validate_hyperparameters()
        from .estimators.base import parse_device
        from .priors import make_prior
        from .samplers import make_sampler

        make_prior(est.prior_scale, make_sampler(est.sampler, **est.get_params_for("sampler")))
        parse_device(est.device)
    unknown = sorted(set(spec["fitted"]) - set(_ESTIMATOR_FITTED))
    if unknown:
        raise ValueError(f"malformed model file: it sets {', '.join(map(repr, unknown))}, which are not fitted "
                         "attributes a model file holds.")
    for attr, value in spec["fitted"].items():
        value = _decode(value, tensors)
        if attr == "input_shape_":
            if not (isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                              for v in value)):
                raise ValueError(f"malformed model file: input_shape_={value!r} names no input features.")
            value = tuple(value)
        if attr in ("diagnostics_", "convergence_", "fit_status_") and not isinstance(value, dict):
            raise ValueError(f"malformed model file: {attr} must be a mapping, got {type(value).__name__}.")
        if attr in ("n_features_in_", "n_train_"):  # (a string "3" gave "X has 3 features, but ... expecting 3")
            _count(value, attr, 1)
        if attr == "fit_status_" and "diverged_chains" in value:
            chains = value["diverged_chains"]
            if not (isinstance(chains, dict) and all(isinstance(k, (int, str)) and str(k).isdigit() for k in chains)):
                raise ValueError(f"malformed model file: fit_status_['diverged_chains'] must map chain numbers to "
                                 f"records, got {chains!r:.200}.")
            value["diverged_chains"] = {int(k): v for k, v in chains.items()}
        setattr(est, attr, value)
    _check_input_map(est)
    _check_outputs(est)
    _check_feature_names(est)
    t = spec["trace"]
    buffer, shapes = _draws_buffer(est, t, tensors)
    n_slots, n_draws = buffer.shape[0], buffer.shape[1]
    arrays, stats = _trace_arrays(t, tensors, n_slots, n_draws)
    est.device_ = _load_device(spec.get("device", str(est.device)))
    from .estimators.run import _GLOBAL_RNG_LOCK

    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):  # (a fit in another thread holds the same lock
        # around its seeded build: restoring the stream must not undo its draws)
        module, likelihood = est._build_module(), est._build_likelihood()
    with est._current_init_context("module"):
        est.module_ = module.to(est.device_)
    with est._current_init_context("criterion"):
        est.criterion_ = likelihood.to(est.device_)
    trace = Trace(n_draws, burn_in=t["burn_in"], thinning=t["thinning"], n_slots=n_slots, chain_axis=True)
    trace.shapes = [torch.Size(s) for s in shapes]
    for attr, value in arrays.items():
        setattr(trace, attr, value)
    trace._lockstep = False  # which steps were candidates is not saved: offers take the general path
    trace._stats = stats
    trace._buffer = buffer.clone()
    if not torch.isfinite(trace.draws()).all():  # (a fit never stores one: the trace refuses them)
        raise ValueError("malformed model file: it holds a posterior draw that is not finite.")
    est.trace_ = trace
    from .samplers import make_sampler

    est.sampler_ = make_sampler(est.sampler, **est.get_params_for("sampler"))
    # the sampler's members per chain (pt-langevin's replicas, eqn's walkers), not the slots over the chains: a
    # fit whose worker was lost keeps fewer slots than n_chains chains have (before: 0 members per chain)
    est.layout_ = ChainLayout(int(est.n_chains), est.sampler_.members_per_chain())
    est.sampler_state_ = None
    est.shards_ = None  # (the draws of every process are in trace_; the chains are not continued)
    est.loaded_ = True
    from .estimators.run import recorded_params

    # (the settings its draws were fitted with, as for a fit)
    est.fit_params_ = recorded_params(est._all_params(deep=False))
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
    OSError
        If ``path`` does not exist (FileNotFoundError), cannot be read (PermissionError), is a directory
        (IsADirectoryError), or is a pipe or device.
    ValueError
        If the file is not a bayesnet model file, is damaged (its contents do not match the checksum written
        with them, or it is cut short), was written by a newer version, names a class or function
        outside the allowlist, or is malformed: parameters out of their ranges, draws that do not fit the network
        it describes or are not finite, bookkeeping or fitted attributes that do not fit the draws or the
        outputs, a value of the wrong type or a missing entry.
    """
    path = os.fsdecode(path)  # (a bytes path too; safetensors takes text)
    spec, tensors, version = _read(path)
    token = _STRING_BUDGET.set([_MAX_STRING_BYTES])
    try:
        return _load(spec, tensors, path, return_metadata, version)
    except ValueError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, RecursionError, RuntimeError, OverflowError) as exc:
        # an entry missing or of the wrong type anywhere in the specification, or sizes torch cannot hold
        raise ValueError(f"{os.fspath(path)} is a malformed bayesnet model file ({type(exc).__name__}: "
                         f"{str(exc)[:200]}).") from None
    finally:
        _STRING_BUDGET.reset(token)


def _load(spec, tensors, path, return_metadata: bool, version: int = VERSION):
    if not isinstance(spec, dict):
        raise ValueError(f"{os.fspath(path)} is a malformed bayesnet model file (its specification is not a "
                         "mapping).")
    if spec.get("kind") == "pipeline":
        from sklearn.pipeline import Pipeline

        steps = []
        classes = _transformer_classes()
        if not spec["steps"]:
            raise ValueError("malformed model file: a pipeline without steps (save writes at least its estimator).")
        for i, step in enumerate(spec["steps"]):
            if i == len(spec["steps"]) - 1:
                steps.append((step["name"], _build_estimator(step, tensors, version)))
                continue
            if step.get("class") == _PASSTHROUGH:
                if set(step) != {"name", "class"}:
                    raise ValueError(f"malformed model file: a passthrough step holds its name only, got "
                                     f"{sorted(step)}.")
                steps.append((step["name"], _PASSTHROUGH))
                continue
            cls = classes.get(step["class"])
            if cls is None:
                raise ValueError(f"the model file names an unknown transformer class {step['class']!r}.")
            obj = cls(**_params_back(step["params"], tensors))
            if hasattr(obj, "_validate_params"):  # (scikit-learn's constraints, as its fit checks them)
                with _malformed():
                    obj._validate_params()
            for attr, value in step["fitted"].items():
                if not (isinstance(attr, str) and attr.endswith("_") and not attr.startswith("_")):
                    raise ValueError(f"malformed model file: it sets {attr!r} on a {step['class']}, which is not a "
                                     "fitted attribute (save writes only public names ending in '_').")
                setattr(obj, attr, _decode(value, tensors))
            _check_transformer(obj)
            steps.append((step["name"], obj))
        names = [name for name, _ in steps]
        if not all(isinstance(n, str) and n and "__" not in n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"malformed model file: pipeline step names {names!r} must be distinct non-empty "
                             "strings without '__'.")
        model = Pipeline(steps)
        _check_pipeline_row(model)
    elif spec.get("kind") == "estimator":
        model = _build_estimator(spec["estimator"], tensors, version)
    else:
        raise ValueError(f"{os.fspath(path)}: unknown model kind {spec.get('kind')!r}.")
    if return_metadata:
        return model, _decode(spec.get("metadata", {}), tensors)
    return model
