"""One-step-ahead forecasting of yearly sunspot numbers with a Bayesian MLP.

A Takens delay embedding feeds a ``BayesianMLPRegressor`` sampled by SGLD.
The regressor samples the observation-noise variance together with the
weights, so its predictive intervals include aleatoric noise; we check their
empirical coverage on the held-out (later) part of the series, compare the
error with a persistence forecast, and tune the embedding with
``GridSearchCV`` + ``TimeSeriesSplit``.

Run from the repository root:

    OMP_NUM_THREADS=1 python examples/sunspots_forecast.py
"""

import time

import numpy as np
import torch

torch.set_num_threads(1)  # keep to one core (and set OMP_NUM_THREADS=1 in the environment)

from sklearn.base import clone
from sklearn.metrics import root_mean_squared_error
from sklearn.model_selection import GridSearchCV, TimeSeriesSplit
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from bayesnet import BayesianMLPRegressor, TakensEmbedding, make_forecasting_windows
from bayesnet.datasets import load_sunspots
from bayesnet.metrics import interval_coverage

# --------------------------------------------------------------------------- #
# Data: lag matrix (column j = lag j+1) and next-year targets, split in time.
# --------------------------------------------------------------------------- #
series, years = load_sunspots(return_years=True)
N_LAGS = 8
X, y = make_forecasting_windows(series, n_lags=N_LAGS)
target_years = years[N_LAGS:]                         # year of each target
split = int(0.7 * len(y))                             # chronological: no shuffling
X_train, X_test, y_train, y_test = X[:split], X[split:], y[:split], y[split:]
print(f"sunspots {years[0]}-{years[-1]}: train targets {target_years[0]}-{target_years[split - 1]} "
      f"({split}), test {target_years[split]}-{target_years[-1]} ({len(y_test)})")

# --------------------------------------------------------------------------- #
# Model: embedding (y[t-1], ..., y[t-4]) -> standardise -> Bayesian MLP (SGLD).
# --------------------------------------------------------------------------- #
pipe = Pipeline([
    ("takensembedding", TakensEmbedding(dimension=4, delay=1)),
    ("standardscaler", StandardScaler()),
    ("bayesianmlpregressor", BayesianMLPRegressor(
        hidden_layer_sizes=(20,), sampler="sgld", sampler__step_size=2e-4, batch_size=32,
        burn_in=3000, n_draws=200, thinning=10, random_state=0)),
])
t0 = time.perf_counter()
pipe.fit(X_train, y_train)
print(f"fit: {time.perf_counter() - t0:.1f} s, {pipe[-1].trace_}")

# Predictive mean, sd (weights + noise) and two equal-tailed predictive intervals.
mean, std, lo95, hi95 = pipe.predict(X_test, return_std=True, return_interval=True, level=0.95)
_, lo50, hi50 = pipe.predict(X_test, return_interval=True, level=0.50)

persistence = X_test[:, 0]                            # forecast y[t] = y[t-1]
print(f"\n{'forecast':<26}{'test RMSE':>10}")
print(f"{'Bayesian MLP (mean)':<26}{root_mean_squared_error(y_test, mean):>10.2f}")
print(f"{'persistence y[t-1]':<26}{root_mean_squared_error(y_test, persistence):>10.2f}")

print(f"\n{'interval':<10}{'nominal':>8}{'coverage':>10}{'mean width':>12}")
for name, level, lo, hi in (("95%", 0.95, lo95, hi95), ("50%", 0.50, lo50, hi50)):
    print(f"{name:<10}{level:>8.2f}{interval_coverage(y_test, lo, hi):>10.3f}{np.mean(hi - lo):>12.1f}")
print(f"mean predictive sd {std.mean():.1f}")

print("\nlast 5 test years:")
print(f"{'year':>6}{'observed':>10}{'mean':>8}{'95% interval':>20}")
for i in range(len(y_test) - 5, len(y_test)):
    print(f"{target_years[split + i]:>6}{y_test[i]:>10.1f}{mean[i]:>8.1f}    [{lo95[i]:6.1f}, {hi95[i]:6.1f}]")

# --------------------------------------------------------------------------- #
# Tune the embedding: dimension and delay, with forward-chaining CV folds.
# A shorter chain keeps the 4 x 3 = 12 fits quick. n_lags=8 covers the
# largest span dimension * delay = 4 * 2.
# --------------------------------------------------------------------------- #
fast = clone(pipe).set_params(bayesianmlpregressor__burn_in=500, bayesianmlpregressor__n_draws=20)
grid = GridSearchCV(fast, {"takensembedding__dimension": [2, 4], "takensembedding__delay": [1, 2]},
                    cv=TimeSeriesSplit(n_splits=3), scoring="neg_root_mean_squared_error")
t0 = time.perf_counter()
grid.fit(X_train, y_train)
print(f"\nGridSearchCV (TimeSeriesSplit(3), burn_in=500, n_draws=20): {time.perf_counter() - t0:.1f} s")
print(f"{'dimension':>10}{'delay':>7}{'CV RMSE':>10}{'rank':>6}")
res = grid.cv_results_
for params, score, rank in zip(res["params"], res["mean_test_score"], res["rank_test_score"]):
    print(f"{params['takensembedding__dimension']:>10}{params['takensembedding__delay']:>7}{-score:>10.2f}{rank:>6}")
print(f"best params: {grid.best_params_}")
best_rmse = root_mean_squared_error(y_test, grid.best_estimator_.predict(X_test))
print(f"test RMSE of the refitted best (fast) pipeline: {best_rmse:.2f}")
