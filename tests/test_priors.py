"""The weight priors: fan-in scaling, the hierarchical prior's exact Gibbs step, ``prior_scale`` resolution, and
the per-chain Gamma numbers the Gibbs step draws."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

from bayesnet.diagnostics import effective_sample_size
from bayesnet.priors import FanInPrior, GaussianPrior, HierarchicalPrior, make_prior
from bayesnet.samplers import ChainRandom, make_sampler


def test_fan_in_variances_follow_each_layer():
    """``g^2 / n_in`` for a dense weight ``(out, in)`` and a convolution ``(out, in, k, k)``; ``s_b^2`` for a
    bias."""
    prior = FanInPrior(gain=2.0, bias_scale=0.5)
    assert prior.variances([(16, 30), (16,), (8, 3, 5, 5), (8,)]) == pytest.approx(
        [4.0 / 30, 0.25, 4.0 / 75, 0.25])


@pytest.mark.parametrize("prior", [FanInPrior(1.5, 0.7), HierarchicalPrior(1.5, 0.7),
                                   HierarchicalPrior(1.5, 0.7, input_relevance=False)],
                         ids=["fan_in", "hier", "hier per layer"])
def test_closed_form_gradient_matches_autograd(prior):
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(3, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True),
              torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)]
    if isinstance(prior, HierarchicalPrior):
        G = 6 if prior.input_relevance else 2  # the first weight's 5 inputs and the bias, or one per tensor
        assert sum(prior.groups([p.shape[1:] for p in params])) == G
        prior.precision = torch.rand(3, G, generator=gen, dtype=torch.float64) + 0.5
    value = prior.log_prob_chains(params)
    auto = torch.autograd.grad(value.sum(), params)
    for a, b in zip(auto, prior.grad_log_prob_chains([p.detach() for p in params])):
        torch.testing.assert_close(a, b)
    if isinstance(prior, HierarchicalPrior):
        detached = [p.detach() for p in params]
        # the value against the formula, group by group: sum_g (a - 1 + n_g/2) log tau_g - b tau_g - tau_g |theta_g|^2
        # / (2 c_k), with c_k = gain^2 / 5 for the weight and bias_scale^2 for the bias
        tau, (w, bias) = prior.precision, detached
        groups = [(w[:, :, j], 2.25 / 5) for j in range(5)] if prior.input_relevance else [(w, 2.25 / 5)]
        groups.append((bias, 0.49))
        expected = sum((0.5 * g[0].numel() * torch.log(tau[:, i]) - tau[:, i]
                        - tau[:, i] * (g * g).reshape(3, -1).sum(1) / (2 * c)) for i, (g, c) in enumerate(groups))
        torch.testing.assert_close(value.detach(), expected)
        # the compiled step's form of the same value
        factors, offset = prior.quadratic_form(detached)
        quad = sum((f.reshape(f.shape + (1,) * (p.ndim - f.ndim)) * p ** 2).reshape(3, -1).sum(1)
                   for f, p in zip(factors, detached))
        torch.testing.assert_close(offset - 0.5 * quad, value.detach())
        # the value and gradient together, as the eager step takes them
        both, grads = prior.log_prob_and_grad_chains(detached)
        torch.testing.assert_close(both, value.detach())
        for a, b in zip(auto, grads):
            torch.testing.assert_close(a, b)


def test_one_precision_per_input_groups_the_input_layer_by_column():
    """The input layer's weights ``(out, in)`` have a precision per input (the weights out of that input), every
    other tensor one; a convolution's input channels, a recurrent layer's input features likewise; an input
    layer with one input has one precision."""
    prior = HierarchicalPrior()
    assert prior.groups([(16, 30), (16,), (2, 16), (2,)]) == [30, 1, 1, 1]
    assert prior.groups([(8,), (8, 3, 5, 5), (8,)]) == [1, 3, 1]  # the first tensor of two or more dimensions
    assert prior.groups([(32, 1, 5), (32,)]) == [1, 1]
    assert HierarchicalPrior(input_relevance=False).groups([(16, 30), (16,)]) == [1, 1]
    with pytest.raises(ValueError, match="input_relevance"):
        HierarchicalPrior(input_relevance="yes")
    # a column of the input layer whose weights are large gets a small precision, one whose weights are small a
    # large one: the Gibbs conditional's mean (a + n/2) / (b + |theta_g|^2 / 2c)
    S = 2000
    w = torch.ones(S, 8, 3, dtype=torch.float64)
    w[:, :, 0] *= 3.0
    w[:, :, 2] *= 0.1
    prior.gibbs_update([w, torch.zeros(S, 8, dtype=torch.float64)], ChainRandom(0, S))
    tau = prior.precision.mean(0).numpy()
    assert tau[0] < tau[1] < tau[2]


@pytest.mark.parametrize("input_relevance", [True, False], ids=["per input", "per layer"])
def test_gibbs_draws_the_precision_from_its_conditional(input_relevance):
    """For fixed weights, the drawn ``tau_g`` of many members has the moments of
    ``Gamma(a + n_g/2, b + |theta_g|^2 / (2 c_k))``, each within 5 standard errors: per input column of the
    input layer (``n_g`` = its 6 weights) and for the bias, or per tensor."""
    S = 4000
    prior = HierarchicalPrior(gain=1.0, bias_scale=2.0, precision_shape=2.0, precision_rate=0.5,
                              input_relevance=input_relevance)
    gen = torch.Generator().manual_seed(1)
    one = [torch.randn(6, 3, generator=gen, dtype=torch.float64), torch.randn(6, generator=gen, dtype=torch.float64)]
    params = [p.expand((S,) + p.shape).contiguous() for p in one]
    prior.gibbs_update(params, ChainRandom(0, S))
    tau = prior.precision.numpy()
    groups = ([one[0][:, j] for j in range(3)] if input_relevance else [one[0]]) + [one[1]]
    variances = [1.0 / 3] * (len(groups) - 1) + [4.0]
    assert tau.shape == (S, len(groups))
    for g, (p, c) in enumerate(zip(groups, variances)):
        shape, rate = 2.0 + p.numel() / 2, 0.5 + float((p * p).sum()) / (2 * c)
        mean, var = shape / rate, shape / rate**2
        assert abs(tau[:, g].mean() - mean) < 5 * math.sqrt(var / S)
        assert abs(tau[:, g].var() - var) < 5 * var * math.sqrt(2.0 / S) * 2


@pytest.mark.parametrize("input_relevance", [True, False], ids=["per input", "per layer"])
def test_gibbs_reports_the_change_of_the_potential(input_relevance):
    """``gibbs_update`` returns the change of every member's potential and gradient, which samplers that cache
    them apply: they equal the difference of the prior's values before and after."""
    prior = HierarchicalPrior(input_relevance=input_relevance)
    gen = torch.Generator().manual_seed(2)
    params = [torch.randn(4, 5, 3, generator=gen, dtype=torch.float64),
              torch.randn(4, 5, generator=gen, dtype=torch.float64)]
    before_u, before_g = -prior.log_prob_chains(params), [-g for g in prior.grad_log_prob_chains(params)]
    dv, dg = prior.gibbs_update(params, ChainRandom(3, 4))
    after_u, after_g = -prior.log_prob_chains(params), [-g for g in prior.grad_log_prob_chains(params)]
    torch.testing.assert_close(dv, after_u - before_u)
    for d, a, b in zip(dg, after_g, before_g):
        torch.testing.assert_close(d, a - b)


