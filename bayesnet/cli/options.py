"""Options of the ``bayesnet`` command: argparse types (their errors read \"argument --x: ...\") and the parser."""

from __future__ import annotations

import argparse
import ast
import math
import re



_AT_DEFAULTS = dict(hidden=(100,), prior_scale="auto", step_size="auto", n_draws=100, burn_in="auto", thinning="auto",
                   batch_size="auto")
DEFAULTS = {
    # the estimators' own defaults on every dataset: the warm-up sets the step size and mass, the prior is "auto"
    "breast_cancer": dict(task="classification", **_AT_DEFAULTS),
    "sunspots": dict(task="forecast", **_AT_DEFAULTS),
    "csv": dict(_AT_DEFAULTS),
}

DEFAULT_OUTPUT = "bayesnet-model.bayesnet"

_FORECAST_DEFAULTS = dict(dimension=4, delay=1)  # Chandra et al. 2019's Takens embedding

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

class CLIError(Exception):
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

def _positive_float_or_auto(text: str) -> float | str:
    return "auto" if text == "auto" else _positive_float(text)

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

def _seed(text: str) -> int:
    return _integer(text, 0, 2**32 - 1)

def _n_jobs(text: str) -> int:
    value = _integer(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be a positive number of workers, or negative to count back from "
                                         "the number of CPUs (-1: all), not 0")
    return value

def _burn_in(text: str) -> int | str:
    if text == "auto":
        return "auto"
    try:
        int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer or auto, got {text!r}") from None
    return _integer(text, 0)  # (its own message for a negative number)

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
    from ..samplers import available_samplers

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
                           "Chandra et al. 2019's)")
    data.add_argument("--delay", type=_positive_int, metavar="TAU",
                      help=f"forecast: Takens delay; the model sees dimension previous values, delay steps apart "
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
    sampling.add_argument("--step-size", type=_positive_float_or_auto, metavar="ETA",
                          help=f"sampler step size, sampler__step_size (default: {_per_dataset('step_size')})")
    sampling.add_argument("--friction", type=_non_negative_float, metavar="GAMMA",
                          help="sampler friction, sampler__friction, for the samplers that have one (sghmc, baoab, "
                               "eqn) (default: the sampler's: 0.05 for sghmc, 1 for baoab and eqn)")
    sampling.add_argument("--n-draws", type=_positive_int, metavar="N",
                          help=f"posterior draws kept per chain (default: {_per_dataset('n_draws')})")
    sampling.add_argument("--burn-in", type=_burn_in, metavar="STEPS",
                          help="sampler steps discarded first, or auto: 200 passes over the training data, at least "
                               f"1000 and at most 20000 steps (default: {_per_dataset('burn_in')})")
    sampling.add_argument("--thinning", type=_thinning, metavar="K",
                          help="keep every K-th step after burn-in, or auto: after an auto burn-in, draws spanning about "
                               "as many steps as it, at least the sampler's own spacing apart (10; 1 for tacthmc), "
                               "spaced up to 4 times wider where the draws have not mixed "
                               f"(default: {_per_dataset('thinning')})")
    sampling.add_argument("--batch-size", type=_batch_size, metavar="ROWS",
                          help="the most rows per mini-batch (an epoch's rows spread evenly over its batches), full for the whole training set, or auto (128; full for hmc and pt-langevin) "
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
                     help="where to save the fitted model ('' to skip), in bayesnet's format (safetensors + JSON: no code runs on load)")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(command="fit", parser=f)

    q = sub.add_parser("predict", formatter_class=_HelpFormatter,
                       help="write predictions with intervals for a CSV file",
                       description="Predict with a model saved by `bayesnet fit`, with intervals, one CSV row per "
                                   "input row.",
                       epilog="example:\n  bayesnet predict bayesnet-model.bayesnet --data new.csv "
                              "--output predictions.csv")
    q.add_argument("model", help="a model file written by `bayesnet fit --output`")
    q.add_argument("--data", required=True, metavar="CSV",
                   help="CSV with the feature columns the model was fitted on, by name (other columns are "
                        "ignored); for forecasts, the series (default: none, required)")
    q.add_argument("--column", help="forecast models: the column of --data holding the series (default: the "
                                    "column the model was fitted on)")
    q.add_argument("--level", type=_probability, default=0.95, help="level of the intervals")
    q.add_argument("--output", metavar="FILE", help="CSV to write (default, or '-': standard output)")
    q.add_argument("--allow-pickle", action="store_true",
                   help="load a joblib/pickle model file; loading a pickle can execute arbitrary code, so pass "
                        "this only for files you trust (default: off, such files are refused)")
    q.set_defaults(command="predict", parser=q)
    return p
