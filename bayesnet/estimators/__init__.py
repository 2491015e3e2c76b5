"""scikit-learn estimators whose fit samples the posterior over network weights."""

from .base import BayesianNeuralNet
from .cnn import BayesianCNNClassifier, BayesianCNNRegressor
from .mlp import MLP, BayesianMLPClassifier, BayesianMLPRegressor
from .rnn import BayesianRNNClassifier, BayesianRNNRegressor

__all__ = ["BayesianNeuralNet", "MLP", "BayesianMLPClassifier", "BayesianMLPRegressor", "BayesianCNNClassifier",
           "BayesianCNNRegressor", "BayesianRNNClassifier", "BayesianRNNRegressor"]
