"""TACT-HMC at the estimators' defaults on the defaults panel's tasks: which fits temper, and what it costs.

For each task and seed, one default fit of the panel's estimator with ``sampler="tacthmc"`` (a StandardScaler in
front, the panel's split, one torch thread), plus the settings given with ``--set``. Printed per fit: the steps
taken, the fit's status ("short" when fewer than ``n_draws`` draws were kept), the draws kept, the fraction of the
steps after the burn-in taken at unit temperature (``diagnostics_["plateau_fraction"]``), the largest effective
temperature of any step (the warm-up's included), the log loss (or RMSE / NLL for a regressor),
the fit seconds, the split R-hat and bulk ESS of the draws' summed training log-likelihood
(``convergence_["log_likelihood"]``; across the chains with ``--set n_chains=4``) and the ConvergenceWarnings. The figures behind benchmarks/README.md, "tacthmc at its
defaults" (measured with the defaults of that time: ``--set sampler__wall=1.6666666666666667 --set
sampler__tempering_noise=0.05``) and "tacthmc's well and tempering friction by the model's size" (the defaults
since).

    python benchmarks/tacthmc_defaults.py                                  # iris and moons, seeds 0-3; minutes
    python benchmarks/tacthmc_defaults.py --tasks iris --seeds 2 --set sampler__wall=1.0
    python benchmarks/tacthmc_defaults.py --set n_chains=4 --set sampler__tempering=false --fan-in-gain 2
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import torch
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from skorch.callbacks import Callback

import defaults_panel as dp


class _HottestStep(Callback):
    """Records the largest effective temperature of any chain's step (``StepInfo.extra``)."""

    def on_train_begin(self, net, **kwargs):
        self.hottest_ = 1.0

    def on_batch_end(self, net, training=False, info=None, **kwargs):
        if training and info is not None:
            self.hottest_ = max(self.hottest_, float(torch.as_tensor(info.extra["effective_temperature"]).max()))


def fit_one(task_name: str, seed: int, settings: dict, fan_in_gain: float | None = None) -> dict:
    task = dp.TASKS[task_name]
    if fan_in_gain is not None:  # (a prior object, which --set cannot spell)
        from bayesnet.priors import FanInPrior

        settings = {**settings, "prior_scale": FanInPrior(gain=fan_in_gain)}
    Xtr, ytr, Xte, yte = task.load(seed)
    hottest = _HottestStep()
    est = task.estimator(random_state=seed, sampler="tacthmc", callbacks=[("hottest", hottest)],
                         **{**task.kwargs, **settings})
    model = make_pipeline(StandardScaler(), est)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(Xtr, ytr)
    seconds = time.perf_counter() - start
    metrics = dp.bayesnet_metrics(task.kind, model, est, Xte, yte, scaler=True)
    ll = (getattr(est, "convergence_", None) or {}).get("log_likelihood") or {}  # (between chains with n_chains > 1)
    return {"task": task_name, "seed": seed, "settings": {k: v if isinstance(v, (int, float, str, bool)) or v is None
                                                          else repr(v) for k, v in settings.items()}, "steps": int(est.fit_status_["steps_taken"]),
            "status": est.fit_status_["status"], "kept": int(est.trace_.kept_per_slot.min()),
            "plateau": round(float(est.diagnostics_["plateau_fraction"]), 3),
            "hottest": round(hottest.hottest_, 2), "seconds": round(seconds, 1),
            "ll_rhat": None if "rhat" not in ll else round(float(ll["rhat"]), 3),
            "ll_ess": None if "ess_bulk" not in ll else round(float(ll["ess_bulk"]), 1),
            "warnings": [str(w.message)[:120] for w in caught if w.category.__name__ == "ConvergenceWarning"],
            **{k: round(float(v), 4) for k, v in metrics.items() if isinstance(v, float)}}


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["iris", "moons"], choices=sorted(dp.TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an estimator setting for every fit (a JSON value or a string), e.g. sampler__wall=1.0")
    ap.add_argument("--fan-in-gain", type=float, default=None,
                    help="the fan-in prior at this gain for every fit (tacthmc's 'auto' prior is the gain 2 one for a "
                         "classifier; 'auto' gives an untempered sampler the hierarchical prior)")
    ap.add_argument("--json", action="store_true", help="one JSON line per fit instead of the table")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    settings = {}
    for item in args.set:
        key, _, text = item.partition("=")
        settings[key] = _value(text)
    if not args.json:
        print(f"tacthmc at the defaults{', with ' + str(settings) if settings else ''}")
        print(f"{'task':10s} {'seed':>4s} {'steps':>7s} {'status':>9s} {'kept':>5s} {'plateau':>8s} {'hottest':>8s} "
              f"{'log loss / NLL':>15s} {'seconds':>8s}  warnings")
    for task in args.tasks:
        for seed in args.seeds:
            row = fit_one(task, seed, settings, args.fan_in_gain)
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            print(f"{task:10s} {seed:4d} {row['steps']:7d} {row['status']:>9s} {row['kept']:5d} {row['plateau']:8.3f} "
                  f"{row['hottest']:8.2f} {row['nll']:15.4f} {row['seconds']:8.1f}  {len(row['warnings'])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
