"""The ``bayesnet`` command: fit a Bayesian network on a CSV file or a bundled dataset, and predict.

Examples
--------
``bayesnet fit``                         breast cancer, MLP, SGHMC, prints test metrics
``bayesnet fit --dataset sunspots``      yearly sunspots, Takens embedding, forecasting
``bayesnet fit --data d.csv --target y --task regression --sampler sgld --set sampler__temperature=0.5``
``bayesnet fit --data digits.csv --target label --model cnn --input-shape 1,8,8``
``bayesnet predict model.joblib --allow-pickle --data new.csv --output predictions.csv``

Everything the user gives is checked before sampling starts: options by argparse (usage and
``bayesnet fit: error: ...``, exit code 2), files and their contents by this module (one line ``error: ...``,
exit code 2). A diverging fit exits with code 3 and an interrupted one (Ctrl-C) with 130; both save the draws
collected so far, marked as a partial fit.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import math
import os
import re
import signal
import sys
import time
from contextlib import contextmanager

import numpy as np

__all__ = ["main", "build_parser"]

DEFAULTS = {
    # Settings validated on the bundled data (see docs/user_guide.md).
    "breast_cancer": dict(task="classification", hidden=(100,), prior_scale=0.5, step_size=1e-4, n_draws=200,
                          burn_in=2000, thinning="auto", batch_size=64),
    "sunspots": dict(task="forecast", hidden=(20,), prior_scale=1.0, step_size=2e-4, n_draws=200, burn_in=3000,
                     thinning="auto", batch_size=32),
    "csv": dict(hidden=(50,), prior_scale=1.0, step_size=1e-4, n_draws=200, burn_in=2000, thinning="auto",
                batch_size=64),
}
DEFAULT_OUTPUT = "bayesnet-model.joblib"
_FORECAST_DEFAULTS = dict(dimension=4, delay=1)  # paper 003's Takens embedding
_TASKS = ("classification", "regression", "forecast")
_MODELS = ("mlp", "cnn", "rnn")
# (model, task head) -> estimator class in the bayesnet namespace
_ESTIMATORS = {("mlp", "classification"): "BayesianMLPClassifier", ("mlp", "regression"): "BayesianMLPRegressor",
               ("cnn", "classification"): "BayesianCNNClassifier", ("cnn", "regression"): "BayesianCNNRegressor",
               ("rnn", "classification"): "BayesianRNNClassifier", ("rnn", "regression"): "BayesianRNNRegressor"}
_HIDDEN_PARAM = {"mlp": "hidden_layer_sizes", "cnn": "dense_layer_sizes", "rnn": "dense_layer_sizes"}
# estimator or sampler parameter <- the shorthand option that sets it (attribute of the parsed arguments)
_SHORTHANDS = {"sampler": "sampler", "sampler__step_size": "step_size", "sampler__friction": "friction",
               "n_draws": "n_draws", "burn_in": "burn_in", "thinning": "thinning", "batch_size": "batch_size",
               "n_chains": "n_chains", "n_jobs": "n_jobs", "device": "device", "random_state": "random_state"}
# pandas' default missing-value markers (pandas.read_csv, na_values): a target cell holding one is missing
_NA_STRINGS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                         "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})


class _CLIError(Exception):
    """A fault in the user's files or data, reported as one line ``error: <message>`` with exit code ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------- #