def test_a_custom_prior_whose_gibbs_update_predates_the_changes_keyword_still_fits():
    """A prior object with ``gibbs_update(parameters, rng)`` (the signature before ``changes``) is called as
    before under a kernel that asks for no change (sghmc, the default) and under one that caches (baoab)."""
    from sklearn.datasets import load_iris

    from bayesnet import BayesianMLPClassifier

    class OldPrior(HierarchicalPrior):
        calls = 0

        def gibbs_update(self, parameters, rng):
            type(self).calls += 1
            return super().gibbs_update(parameters, rng)

    X, y = load_iris(return_X_y=True)
    for sampler in ("sghmc", "baoab"):
        OldPrior.calls = 0
        clf = BayesianMLPClassifier(hidden_layer_sizes=(8,), prior_scale=OldPrior(), sampler=sampler, burn_in=60,
                                    n_draws=5, thinning=2, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf.fit(X, y)
        assert OldPrior.calls > 0 and clf.trace_.n_stored == 5


def test_gibbs_without_the_changes_draws_the_same_precisions_and_only_caching_kernels_ask_for_them():
    """``changes=False`` skips the change of the potential and gradient, not the draw: the same precisions from
    the same stream. The samplers ask for the change only when their kernel caches the potential or gradient
    (overrides ``potential_changed``): sghmc does not, baoab does."""
    gen = torch.Generator().manual_seed(2)
    params = [torch.randn(4, 5, 3, generator=gen, dtype=torch.float64),
              torch.randn(4, 5, generator=gen, dtype=torch.float64)]
    with_changes, without = HierarchicalPrior(), HierarchicalPrior()
    dv, dg = with_changes.gibbs_update(params, ChainRandom(3, 4))
    assert dv is not None and len(dg) == 2
    assert without.gibbs_update(params, ChainRandom(3, 4), changes=False) == (None, None)
    assert torch.equal(with_changes.precision, without.precision)

    class Asked(_PriorOnly):  # the prior-only potential, remembering what each Gibbs step was asked for
        def gibbs_update(self, rng, changes=True):
            asked.append((name, changes))
            return super().gibbs_update(rng, changes)

    asked = []
    for name in ("sghmc", "baoab"):
        pot = Asked(HierarchicalPrior(), 4, 3, gibbs_interval=1)
        sampler = make_sampler(name, step_size=0.01)
        state = sampler.init(pot.parameters, ChainRandom(5, 4), n_chains=4)
        sampler.step(state, pot, None)
    assert asked == [("sghmc", False), ("baoab", True)]


@pytest.mark.parametrize("reports", ["None", "(None, None)", "(value, None)"])
def test_a_caching_kernel_recomputes_after_a_gibbs_step_whose_prior_reports_no_change(reports):
    """A custom prior whose ``gibbs_update`` moves its precisions but reports no change even when asked (returns
    None, ``(None, None)`` or no gradient): through the estimators' ``ChainPosterior``, a kernel that caches the
    potential or its gradient (baoab, eqn, pt-langevin) drops its cache and evaluates the potential anew, so
    its chain (here on the full data) is the one it runs with a prior that reports the change, up to the
    rounding of the cached update. It used to fail inside ``potential_changed`` (``(None, None)``, ``(value,
    None)``) or sample on from the stale cache (None)."""
    from bayesnet.estimators.mlp import MLP
    from bayesnet.likelihoods import CategoricalLikelihood
    from bayesnet.posterior import ChainPosterior

    class Silent(HierarchicalPrior):
        def gibbs_update(self, parameters, rng, changes=True):
            value, _ = super().gibbs_update(parameters, rng, changes)
            return {"None": None, "(None, None)": (None, None), "(value, None)": (value, None)}[reports]

    gen = torch.Generator().manual_seed(0)
    X, y = torch.randn(30, 4, generator=gen), torch.randint(0, 3, (30,), generator=gen)
    final = {}
    for name, options in (("baoab", {}), ("eqn", {"n_walkers": 2}), ("pt-langevin", {"n_replicas": 2})):
        for prior_class in (HierarchicalPrior, Silent):
            torch.manual_seed(1)
            net, lik = MLP(4, (5,), 3, "relu"), CategoricalLikelihood()
            members = [[p.detach() + 0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i))
                        for p in net.parameters()] for i in range(4)]  # two chains of two members
            prior = prior_class(gibbs_interval=1)
            posterior = ChainPosterior(net, lik, prior, len(y), members)
            sampler = make_sampler(name, step_size=0.02, **options)
            chains = 4 if name == "baoab" else 2
            state = sampler.init(posterior.parameters, ChainRandom(5, chains), n_chains=chains)
            for _ in range(20):
                state, _ = sampler.step(state, posterior, (X, y))
            final[name, prior_class] = [p.detach().clone() for p in posterior.parameters]
            assert all(torch.isfinite(p).all() for p in final[name, prior_class])
        for a, b in zip(final[name, Silent], final[name, HierarchicalPrior]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


class _PriorOnly:
    """The potential ``-log p(theta, tau)`` of a hierarchical prior alone (no data), with its Gibbs step."""

    def __init__(self, prior, S, n, gibbs_interval=2):
        self.prior = prior
        self.parameters = [torch.randn(S, n, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
                           .requires_grad_(True)]
        self.gibbs_interval = gibbs_interval

    def value(self, batch=None):
        return -self.prior.log_prob_chains(self.parameters)

    def value_and_grad(self, batch=None):
        with torch.no_grad():
            return self.value(), [-g for g in self.prior.grad_log_prob_chains(self.parameters)]

    def gibbs_update(self, rng, changes=True):
        return self.prior.gibbs_update([p.detach() for p in self.parameters], rng, changes)


class _WrongShape(HierarchicalPrior):
    """A Gibbs step from the wrong conditional (shape ``a + n`` instead of ``a + n/2``): the power check."""

    @torch.no_grad()
    def gibbs_update(self, parameters, rng, changes=True):
        n = parameters[0][0].numel()
        sq = (parameters[0] * parameters[0]).reshape(parameters[0].shape[0], -1).sum(1, keepdim=True).double()
        tau_old = self._tau(parameters).clone()
        before = self._energy(parameters, tau_old)
        self.precision = rng.gamma(torch.full_like(sq, self.precision_shape + n)) / (self.precision_rate + 0.5 * sq)
        delta = (self._energy(parameters, self.precision) - before).to(parameters[0].dtype)
        return delta, [parameters[0] * (self.precision - tau_old).to(parameters[0].dtype)]


def _joint_errors(prior, S=256, n=4, steps=1500, burn=300):
    """HMC on ``theta | tau`` alternated with the Gibbs step on ``tau | theta``, prior only: the z-scores of the
    draws' ``E[tau]`` and ``E[theta^2]`` against the marginal values ``a/b`` and ``b/(a-1)`` (the weights'
    marginal is a Student t), with standard errors from the measured ESS."""
    pot = _PriorOnly(prior, S, n)
    sampler = make_sampler("hmc", step_size=0.3, n_leapfrog=8, adaptation_steps=0)
    state = sampler.init(pot.parameters, ChainRandom(5, S), n_chains=S)
    taus, squares = [], []
    for k in range(steps):
        state, _ = sampler.step(state, pot, None)
        if k >= burn:
            taus.append(prior.precision[:, 0].numpy().copy())
            squares.append((pot.parameters[0].detach() ** 2).mean(1).numpy().copy())
    a, b = prior.precision_shape, prior.precision_rate
    z = {}
    for name, draws, expected in (("tau", np.stack(taus, 1), a / b), ("theta2", np.stack(squares, 1), b / (a - 1))):
        ess = effective_sample_size(draws)
        z[name] = (draws.mean() - expected) / (draws.std() / math.sqrt(ess))
    return z


@pytest.mark.slow
def test_gibbs_within_hmc_keeps_the_joint_hierarchical_prior():
    """The composition of the exact Gibbs step with HMC leaves ``p(theta, tau)`` invariant: with no data the
    draws have the prior's marginal moments (within 4 ESS-based standard errors), and a Gibbs step from the
    wrong conditional fails the same check."""
    z = _joint_errors(HierarchicalPrior(bias_scale=1.0, precision_shape=3.0, precision_rate=3.0, gibbs_interval=2))
    assert abs(z["tau"]) < 4 and abs(z["theta2"]) < 4, z
    wrong = _joint_errors(_WrongShape(bias_scale=1.0, precision_shape=3.0, precision_rate=3.0, gibbs_interval=2))
    assert abs(wrong["tau"]) > 4, wrong


def test_prior_scale_resolution():
    """"auto" is hierarchical for a sampler at temperature 1 and fan-in for one that tempers; "hierarchical"
    with a tempering sampler is refused; a number is the isotropic prior; a prior object is copied."""
    assert type(make_prior("auto", make_sampler("sghmc"))) is HierarchicalPrior
    assert type(make_prior("auto", make_sampler("pt-langevin"))) is FanInPrior
    assert type(make_prior("auto", make_sampler("tacthmc"))) is FanInPrior
    assert type(make_prior("auto", make_sampler("sghmc", temperature=0.5))) is FanInPrior
    assert type(make_prior("fan_in", make_sampler("sghmc"))) is FanInPrior
    # the fan-in prior's gain follows the likelihood: wide for logits, 1 for standardised targets; an explicit
    # "fan_in" is gain 1 whatever the likelihood
    from bayesnet.likelihoods import CategoricalLikelihood, GaussianLikelihood

    tact = make_sampler("tacthmc")
    assert make_prior("auto", tact, CategoricalLikelihood()).gain == CategoricalLikelihood.fan_in_gain == 2.0
    assert make_prior("auto", tact, GaussianLikelihood()).gain == make_prior("auto", tact).gain == 1.0
    assert make_prior("fan_in", tact, CategoricalLikelihood()).gain == 1.0
    assert type(make_prior("auto", make_sampler("sghmc"), CategoricalLikelihood())) is HierarchicalPrior
    with pytest.raises(ValueError, match="temperature 1 throughout"):
        make_prior("hierarchical", make_sampler("pt-langevin"))
    with pytest.raises(ValueError, match="prior_scale"):
        make_prior("wide", make_sampler("sghmc"))
    with pytest.raises(TypeError, match="prior_scale"):
        make_prior([1.0], make_sampler("sghmc"))
    assert make_prior(0.3).scale == 0.3
    mine = HierarchicalPrior()
    assert make_prior(mine, make_sampler("sgld")) is not mine


@pytest.mark.parametrize("name", ["pt-langevin", "tacthmc"])
def test_a_sampler_that_tempers_the_likelihood_only_takes_the_hierarchical_prior(name):
    """pt-langevin and tacthmc with ``tempered="likelihood"`` sample the prior at temperature 1: "auto" is the
    hierarchical prior and "hierarchical" is allowed; the paper's mode's refusal names the setting (and for
    pt-langevin, below, a prior with hyperparameters but no way to exchange them with the positions is refused: a
    swap would leave them behind)."""
    likelihood = make_sampler(name, tempered="likelihood")
    assert likelihood.prior_temperature_range() == (1.0, 1.0) and likelihood.temperature_range()[1] > 1.0
    assert type(make_prior("auto", likelihood)) is HierarchicalPrior
    assert type(make_prior("hierarchical", likelihood)) is HierarchicalPrior
    assert type(make_prior("auto", make_sampler(name))) is FanInPrior
    with pytest.raises(ValueError, match="tempered='likelihood'"):
        make_prior("hierarchical", make_sampler(name))
    if name != "pt-langevin":
        return

    class NoExchange(HierarchicalPrior):
        permute_members = None

    with pytest.raises(ValueError, match="permute_members"):
        make_prior(NoExchange(), likelihood)
    prior = HierarchicalPrior()
    prior.precision = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)
    prior.permute_members(torch.tensor([2, 0, 1]))
    assert prior.precision[:, 0].tolist() == [4.0, 0.0, 2.0]


def test_invalid_prior_hyperparameters_are_refused():
    for kwargs in (dict(gain=0.0), dict(bias_scale=float("nan")), dict(precision_shape=0.5),
                   dict(precision_rate=-1.0), dict(gibbs_interval=0)):
        with pytest.raises(ValueError):
            HierarchicalPrior(**kwargs)
    with pytest.raises(ValueError):
        GaussianPrior(float("inf"))


@pytest.mark.parametrize("shape", [1.0, 2.5, 12.0])
def test_chain_gamma_has_the_gamma_distribution(shape):
    """Marsaglia-Tsang from the chains' pools: a Kolmogorov-Smirnov test against Gamma(shape, 1) passes, and
    fails against Gamma(1.1 shape, 1) (the power check)."""
    draws = ChainRandom(7, 8).gamma(torch.full((8, 1000), shape, dtype=torch.float64)).numpy().ravel()
    assert stats.kstest(draws, stats.gamma(shape).cdf).pvalue > 1e-3
    assert stats.kstest(draws, stats.gamma(1.1 * shape).cdf).pvalue < 1e-3


def test_chain_gamma_is_per_chain():
    """Chain 0's numbers do not depend on how many chains draw beside it; shapes below 1 are refused."""
    one = ChainRandom(11, 1).gamma(torch.full((1, 5), 3.0, dtype=torch.float64))
    four = ChainRandom(11, 4).gamma(torch.full((4, 5), 3.0, dtype=torch.float64))
    torch.testing.assert_close(one[0], four[0])
    with pytest.raises(ValueError, match=">= 1"):
        ChainRandom(0, 1).gamma(torch.tensor([0.5]))
    # without the check (the Gibbs step's shapes are >= 1 by construction: no read of the device), the same numbers
    unchecked = ChainRandom(11, 4).gamma(torch.full((4, 5), 3.0, dtype=torch.float64), check=False)
    assert torch.equal(unchecked, four)
    # a precision_shape set below 1 by hand after the prior was made is refused by the Gibbs step (on the host)
    prior = HierarchicalPrior()
    prior.precision_shape = 0.2
    with pytest.raises(ValueError, match="precision_shape"):
        prior.gibbs_update([torch.randn(2, 3, 4, dtype=torch.float64)], ChainRandom(0, 2))


def test_gibbs_steps_start_at_half_the_warm_up():
    """The precisions stay at their start (the fan-in prior) through the first half of the warm-up, then are
    drawn every ``gibbs_interval`` steps; without a warm-up, from the first step."""
    prior = HierarchicalPrior(gibbs_interval=5)
    pot = _PriorOnly(prior, 4, 3, gibbs_interval=5)
    sampler = make_sampler("sgld", step_size=1e-2, adaptation_steps=40)
    state = sampler.init(pot.parameters, ChainRandom(0, 4), n_chains=4)
    for _ in range(20):
        state, _ = sampler.step(state, pot, None)
    assert prior.precision is None or torch.equal(prior.precision, torch.ones_like(prior.precision))
    state, _ = sampler.step(state, pot, None)  # step 20 of 40: the first Gibbs step
    assert not torch.equal(prior.precision, torch.ones_like(prior.precision))
    fresh = HierarchicalPrior(gibbs_interval=5)
    pot = _PriorOnly(fresh, 4, 3, gibbs_interval=5)
    sampler = make_sampler("sgld", step_size=1e-2, adaptation_steps=0)
    state = sampler.init(pot.parameters, ChainRandom(0, 4), n_chains=4)
    sampler.step(state, pot, None)
    assert not torch.equal(fresh.precision, torch.ones_like(fresh.precision))


class _NoJacobian(HierarchicalPrior):
    """A scale move's prior ratio without tau's Jacobian (``-2(a-1)s``): the power check (it targets
    ``Gamma(a - 1, b)`` for tau)."""

    def scale_log_ratio(self, parameters, k, s):
        return super().scale_log_ratio(parameters, k, s) + 2.0 * s


@pytest.mark.parametrize("prior_class, holds, input_relevance",
                         [(HierarchicalPrior, True, True), (HierarchicalPrior, True, False), (_NoJacobian, False, True)],
                         ids=["exact", "exact per layer", "power check"])
def test_scale_moves_keep_the_hierarchical_prior(prior_class, holds, input_relevance, monkeypatch):
    """The warm-up's scale moves (theta_k -> e^s theta_k, tau_g -> e^-2s tau_g for each of its groups,
    Metropolis) with a flat likelihood, from exact prior draws of 3000 members: after 150 rounds every group's
    tau is still Gamma(a, b) and tau_g |theta_g|^2 / c_k still chi-square(n_g) (Kolmogorov-Smirnov, p > 1e-3;
    the groups: the input layer's three input columns, then one per tensor). The power check drops tau's
    Jacobian from the ratio, and the test fails."""
    from bayesnet.estimators.mlp import MLP
    from bayesnet.likelihoods import CategoricalLikelihood
    from bayesnet.posterior import ChainPosterior

    S, a, b = 3000, 2.0, 0.5
    prior = prior_class(precision_shape=a, precision_rate=b, input_relevance=input_relevance)
    module, lik = MLP(3, (4,), 2), CategoricalLikelihood()
    gen = torch.Generator().manual_seed(0)
    shapes = [p.shape for p in module.parameters()]
    c = prior.variances(shapes)
    counts = prior.groups(shapes)
    # every group's (tensor, index into the tensor) and its tau column
    groups = [(k, (slice(None), j) if g > 1 else ...) for k, g in enumerate(counts) for j in range(g)]
    # (drawn from the test's own seeded stream: from torch's global generator the draw depended on the tests run
    # before, and one order in 50-100 put a KS p-value below the threshold by chance)
    tau = torch.as_tensor(np.random.default_rng(0).gamma(a, 1.0 / b, size=(S, len(groups))))
    members = []
    for i in range(S):
        member = [torch.randn(shape, generator=gen, dtype=torch.float64) * math.sqrt(ck)
                  for shape, ck in zip(shapes, c)]
        for col, (k, where) in enumerate(groups):
            member[k][where] /= math.sqrt(float(tau[i, col]))
        members.append(member)
    pot = ChainPosterior(module.double(), lik, prior, 100, members)
    prior.precision = tau.clone()
    monkeypatch.setattr(lik, "pointwise_log_likelihood", lambda out, y, params: torch.zeros(S, len(y)))
    rng = ChainRandom(1, S)
    batch = [(torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, dtype=torch.long))]
    rates = [pot.scale_move(batch, rng, log_sd=0.5) for _ in range(150)]
    assert 0.2 < float(torch.stack(rates).mean()) < 0.9
    p_values = []
    assert prior.precision.shape == (S, len(groups))
    for col, (k, where) in enumerate(groups):
        t = prior.precision[:, col].numpy()
        p_values.append(stats.kstest(t, stats.gamma(a, scale=1 / b).cdf).pvalue)
        w = pot.network_parameters[k].detach()
        w = w[(slice(None),) + where] if where is not ... else w
        q = (t * (w ** 2).reshape(S, -1).sum(1).numpy() / c[k])
        p_values.append(stats.kstest(q, stats.chi2(w[0].numel()).cdf).pvalue)
    assert (min(p_values) > 1e-3) == holds, p_values


