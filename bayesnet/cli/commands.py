"""The ``bayesnet fit`` and ``bayesnet predict`` commands, and their model files."""

from __future__ import annotations

import os
import signal
import sys
import warnings
import time
from contextlib import contextmanager, suppress

import numpy as np

from .options import CLIError, _TASKS, build_parser
from .data import _check_input_file, _check_output_path, _load_csv_for_fit, _numeric, _target_cells, read_csv
from .models import _build_pipeline, _check_shape, _cli_words, _fit_settings, _option


def _percent(level: float) -> str:
    """``level`` (in (0, 1)) as a percentage with the digits it needs, up to 12 significant ones: 95%, 99.9999%
    (``:.0%`` printed 0.999999 as 100%)."""
    return f"{100 * level:.12g}%"


# ---------------------------------------------------------------------- #
# model files: bayesnet's own format (bayesnet.io: safetensors + JSON, no code on load); a pickle only when asked
# ---------------------------------------------------------------------- #
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")  # pickle protocol 2-5 (uncompressed joblib)
_COMPRESSED_MAGIC = (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda", b"\x1f\x8b", b"BZh", b"\xfd7zXZ",
                     b"]\x00\x00", b"\x04\x22\x4d\x18")  # joblib's zlib, gzip, bz2, xz, lzma (the .lzma header:
# its properties byte, then the dictionary size, 64 KiB-64 MiB little-endian) and lz4 compressors


def save_model(path: str, model, meta: dict) -> None:
    """Write the fitted pipeline and its metadata to ``path`` in bayesnet's model format (:func:`bayesnet.save`:
    draws and statistics as safetensors, the rest as JSON; written to a temporary file, then renamed)."""
    from ..io import save

    try:
        save(model, path, metadata=meta)
    except OSError as exc:
        raise CLIError(f"cannot write the model to {path}: {exc.strerror or exc}.", code=1) from None


def _is_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of ``size`` bytes starting with ``head`` (at least its first 9) is laid out as a safetensors
    file: an 8-byte little-endian header length that fits the file, then the JSON header's ``{``. Checked before
    the pickle magic: the header length's low bytes can spell it (a header of 24,184 bytes starts ``x^``, zlib's),
    and a file ``bayesnet fit`` wrote was taken for a pickle."""
    return len(head) >= 9 and head[8:9] == b"{" and 8 + int.from_bytes(head[:8], "little") <= size


def load_model(path: str, allow_pickle: bool = False):
    """Read ``(model, meta)`` from a file written by :func:`save_model` (no code runs while reading it); a
    joblib/pickle file of an earlier version only with ``allow_pickle``."""
    from ..io import _NotAModelFile, load

    _check_input_file(path, "model file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(9)
        if not _is_safetensors(head, os.path.getsize(path)) and head.startswith(_PICKLE_MAGIC + _COMPRESSED_MAGIC):
            model, meta = _load_pickle(path, allow_pickle)
            _check_metadata(path, model, meta)  # (the metadata is data whichever file held it)
            return model, meta
        model, meta = load(path, return_metadata=True)
    except OSError as exc:  # (not found and directories were refused above: unreadable, or gone meanwhile)
        raise CLIError(f"cannot read the model file {path!r} ({exc.strerror or exc}).") from None
    except _NotAModelFile as exc:
        raise CLIError(f"{str(exc).rstrip('.')}; give the file written by `bayesnet fit --output`.") from None
    except ValueError as exc:  # a model file, but damaged, crafted or from a newer version: io's words
        message = str(exc)
        raise CLIError(message if message.startswith(f"{path} ") else f"{path}: {message}") from None
    if not (isinstance(meta, dict) and meta.get("task") in _TASKS):
        raise CLIError(f"{path} is a bayesnet model file, but not one written by `bayesnet fit` (it lacks the "
                       "command's metadata: task, features).")
    _check_metadata(path, model, meta)
    return model, meta


def _check_metadata(path: str, model, meta: dict) -> None:
    """The command's metadata that predict reads, checked as data (a crafted file gave tracebacks, or a model
    reading other columns than it was fitted on): the feature names, one per input column; the target column's
    name; a forecaster's window length; the partial-fit note, as printable text."""
    from sklearn.base import is_classifier
    from sklearn.pipeline import Pipeline

    def bad(what: str):
        raise CLIError(f"{path} is a malformed bayesnet model file: its metadata's {what}.")

    if not isinstance(model, Pipeline):
        raise CLIError(f"{path} is a bayesnet model file, but not one written by `bayesnet fit` (it holds an "
                       "estimator, not the command's pipeline).")
    if is_classifier(model[-1]) != (meta["task"] == "classification"):
        bad(f"task {meta['task']!r} is not the model's ({type(model[-1]).__name__})")
    target, partial = meta.get("target"), meta.get("partial")
    n_in = getattr(model, "n_features_in_", None)
    if target is not None and not isinstance(target, str):
        bad(f"target {target!r} is not a column name")
    if partial is not None and not (isinstance(partial, str) and partial.isprintable()):
        bad("partial-fit note is not printable text")
    if meta["task"] == "forecast":
        n_lags = meta.get("n_lags")
        if isinstance(n_lags, bool) or not isinstance(n_lags, int) or n_lags < 1 or (n_in is not None
                                                                                  and n_lags != n_in):
            bad(f"window length n_lags={n_lags!r} is not the {n_in or 'positive'} lag columns the model reads")
        return
    features = meta.get("features")
    if not (isinstance(features, list) and features and all(isinstance(f, str) for f in features)
            and len(set(features)) == len(features) and (n_in is None or len(features) == n_in)):
        bad(f"feature names {features!r} are not {n_in or 'the'} distinct column names the model reads")
    fitted_names = getattr(model, "feature_names_in_", None)
    if fitted_names is not None and list(fitted_names) != features:
        bad(f"feature names {features!r} are not the ones the model was fitted on, {list(fitted_names)!r}")


