"""Bayesian multilayer perceptrons."""

from __future__ import annotations

import torch
from torch import nn

from .base import BayesianNeuralNet
from .mixins import BayesianClassifierMixin, BayesianRegressorMixin

__all__ = ["MLP", "BayesianMLPClassifier", "BayesianMLPRegressor"]

_ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "logistic": nn.Sigmoid,
                "gelu": nn.GELU, "identity": nn.Identity}


class MLP(nn.Module):
    """Fully connected network ``in -> hidden... -> out`` with one activation between layers.

    Parameters
    ----------
    n_features : int
    hidden_layer_sizes : tuple of int
    n_outputs : int
    activation : {"relu", "tanh", "sigmoid"/"logistic", "gelu", "identity"}
    """

    def __init__(self, n_features: int, hidden_layer_sizes=(100,), n_outputs: int = 1, activation: str = "relu"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}.")
        sizes = [int(n_features), *[int(h) for h in hidden_layer_sizes]]
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), _ACTIVATIONS[activation]()]
        layers.append(nn.Linear(sizes[-1], int(n_outputs)))
        self.net = nn.Sequential(*layers)

    def forward(self, X):
        return self.net(X)

    def forward_chains(self, parameters, X):
        """Outputs of ``S`` parameter sets at once, shape ``(S, n, n_outputs)``.

        ``parameters`` lists this module's parameters in order, each with a
        leading axis of ``S`` members (weights ``(S, out, in)``, biases
        ``(S, out)``); ``X`` is ``(n, n_features)`` (shared by the members) or
        ``(S, n, n_features)``. Batched matrix products: on a CPU measurably
        faster than ``vmap`` over ``functional_call`` (benchmarks/chains_vectorised.py).
        """
        layers = [m for m in self.net if isinstance(m, nn.Linear)]
        activations = [m for m in self.net if not isinstance(m, nn.Linear)]
        single = parameters[0].shape[0] == 1 and X.ndim == 2  # one member: plain matrix products, no batch axis
        h = X
        for i in range(len(layers)):
            weight, bias = parameters[2 * i], parameters[2 * i + 1]
            if single:
                h = torch.nn.functional.linear(h, weight.squeeze(0), bias.squeeze(0))  # views: no copy in backward
            else:
                h = torch.baddbmm(bias.unsqueeze(1), h.expand(weight.shape[0], *h.shape[-2:]),
                                  weight.transpose(1, 2))
            if i < len(activations):
                h = activations[i](h)
        return h.unsqueeze(0) if single else h


def _check_hidden(hidden_layer_sizes):
    sizes = (hidden_layer_sizes,) if isinstance(hidden_layer_sizes, int) else tuple(hidden_layer_sizes)
    if any(isinstance(h, bool) or int(h) != h or h < 1 for h in sizes):
        raise ValueError(f"hidden_layer_sizes must be positive integers, got {hidden_layer_sizes!r}.")
    return sizes


