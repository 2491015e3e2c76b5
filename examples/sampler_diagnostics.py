"""Compare bayesnet's samplers on the diabetes data, with MCMC diagnostics.

For sgld, sghmc, sgnht, baoab (two settings) and hmc this fits a
``BayesianMLPRegressor`` on standardised inputs and prints

* test RMSE and the empirical coverage of the 95% predictive interval;
* effective sample size (ESS) and split R-hat of the stored mini-batch
  potentials and of 3 fixed random projections of the weight draws;
* the mean kinetic temperature recorded in the skorch history (samplers with
  momentum), which should be close to the sampler's temperature (1).

Run from the repository root:

    OMP_NUM_THREADS=1 python examples/sampler_diagnostics.py
"""

import time

import numpy as np
import torch

torch.set_num_threads(1)  # keep to one core (and set OMP_NUM_THREADS=1 in the environment)

from sklearn.datasets import load_diabetes
from sklearn.metrics import root_mean_squared_error
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import bayesnet
from bayesnet import BayesianMLPRegressor, DivergenceError, effective_sample_size, split_rhat
from bayesnet.metrics import interval_coverage

# --------------------------------------------------------------------------- #
# Data: 442 patients, 10 features; standardise X (y is standardised inside).
# --------------------------------------------------------------------------- #
X, y = load_diabetes(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
scaler = StandardScaler().fit(X_train)
X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
print(f"diabetes: {len(y_train)} train / {len(y_test)} test rows; available samplers: "
      f"{bayesnet.available_samplers()}")

# Step sizes are in units of the full-data potential (stable size ~ 1/N).
# sgld / sghmc / sgnht take eta; baoab takes a *time step* eps with a friction
# gamma per unit time, and SGHMC's eta corresponds to eps**2 (eps = 5e-3 is
# comparable to eta = 2.5e-5). The first baoab row keeps the default
# friction=1: its per-step damping 1 - exp(-gamma * eps) = 0.005 is ten times
# weaker than SGHMC's friction=0.05, and the kinetic temperature (and the
# split R-hat) show that this chain runs hot. The second row damps harder and
# uses a smaller time step.
RUNS = [  # (label, sampler, sampler hyperparameters)
    ("sgld", "sgld", {"sampler__step_size": 2e-5}),
    ("sghmc", "sghmc", {"sampler__step_size": 2e-5}),
    ("sgnht", "sgnht", {"sampler__step_size": 2e-5}),
    ("baoab g=1", "baoab", {"sampler__step_size": 5e-3}),
    ("baoab g=10", "baoab", {"sampler__step_size": 2e-3, "sampler__friction": 10.0}),
    # hmc: full batch (batch_size=-1), whole trajectories per step; its step size is tuned during burn-in
    ("hmc", "hmc", {"sampler__step_size": 1e-3, "sampler__n_leapfrog": 10, "batch_size": -1, "burn_in": 200,
                    "n_draws": 200, "thinning": 2}),
]
COMMON = dict(hidden_layer_sizes=(50,), batch_size=64, burn_in=2000, n_draws=200, thinning=10, random_state=0)

rng = np.random.default_rng(0)
projections = None  # (D, 3) unit vectors, drawn once D is known, shared by all samplers


def kinetic_temperatures(est):
    """Kinetic temperature at every sampler step after burn-in (empty without momentum).

    ``est.history`` is skorch's History: one dict per epoch, whose "batches"
    entry holds one dict per sampler step (e.g. ``est.history[-1, "batches"]``
    for the last epoch) with "potential" and, for samplers with momentum,
    "kinetic_temperature".
    """
    temps = [b["kinetic_temperature"] for epoch in est.history for b in epoch["batches"]
             if "kinetic_temperature" in b]
    return np.array(temps[est.burn_in:], dtype=float)


available = bayesnet.available_samplers()
rows = []
for label, name, params in RUNS:
    if name not in available:
        print(f"{label}: sampler {name!r} not available, skipped")
        continue
    est = BayesianMLPRegressor(sampler=name, **{**COMMON, **params})
    t0 = time.perf_counter()
    try:
        est.fit(X_train, y_train)
    except DivergenceError as err:
        print(f"{label}: DivergenceError: {err}")
        if len(est.trace_) < 4:
            continue  # too few draws to predict with or to diagnose
    seconds = time.perf_counter() - t0

    mean, lo, hi = est.predict(X_test, return_interval=True, level=0.95)
    rmse = root_mean_squared_error(y_test, mean)
    cover = interval_coverage(y_test, lo, hi)

    # Diagnostics on the single chain, (1, n_draws, D).
    draws = est.trace_.as_array()
    if projections is None:
        projections = rng.standard_normal((draws.shape[-1], 3))
        projections /= np.linalg.norm(projections, axis=0)
    proj = draws[0] @ projections                     # (n_draws, 3)
    # The stored potentials are *mini-batch* potentials: batch-to-batch noise
    # decorrelates them, so their ESS looks better than that of the weights.
    pot = est.trace_.potentials
    ess = [effective_sample_size(pot)] + [effective_sample_size(proj[:, k]) for k in range(3)]
    rhat = [split_rhat(pot)] + [split_rhat(proj[:, k]) for k in range(3)]
    temps = kinetic_temperatures(est)
    kin = temps.mean() if temps.size else None
    rows.append((label, params["sampler__step_size"], rmse, cover, ess, rhat, kin, seconds, draws.shape[1]))

print(f"\nbaseline: RMSE of predicting the training mean = "
      f"{root_mean_squared_error(y_test, np.full_like(y_test, y_train.mean())):.2f}")
print(f"\n{'sampler':<11}{'step':>8}{'RMSE':>8}{'cov95':>7}{'draws':>6}"
      f"{'ESS U':>7}{'ESS proj (3)':>20}{'Rhat U':>8}{'Rhat proj (3)':>20}{'kinT':>7}{'fit s':>7}")
for name, step, rmse, cover, ess, rhat, kin, seconds, n in rows:
    ess_p = " ".join(f"{e:6.1f}" for e in ess[1:])
    rhat_p = " ".join(f"{r:6.3f}" for r in rhat[1:])
    kin_s = f"{kin:7.3f}" if kin is not None else f"{'-':>7}"
    print(f"{name:<11}{step:>8.0e}{rmse:>8.2f}{cover:>7.3f}{n:>6}{ess[0]:>7.1f}{ess_p:>20}"
          f"{rhat[0]:>8.3f}{rhat_p:>20}{kin_s}{seconds:>7.1f}")
print("\nESS is in kept draws (of 200); split R-hat > 1.01 means the two halves of the kept chain disagree."
      "\nkinT: mean kinetic temperature after burn-in (target 1; sgld has no momentum).")