# argument types: argparse reports their errors as "argument --x: ..."
# ---------------------------------------------------------------------- #
def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _probability(text: str) -> float:
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _integer(text: str, low: int | None = None, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if low is not None and value < low or high is not None and value > high:
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise argparse.ArgumentTypeError(f"must be an integer {bounds}, got {text}")
    return value


def _positive_int(text: str) -> int:
    return _integer(text, 1)


def _non_negative_int(text: str) -> int:
    return _integer(text, 0)


def _seed(text: str) -> int:
    return _integer(text, 0, 2**32 - 1)


def _n_jobs(text: str) -> int:
    value = _integer(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be a positive number of workers, or negative to count back from "
                                         "the number of CPUs (-1: all), not 0")
    return value


def _thinning(text: str) -> int | str:
    return "auto" if text == "auto" else _word_or_count(text, "auto")


def _batch_size(text: str) -> int | str:
    if text in ("auto", "full"):
        return "auto" if text == "auto" else -1
    return _word_or_count(text, "auto, full")


def _word_or_count(text: str, words: str) -> int:
    try:
        return _integer(text, 1)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or {words}, got {text!r}") from None


def _device(text: str) -> str:
    if not re.fullmatch(r"cpu|auto|mps|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N, mps or auto, got {text!r}")
    return text


def _input_shape(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.replace("x", ",").split(",")]
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected 2 or 3 positive integers separated by commas (C,L or C,H,W for "
                                         f"the cnn, T,F for the rnn), got {text!r}")
    return tuple(int(p) for p in parts)


def _key_value(text: str) -> tuple[str, object]:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_]\w*", key):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE such as prior_scale=0.5 or sampler__friction=0.1, "
                                         f"got {text!r}")
    try:  # numbers, tuples, None, True, quoted strings; anything else is taken as a bare string (never eval)
        value = ast.literal_eval(raw.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = raw.strip()
    return key, value


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` after every option; options whose default depends on the data say it in their
    help text instead."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default:" in text or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
            return text
        return super()._get_help_string(action)


def _per_dataset(key: str) -> str:
    """A default that depends on the data, for the help text: ``2000 (breast_cancer, CSV), 3000 (sunspots)``."""
    groups: dict[str, list[str]] = {}
    for source, settings in DEFAULTS.items():
        value = settings[key]
        text = " ".join(str(v) for v in value) if isinstance(value, tuple) else f"{value:g}" \
            if isinstance(value, float) else str(value)
        groups.setdefault(text, []).append("CSV" if source == "csv" else source)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{value} ({', '.join(sources)})" for value, sources in groups.items())


def build_parser() -> argparse.ArgumentParser:
    """The ``bayesnet`` argument parser, with the ``fit`` and ``predict`` subcommands."""
    from .samplers import available_samplers

    p = argparse.ArgumentParser(prog="bayesnet", formatter_class=_HelpFormatter,
                                description="Bayesian neural networks fitted by posterior sampling.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{fit,predict}")
    f = sub.add_parser(
        "fit", formatter_class=_HelpFormatter, help="fit on a CSV file or a bundled dataset and print test metrics",
        description="Fit a Bayesian network (scaler + estimator pipeline) on a CSV file or a bundled dataset, print "
                    "test metrics on a held-out split and save the model.",
        epilog="examples:\n"
               "  bayesnet fit\n"
               "  bayesnet fit --dataset sunspots --model rnn --set hidden_size=16\n"
               "  bayesnet fit --data d.csv --target y --task regression --sampler sgld --step-size 5e-5\n"
               "  bayesnet fit --data digits.csv --target label --model cnn --input-shape 1,8,8 --set channels=8,8\n"
               "  bayesnet fit --data d.csv --target y --set sampler__friction=0.1 --set prior_scale=0.5")
    data = f.add_argument_group("data")
    data.add_argument("--data", metavar="CSV",
                      help="CSV file with a header row; every column except --target is a numeric feature "
                           "(default: the bundled --dataset)")
    data.add_argument("--target", metavar="COLUMN", help="the target column of --data; required with --data "
                                                         "(default: none)")
    data.add_argument("--task", choices=_TASKS,
                      help="with --data: what to fit; forecast reads --target as a univariate series and ignores "
                           "the other columns (default: classification)")
    data.add_argument("--dataset", choices=["breast_cancer", "sunspots"],
                      help="bundled data used without --data: breast_cancer (classification) or sunspots "
                           "(forecast) (default: breast_cancer)")
    data.add_argument("--test-size", type=_probability, default=0.3, metavar="FRACTION",
                      help="fraction of the rows held out for the test metrics (stratified for classification, "
                           "the last rows for forecasts)")
    data.add_argument("--dimension", type=_positive_int, metavar="D",
                      help=f"forecast: Takens embedding dimension (default: {_FORECAST_DEFAULTS['dimension']}, "
                           "paper 003's)")
    data.add_argument("--delay", type=_positive_int, metavar="TAU",
                      help=f"forecast: Takens delay; the model sees the dimension * delay previous values "
                           f"(default: {_FORECAST_DEFAULTS['delay']})")
    model = f.add_argument_group("model")
    model.add_argument("--model", choices=_MODELS, default="mlp",
                       help="network: multilayer perceptron, convolutional (signals, images) or recurrent "
                            "(sequences; LSTM, --set cell=gru for a GRU)")
    model.add_argument("--hidden", type=_positive_int, nargs="+", metavar="N",
                       help="mlp: hidden layer widths (hidden_layer_sizes); cnn, rnn: widths of the dense layers "
                            "after the convolutions or the recurrent layer (dense_layer_sizes) (default: mlp: "
                            f"{_per_dataset('hidden')}; cnn: 100; rnn: 64)")
    model.add_argument("--input-shape", type=_input_shape, metavar="SHAPE",
                       help="cnn: C,L or C,H,W of one sample; rnn: T,F (time steps, features per step); the "
                            "feature columns, in row-major order, are reshaped to it (default: cnn: one-channel "
                            "signals of the feature columns; rnn: univariate sequences, one column per time step)")
    model.add_argument("--set", dest="set_params", type=_key_value, action="append", default=[],
                       metavar="KEY=VALUE",
                       help="any estimator parameter (prior_scale=0.5, activation=tanh, channels=8,8 for the "
                            "cnn, hidden_size=32 or cell=gru for the rnn, ...) or sampler hyperparameter "
                            "(sampler__NAME=VALUE, e.g. sampler__friction=0.1); repeatable; VALUE is read as a "
                            "Python literal (number, tuple, None, True), otherwise as a string "
                            f"(default: none; prior_scale is {_per_dataset('prior_scale')})")
    sampling = f.add_argument_group("sampling")
    sampling.add_argument("--sampler", choices=available_samplers(), help="sampling algorithm (default: sghmc)")
    sampling.add_argument("--step-size", type=_positive_float, metavar="ETA",
                          help=f"sampler step size, sampler__step_size (default: {_per_dataset('step_size')})")
    sampling.add_argument("--friction", type=_non_negative_float, metavar="GAMMA",
                          help="sampler friction, sampler__friction, for the samplers that have one (sghmc, baoab, "
                               "eqn) (default: the sampler's: 0.05 for sghmc, 1 for baoab and eqn)")
    sampling.add_argument("--n-draws", type=_positive_int, metavar="N",
                          help=f"posterior draws kept per chain (default: {_per_dataset('n_draws')})")
    sampling.add_argument("--burn-in", type=_non_negative_int, metavar="STEPS",
                          help=f"sampler steps discarded first (default: {_per_dataset('burn_in')})")
    sampling.add_argument("--thinning", type=_thinning, metavar="K",
                          help="keep every K-th step after burn-in, or auto: the sampler's own (10; 1 for tacthmc) "
                               f"(default: {_per_dataset('thinning')})")
    sampling.add_argument("--batch-size", type=_batch_size, metavar="ROWS",
                          help="rows per mini-batch, full for the whole training set, or auto (128; full for hmc) "
                               f"(default: {_per_dataset('batch_size')})")
    sampling.add_argument("--n-chains", type=_positive_int, metavar="C",
                          help="independent chains, advanced together (default: 1)")
    sampling.add_argument("--n-jobs", type=_n_jobs, metavar="J",
                          help="with --n-chains: groups of chains in J joblib worker processes (-1: one per CPU) "
                               "(default: none, all chains in this process)")
    sampling.add_argument("--device", type=_device, help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    sampling.add_argument("--random-state", type=_seed, metavar="SEED",
                          help="seed of the split, the initial weights, the batches and the sampler noise "
                               "(default: 0)")
    out = f.add_argument_group("output")
    out.add_argument("--level", type=_probability, default=0.95,
                     help="level of the credible and predictive intervals in the test metrics")
    out.add_argument("--output", default=DEFAULT_OUTPUT, metavar="FILE",
                     help="where to save the fitted model ('' to skip); a joblib (pickle) file")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=_fit, parser=f)

    q = sub.add_parser("predict", formatter_class=_HelpFormatter,
                       help="write predictions with intervals for a CSV file",
                       description="Predict with a model saved by `bayesnet fit`, with intervals, one CSV row per "
                                   "input row.",
                       epilog="example:\n  bayesnet predict model.joblib --allow-pickle --data new.csv "
                              "--output predictions.csv")
    q.add_argument("model", help="a model file written by `bayesnet fit --output`")
    q.add_argument("--data", required=True, metavar="CSV",
                   help="CSV with the feature columns the model was fitted on, by name (other columns are "
                        "ignored); for forecasts, the series (default: none, required)")
    q.add_argument("--column", help="forecast models: the column of --data holding the series (default: the "
                                    "column the model was fitted on)")
    q.add_argument("--level", type=_probability, default=0.95, help="level of the intervals")
    q.add_argument("--output", metavar="FILE", help="CSV to write (default: standard output)")
    q.add_argument("--allow-pickle", action="store_true",
                   help="load a joblib/pickle model file; loading a pickle can execute arbitrary code, so pass "
                        "this only for files you trust (default: off, such files are refused)")
    q.set_defaults(func=_predict, parser=q)
    return p


# ---------------------------------------------------------------------- #
# options -> estimator parameters, checked before anything is read or fitted
# ---------------------------------------------------------------------- #
def _estimator_class(kind: str, task: str):
    import bayesnet

    return getattr(bayesnet, _ESTIMATORS[kind, "classification" if task == "classification" else "regression"])


def _option(param: str, given: dict) -> str:
    """How the user spells ``param`` on the command line (a shorthand option or ``--set param``)."""
    if param in given:
        return given[param]
    flags = {k: "--" + v.replace("_", "-") for k, v in _SHORTHANDS.items()}
    return flags.get(param, f"--set {param}")


def _cli_words(message: str, given: dict | None = None) -> str:
    """Rewrite the library's Python wording of parameters (``sampler__friction=0.1``, ``sampler__<name>``, "the
    'n_draws' parameter of BayesianMLPClassifier", "kept in `trace_`") in command-line terms."""
    given = given or {}
    message = message.replace("set them as sampler__<name>", "set them with --set sampler__NAME=VALUE")
    message = message.replace("sampler__<name>", "--set sampler__NAME=VALUE")

    def option_value(match):
        key, value = f"sampler__{match['name']}", match["value"]
        option = _option(key, given)
        if value is None:
            return option
        return f"{option}={value}" if option.startswith("--set") else f"{option} {value}"

    message = re.sub(r"\bsampler__(?P<name>\w+)(?:=(?P<value>[^\s,;)]+))?", option_value, message)
    from .samplers import available_samplers, get_sampler_class

    sampler_classes = {get_sampler_class(n).__name__ for n in available_samplers()}
    message = re.sub(r"The '(\w+)' parameter of (\w+)",
                     lambda m: _option(f"sampler__{m[1]}" if m[2] in sampler_classes else m[1], given), message)
    message = re.sub(r"\s*[^.]*`trace_`[^.]*\.", "", message)  # the library's pointer to the estimator attribute
    if not message.startswith("--"):  # "prior scale must be ...", "hidden_layer_sizes must be ...": name the option
        named = [k for k in given if not k.startswith("sampler") and re.match(
            rf"{re.escape(k)}\b|{re.escape(k.replace('_', ' '))}\b", message)]
        if named:
            message = f"{given[named[0]]}: {message}"
    return message


def _fit_settings(args) -> dict:
    """Check the options of ``fit`` against each other and against the estimator's and sampler's parameters,
    and return the resolved settings. Option errors exit through argparse (code 2)."""
    from .priors import make_prior
    from .samplers import available_samplers, get_sampler_class, make_sampler

    error = args.parser.error
    if args.data is not None:
        if args.dataset is not None:
            error("give either --data or --dataset, not both")
        if args.target is None:
            error("--target is required with --data (the name of the column to predict)")
        source, task = args.data, args.task or "classification"
        d = dict(DEFAULTS["csv"])
    else:
        for option, value in (("--target", args.target), ("--task", args.task)):
            if value is not None:
                error(f"{option} applies to --data; the bundled datasets set their own target and task")
        source = args.dataset or "breast_cancer"
        d = dict(DEFAULTS[source])
        task = d["task"]
    if task != "forecast" and (args.dimension is not None or args.delay is not None):
        error("--dimension and --delay apply to forecasting only (--task forecast or --dataset sunspots)")
    kind = args.model
    if args.input_shape is not None:
        if kind == "mlp":
            error("--input-shape applies to --model cnn or rnn; the mlp takes the feature columns as they are")
        if task == "forecast":
            error("--input-shape does not apply to forecasts: the Takens windows are univariate sequences of "
                  "--dimension values")
        if kind == "rnn" and len(args.input_shape) != 2:
            error(f"--input-shape for the rnn is T,F (time steps, features per step), got "
                  f"{','.join(map(str, args.input_shape))}")

    # defaults, then shorthand options, then --set; `given` records how the user spelled each parameter
    params = dict(sampler="sghmc", n_draws=d["n_draws"], burn_in=d["burn_in"], thinning=d["thinning"],
                  batch_size=d["batch_size"], prior_scale=d["prior_scale"], sampler__step_size=d["step_size"],
                  n_chains=1, device="cpu", random_state=0, verbose=0 if args.quiet else 1)
    if kind == "mlp":
        params["hidden_layer_sizes"] = d["hidden"]
    given = {}
    for param, attr in _SHORTHANDS.items():
        if getattr(args, attr) is not None:
            params[param], given[param] = getattr(args, attr), "--" + attr.replace("_", "-")
    if args.hidden is not None:
        params[_HIDDEN_PARAM[kind]], given[_HIDDEN_PARAM[kind]] = tuple(args.hidden), "--hidden"
    if args.quiet:
        given["verbose"] = "--quiet"
    if kind == "cnn" and args.input_shape is not None:
        params["input_shape"], given["input_shape"] = args.input_shape, "--input-shape"
    for key, value in args.set_params:
        if key in given:
            what = "was given twice" if given[key] == f"--set {key}" else f"repeats {given[key]}"
            error(f"--set {key} {what}; give it once")
        params[key], given[key] = value, f"--set {key}"

    # names: the estimator's documented parameters, and the chosen sampler's hyperparameters
    cls = _estimator_class(kind, task)
    sampler = params["sampler"]
    if not isinstance(sampler, str) or sampler not in available_samplers():
        error(f"--set sampler={sampler}: unknown sampler; choose from {', '.join(available_samplers())}")
    hyper = get_sampler_class(sampler).hyperparameter_names()
    documented = [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs")]
    settable = [name for name in cls().get_params(deep=False) if name in documented]
    for key, spelled in given.items():
        if key.startswith("sampler__"):
            name = key[len("sampler__"):]
            if name not in hyper:
                error(f"{spelled}: the {sampler} sampler has no hyperparameter {name!r}; its hyperparameters are "
                      f"{', '.join(hyper)} (set them with --set sampler__NAME=VALUE)")
        elif key not in settable:
            if key in hyper:
                hint = f"; {key} is a hyperparameter of the {sampler} sampler: --set sampler__{key}=..."
            else:
                close = difflib.get_close_matches(key, settable + [f"sampler__{h}" for h in hyper], n=1)
                hint = f"; did you mean --set {close[0]}=...?" if close else ""
            error(f"{spelled}: {cls.__name__} has no parameter {key!r} that the command line can set{hint} "
                  f"(its parameters: {', '.join(sorted(settable))}; the sampler's: "
                  f"{', '.join('sampler__' + h for h in hyper)})")
    # values: the sampler's own checks, then the estimator's constraints (architecture sizes are checked when
    # the network is built, still before the first sampler step)
    sampler_params = {k[len("sampler__"):]: v for k, v in params.items() if k.startswith("sampler__")}
    try:
        make_sampler(sampler, **sampler_params)
    except (TypeError, ValueError) as exc:
        bad = [k for k in sampler_params if re.search(rf"\b{k}\b", str(exc))]
        prefix = f"{_option('sampler__' + bad[0], given)}: " if bad else ""
        error(prefix + _cli_words(str(exc), given))
    est = cls(**params)
    try:
        # the estimator's scikit-learn parameter constraints (private; partial_fit checks them again anyway)
        getattr(est, "_validate_hyperparameters", lambda: None)()
        make_prior(params["prior_scale"])
    except (TypeError, ValueError) as exc:
        error(_cli_words(str(exc), given))
    if str(params["device"]).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            error(f"{_option('device', given)} {params['device']}: CUDA is not available on this machine; "
                  "use cpu or auto")
    forecast = dict(dimension=args.dimension or _FORECAST_DEFAULTS["dimension"],
                    delay=args.delay or _FORECAST_DEFAULTS["delay"])
    return dict(source=source, task=task, kind=kind, params=params, given=given, cls=cls, **forecast)


# ---------------------------------------------------------------------- #
# CSV files (pandas), checked cell by cell before anything is fitted
# ---------------------------------------------------------------------- #
def _check_input_file(path: str, option: str) -> None:
    if not os.path.exists(path):
        raise _CLIError(f"{option} {path!r} not found.")
    if os.path.isdir(path):
        raise _CLIError(f"{option} {path!r} is a directory, not a file.")


def _check_output_path(path: str | None, option: str = "--output") -> None:
    """Fail before the fit, not after it, when the output cannot be written."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise _CLIError(f"{option}: {path!r} is a directory; give a file name.")
    if not os.path.isdir(folder):
        raise _CLIError(f"{option}: the folder {folder!r} does not exist.")
    if not os.access(folder, os.W_OK) or os.path.exists(path) and not os.access(path, os.W_OK):
        raise _CLIError(f"{option}: {path!r} is not writable.")


def _read_csv(path: str, option: str = "--data: file"):
    """Read a CSV with a header row, every cell as text.

    Returns
    -------
    names : list of str
        The header, unique and non-empty.
    body : pandas.DataFrame
        The data rows, as strings; blank lines are dropped, and the index is the line number minus one.

    Raises
    ------
    _CLIError
        For a missing, empty or unreadable file, ragged rows (too many fields), a header with duplicate or
        empty names, or no data rows.
    """
    import pandas as pd

    _check_input_file(path, option)
    try:
        raw = pd.read_csv(path, header=None, dtype=str, keep_default_na=False, skip_blank_lines=False,
                          skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise _CLIError(f"{path} is empty; a CSV file with a header row and data rows is needed.") from None
    except pd.errors.ParserError as exc:
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if found:
            expected, line, saw = found.groups()
            raise _CLIError(f"{path}: line {line} has {saw} fields but the header has {expected} (ragged rows); "
                            "every row needs one value per column.") from None
        raise _CLIError(f"{path} is not a readable CSV file: {str(exc).strip()}") from None
    except UnicodeDecodeError:
        raise _CLIError(f"{path} is not a text CSV file (it is not UTF-8).") from None
    except OSError as exc:
        raise _CLIError(f"cannot read {path}: {exc.strerror or exc}.") from None
    raw = raw.fillna("")  # missing fields of short rows (NaN in some pandas versions): see _raise_if_short_rows
    names = [str(n).strip() for n in raw.iloc[0]]
    unnamed = [i + 1 for i, n in enumerate(names) if not n]
    if unnamed:
        raise _CLIError(f"{path}: column(s) {unnamed} have no name in the header row; name every column (an "
                        "unnamed first column is often a saved index: drop it).")
    seen: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        seen.setdefault(name, []).append(i + 1)
    dup = {name: cols for name, cols in seen.items() if len(cols) > 1}
    if dup:
        which = "; ".join(f"{name!r} (columns {', '.join(map(str, cols))})" for name, cols in dup.items())
        raise _CLIError(f"{path} has duplicate column names: {which}; give every column its own name.")
    body = raw.iloc[1:]
    body = body[(body != "").any(axis=1)]  # blank lines
    if body.empty:
        raise _CLIError(f"{path} has a header row but no data rows.")
    return names, body


def _raise_if_short_rows(path: str) -> None:
    """Rows with fewer fields than the header read as empty cells; tell them apart (python engine: None)."""
    import pandas as pd

    raw = pd.read_csv(path, header=None, dtype=object, keep_default_na=False, skip_blank_lines=False,
                      engine="python", skipinitialspace=True)
    missing = raw.isna()
    short = missing.any(axis=1) & ~missing.all(axis=1)
    if short.any():
        line = int(short.to_numpy().nonzero()[0][0]) + 1
        fields = int((~missing.loc[short.idxmax()]).sum())
        raise _CLIError(f"{path}: line {line} has {fields} fields but the header has {raw.shape[1]} (ragged "
                        "rows); every row needs one value per column.")


def _cell(value: str) -> str:
    return "an empty cell" if value == "" else repr(value)


def _numeric(path: str, names: list[str], body, columns: list[str], role: str) -> np.ndarray:
    """The given columns as finite float64 numbers, shape ``(n_rows, len(columns))``; a missing or
    non-numeric cell raises, naming the column, how many cells and the first one's line."""
    import pandas as pd

    out = np.empty((len(body), len(columns)))
    for j, name in enumerate(columns):
        text = body.iloc[:, names.index(name)]
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(bad.nonzero()[0][0])
            if text.iloc[first] == "":
                _raise_if_short_rows(path)
            raise _CLIError(
                f"{role} column {name!r} in {path} has {int(bad.sum())} missing, non-numeric or infinite "
                f"value(s), the first on line {body.index[first] + 1}: {_cell(text.iloc[first])}. {role.capitalize()}s "
                "must be finite numbers: fill or drop those rows, or remove the column.")
        out[:, j] = values
    return out


def _target_cells(path: str, names: list[str], body, target: str):
    """The target column as text, refusing missing cells (empty, or one of pandas' NA markers)."""
    if target not in names:
        close = difflib.get_close_matches(target, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        separators = [sep for sep in (";", "\t", "|") if len(names) == 1 and sep in names[0]]
        if separators:
            hint = f" (the header reads as one column: is the file separated by {separators[0]!r}? only commas are)"
        raise _CLIError(f"--target: column {target!r} is not in {path}{hint}; its columns are "
                        f"{', '.join(names)}.")
    text = body.iloc[:, names.index(target)]
    missing = text.isin(_NA_STRINGS).to_numpy()
    if missing.any():
        first = int(missing.nonzero()[0][0])
        if text.iloc[first] == "":
            _raise_if_short_rows(path)
        raise _CLIError(f"target column {target!r} in {path} is missing in {int(missing.sum())} of {len(text)} "
                        f"rows, the first on line {body.index[first] + 1} ({_cell(text.iloc[first])}); drop or "
                        "fill those rows.")
    return text


def _load_csv_for_fit(path: str, target: str, task: str):
    """``X (n, F)``, ``y`` and the feature names from a CSV; for forecasts ``X`` is the series ``(n,)`` and
    ``y`` None."""
    import pandas as pd

    names, body = _read_csv(path)
    text = _target_cells(path, names, body, target)
    if task == "forecast":
        return _numeric(path, names, body, [target], "series")[:, 0], None, [target]
    features = [n for n in names if n != target]
    if not features:
        raise _CLIError(f"{path} has no feature columns besides the target {target!r}.")
    if task == "regression":
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(bad.nonzero()[0][0])
            raise _CLIError(f"--task regression needs a numeric target, but column {target!r} holds "
                            f"{_cell(text.iloc[first])} on line {body.index[first] + 1} ({int(bad.sum())} such "
                            "rows); for class labels use --task classification.")
        y = values
    else:
        y = text.to_numpy(dtype=object).astype(str)
    X = _numeric(path, names, body, features, "feature")
    if task == "classification":
        _check_classes(path, target, y)
    return X, y, features


def _check_classes(source: str, target: str, y: np.ndarray) -> None:
    import pandas as pd

    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise _CLIError(f"target column {target!r} in {source} has a single class, {str(classes[0])!r}; "
                        "classification needs at least two.")
    rare = classes[counts < 2]
    if len(rare):
        numeric = pd.to_numeric(pd.Series(classes), errors="coerce")
        hint = " The target looks continuous: use --task regression." \
            if numeric.notna().all() and len(classes) > len(y) / 2 else ""
        shown = ", ".join(repr(str(c)) for c in rare[:5]) + (", ..." if len(rare) > 5 else "")
        raise _CLIError(f"target column {target!r} in {source}: {len(rare)} class(es) have a single row ({shown}); "
                        "the stratified train/test split needs at least two rows per class: drop or merge "
                        f"them.{hint}")


# ---------------------------------------------------------------------- #
# pipeline
# ---------------------------------------------------------------------- #
def _to_sequences(X, shape):
    """Rows of ``prod(shape)`` features -> ``(n, *shape)`` sequences for the RNN (row-major)."""
    return np.asarray(X).reshape(len(X), *shape)


def _oldest_first(X):
    """Takens windows come newest first; a recurrent network reads them in time order."""
    return np.ascontiguousarray(np.asarray(X)[:, ::-1])


def _build_pipeline(settings: dict, embed: int | None = None):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    from .timeseries import TakensEmbedding

    steps = [TakensEmbedding(dimension=embed, delay=settings["delay"])] if embed else []
    steps.append(StandardScaler())
    if settings["kind"] == "rnn" and embed:
        steps.append(FunctionTransformer(_oldest_first))
    if settings["kind"] == "rnn" and settings.get("input_shape"):
        steps.append(FunctionTransformer(_to_sequences, kw_args={"shape": tuple(settings["input_shape"])}))
    return make_pipeline(*steps, settings["cls"](**settings["params"]))


# ---------------------------------------------------------------------- #
# model files: joblib for now; the two functions below are the only place that knows the format
# ---------------------------------------------------------------------- #
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")  # pickle protocol 2-5 (uncompressed joblib)
_COMPRESSED_MAGIC = (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda", b"\x1f\x8b", b"BZh", b"\xfd7zXZ",
                     b"\x04\x22\x4d\x18")  # joblib's zlib, gzip, bz2, xz and lz4 compressors


def _save_model(path: str, model, meta: dict) -> None:
    """Write the fitted pipeline and its metadata to ``path`` (joblib), through a temporary file so that a
    failed write leaves an existing file intact."""
    import joblib

    tmp = f"{path}.part"
    try:
        joblib.dump({"model": model, "meta": meta}, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise _CLIError(f"cannot write the model to {path}: {exc.strerror or exc}.", code=1) from None


def _load_model(path: str, allow_pickle: bool):
    """Read ``(model, meta)`` from a file written by :func:`_save_model`; a pickle only with ``allow_pickle``."""
    import joblib

    _check_input_file(path, "model file")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if not head.startswith(_PICKLE_MAGIC + _COMPRESSED_MAGIC):
        raise _CLIError(f"{path} is not a bayesnet model file; give the file written by `bayesnet fit --output`.")
    if not allow_pickle:
        raise _CLIError(f"{path} is a joblib (pickle) file, and loading a pickle can execute arbitrary code. Load "
                        "only files you trust (written by you or by someone you trust), with --allow-pickle.")
    try:
        bundle = joblib.load(path)
    except Exception as exc:  # a corrupt or foreign pickle can fail in any way
        raise _CLIError(f"could not load {path} as a bayesnet model ({type(exc).__name__}: {exc}).") from None
    if not (isinstance(bundle, dict) and {"model", "meta"} <= set(bundle) and isinstance(bundle["meta"], dict)
            and bundle["meta"].get("task") in _TASKS):
        raise _CLIError(f"{path} is a joblib file but not a bayesnet model file; give the file written by "
                        "`bayesnet fit --output`.")
    return bundle["model"], bundle["meta"]


# ---------------------------------------------------------------------- #
# fit
# ---------------------------------------------------------------------- #
@contextmanager
def _stop_on_sigint():
    """During a fit, Ctrl-C ends sampling (the estimator keeps its draws) and is remembered, so that the
    command can save what was collected and exit 130 instead of carrying on as if the fit were complete."""
    state = {"interrupted": False}

    def handler(signum, frame):
        state["interrupted"] = True
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave the handler alone
        previous = None
    try:
        yield state
    except KeyboardInterrupt:
        state["interrupted"] = True
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _steps_taken(est) -> int:
    """Sampler steps completed: the chain's own count, or the run's status (chains in worker processes)."""
    state = getattr(est, "sampler_state_", None)
    if state is not None:
        return int(state.step)
    status = getattr(est, "fit_status_", None)
    return int(status.get("steps_taken", 0)) if status else 0


def _fit_data(settings: dict, args):
    if settings["source"] == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        data = load_breast_cancer()
        return data.data, data.target_names[data.target], list(data.feature_names)
    if settings["source"] == "sunspots":
        from .datasets import load_sunspots

        return load_sunspots(), None, ["sunspots"]
    return _load_csv_for_fit(args.data, args.target, settings["task"])


def _split(X, y, settings: dict, args):
    from sklearn.model_selection import train_test_split

    task, n = settings["task"], len(X)
    if task == "forecast":
        from .timeseries import make_forecasting_windows

        n_lags = settings["dimension"] * settings["delay"]
        if len(X) < n_lags + 3:
            raise _CLIError(f"the series has {len(X)} values, too few for --dimension {settings['dimension']} x "
                            f"--delay {settings['delay']} = {n_lags} lags (at least {n_lags + 3} are needed to "
                            "have training and test windows).")
        Xw, yw = make_forecasting_windows(np.asarray(X, dtype=float).ravel(), n_lags=n_lags)
        split = int(round(len(yw) * (1 - args.test_size)))  # chronological split
        if split < 2 or split >= len(yw):
            raise _CLIError(f"--test-size {args.test_size} leaves {split} of {len(yw)} windows for training and "
                            f"{len(yw) - split} for testing; each side needs at least {2 if split < 2 else 1}.")
        return Xw[:split], Xw[split:], yw[:split], yw[split:]
    try:
        return train_test_split(X, y, test_size=args.test_size, random_state=settings["params"]["random_state"],
                                stratify=y if task == "classification" else None)
    except ValueError as exc:
        raise _CLIError(f"cannot split the {n} rows with --test-size {args.test_size}: {exc}") from None


def _check_shape(settings: dict, n_features: int) -> None:
    shape = settings.get("input_shape")
    if shape is not None and math.prod(shape) != n_features:
        raise _CLIError(f"--input-shape {','.join(map(str, shape))} holds {math.prod(shape)} values per row, but "
                        f"the data has {n_features} feature columns.")


def _fit(args) -> int:
    settings = _fit_settings(args)
    settings["input_shape"] = args.input_shape
    _check_output_path(args.output)
    X, y, features = _fit_data(settings, args)
    task, source = settings["task"], settings["source"]
    Xtr, Xte, ytr, yte = _split(X, y, settings, args)
    meta = {"task": task, "source": source, "features": features, "target": args.target,
            "model": settings["kind"], "input_shape": settings["input_shape"], "partial": None}
    if task == "forecast":
        meta["n_lags"] = settings["dimension"] * settings["delay"]
        model = _build_pipeline(settings, embed=settings["dimension"])
    else:
        _check_shape(settings, X.shape[1])
        model = _build_pipeline(settings)
    est = model[-1]

    print(f"bayesnet: {task} on {source} ({len(Xtr)} train / {len(Xte)} test rows), model={settings['kind']}, "
          f"sampler={est.sampler}", flush=True)
    from .samplers import DivergenceError

    t0 = time.perf_counter()
    with _stop_on_sigint() as sigint:
        try:
            model.fit(Xtr, ytr)
        except DivergenceError as exc:
            return _stopped(model, meta, args, settings, "diverged", _cli_words(str(exc), settings["given"]))
        except (ValueError, TypeError) as exc:
            if _steps_taken(est):
                raise
            # bad settings found when the network is built (sizes, activation, ...), before the first step
            raise _CLIError(_cli_words(str(exc), settings["given"])) from None
    # the estimator itself ends a Ctrl-C'ed fit at the end of a sampler step and records it
    if sigint["interrupted"] or getattr(est, "fit_status_", {}).get("status") == "interrupted":
        return _stopped(model, meta, args, settings, "interrupted", "")
    elapsed = time.perf_counter() - t0
    chains = f" from {est.n_chains} chains (max split R-hat {est.diagnostics_['max_rhat']:.3f})" \
        if est.n_chains > 1 and "max_rhat" in est.diagnostics_ else ""
    print(f"fitted in {elapsed:.1f} s: {est.n_draws_kept_} posterior draws kept{chains} "
          f"(burn-in {est.burn_in} steps, thinning {est.trace_.thinning}, "
          f"{est.diagnostics_['n_steps']} sampler steps)")
    _print_metrics(model, task, Xte, yte, args.level)
    if args.output:
        _save_model(args.output, model, meta)
        print(f"model saved to {args.output}")
    return 0


def _stopped(model, meta: dict, args, settings: dict, why: str, message: str) -> int:
    """A fit that ended early: save the draws collected so far, marked partial, and say so. Exit code 3 for a
    divergence, 130 for Ctrl-C."""
    est = model[-1]
    trace = getattr(est, "trace_", None)
    n_draws = len(trace) if trace is not None else 0
    steps = _steps_taken(est)
    if why == "diverged":
        head, code = f"error: the fit diverged: {message}", 3
        meta["partial"] = f"diverged after {steps} sampler steps; {n_draws} draws"
        retry = f"rerun with a smaller {_option('sampler__step_size', settings['given'])} for a complete fit"
    else:
        head, code = f"interrupted (Ctrl-C) after {steps} sampler steps.", 130
        meta["partial"] = f"interrupted after {steps} sampler steps; {n_draws} draws"
        retry = "rerun for a complete fit"
    if n_draws == 0:
        tail = " No draw was collected before it, so nothing was saved."
    elif not args.output:
        tail = f" The {n_draws} draws collected before it were not saved (--output '')."
    else:
        _save_model(args.output, model, meta)
        tail = (f" The {n_draws} draws collected before it were saved to {args.output} as a partial fit: "
                f"`bayesnet predict` can use it, but it is not the posterior sample that was asked for; {retry}.")
    print(head + tail, file=sys.stderr)
    return code


def _print_metrics(model, task: str, Xte, yte, level: float) -> None:
    from .metrics import expected_calibration_error, interval_coverage

    est = model[-1]
    if task == "classification":
        from sklearn.metrics import accuracy_score, log_loss

        proba, lo, hi = model.predict_proba(Xte, return_interval=True, level=level)
        pred = est.classes_[np.argmax(proba, axis=1)]
        print(f"test accuracy          {accuracy_score(yte, pred):.4f}")
        print(f"test log loss          {log_loss(yte, proba, labels=est.classes_):.4f}")
        print(f"expected calib. error  {expected_calibration_error(yte, proba, classes=est.classes_):.4f}")
        print(f"mean {level:.0%} credible width of p(class) {np.mean(hi - lo):.4f}")
    else:
        mean, std, lo, hi = model.predict(Xte, return_std=True, return_interval=True, level=level)
        rmse = float(np.sqrt(np.mean((mean - yte) ** 2)))
        print(f"test RMSE              {rmse:.4f}")
        print(f"{level:.0%} interval coverage   {interval_coverage(yte, lo, hi):.4f}")
        print(f"mean interval width    {np.mean(hi - lo):.4f}")


# ---------------------------------------------------------------------- #
# predict
# ---------------------------------------------------------------------- #
def _predict(args) -> int:
    import pandas as pd

    _check_input_file(args.data, "--data: file")
    _check_output_path(args.output)
    model, meta = _load_model(args.model, args.allow_pickle)
    if meta.get("partial"):
        print(f"warning: {args.model} is a partial fit ({meta['partial']}).", file=sys.stderr)
    if meta["task"] == "forecast":
        from .timeseries import make_forecasting_windows

        column = args.column or meta["target"]
        if column is None:
            raise _CLIError("this model was fitted on the bundled series; name the CSV column holding the series "
                            "with --column.")
        names, body = _read_csv(args.data)
        _target_cells(args.data, names, body, column)
        series = _numeric(args.data, names, body, [column], "series")[:, 0]
        if len(series) < meta["n_lags"]:
            raise _CLIError(f"column {column!r} has {len(series)} values; the model needs the {meta['n_lags']} "
                            "previous values for each forecast.")
        # one window per time with enough history, plus the window for the next, unobserved value
        padded = np.concatenate([series, [0.0]])
        X, _ = make_forecasting_windows(padded, n_lags=meta["n_lags"])
        index = np.arange(meta["n_lags"], len(padded))
    else:
        if args.column is not None:
            raise _CLIError("--column applies to forecast models; this model reads the columns "
                            f"{', '.join(meta['features'])}.")
        names, body = _read_csv(args.data)
        missing = [f for f in meta["features"] if f not in names]
        if missing:
            raise _CLIError(f"{args.data} lacks the feature column(s) {', '.join(map(repr, missing))} that the "
                            "model was fitted on.")
        X = _numeric(args.data, names, body, meta["features"], "feature")
        index = np.arange(len(X))
    if meta["task"] == "classification":
        proba, lo, hi = model.predict_proba(X, return_interval=True, level=args.level)
        classes = model[-1].classes_
        table = {"row": index, "prediction": classes[np.argmax(proba, axis=1)]}
        for j, c in enumerate(classes):
            table.update({f"proba_{c}": proba[:, j], f"lower_{c}": lo[:, j], f"upper_{c}": hi[:, j]})
    else:
        mean, std, lo, hi = model.predict(X, return_std=True, return_interval=True, level=args.level)
        table = {"row": index, "prediction": mean, "std": std, "lower": lo, "upper": hi}
    frame = pd.DataFrame(table)
    if args.output:
        frame.to_csv(args.output, index=False, float_format="%.6g")
        print(f"{len(frame)} predictions written to {args.output}", file=sys.stderr)
    else:
        frame.to_csv(sys.stdout, index=False, float_format="%.6g", lineterminator="\n")
    return 0


def main(argv=None) -> int:
    """Run the ``bayesnet`` command.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit code: 0 on success; 2 for bad input (argparse exits with ``SystemExit(2)`` itself for bad
        options; bad files and data print one line ``error: ...``); 3 when the fit diverged; 130 when it was
        interrupted (Ctrl-C). A diverged or interrupted fit still saves the draws collected before it, marked
        partial.
    """
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except _CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C).", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bayesnet predict ... | head`: the reader left; not an error of ours
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout at exit
        except (OSError, ValueError):
            pass
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
