"""The ``bayesnet`` command: fit a Bayesian network on a CSV file or a bundled dataset, and predict.

Examples
--------
``bayesnet fit``                         breast cancer, SGHMC, prints test metrics
``bayesnet fit --dataset sunspots``      yearly sunspots, Takens embedding, forecasting
``bayesnet fit --data d.csv --target y --task regression --sampler sgld``
``bayesnet predict model.joblib --data new.csv --output predictions.csv``
"""

from __future__ import annotations

import argparse
import csv
import sys
import time

import joblib
import numpy as np

__all__ = ["main", "build_parser"]

DEFAULTS = {
    # Settings validated on the bundled data (see docs/user_guide.md).
    "breast_cancer": dict(task="classification", hidden=(100,), prior_scale=0.5, step_size=1e-4, n_draws=200,
                          burn_in=2000, thinning="auto", batch_size=64),
    "sunspots": dict(task="forecast", hidden=(20,), prior_scale=1.0, step_size=2e-4, n_draws=200, burn_in=3000, thinning="auto",
                     batch_size=32),
    "csv": dict(hidden=(50,), prior_scale=1.0, step_size=1e-4, n_draws=200, burn_in=2000, thinning="auto", batch_size=64),
}


def _read_csv(path: str, target: str | None, features: list[str] | None = None):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise SystemExit(f"error: {path} has no data rows.")
    header, body = rows[0], [r for r in rows[1:] if any(cell.strip() for cell in r)]  # skip blank lines
    if target is not None and target not in header:
        raise SystemExit(f"error: target column {target!r} not in {path}; columns are {header}.")
    cols = {name: [r[i] for r in body] for i, name in enumerate(header)}
    if features is None:
        features = [h for h in header if h != target]
    else:  # the columns the model was fitted on, in that order
        missing = [f for f in features if f not in header]
        if missing:
            raise SystemExit(f"error: {path} lacks the feature column(s) {missing} the model was fitted on.")
    try:
        X = np.array([[float(v) for v in row] for row in zip(*(cols[f] for f in features))], dtype=np.float64)
    except ValueError as exc:
        raise SystemExit(f"error: feature columns must be numeric ({exc}).") from None
    y = np.array(cols[target]) if target is not None else None
    return X, y, features


def _classifier(args, d):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from .estimators import BayesianMLPClassifier

    est = BayesianMLPClassifier(hidden_layer_sizes=d["hidden"], sampler=args.sampler, n_draws=d["n_draws"],
                                burn_in=d["burn_in"], thinning=d["thinning"], batch_size=d["batch_size"],
                                prior_scale=d["prior_scale"], device=args.device, random_state=args.random_state,
                                verbose=int(not args.quiet), n_chains=args.n_chains, n_jobs=args.n_jobs,
                                **_sampler_kwargs(args, d))
    return make_pipeline(StandardScaler(), est)


def _regressor(args, d, embed: int | None = None):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from .estimators import BayesianMLPRegressor
    from .timeseries import TakensEmbedding

    est = BayesianMLPRegressor(hidden_layer_sizes=d["hidden"], sampler=args.sampler, n_draws=d["n_draws"],
                               burn_in=d["burn_in"], thinning=d["thinning"], batch_size=d["batch_size"],
                               prior_scale=d["prior_scale"], device=args.device, random_state=args.random_state,
                               verbose=int(not args.quiet), n_chains=args.n_chains, n_jobs=args.n_jobs,
                               **_sampler_kwargs(args, d))
    steps = [TakensEmbedding(dimension=embed, delay=args.delay)] if embed else []
    return make_pipeline(*steps, StandardScaler(), est)


def _sampler_kwargs(args, d):
    kw = {"sampler__step_size": args.step_size if args.step_size is not None else d["step_size"]}
    if args.friction is not None:
        kw["sampler__friction"] = args.friction
    return kw


def _fit(args) -> int:
    from sklearn.model_selection import train_test_split

    from .metrics import expected_calibration_error, interval_coverage

    if args.data is None:
        source = args.dataset
        d = dict(DEFAULTS[source])
        if source == "breast_cancer":
            from sklearn.datasets import load_breast_cancer

            data = load_breast_cancer()
            X, y, features, task = data.data, data.target_names[data.target], list(data.feature_names), "classification"
        else:
            from .datasets import load_sunspots

            X, y, features, task = load_sunspots(), None, ["sunspots"], "forecast"
    else:
        if args.target is None:
            raise SystemExit("error: --target is required with --data.")
        d = dict(DEFAULTS["csv"])
        X, y, features = _read_csv(args.data, args.target)
        source, task = args.data, args.task
        if task == "forecast":
            X, y = y.astype(float), None
    for key in ("n_draws", "burn_in", "thinning", "batch_size"):
        if getattr(args, key) is not None:
            d[key] = getattr(args, key)
    if args.hidden is not None:
        d["hidden"] = tuple(args.hidden)

    meta = {"task": task, "source": source, "features": features, "target": args.target}
    if task == "forecast":
        from .timeseries import make_forecasting_windows

        n_lags = args.dimension * args.delay
        Xw, yw = make_forecasting_windows(np.asarray(X, dtype=float).ravel(), n_lags=n_lags)
        split = int(round(len(yw) * (1 - args.test_size)))  # chronological split
        Xtr, Xte, ytr, yte = Xw[:split], Xw[split:], yw[:split], yw[split:]
        model = _regressor(args, d, embed=args.dimension)
        meta["n_lags"] = n_lags
    elif task == "regression":
        y = y.astype(float)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=args.test_size, random_state=args.random_state)
        model = _regressor(args, d)
    else:
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=args.test_size, stratify=y,
                                              random_state=args.random_state)
        model = _classifier(args, d)

    print(f"bayesnet: {task} on {source} ({len(Xtr)} train / {len(Xte)} test rows), sampler={args.sampler}",
          flush=True)
    t0 = time.perf_counter()
    model.fit(Xtr, ytr)
    elapsed = time.perf_counter() - t0
    est = model[-1]
    chains = f" from {est.n_chains} chains (max split R-hat {est.diagnostics_['max_rhat']:.3f})" \
        if est.n_chains > 1 and "max_rhat" in est.diagnostics_ else ""
    print(f"fitted in {elapsed:.1f} s: {est.n_draws_kept_} posterior draws kept{chains} "
          f"(burn-in {est.burn_in} steps, thinning {est.trace_.thinning}, "
          f"{est.diagnostics_['n_steps']} sampler steps)")
    level = args.level
    if task == "classification":
        from sklearn.metrics import accuracy_score, log_loss

        proba = model.predict_proba(Xte)
        _, lo, hi = model.predict_proba(Xte, return_interval=True, level=level)
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
    if args.output:
        joblib.dump({"model": model, "meta": meta}, args.output)
        print(f"model saved to {args.output}")
    return 0