_COMMON_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Widths of the hidden layers.
    activation : {"relu", "tanh", "sigmoid", "logistic", "gelu", "identity"}, default="relu"
    sampler : str, Sampler instance or class, default="sghmc"
        One of :func:`bayesnet.available_samplers`. Its hyperparameters are
        set as ``sampler__<name>=value`` keyword arguments, e.g.
        ``sampler__step_size=1e-4`` (also through ``set_params`` and
        ``GridSearchCV``).
    n_draws : int, default=100
        Number of posterior draws kept per chain (per temperature-1 replica
        or walker for pt-langevin and eqn) for prediction; predictions average
        the draws of all chains.
    burn_in : int, default=1000
        Sampler steps (mini-batches) discarded at the start.
    thinning : int or "auto", default="auto"
        Keep every ``thinning``-th candidate step after burn-in (every step
        is a candidate, except for tacthmc, which offers only the steps at
        unit temperature that are multiples of its ``steps_per_sample``, and
        hmc, where a step is a whole trajectory). "auto" is 10, or 1 for
        tacthmc.
    n_chains : int, default=1
        Independent chains. On one device they advance together in one
        batched forward and backward pass (the MLP's batched matrix products;
        ``vmap`` for other networks), all on the same mini-batch; each starts
        from its own random initialisation. pt-langevin runs ``n_replicas``
        tempering replicas per chain, eqn ``n_walkers`` walkers per chain.
        ``convergence_`` reports split R-hat and bulk ESS across them.
    n_jobs : int or None, default=None
        With ``n_chains > 1``: fit groups of chains in ``n_jobs`` joblib
        worker processes (loky by default; inside
        ``joblib.parallel_config(backend="dask")`` on a dask cluster) and
        merge their draws; None keeps all chains vectorised in this process.
        Each group is vectorised in its worker.
    prior_scale : float or prior object, default=1.0
        Standard deviation of the isotropic Gaussian prior on every weight
        and bias (or an object with ``log_prob(parameters)``).
    batch_size : int or "auto", default="auto"
        Mini-batch size; -1 for full-batch gradients; "auto" is 128 rows for
        the stochastic-gradient samplers and the full batch for ``hmc``.
    max_epochs : int or None, default=None
        Epochs to run; None runs ``burn_in + n_draws * thinning`` steps
        (for tacthmc ``burn_in + n_draws * thinning * steps_per_sample / 0.2``,
        0.2 being the expected fraction of steps at unit temperature).
    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Where sampling runs; draws are always stored on the CPU.
    random_state : int, RandomState or None, default=None
        Seeds the initial weights, the mini-batch order and the sampler noise.
    verbose : int, default=0
        1 shows a progress bar over sampler steps.
    **kwargs
        ``sampler__*`` hyperparameters and skorch ``NeuralNet`` options
        (``callbacks``, ``iterator_train__*``, ...).

    Attributes
    ----------
    classes_ / n_outputs_ / n_features_in_ : fitted data description.
    module_ : torch.nn.Module
        The network; its parameters hold the chain's current position.
    sampler_ : bayesnet.samplers.Sampler
    trace_ : bayesnet.trace.Trace
        The retained draws, one slot per chain (per replica/walker for
        pt-langevin and eqn); ``trace_.as_array()`` is (n_slots, n_draws, D).
    convergence_ : dict
        ``{"potential" | "projection_k": {"rhat": float, "ess_bulk": float}}``:
        rank-normalised split R-hat and bulk effective sample size (Vehtari
        et al. 2021) of the potential and of three fixed random projections
        of the weights, over the draws of all chains.
    shards_ : list of estimators or None
        With ``n_jobs``: the per-process estimators whose draws were merged.
    diagnostics_ : dict
        Means over the steps after burn-in of the sampler's diagnostics:
        ``potential``, ``kinetic_temperature`` (samplers with momentum; about
        ``temperature`` when the step size is right), ``thermostat`` (sgnht),
        ``acceptance_rate`` and ``n_divergent`` (hmc), ``n_steps``, and
        ``max_rhat``/``min_ess_bulk`` over ``convergence_``; pt-langevin adds
        its acceptance and swap rates.
    history_ : skorch History
        Per step: ``potential``, ``kinetic_energy``, ``kinetic_temperature``
        (samplers with momentum), ``train_loss`` (= potential / N).
"""


class BayesianMLPClassifier(BayesianClassifierMixin, BayesianNeuralNet):
    __doc__ = """Bayesian MLP classifier fitted by sampling the posterior over its weights.

    The likelihood is categorical on the network's logits; ``predict_proba``
    averages the class probabilities of the retained posterior draws.
    """ + _COMMON_DOC

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, sampler="sghmc", n_draws=100,
                 burn_in=1000, thinning="auto", n_chains=1, n_jobs=None, prior_scale=1.0, batch_size="auto",
                 max_epochs=None, device="cpu",
                 random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, batch_size=batch_size, max_epochs=max_epochs,
                         device=device,
                         random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation

    def _build_module(self):
        return MLP(self.n_features_in_, _check_hidden(self.hidden_layer_sizes), self.n_outputs_, self.activation)


class BayesianMLPRegressor(BayesianRegressorMixin, BayesianNeuralNet):
    __doc__ = """Bayesian MLP regressor fitted by sampling the posterior over its weights and noise.

    The likelihood is Gaussian with an observation-noise variance that is
    sampled too (inverse-gamma prior, paper 001 Sec. 4, paper 003 eq. 5), so
    predictive intervals include aleatoric noise. Targets are standardised
    internally and predictions mapped back.
    """ + _COMMON_DOC + """
    noise_shape, noise_scale : float, default=1.0, 0.1
        Inverse-gamma prior ``IG(noise_shape, noise_scale)`` on the noise
        variance of the *standardised* targets.
"""

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, sampler="sghmc", n_draws=100,
                 burn_in=1000, thinning="auto", n_chains=1, n_jobs=None, prior_scale=1.0, noise_shape=1.0,
                 noise_scale=0.1, batch_size="auto",
                 max_epochs=None, device="cpu", random_state=None, verbose=0, **kwargs):
        super().__init__(sampler=sampler, n_draws=n_draws, burn_in=burn_in, thinning=thinning, n_chains=n_chains,
                         n_jobs=n_jobs, prior_scale=prior_scale, batch_size=batch_size, max_epochs=max_epochs,
                         device=device,
                         random_state=random_state, verbose=verbose, **kwargs)
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.noise_shape = noise_shape
        self.noise_scale = noise_scale

    def _build_module(self):
        return MLP(self.n_features_in_, _check_hidden(self.hidden_layer_sizes), self.n_outputs_, self.activation)
