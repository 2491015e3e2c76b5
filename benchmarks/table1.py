"""Luo et al. 2018 Table 1 at this machine's scale: an MLP on scikit-learn digits with 0/20/30 % permuted labels.

The paper (Sec. 5.2) trains an MLP with one hidden layer of 100 units on EMNIST
for 1000 epochs, permuting a fraction of the training labels at the start of
every epoch, and compares TACT-HMC with SGHMC, SGNHT, Adam and momentum SGD,
each tuned. Here the data are scikit-learn's 8x8 digits (1,797 images, shipped
with scikit-learn), the epoch budget is ``--epochs`` (same for all methods),
and each method's setting is tuned on a validation split at 0 % permutation
from a small grid (samplers: the step size; optimisers: learning rate and
weight decay, the decay playing the prior's part), then used for every
permutation level.
Sampler accuracies are those of the Monte Carlo averaged prediction over the
retained draws; optimisers are evaluated at their final weights.

    python benchmarks/table1.py                      # digits, about 5 minutes on 2 cores
    python benchmarks/table1.py --dataset mnist1d    # MNIST-1D (pip install mnist1d), generated offline
    python benchmarks/table1.py --epochs 100 --quick

MNIST-1D (Greydanus 2020; 4,000 training and 1,000 test signals of length 40,
generated procedurally by the ``mnist1d`` package with its default arguments,
no download) is the harder set: its paper reports 68 % for an MLP.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from bayesnet import BayesianMLPClassifier
from bayesnet.estimators.base import TensorBatchIterator
from bayesnet.estimators.mlp import MLP

torch.set_num_threads(1)


class PermutedLabelIterator(TensorBatchIterator):
    """Mini-batches in which a ``fraction`` of the labels is randomly permuted anew at every epoch."""

    def __init__(self, dataset, batch_size, shuffle=False, generator=None, drop_last=False, fraction=0.0):
        super().__init__(dataset, batch_size, shuffle=shuffle, generator=generator, drop_last=drop_last)
        self.fraction = fraction
        self.original = self.tensors[1].clone()

    def __iter__(self):
        if self.fraction > 0:
            y = self.original.clone()
            idx = torch.randperm(self.n, generator=self.generator)[: int(round(self.fraction * self.n))]
            y[idx] = y[idx[torch.randperm(len(idx), generator=self.generator)]]
            self.tensors = (self.tensors[0], y)
        return super().__iter__()


def fit_sampler(name, step_size, Xtr, ytr, epochs, fraction, seed):
    steps = epochs * int(np.ceil(len(Xtr) / 128))
    clf = BayesianMLPClassifier(sampler=name, sampler__step_size=step_size, hidden_layer_sizes=(100,),
                                batch_size=128, max_epochs=epochs, burn_in=steps // 2, n_draws=100,
                                iterator_train=PermutedLabelIterator, iterator_train__fraction=fraction,
                                random_state=seed)
    clf.fit(Xtr, ytr)
    return clf


def fit_optimiser(name, setting, Xtr, ytr, epochs, fraction, seed):
    lr, weight_decay = setting
    torch.manual_seed(seed)
    net = MLP(Xtr.shape[1], (100,), int(ytr.max()) + 1, "relu")
    opt = (torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay) if name == "adam"
           else torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay))
    X, y = torch.as_tensor(Xtr), torch.as_tensor(ytr)
    it = PermutedLabelIterator(torch.utils.data.TensorDataset(X, y), 128, shuffle=True,
                               generator=torch.Generator().manual_seed(seed), fraction=fraction)
    for _ in range(epochs):
        for xb, yb in it:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xb), yb).backward()
            opt.step()
    return net


def accuracy(model, X, y):
    if not isinstance(model, torch.nn.Module) and len(model.trace_) == 0:
        return float("nan")  # a tacthmc run that never returned to unit temperature
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return float((model(torch.as_tensor(X)).argmax(1).numpy() == y).mean())
    return float(model.score(X, y))


# samplers: step size; optimisers: (learning rate, weight decay), the decay standing in for the prior
GRIDS = {"tacthmc": [3e-5, 1e-4, 3e-4], "sghmc": [3e-5, 1e-4, 3e-4], "sgnht": [3e-5, 1e-4, 3e-4],
         "adam": [(lr, wd) for wd in (0.0, 1e-3, 1e-2) for lr in (3e-4, 1e-3, 3e-3)],
         "momentum SGD": [(lr, wd) for wd in (0.0, 1e-3, 1e-2) for lr in (3e-3, 1e-2, 3e-2)]}


def fmt(setting) -> str:
    """A step size, or an optimiser's (learning rate, weight decay)."""
    return "/".join(f"{v:g}" for v in setting) if isinstance(setting, tuple) else f"{setting:g}"


def run(name, value, Xtr, ytr, epochs, fraction, seed):
    if name in ("adam", "momentum SGD"):
        return fit_optimiser("adam" if name == "adam" else "sgd", value, Xtr, ytr, epochs, fraction, seed)
    return fit_sampler(name, value, Xtr, ytr, epochs, fraction, seed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="no tuning: the middle of each grid")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dataset", choices=["digits", "mnist1d"], default="digits")
    args = ap.parse_args()
    if args.dataset == "mnist1d":
        from mnist1d.data import get_dataset_args, make_dataset

        data = make_dataset(get_dataset_args())  # procedural, seed 42: the published train/test split
        Xtr, Xte, ytr, yte = data["x"], data["x_test"], data["y"], data["y_test"]
    else:
        X, y = load_digits(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=args.seed)
    scaler = StandardScaler().fit(Xtr)
    Xtr, Xte = scaler.transform(Xtr).astype(np.float32), scaler.transform(Xte).astype(np.float32)
    Xfit, Xval, yfit, yval = train_test_split(Xtr, ytr, test_size=0.2, stratify=ytr, random_state=args.seed)
    best = {}
    for name, grid in GRIDS.items():
        if args.quick:
            best[name] = grid[1]
            continue
        scores = [accuracy(run(name, v, Xfit, yfit, args.epochs, 0.0, args.seed), Xval, yval) for v in grid]
        best[name] = grid[int(np.nanargmax(scores))]
        print(f"tuning {name:13s} " + "  ".join(f"{fmt(v)}: {s:.3f}" for v, s in zip(grid, scores)), flush=True)
    print(f"\nMLP ({Xtr.shape[1]}-100-10) on {args.dataset}, {args.epochs} epochs, batch 128; test accuracy (%)")
    print(f"{'method':13s} {'setting':>14s} {'0%':>7s} {'20%':>7s} {'30%':>7s}   notes")
    for name in GRIDS:
        row, notes = [], ""
        t = time.perf_counter()
        for fraction in (0.0, 0.2, 0.3):
            model = run(name, best[name], Xtr, ytr, args.epochs, fraction, args.seed)
            row.append(100 * accuracy(model, Xte, yte))
            if name == "tacthmc":
                notes += f"[{len(model.trace_)} draws, plateau {model.diagnostics_['plateau_fraction']:.0%}] "
        notes += f"{time.perf_counter() - t:.0f}s"
        print(f"{name:13s} {fmt(best[name]):>14s} " + " ".join(f"{a:7.2f}" for a in row) + f"   {notes}", flush=True)


if __name__ == "__main__":
    main()
