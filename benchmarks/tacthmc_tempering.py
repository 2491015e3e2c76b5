"""How TACT-HMC's tempering variable moves on a network posterior, for several tempering step sizes.

A 30-16-2 ReLU MLP (530 weights) on scikit-learn's breast cancer data
(standardised, all 569 rows, batch 64, prior scale 0.5, step size 1e-4), the
paper's well (temperatures 1 to 9) with its tempering friction (``tempering_noise=0.05``; the defaults size both
to the network since 2026-11-29) and ABF. For each ``tempering_step_size``
the kernel runs ``--steps`` steps and prints, per twentieth of the run, the
fraction of steps at unit temperature, the mean |xi| and the mean potential;
then the histogram of xi over the ABF bins. "auto" is
``1.5e-3 * min(1, 2 / D) ** 2`` (2.1e-8 here).

    python benchmarks/tacthmc_tempering.py                       # auto, 1e-8, 1e-7, 6e-6; ~8 minutes
    python benchmarks/tacthmc_tempering.py --eta-xi auto --steps 20000
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from bayesnet import BayesianMLPClassifier
from bayesnet.samplers.tacthmc import PAPER_TEMPERING


def run(eta_xi, n_steps: int, seed: int = 0) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X).astype(np.float32)
    # the step size given, as the paper's unpreconditioned step (its default is now "auto", set by a warm-up)
    est = BayesianMLPClassifier(sampler="tacthmc", hidden_layer_sizes=(16,), prior_scale=0.5, batch_size=64,
                                random_state=seed, max_epochs=1, burn_in=0, sampler__step_size=1e-4,
                                sampler__tempering_step_size=eta_xi,
                                **{f"sampler__{k}": v for k, v in PAPER_TEMPERING.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)  # builds the posterior and the chain (one epoch)
    sampler, state, posterior = est.sampler_, est.sampler_state_, est.posterior_
    dim = sum(p.numel() for p in posterior.parameters)
    print(f"\ntempering_step_size={eta_xi} -> {state.tempering_step_size:.3g} (D={dim}), "
          f"{n_steps} steps")
    gen = torch.Generator().manual_seed(seed)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    window = max(1, n_steps // 20)
    plateau, xi_abs, potential = [], [], []
    t0 = time.perf_counter()
    for k in range(1, n_steps + 1):
        idx = torch.randint(0, len(X), (64,), generator=gen)
        state, info = sampler.step(state, posterior, (Xt[idx], yt[idx]))
        plateau.append(float(info.extra["on_plateau"]))
        xi_abs.append(abs(float(state.xi)))
        potential.append(float(info.potential))
        if not np.isfinite(potential[-1]):
            print(f"  diverged at step {k}")
            return
        if k % window == 0:
            print(f"  step {k:7d}: at unit temperature {np.mean(plateau[-window:]):5.3f}  "
                  f"|xi| {np.mean(xi_abs[-window:]):4.2f}  U {np.mean(potential[-window:]):8.0f}")
    _, _, visits = sampler.bias_profile(state)
    visits = visits.reshape(-1, visits.shape[-1]).sum(0)  # the estimator's state has a chain axis (one chain)
    print(f"  overall fraction at unit temperature {np.mean(plateau):.3f} "
          f"(ideal {sampler.ideal_plateau_fraction(state):.2f}); "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"  xi histogram over the bins [-{state.wall:.3g}, {state.wall:.3g}]:",
          " ".join(f"{v:.3f}" for v in (visits / visits.sum()).tolist()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eta-xi", nargs="+", default=["auto", "1e-8", "1e-7", "6e-6"])
    ap.add_argument("--steps", type=int, default=100_000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for value in args.eta_xi:
        run(value if value == "auto" else float(value), args.steps)


if __name__ == "__main__":
    main()