def test_scale_moves_run_in_the_warm_up_only():
    """With the hierarchical prior the warm-up makes one round of scale moves after each Gibbs step from half
    the burn-in until its final window starts (burn-in 200: Gibbs steps at 100, 110, ..., 170 before the final
    window at 180), and none after; the report counts them. A prior without precisions makes none."""
    from sklearn.datasets import load_iris

    from bayesnet import BayesianMLPClassifier

    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    est = BayesianMLPClassifier((8,), burn_in=200, n_draws=20, thinning=5, random_state=0).fit(X, y)
    report = est.sampler_state_.warmup_report
    assert report["scale_moves"] == 8
    assert 0.0 < float(report["scale_acceptance"].mean()) < 1.0
    fixed = BayesianMLPClassifier((8,), burn_in=200, n_draws=20, thinning=5, random_state=0,
                                  prior_scale="fan_in").fit(X, y)
    assert fixed.sampler_state_.warmup_report["scale_moves"] == 0
    assert fixed.sampler_state_.warmup_report["scale_acceptance"] is None


def test_a_prior_pickled_before_input_relevance_keeps_one_precision_per_tensor():
    """A fitted estimator pickled before the inputs had precisions of their own holds a precision ``(S, K)``:
    unpickled, its prior keeps that layout (``input_relevance=False``), and a fresh prior round-trips."""
    import pickle

    params = [torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)]
    old = HierarchicalPrior(input_relevance=False)
    old.gibbs_update(params, ChainRandom(0, 2))
    state = old.__getstate__()
    del state["input_relevance"]
    restored = HierarchicalPrior.__new__(HierarchicalPrior)
    restored.__setstate__(state)
    assert restored.input_relevance is False
    torch.testing.assert_close(restored.log_prob_chains(params), old.log_prob_chains(params))
    fresh = pickle.loads(pickle.dumps(HierarchicalPrior()))
    assert fresh.input_relevance is True and sum(fresh.groups([(4, 3), (4,)])) == 4
