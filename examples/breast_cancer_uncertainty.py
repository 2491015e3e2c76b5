"""Uncertainty-aware classification of breast cancer tumours with a Bayesian MLP.

Fits ``BayesianMLPClassifier`` by SGHMC (posterior sampling over the weights),
compares it with scikit-learn's point-estimate ``MLPClassifier`` on the same
split, and uses the 95% credible interval of p(malignant) to flag the test
rows the model is least sure about.

Run from the repository root:

    OMP_NUM_THREADS=1 python examples/breast_cancer_uncertainty.py
"""

import time
import warnings

import numpy as np
import torch

torch.set_num_threads(1)  # keep to one core (and set OMP_NUM_THREADS=1 in the environment)

from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bayesnet import BayesianMLPClassifier
from bayesnet.metrics import expected_calibration_error

# --------------------------------------------------------------------------- #
# Data: stratified 70/30 split. In sklearn's encoding 0 = malignant, 1 = benign.
# --------------------------------------------------------------------------- #
data = load_breast_cancer()
X, y = data.data, data.target
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
MALIGNANT = list(data.target_names).index("malignant")  # == 0
print(f"breast cancer: {len(y_train)} train / {len(y_test)} test rows, {X.shape[1]} features")

# --------------------------------------------------------------------------- #
# Bayesian MLP: 2000 burn-in SGHMC steps, then keep every 10th of 2000 steps.
# --------------------------------------------------------------------------- #
bayes = make_pipeline(
    StandardScaler(),
    BayesianMLPClassifier(hidden_layer_sizes=(100,), sampler="sghmc", sampler__step_size=1e-4,
                          prior_scale=0.5, n_draws=200, burn_in=2000, thinning=10, batch_size=64,
                          random_state=0),
)
t0 = time.perf_counter()
bayes.fit(X_train, y_train)
t_bayes = time.perf_counter() - t0
net = bayes[-1]

# Posterior predictive probabilities plus equal-tailed 95% credible bounds of
# each class probability across the 200 posterior draws.
proba, lower, upper = bayes.predict_proba(X_test, return_interval=True, level=0.95)
pred = net.classes_[proba.argmax(axis=1)]  # same as bayes.predict(X_test)

# --------------------------------------------------------------------------- #
# Baseline: a point-estimate MLP with the same architecture.
# --------------------------------------------------------------------------- #
mlp = make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(100,), max_iter=500, random_state=0))
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    mlp.fit(X_train, y_train)
t_mlp = time.perf_counter() - t0
proba_mlp = mlp.predict_proba(X_test)


def row(name, p, classes, seconds):
    acc = accuracy_score(y_test, classes[p.argmax(axis=1)])
    nll = log_loss(y_test, p, labels=classes)
    ece = expected_calibration_error(y_test, p, classes=classes)
    print(f"{name:<28}{acc:>9.4f}{nll:>10.4f}{ece:>9.4f}{seconds:>9.1f}")


print(f"\n{'model':<28}{'accuracy':>9}{'log loss':>10}{'ECE':>9}{'fit s':>9}")
row("BayesianMLPClassifier sghmc", proba, net.classes_, t_bayes)
row("sklearn MLPClassifier", proba_mlp, mlp[-1].classes_, t_mlp)
print(f"({net.trace_})")

# --------------------------------------------------------------------------- #
# Which test rows is the posterior least sure about?
# --------------------------------------------------------------------------- #
p_mal, lo_mal, hi_mal = proba[:, MALIGNANT], lower[:, MALIGNANT], upper[:, MALIGNANT]
width = hi_mal - lo_mal
order = np.argsort(-width, kind="stable")[:5]
# Per-draw probabilities, (n_draws, n_test, n_classes): the share of posterior
# draws that individually vote "malignant" shows how split the posterior is.
draws = net.predict_draws(bayes[:-1].transform(X_test))
votes = (draws[:, :, MALIGNANT] > 0.5).mean(axis=0)
print("\n5 test rows with the widest 95% credible interval of p(malignant):")
print(f"{'test row':>8}{'p(mal)':>9}{'95% interval':>20}{'width':>8}{'draws>0.5':>11}{'true':>11}{'predicted':>11}")
for i in order:
    print(f"{i:>8}{p_mal[i]:>9.3f}    [{lo_mal[i]:.3f}, {hi_mal[i]:.3f}]{width[i]:>8.4f}{votes[i]:>11.2f}"
          f"{data.target_names[y_test[i]]:>11}{data.target_names[pred[i]]:>11}")

# Split the test rows at the median interval width: the model should be more
# accurate where its credible interval is narrow.
median = np.median(width)
narrow = width <= median
correct = pred == y_test
print(f"\nmedian interval width {median:.4f}")
print(f"{'group':<22}{'rows':>6}{'accuracy':>10}{'errors':>8}")
for name, mask in (("narrow (<= median)", narrow), ("wide (> median)", ~narrow)):
    print(f"{name:<22}{mask.sum():>6}{correct[mask].mean():>10.4f}{(~correct[mask]).sum():>8}")
