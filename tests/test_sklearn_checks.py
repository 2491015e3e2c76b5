"""scikit-learn's estimator checks over the Bayesian estimators."""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayesnet import (BayesianCNNClassifier, BayesianCNNRegressor, BayesianMLPClassifier, BayesianMLPRegressor,
                      BayesianRNNClassifier, BayesianRNNRegressor, TakensEmbedding)

# Small, fast settings: the checks fit dozens of times.
FAST = dict(n_draws=10, burn_in=200, thinning=2, batch_size=64, random_state=0)

# Checks that cannot pass, with the reason (parametrize_with_checks marks them xfail).
_CONV_ROUNDING = ("float32 convolution kernels round differently for different numbers of rows (measured: "
                  "1.3e-7 on outputs of order 1, float32's machine epsilon, against the check's 1e-7 tolerance; also "
                  "with oneDNN off), so a row's prediction can differ in its last bit between a subset and the whole")
EXPECTED_FAILED = {
    "BayesianCNNRegressor": {"check_methods_subset_invariance": _CONV_ROUNDING},
    "BayesianCNNClassifier": {"check_methods_subset_invariance": _CONV_ROUNDING},
    "BayesianRNNRegressor": {
        "check_regressors_train": "the check's data is 10 tabular columns with one informative: read as a sequence, "
        "the recurrent net must learn to keep column 5 in its state; it does (R^2 0.55 after 3000 sghmc steps) but "
        "not in the 150 steps the checks can afford (R^2 about 0)",
    },
}


@parametrize_with_checks(
    # every estimator at its default sampler and step size (the warm-up adapts it, also on the checks' raw data)
    [BayesianMLPClassifier(hidden_layer_sizes=(16,), **FAST),
     BayesianMLPRegressor(hidden_layer_sizes=(16,), **FAST),
     # 2-D X: one-channel signals for the CNN, univariate sequences for the RNN
     BayesianCNNClassifier(channels=(4,), dense_layer_sizes=(16,), **FAST),
     # (the checks' two tabular columns read as a two-step sequence; 200 steps of warm-up pass the score checks on
     # random_state 0-4, measured 2026-11-27, where it had 400: 94 -> 65 s in one process)
     BayesianRNNClassifier(hidden_size=8, dense_layer_sizes=(8,), **FAST)],
    expected_failed_checks=lambda est: EXPECTED_FAILED.get(type(est).__name__, {}),
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# The CNN and RNN regressors (70 s of the checks on a 2-core machine) run with -m slow: their regression code is the
# MLP regressor's and their networks the classifiers', both checked in the default run (which must stay under about
# 10 minutes).
@pytest.mark.slow
@parametrize_with_checks(
    # (a convolution over tabular columns learns slower than a dense layer: more steps for the score checks)
    [BayesianCNNRegressor(channels=(8,), dense_layer_sizes=(16,), **{**FAST, "burn_in": 400}),
     BayesianRNNRegressor(hidden_size=8, dense_layer_sizes=(8,), **FAST)],
    expected_failed_checks=lambda est: EXPECTED_FAILED.get(type(est).__name__, {}),
)
def test_sklearn_compatible_regressors_on_signals(estimator, check):
    check(estimator)


# The Takens transformer (under a second in all). dimension=1: the checks' data have as few as one column.
@parametrize_with_checks([TakensEmbedding(dimension=1)])
def test_sklearn_compatible_transformer(estimator, check):
    check(estimator)
