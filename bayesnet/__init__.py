"""bayesnet: scikit-learn compatible Bayesian neural networks fitted by posterior sampling."""

from .diagnostics import effective_sample_size, integrated_autocorrelation_time, split_rhat
from .estimators import (BayesianCNNClassifier, BayesianCNNRegressor, BayesianMLPClassifier,
                         BayesianMLPRegressor, BayesianRNNClassifier, BayesianRNNRegressor)
from .io import load, save
from .samplers import DivergenceError, available_samplers, make_sampler
from .timeseries import TakensEmbedding, make_forecasting_windows

__version__ = "0.1.0"

__all__ = [
    "BayesianMLPClassifier",
    "BayesianMLPRegressor",
    "BayesianCNNClassifier",
    "BayesianCNNRegressor",
    "BayesianRNNClassifier",
    "BayesianRNNRegressor",
    "TakensEmbedding",
    "make_forecasting_windows",
    "DivergenceError",
    "save",
    "load",
    "available_samplers",
    "make_sampler",
    "effective_sample_size",
    "integrated_autocorrelation_time",
    "split_rhat",
]
