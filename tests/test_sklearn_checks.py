"""scikit-learn's estimator checks over the Bayesian estimators."""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayesnet import BayesianMLPClassifier, BayesianMLPRegressor

# Small, fast settings: the checks fit dozens of times.
FAST = dict(hidden_layer_sizes=(16,), n_draws=10, burn_in=150, thinning=5, batch_size=64, random_state=0)

# Checks that cannot pass, with the reason (parametrize_with_checks marks them xfail).
EXPECTED_FAILED = {}


@parametrize_with_checks(
    [BayesianMLPClassifier(**FAST), BayesianMLPRegressor(**FAST)],
    expected_failed_checks=lambda est: EXPECTED_FAILED,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
