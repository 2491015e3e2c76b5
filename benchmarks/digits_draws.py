"""Digits: what the default classifier's averaged predictive is made of, draw by draw.

The defaults panel's digits task (its split, a StandardScaler in front) fitted by `BayesianMLPClassifier()` at
its defaults; its draws read one by one (`predict_draws`). Printed per seed and likelihood weight: the averaged
predictive's accuracy, NLL, ECE (15 bins) and mean confidence; on the ordinary test rows (every standardised
input below 10 in absolute value) the accuracy and mean confidence of the average and of a single draw (means
over the draws); the share of the NLL carried by the other rows (an input rare in training, its z-score 10 or
more; a pixel constant in training keeps scale 1, so its rows count as ordinary); and five
`MLPClassifier()` of other seeds averaged, for comparison (benchmarks/README.md, "Where the digits
predictive's underconfidence comes from").

`--likelihood-weights 1 2 3` also fits colder posteriors: the data term weighted by w (the run's
`ChainPosterior` built with `w * n_data`; the run's plan, the prior and its Gibbs steps unchanged, the warm-up
adapting its step to the stiffer posterior; its scale moves' noise penalty then also counts `w * n_data` rows
in its finite-population factor). A benchmark-only device: the estimators have no such parameter.

    OMP_NUM_THREADS=1 python benchmarks/digits_draws.py [--seeds 0 1 2 3] [--likelihood-weights 1 2 3]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from defaults_panel import TASKS  # noqa: E402

from bayesnet import BayesianMLPClassifier  # noqa: E402
from bayesnet.estimators import run  # noqa: E402
from bayesnet.metrics import expected_calibration_error  # noqa: E402

RARE_Z = 10.0  # a test row with a standardised input at least this large holds a pixel rare in training


@contextlib.contextmanager
def likelihood_weight(weight: float):
    """Build the run's posterior with its data term weighted by ``weight`` (1: the posterior itself)."""
    base = run.ChainPosterior

    class Weighted(base):
        def __init__(self, module, likelihood, prior, n_data, *args, **kwargs):
            super().__init__(module, likelihood, prior, max(1, round(weight * n_data)), *args, **kwargs)

    run.ChainPosterior = Weighted if weight != 1 else base
    try:
        yield
    finally:
        run.ChainPosterior = base


def _nll(proba, y) -> np.ndarray:
    return -np.log(np.clip(proba[np.arange(len(y)), y], 1e-300, None))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--likelihood-weights", type=float, nargs="+", default=[1.0])
    parser.add_argument("--no-mlp", action="store_true", help="skip the five scikit-learn MLPs")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("seed | weight | average: acc / NLL / ECE / conf | ordinary rows: average acc / conf, one draw acc / conf"
          " | rare rows: n, share of the NLL | five MLPs: NLL (rare rows' share) / ordinary acc / conf")
    for seed in args.seeds:
        Xtr, ytr, Xte, yte = TASKS["digits"].load(seed)
        scaler = StandardScaler().fit(Xtr)
        Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
        rare = np.abs(Xte).max(1) >= RARE_Z
        ordinary = ~rare
        mlp = "-"
        if not args.no_mlp:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                q = np.mean([MLPClassifier(random_state=10 * seed + k).fit(Xtr, ytr).predict_proba(Xte)
                             for k in range(5)], 0)
            nll_q = _nll(q, yte)  # digits' labels are 0..9, the columns' order
            mlp = (f"{nll_q.mean():.3f} ({nll_q[rare].sum() / len(yte):.3f}) / "
                   f"{np.mean(q[ordinary].argmax(1) == yte[ordinary]):.3f} / {q[ordinary].max(1).mean():.3f}")
        for weight in args.likelihood_weights:
            with likelihood_weight(weight), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = BayesianMLPClassifier(random_state=seed).fit(Xtr, ytr)
            y = np.searchsorted(est.classes_, yte)
            draws = est.predict_draws(Xte)  # (D, n, K)
            p = draws.mean(0)
            nll = _nll(p, y)
            one = draws[:, ordinary]
            print(f"{seed:4d} | {weight:g} | {np.mean(p.argmax(1) == y):.3f} / {nll.mean():.3f} / "
                  f"{expected_calibration_error(y, p):.3f} / {p.max(1).mean():.3f} | "
                  f"{np.mean(p[ordinary].argmax(1) == y[ordinary]):.3f} / {p[ordinary].max(1).mean():.3f}, "
                  f"{np.mean(one.argmax(2) == y[ordinary]):.3f} / {one.max(2).mean():.3f} | "
                  f"{int(rare.sum())}, {nll[rare].sum() / len(y):.3f} | {mlp}", flush=True)


if __name__ == "__main__":
    main()
