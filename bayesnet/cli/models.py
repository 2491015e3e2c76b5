"""From the ``bayesnet`` command's options to an estimator pipeline, and the library's messages in its words."""

from __future__ import annotations

import difflib
import inspect
import math
import re
from numbers import Real

import numpy as np

from .options import CLIError, DEFAULTS, _ESTIMATORS, _FORECAST_DEFAULTS, _HIDDEN_PARAM, _SHORTHANDS


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

    def with_value(option: str, value: str) -> str:  # ("--set name=value", or a shorthand option and its value)
        return f"{option}={value}" if option.startswith("--set") else f"{option} {value}"

    def option_value(match):
        option = _option(f"sampler__{match['name']}", given)
        return option if match["value"] is None else with_value(option, match["value"])

    message = re.sub(r"\bsampler__(?P<name>\w+)(?:=(?P<value>[^\s,;)]+))?", option_value, message)
    message = re.sub(r"\bburn_in(?= \(now)", lambda m: _option("burn_in", given), message)  # "increase burn_in (now"
    message = re.sub(r"\bmax_epochs=(?P<value>\d+)", lambda m: with_value(_option("max_epochs", given), m["value"]),
                     message)  # (burn_in_words: "at most half of the max_epochs=1 run")
    message = re.sub(r"\bn_draws(?= \(now)", lambda m: _option("n_draws", given), message)  # "Increase n_draws (now"
    # the warnings' advice ("more n_draws or thinning (now ...)", "several chains (n_chains)", "Use
    # prior_scale='auto'") and the library's pointer to fit_status_, which the command prints itself
    message = re.sub(r"\bn_draws or thinning\b",
                     lambda m: f"{_option('n_draws', given)} or {_option('thinning', given)}", message)
    message = re.sub(r"\(n_chains\)", lambda m: f"({_option('n_chains', given)})", message)
    message = re.sub(r"\bprior_scale(?==)", lambda m: _option("prior_scale", given), message)
    message = re.sub(r"\s*\(see fit_status_\)|;\s*see fit_status_", "", message)
    # the library's pointers to partial_fit, which continues chains in Python: a saved model holds the draws, not
    # the chains, so the command line runs anew (before: "partial_fit continues the planned run where it stopped"
    # after a Ctrl-C)
    message = re.sub(r";\s*partial_fit continues the planned run where it stopped\.",
                     ": run the command again to fit anew (a saved model holds the draws, not the chains).", message)
    message = re.sub(r",? or call partial_fit to continue the chains|:? partial_fit continues the chains|"
                     r" \(partial_fit continues the chains?\)", "", message)
    message = re.sub(r", and partial_fit continues it\b", "", message)
    from ..samplers import available_samplers, get_sampler_class

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
    from ..priors import make_prior
    from ..samplers import available_samplers, get_sampler_class, make_sampler

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
    # (the constructor's named parameters, and those it takes through skorch's **kwargs but validates and
    # documents, such as compile)
    documented = [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs")]
    documented += [name for name in cls._parameter_constraints if name not in documented]
    settable = [name for name in cls()._all_params(deep=False) if name in documented]
    for key, spelled in given.items():
        if key.startswith("sampler__"):
            name = key[len("sampler__"):]
            if name not in hyper:
                error(f"{spelled}: the {sampler} sampler has no hyperparameter {name!r}; its hyperparameters are "
                      f"{', '.join(hyper)} (set them with --set sampler__NAME=VALUE)")
        elif key not in settable:
            if key in hyper:
                hint = f"; {key} is a hyperparameter of the {sampler} sampler: --set sampler__{key}=..."
            elif key.split("__")[0] in ("warm_start", "callbacks", "iterator_train", "iterator_valid"):  # (no near miss)
                hint = (f"; {key} is a setting of the Python estimator that the fit and predict commands do not "
                        "take: use the Python API for it")
            else:
                close = difflib.get_close_matches(key, settable + [f"sampler__{h}" for h in hyper], n=1)
                hint = f"; did you mean --set {close[0]}=...?" if close else ""
            error(f"{spelled}: {cls.__name__} has no parameter {key!r} that the command line can set{hint} "
                  f"(its parameters: {', '.join(sorted(settable))}; the sampler's: "
                  f"{', '.join('sampler__' + h for h in hyper)})")
    # values: the sampler's own checks, then the estimator's constraints, the architecture's included (a size
    # inside a tuple and the kernel's oddness are checked when the network is built, before the first step)
    sampler_params = {k[len("sampler__"):]: v for k, v in params.items() if k.startswith("sampler__")}
    try:
        make_sampler(sampler, **sampler_params)
    except (TypeError, ValueError) as exc:
        bad = [k for k in sampler_params if re.search(rf"\b{k}\b", str(exc))]
        message = _cli_words(str(exc), given)  # (as there: a message that starts with an option names it already)
        error(f"{_option('sampler__' + bad[0], given)}: {message}" if bad and not message.startswith("--") else message)
    est = cls(**params)
    try:
        # the estimator's scikit-learn parameter constraints (private; partial_fit checks them again anyway)
        getattr(est, "_validate_hyperparameters", lambda: None)()
        make_prior(params["prior_scale"], make_sampler(sampler, **sampler_params))
    except (TypeError, ValueError) as exc:
        error(_cli_words(str(exc), given))
    from ..estimators.base import resolve_device

    try:
        resolve_device(params["device"])
    except ValueError as exc:
        kind_of = "MPS" if str(params["device"]).startswith("mps") else "CUDA"
        error(f"{_option('device', given)} {params['device']}: {kind_of} is not available on this machine; use cpu "
              "or auto" if "not available" in str(exc) else _cli_words(str(exc), given))
    forecast = dict(dimension=args.dimension or _FORECAST_DEFAULTS["dimension"],
                    delay=args.delay or _FORECAST_DEFAULTS["delay"])
    return dict(source=source, task=task, kind=kind, params=params, given=given, cls=cls, **forecast)

# ---------------------------------------------------------------------- #
# pipeline
# ---------------------------------------------------------------------- #
def to_sequences(X, shape):
    """Rows of ``prod(shape)`` features -> ``(n, *shape)`` sequences for the RNN (row-major)."""
    return np.asarray(X).reshape(len(X), *shape)

def oldest_first(X):
    """Takens windows come newest first; a recurrent network reads them in time order."""
    return np.ascontiguousarray(np.asarray(X)[:, ::-1])

def _build_pipeline(settings: dict, embed: int | None = None):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    from ..timeseries import TakensEmbedding

    steps = [TakensEmbedding(dimension=embed, delay=settings["delay"])] if embed else []
    steps.append(StandardScaler())
    if settings["kind"] == "rnn" and embed:
        steps.append(FunctionTransformer(oldest_first))
    if settings["kind"] == "rnn" and settings.get("input_shape"):
        steps.append(FunctionTransformer(to_sequences, kw_args={"shape": tuple(settings["input_shape"])}))
    return make_pipeline(*steps, settings["cls"](**settings["params"]))

def _check_shape(settings: dict, n_features: int) -> None:
    """``--input-shape`` (or the CNN's ``--set input_shape``) against the data's feature columns, named by the
    option the user gave, in its comma-separated form (the estimator's own check names ``input_shape=(5, 7)``); a
    shape that is not positive whole numbers is left to the estimator's validation."""
    shape, option = settings.get("input_shape"), "--input-shape "
    if shape is None and settings["given"].get("input_shape") == "--set input_shape":
        shape, option = settings["params"]["input_shape"], "--set input_shape="
    if not (isinstance(shape, (tuple, list)) and shape and all(
            isinstance(s, Real) and not isinstance(s, bool) and float(s).is_integer() and s > 0 for s in shape)):
        return
    shape = [int(s) for s in shape]  # (the estimator takes 3.0 for 3)
    if math.prod(shape) != n_features:
        raise CLIError(f"{option}{','.join(map(str, shape))} holds {math.prod(shape)} values per row, but "
                        f"the data has {n_features} feature columns.")
