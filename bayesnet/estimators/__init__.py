"""scikit-learn estimators whose fit samples the posterior over network weights."""

from .base import BayesianNeuralNet
from .mlp import MLP, BayesianMLPClassifier, BayesianMLPRegressor

__all__ = ["BayesianNeuralNet", "MLP", "BayesianMLPClassifier", "BayesianMLPRegressor"]
