"""The foundation issue's real-data claims, measured as tests.

* Breast cancer, stratified 70/30 splits: BayesianMLPClassifier(sampler="sghmc")
  reaches mean test accuracy >= 0.96 and an expected calibration error no worse
  than scikit-learn's MLPClassifier on the same splits.
* A Takens-embedded real series (yearly sunspots): the regressor's 95 %
  predictive intervals cover 90-98 % of the test targets.
"""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bayesnet import BayesianMLPClassifier, BayesianMLPRegressor, TakensEmbedding, make_forecasting_windows
from bayesnet.datasets import load_sunspots
from bayesnet.metrics import expected_calibration_error, interval_coverage

# Six splits: ECE on 171 test rows is noisy (a few hundredths from split to split), so compare means.
SPLITS = [0, 1, 2, 3, 4, 5]


@pytest.mark.slow  # 6 fits of 4,000 steps, about 20 s: the default run checks the defaults on breast cancer elsewhere
def test_breast_cancer_accuracy_and_calibration():
    X, y = load_breast_cancer(return_X_y=True)
    acc, ece, acc_sk, ece_sk = [], [], [], []
    for seed in SPLITS:
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
        bayes = make_pipeline(StandardScaler(), BayesianMLPClassifier(
            hidden_layer_sizes=(100,), sampler="sghmc", sampler__step_size=1e-4, prior_scale=0.5,
            n_draws=200, burn_in=2000, thinning=10, batch_size=64, random_state=0)).fit(Xtr, ytr)
        sk = make_pipeline(StandardScaler(), MLPClassifier(random_state=0, max_iter=2000)).fit(Xtr, ytr)
        for model, a, e in ((bayes, acc, ece), (sk, acc_sk, ece_sk)):
            p = model.predict_proba(Xte)
            a.append(accuracy_score(yte, p.argmax(1)))
            e.append(expected_calibration_error(yte, p))
    print("bayesnet acc", np.round(acc, 4), "ece", np.round(ece, 4))
    print("sklearn  acc", np.round(acc_sk, 4), "ece", np.round(ece_sk, 4))
    assert np.mean(acc) >= 0.96
    # calibration no worse than scikit-learn's MLP: the paired difference over the splits within two of its
    # standard errors (171 test rows per split make an ECE uncertain by about 0.01)
    diff = np.asarray(ece) - np.asarray(ece_sk)
    assert diff.mean() <= 2 * diff.std(ddof=1) / np.sqrt(len(diff)), diff


def test_sunspots_forecast_interval_coverage():
    X, y = make_forecasting_windows(load_sunspots(), n_lags=4)
    split = int(0.7 * len(y))  # chronological
    reg = make_pipeline(TakensEmbedding(dimension=4, delay=1), StandardScaler(),
                        BayesianMLPRegressor(hidden_layer_sizes=(20,), sampler="sgld", sampler__step_size=2e-4,
                                             batch_size=32, burn_in=3000, n_draws=200, thinning=10,
                                             random_state=0))
    reg.fit(X[:split], y[:split])
    mean, lo, hi = reg.predict(X[split:], return_interval=True, level=0.95)
    cover = interval_coverage(y[split:], lo, hi)
    rmse = float(np.sqrt(np.mean((mean - y[split:]) ** 2)))
    print(f"sunspots: 95% coverage {cover:.3f}, RMSE {rmse:.2f} (persistence {np.sqrt(np.mean((X[split:, 0] - y[split:])**2)):.2f})")
    assert 0.90 <= cover <= 0.98