def _predict(args) -> int:
    bundle = joblib.load(args.model)
    model, meta = bundle["model"], bundle["meta"]
    if meta["task"] == "forecast":
        from .timeseries import make_forecasting_windows

        column = args.column or meta["target"]
        if column is None:
            raise SystemExit("error: this model was fitted on the bundled series; name the CSV column holding "
                             "the series with --column.")
        _, series, _ = _read_csv(args.data, column)
        try:
            series = series.astype(float)
        except ValueError:
            raise SystemExit(f"error: column {column!r} must hold numbers.") from None
        if not np.all(np.isfinite(series)):
            raise SystemExit(f"error: column {column!r} contains missing or non-finite values.")
        # one window per time with enough history, plus the window for the next, unobserved value
        padded = np.concatenate([series, [0.0]])
        X, _ = make_forecasting_windows(padded, n_lags=meta["n_lags"])
        index = np.arange(meta["n_lags"], len(padded))
    else:
        X, _, _ = _read_csv(args.data, None, features=meta["features"])
        index = np.arange(len(X))
    rows = []
    if meta["task"] == "classification":
        proba, lo, hi = model.predict_proba(X, return_interval=True, level=args.level)
        classes = model[-1].classes_
        header = ["row", "prediction"] + [f"{k}_{c}" for c in classes for k in ("proba", "lower", "upper")]
        for i in range(len(X)):
            vals = [v for j in range(len(classes)) for v in (proba[i, j], lo[i, j], hi[i, j])]
            rows.append([index[i], classes[np.argmax(proba[i])], *(f"{v:.6g}" for v in vals)])
    else:
        mean, std, lo, hi = model.predict(X, return_std=True, return_interval=True, level=args.level)
        header = ["row", "prediction", "std", "lower", "upper"]
        rows = [[index[i], *(f"{v:.6g}" for v in (mean[i], std[i], lo[i], hi[i]))] for i in range(len(X))]
    out = open(args.output, "w", newline="") if args.output else sys.stdout
    try:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    finally:
        if args.output:
            out.close()
            print(f"{len(rows)} predictions written to {args.output}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .samplers import available_samplers

    p = argparse.ArgumentParser(prog="bayesnet", description="Bayesian neural networks fitted by posterior sampling.")
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="fit on a CSV file or a bundled dataset and print test metrics")
    f.add_argument("--data", help="CSV file with a header row (default: a bundled dataset)")
    f.add_argument("--target", help="name of the target column in --data")
    f.add_argument("--task", choices=["classification", "regression", "forecast"], default="classification",
                   help="with --data: what to fit (forecast: --target is a univariate series)")
    f.add_argument("--dataset", choices=["breast_cancer", "sunspots"], default="breast_cancer",
                   help="bundled dataset used when --data is not given")
    f.add_argument("--sampler", choices=available_samplers(), default="sghmc")
    f.add_argument("--step-size", type=float, help="sampler step size (sampler__step_size)")
    f.add_argument("--friction", type=float, help="sampler friction, for samplers that have one")
    f.add_argument("--hidden", type=int, nargs="+", help="hidden layer sizes, e.g. --hidden 50 50")
    f.add_argument("--n-draws", type=int)
    f.add_argument("--burn-in", type=int)
    f.add_argument("--thinning", type=int)
    f.add_argument("--batch-size", type=int)
    f.add_argument("--n-chains", type=int, default=1, help="independent chains, vectorised (default 1)")
    f.add_argument("--n-jobs", type=int, help="with --n-chains: groups of chains in joblib worker processes")
    f.add_argument("--dimension", type=int, default=4, help="forecast: Takens embedding dimension (paper 003: 4)")
    f.add_argument("--delay", type=int, default=1, help="forecast: Takens delay")
    f.add_argument("--test-size", type=float, default=0.3)
    f.add_argument("--level", type=float, default=0.95, help="credible / predictive interval level")
    f.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    f.add_argument("--random-state", type=int, default=0)
    f.add_argument("--output", default="bayesnet-model.joblib", help="where to save the fitted model ('' to skip)")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=_fit)
    q = sub.add_parser("predict", help="write predictions with intervals for a CSV file")
    q.add_argument("model", help="a file saved by `bayesnet fit`")
    q.add_argument("--data", required=True, help="CSV with the same feature columns as in fit")
    q.add_argument("--column", help="forecast models: the column holding the series")
    q.add_argument("--level", type=float, default=0.95)
    q.add_argument("--output", help="CSV to write (default: standard output)")
    q.set_defaults(func=_predict)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