def _load_pickle(path: str, allow_pickle: bool):
    import joblib

    if not allow_pickle:
        raise CLIError(f"{path} is a joblib (pickle) file, and loading a pickle can execute arbitrary code. Load "
                       "only files you trust (written by you or by someone you trust), with --allow-pickle; "
                       "`bayesnet fit` now writes files that hold no code.")
    try:
        bundle = joblib.load(path)
    except Exception as exc:  # a corrupt or foreign pickle can fail in any way
        raise CLIError(f"could not load {path} as a bayesnet model ({type(exc).__name__}: {exc}).") from None
    if not (isinstance(bundle, dict) and {"model", "meta"} <= set(bundle) and isinstance(bundle["meta"], dict)
            and bundle["meta"].get("task") in _TASKS):
        raise CLIError(f"{path} is a joblib file but not a bayesnet model file; give the file written by "
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
        return data.data, data.target_names[data.target], [str(f) for f in data.feature_names]  # (not np.str_,
        # which scikit-learn does not take for a column name)
    if settings["source"] == "sunspots":
        from ..datasets import load_sunspots

        return load_sunspots(), None, ["sunspots"]
    return _load_csv_for_fit(args.data, args.target, settings["task"])

def _split(X, y, settings: dict, args):
    from sklearn.model_selection import train_test_split

    task, n = settings["task"], len(X)
    if task == "forecast":
        from ..timeseries import make_forecasting_windows

        n_lags = settings["dimension"] * settings["delay"]
        if len(X) < n_lags + 3:
            raise CLIError(f"the series has {len(X)} values, too few for --dimension {settings['dimension']} x "
                            f"--delay {settings['delay']} = {n_lags} lags (at least {n_lags + 3} are needed to "
                            "have training and test windows).")
        Xw, yw = make_forecasting_windows(np.asarray(X, dtype=float).ravel(), n_lags=n_lags)
        split = int(round(len(yw) * (1 - args.test_size)))  # chronological split
        if split < 2 or split >= len(yw):
            raise CLIError(f"--test-size {args.test_size} leaves {split} of {len(yw)} windows for training and "
                            f"{len(yw) - split} for testing; each side needs at least {2 if split < 2 else 1}.")
        return Xw[:split], Xw[split:], yw[:split], yw[split:]
    try:
        return train_test_split(X, y, test_size=args.test_size, random_state=settings["params"]["random_state"],
                                stratify=y if task == "classification" else None)
    except ValueError as exc:
        raise CLIError(f"cannot split the {n} rows with --test-size {args.test_size}: {exc}") from None

def _fit(args) -> int:
    settings = _fit_settings(args)
    _GIVEN.update(settings["given"])  # (main cleared it)
    settings["input_shape"] = args.input_shape
    _check_output_path(args.output, inputs={"--data": getattr(args, "data", None)})
    X, y, features = _fit_data(settings, args)
    task, source = settings["task"], settings["source"]
    if task != "forecast":  # fitted with its column names, so that the saved model takes a DataFrame in Python
        import pandas as pd  # without scikit-learn's "X has feature names" warning, and checks the names it gets

        X = pd.DataFrame(X, columns=features)
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
    from ..samplers import DivergenceError

    t0 = time.perf_counter()
    with _stop_on_sigint() as sigint:
        try:
            model.fit(Xtr, ytr)
        except DivergenceError as exc:
            return _stopped(model, meta, args, settings, "diverged", _cli_words(str(exc), settings["given"]))
        except (ValueError, TypeError) as exc:
            if _steps_taken(est):
                raise
            # bad settings found when the network is built (a size inside a tuple, an even kernel), before the
            # first step
            raise CLIError(_cli_words(str(exc), settings["given"])) from None
    # the estimator itself ends a Ctrl-C'ed fit at the end of a sampler step and records it
    if sigint["interrupted"] or getattr(est, "fit_status_", {}).get("status") == "interrupted":
        return _stopped(model, meta, args, settings, "interrupted", "")
    status = getattr(est, "fit_status_", {})
    if status.get("status") == "short":  # fewer draws than asked for (the ConvergenceWarning printed says why)
        why = (f"; raise or drop {_option('max_epochs', settings['given'])}" if est.max_epochs is not None else
               " (the warning above says why)")
        if not est.__sklearn_is_fitted__():
            raise CLIError(f"no posterior draw was kept in {_steps_taken(est)} sampler steps, so nothing was "
                           f"saved{why}.")
        from ..estimators.run import least_kept_per_chain

        meta["partial"] = (f"short: {least_kept_per_chain(est)} of {est.n_draws} draws per chain"
                           f"{' (max_epochs ended the run)' if est.max_epochs is not None else ''}")
    elapsed = time.perf_counter() - t0
    chains = f" from {est.n_chains} chains (max split R-hat {est.diagnostics_['max_rhat']:.3f})" \
        if est.n_chains > 1 and "max_rhat" in est.diagnostics_ else ""
    extended = est.fit_status_.get("thinning_extended")
    from ..estimators.run import _times

    spread = (f" (doubled {_times(len(extended))} from {extended[0]['thinning'][0]}, as the draws had not mixed)"
              if extended else "")
    print(f"fitted in {elapsed:.1f} s: {est.n_draws_kept_} posterior draws kept{chains} "
          f"(burn-in {est.trace_.burn_in} steps, thinning {est.trace_.thinning}{spread}, "
          f"{est.diagnostics_['n_steps']} sampler steps)")
    _print_metrics(model, task, Xte, yte, args.level)
    if args.output:
        save_model(args.output, model, meta)
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
        save_model(args.output, model, meta)
        tail = (f" The {n_draws} draws collected before it were saved to {args.output} as a partial fit: "
                f"`bayesnet predict` can use it, but it is not the posterior sample that was asked for; {retry}.")
    print(head + tail, file=sys.stderr)
    return code

def _print_metrics(model, task: str, Xte, yte, level: float) -> None:
    from ..metrics import expected_calibration_error, interval_coverage

    est = model[-1]
    if task == "classification":
        from sklearn.metrics import accuracy_score, log_loss

        proba, lo, hi = model.predict_proba(Xte, return_interval=True, level=level)
        pred = est.classes_[np.argmax(proba, axis=1)]
        print(f"test accuracy          {accuracy_score(yte, pred):.4f}")
        print(f"test log loss          {log_loss(yte, proba, labels=est.classes_):.4f}")
        print(f"expected calib. error  {expected_calibration_error(yte, proba, classes=est.classes_):.4f}")
        print(f"mean {_percent(level)} credible width of p(class) {np.mean(hi - lo):.4f}")
    else:
        mean, std, lo, hi = model.predict(Xte, return_std=True, return_interval=True, level=level)
        rmse = float(np.sqrt(np.mean((mean - yte) ** 2)))
        print(f"test RMSE              {rmse:.4f}")
        print(f"{_percent(level)} interval coverage   {interval_coverage(yte, lo, hi):.4f}")
        print(f"mean interval width    {np.mean(hi - lo):.4f}")

# ---------------------------------------------------------------------- #
# predict
# ---------------------------------------------------------------------- #
def _predict(args) -> int:
    import pandas as pd

    _check_input_file(args.data, "--data: file")
    if args.output == "-":  # (the usual name of standard output)
        args.output = None
    _check_output_path(args.output, inputs={"--data": args.data, "MODEL": args.model})
    model, meta = load_model(args.model, args.allow_pickle)
    if meta.get("partial"):
        print(f"warning: {args.model} is a partial fit ({meta['partial']}).", file=sys.stderr)
    if meta["task"] == "forecast":
        from ..timeseries import make_forecasting_windows

        column = args.column or meta["target"]
        if column is None:
            raise CLIError("this model was fitted on the bundled series; name the CSV column holding the series "
                            "with --column.")
        names, body = read_csv(args.data)
        _target_cells(args.data, names, body, column, "--column" if args.column else
                      "the series column the model was fitted on (name another with --column)")
        series = _numeric(args.data, names, body, [column], "series")[:, 0]
        if len(series) < meta["n_lags"]:
            raise CLIError(f"column {column!r} has {len(series)} values; the model needs the {meta['n_lags']} "
                            "previous values for each forecast.")
        # one window per time with enough history, plus the window for the next, unobserved value
        padded = np.concatenate([series, [0.0]])
        X, _ = make_forecasting_windows(padded, n_lags=meta["n_lags"])
        index = np.arange(meta["n_lags"], len(padded))
    else:
        if args.column is not None:
            raise CLIError("--column applies to forecast models; this model reads the columns "
                            f"{', '.join(meta['features'])}.")
        names, body = read_csv(args.data)
        missing = [f for f in meta["features"] if f not in names]
        if missing:
            raise CLIError(f"{args.data} lacks the feature column(s) {', '.join(map(repr, missing))} that the "
                            "model was fitted on.")
        X = _numeric(args.data, names, body, meta["features"], "feature")
        index = np.arange(len(X))
        if hasattr(model, "feature_names_in_"):  # (models saved before 2026-11-29 were fitted on arrays)
            X = pd.DataFrame(X, columns=meta["features"])
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
        tmp = f"{args.output}.tmp-{os.getpid()}"  # (written whole, then renamed: a failed write leaves no
        try:  # truncated file, and an existing one as it was)
            frame.to_csv(tmp, index=False, float_format="%.6g")
            os.replace(tmp, args.output)
        except OSError as exc:
            raise CLIError(f"cannot write the predictions to {args.output}: {exc.strerror or exc}.", code=1) from None
        finally:
            with suppress(OSError):
                os.remove(tmp)
        print(f"{len(frame)} predictions written to {args.output}", file=sys.stderr)
    else:
        frame.to_csv(sys.stdout, index=False, float_format="%.6g", lineterminator="\n")
    return 0

#: how the running command spelled each parameter (``_fit_settings``' ``given``), for its warnings' words
_GIVEN: dict = {}


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {_cli_words(str(message), _GIVEN)}", file=sys.stderr if file is None else file)


def main(argv=None) -> int:
    """Run the ``bayesnet`` command.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit code: 0 on success; 1 when the model file cannot be written; 2 for bad input (argparse exits
        with ``SystemExit(2)`` itself for bad options; bad files and data print one line ``error: ...``); 3 when
        the fit diverged; 130 when it was interrupted (Ctrl-C); 141 when the reader of standard output went away
        (a broken pipe). A diverged or interrupted fit still saves the draws collected before it, marked
        partial.
    """
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            _GIVEN.clear()  # (a previous command's spelling, in the same process: none)
            warnings.showwarning = _show_warning  # one line per warning, in the command's words, not Python's
            return {"fit": _fit, "predict": _predict}[args.command](args)
    except CLIError as exc:
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
