"""The potential U(theta) = -log posterior and its mini-batch estimate.

This is the one place where the dataset-size scaling N/|S| happens; samplers
receive ``U`` and ``grad U`` and never rescale.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

__all__ = ["Posterior", "ChainPosterior", "FunctionPotential", "batched_outputs"]


class Posterior:
    r"""Potential of a Bayesian neural network on mini-batches.

    .. math::

        \tilde U(\theta) = -\log p(\theta) - \log p(\phi)
            - \frac{N}{|S|} \sum_{i \in S} \log p(y_i | x_i, \theta, \phi)

    (Luo et al. 2018 Sec. 3.1; Karagiannis's SGLD notes eqs. 2.3 and 3.2), where :math:`\theta` are
    the network's weights, :math:`\phi` the likelihood's own parameters (the
    Gaussian log noise variance) and :math:`S` the mini-batch. It is an
    unbiased estimate of the full-data potential :math:`U`.

    Parameters
    ----------
    module : torch.nn.Module
        The network :math:`f_\theta`; its parameters are moved in place.
    likelihood : torch.nn.Module
        ``likelihood(output, y)`` returns the summed log-likelihood of a batch;
        ``likelihood.log_prior()`` the log prior of its own parameters.
    prior : object with ``log_prob(parameters)``
        Prior over the network's parameters, e.g.
        :class:`bayesnet.priors.GaussianPrior`.
    n_data : int
        Dataset size :math:`N`.

    Attributes
    ----------
    parameters : list of Tensor
        The network's parameters followed by the likelihood's: the positions
        the sampler moves.
    """

    def __init__(self, module: nn.Module, likelihood: nn.Module, prior: Any, n_data: int):
        if n_data <= 0:
            raise ValueError(f"n_data must be positive, got {n_data}.")
        self.module = module
        self.likelihood = likelihood
        self.prior = prior
        self.n_data = int(n_data)
        self.network_parameters = [p for p in module.parameters() if p.requires_grad]
        self.parameters = self.network_parameters + [p for p in likelihood.parameters() if p.requires_grad]

    def value(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Mini-batch potential as a differentiable 0-d tensor."""
        X, y = batch
        output = self.module(X)
        log_lik = self.likelihood(output, y)
        scale = self.n_data / y.shape[0]
        return -scale * log_lik - self.prior.log_prob(self.network_parameters) - self.likelihood.log_prior()

    def value_and_grad(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, list[Tensor]]:
        """``(U, [dU/dp for p in parameters])`` on ``batch = (X, y)``."""
        with torch.enable_grad():
            u = self.value(batch)
            grads = torch.autograd.grad(u, self.parameters)
        return u.detach(), list(grads)


class FunctionPotential:
    """A potential given by a differentiable function of the position.

    Used for analytic targets (tests, examples) and as a reference for custom
    models that are not ``nn.Module`` networks.

    Parameters
    ----------
    fn : callable
        ``fn(parameters, batch) -> U`` with ``U`` a differentiable 0-d tensor.
        It may return one value per chain (shape ``(C,)``) when the
        parameters pack ``C`` chains on a leading axis; the gradient is then
        that of the sum, i.e. every chain's own gradient. hmc, pt-langevin
        and tacthmc need one value per member (their first step raises
        ``ValueError`` otherwise); the gradient samplers also take the sum,
        but the warm-up's guard then cannot compare each member's potential
        with its fallback's (it tests the temperatures only): with several
        chains, return one value per member. A value of any other size is a
        ``ValueError`` at the first step.
    parameters : sequence of Tensor
        Initial positions; converted to leaf tensors with ``requires_grad``.
    gradient_noise : float, default=0.0
        Standard deviation of Gaussian noise added to every gradient component,
        unknown to the sampler (the "noisy gradient" setting of Luo et al. 2018 Sec. 5.1).
    generator : torch.Generator, optional
        Source of the gradient noise.

    Raises
    ------
    TypeError
        If ``fn`` is not callable, ``parameters`` is one tensor rather than a list of them, or a parameter is not a
        real floating-point tensor (an integer or complex one).
    ValueError
        If ``parameters`` is empty.
    """

    def __init__(self, fn: Callable[[Sequence[Tensor], Any], Tensor], parameters: Sequence[Tensor],
                 gradient_noise: float = 0.0, generator: torch.Generator | None = None):
        if not callable(fn):
            raise TypeError(f"fn must be a callable fn(parameters, batch) -> U, got {type(fn).__name__}.")
        if isinstance(parameters, Tensor):  # (iterated, it became one 0-d parameter per entry, failing at the
            # first step with torch's "appears to not have been used", or moving the entries as separate tensors)
            raise TypeError(f"parameters must be a list of tensors, got one tensor of shape {tuple(parameters.shape)}; "
                            "wrap it in a list: [tensor].")
        parameters = list(parameters)
        if not parameters:
            raise ValueError("parameters must hold at least one tensor.")
        for i, p in enumerate(parameters):  # (torch's own error for an integer tensor named no parameter)
            if not isinstance(p, Tensor):
                raise TypeError(f"parameters[{i}] must be a torch.Tensor, got {type(p).__name__}; convert it with "
                                "torch.as_tensor(..., dtype=torch.float32).")
            if p.is_complex():
                raise TypeError(f"parameters[{i}] must be a real floating-point tensor (the samplers move it by "
                                f"gradients), got dtype {p.dtype}; give its real and imaginary parts as real "
                                "coordinates (torch.view_as_real).")
            if not p.is_floating_point():
                raise TypeError(f"parameters[{i}] must be a real floating-point tensor (the samplers move it by "
                                f"gradients), got dtype {p.dtype}; convert it with .float() or .double().")
        self.fn = fn
        self.parameters = [p.detach().clone().requires_grad_(True) for p in parameters]
        self.gradient_noise = float(gradient_noise)
        self.generator = generator

    def value(self, batch: Any = None) -> Tensor:
        """``U`` (or one value per chain) without a graph."""
        with torch.no_grad():
            return self.fn(self.parameters, batch).detach()

    def functional(self):
        """The potential as a pure function, for a compiled transition (:mod:`bayesnet.samplers.compiled`):
        ``f(parameters, X, y, factors, offset) = fn(parameters, (X, y))``, the batch passed as the pair the
        compiled step is given (the eager calls of the same step receive that pair too); the prior form is not used
        (``fn`` is the whole potential). None with ``gradient_noise`` (drawn inside :meth:`value_and_grad`, not
        reproducible in a compiled step)."""
        if self.gradient_noise > 0:
            return None
        fn = self.fn
        return lambda parameters, X, y, factors, offset: fn(parameters, (X, y))

    def prior_form(self) -> tuple[list, None]:
        """No separate prior for a compiled transition: ``fn`` is the whole potential (see :meth:`functional`)."""
        return [], None

    def value_and_grad(self, batch: Any = None) -> tuple[Tensor, list[Tensor]]:
        with torch.enable_grad():
            u = self.fn(self.parameters, batch)
            grads = list(torch.autograd.grad(u.sum(), self.parameters))
        if self.gradient_noise > 0:
            grads = [g + self.gradient_noise * torch.randn(g.shape, generator=self.generator, dtype=g.dtype,
                                                           device=g.device) for g in grads]
        return u.detach(), grads


class _LogPrior(nn.Module):
    """Calls ``likelihood.log_prior()`` as a ``forward`` so that ``functional_call`` can substitute its parameters."""

    def __init__(self, likelihood: nn.Module):
        super().__init__()
        self.likelihood = likelihood

    def forward(self):
        return torch.as_tensor(self.likelihood.log_prior())


def batched_outputs(module: nn.Module, names: Sequence[str], parameters: Sequence[Tensor], X: Tensor) -> Tensor:
    """Outputs of ``S`` parameter sets of ``module`` on the same inputs.

    The module's own ``forward_chains`` is used when it has one (batched
    matrix products, measured faster in ``benchmarks/chains_vectorised.py``),
    else ``torch.func.vmap`` over ``functional_call``. Serves both sampling
    (chains, replicas, walkers) and prediction (posterior draws).

    Parameters
    ----------
    module : torch.nn.Module
        The architecture; its own parameters are not used.
    names : sequence of str
        The module's trainable parameter names, in ``named_parameters`` order.
    parameters : sequence of Tensor
        One tensor per name, shape ``(S, *param.shape)``.
    X : Tensor, shape (n, ...)
        Inputs shared by the ``S`` parameter sets.

    Returns
    -------
    Tensor, shape (S, n, n_outputs)
    """
    forward_chains = getattr(module, "forward_chains", None)
    if forward_chains is not None:
        return forward_chains(list(parameters), X)

    def single(ps, xb):
        return torch.func.functional_call(module, dict(zip(names, ps)), (xb,))

    return torch.func.vmap(single, in_dims=(0, None))(list(parameters), X)


_TAKES_CHANGES: dict = {}


def _takes_changes(update) -> bool:
    """Whether a prior's ``gibbs_update`` takes the ``changes`` keyword (a custom prior written before it existed
    takes ``(parameters, rng)``), per function, looked up once."""
    function = getattr(update, "__func__", update)
    if function not in _TAKES_CHANGES:
        try:
            parameters = inspect.signature(update).parameters.values()
        except (TypeError, ValueError):  # (no signature to read: call it as before)
            parameters = ()
        _TAKES_CHANGES[function] = any(p.name == "changes" or p.kind is p.VAR_KEYWORD for p in parameters)
    return _TAKES_CHANGES[function]


def _rows(batches) -> tuple[Tensor, Tensor]:
    """The inputs and targets of mini-batches ``(X, y, ...)`` laid end to end (the warm-up's last batches)."""
    return torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])


def _data_potential(likelihood, n_data: int, outputs: Tensor, y: Tensor, lik_params) -> Tensor:
    """``-(N/|B|) log p(y | outputs, phi) - log p(phi)`` of every member, from the network's outputs ``(S, |B|,
    k)`` on a batch of ``|B|`` rows: the eager potential's and the compiled one's data term."""
    u = -(n_data / y.shape[0]) * likelihood.log_likelihood_chains(outputs, y, lik_params)
    log_prior_phi = likelihood.log_prior_chains(lik_params)
    # a likelihood without parameters (categorical) has a prior of 0.0: no tensor operation (and no backward node)
    # for it; a step is mostly per-operation overhead on small networks
    return u if isinstance(log_prior_phi, float) and log_prior_phi == 0.0 else u - log_prior_phi


def quadratic_terms(factors: Sequence[Tensor], parameters: Sequence[Tensor]) -> Tensor:
    """``sum_k sum(factors[k] * theta_k^2)`` per member, ``(S,)``: the quadratic part of a prior's
    :meth:`~bayesnet.priors.HierarchicalPrior.quadratic_form` (``-log p = quad / 2 - offset``), each factor per member
    ``(S,)`` (or a 0-d one for all) or per member and input column (broadcast against the tensor)."""
    return sum(f * (p * p).reshape(p.shape[0], -1).sum(1) if f.ndim <= 1 else (f * p * p).reshape(
        p.shape[0], -1).sum(1) for f, p in zip(factors, parameters))


class ChainPosterior:
    r"""The potential of :class:`Posterior` for ``S`` packed position sets (chains, replicas, walkers).

    Every network parameter (and every parameter of the likelihood, e.g. the
    Gaussian log noise variance) is held as one leaf tensor with a leading
    axis of ``S`` members; ``value_and_grad`` returns the ``S`` mini-batch
    potentials

    .. math::

        \tilde U(\theta_s) = -\log p(\theta_s) - \log p(\phi_s)
            - \frac{N}{|S|} \sum_{i \in S} \log p(y_i | x_i, \theta_s, \phi_s)

    on the same mini-batch and their gradients, in one batched forward and
    backward pass. The network is evaluated by its own
    ``forward_chains(parameters, X)`` when it has one (the MLP's batched
    matrix products, the faster layout measured by
    ``benchmarks/chains_vectorised.py``), otherwise by ``torch.func.vmap``
    over ``functional_call`` of the module, which serves any network. The
    likelihood and prior terms use their batched forms
    (``log_likelihood_chains``, ``log_prior_chains``, ``log_prob_chains``)
    when both have them, otherwise ``vmap`` over their per-member forms.

    Parameters
    ----------
    module : torch.nn.Module
        The architecture :math:`f_\theta` (a template: its own parameters are
        not moved).
    likelihood : torch.nn.Module
        As for :class:`Posterior`.
    prior : object with ``log_prob(parameters)``
        Evaluated per member (under ``vmap``).
    n_data : int
        Dataset size :math:`N` (> 0).
    members : sequence of sequence of Tensor
        The ``S`` initial position sets, each listing the module's trainable
        parameters followed by the likelihood's.

    Attributes
    ----------
    parameters : list of Tensor
        Shapes ``(S, *p.shape)``: the positions the sampler moves.
    n_members : int
        ``S``.
    virial_wanted : bool
        When True, :meth:`value_and_grad` also stores :attr:`virial` (set by the estimators after the
        burn-in, for samplers with a :meth:`~bayesnet.samplers.Sampler.configurational_target`).
    virial : Tensor or None
        ``(S,)``: :math:`\theta \cdot \nabla U(\theta) / D` per member (``D`` the numbers per member, every
        parameter counted), the configurational temperature, at the last gradient taken while
        :attr:`virial_wanted` (kept until the next such gradient). None before the first.
    data_weight : Tensor or None
        ``(S,)``: a weight :math:`\beta_s` on every member's data term, set through :meth:`set_data_weight` by a
        sampler that tempers the likelihood only (:class:`~bayesnet.samplers.PTLangevin` and
        :class:`~bayesnet.samplers.TACTHMC` with ``tempered="likelihood"``): the potentials are then
        :math:`\beta_s U_D(\theta_s) + U_P(\theta_s)`, the data term (with the likelihood's own parameters' prior)
        weighted and the network's prior not. None (the default): :math:`U_D + U_P`.
    data_value : Tensor or None
        ``(S,)``: the unweighted data terms :math:`U_D` of the last evaluation made while :attr:`data_weight` was
        set (what a swap of tempered replicas compares, and TACT-HMC's tempering force reads); None before.

    Raises
    ------
    ValueError
        If ``n_data`` is not positive or ``members`` is empty.
    """

    def __init__(self, module: nn.Module, likelihood: nn.Module, prior: Any, n_data: int,
                 members: Sequence[Sequence[Tensor]]):
        if n_data <= 0:
            raise ValueError(f"n_data must be positive, got {n_data}.")
        if not members:
            raise ValueError("need at least one member.")
        self.module = module
        self.likelihood = likelihood
        self.prior = prior
        self.n_data = int(n_data)
        self.net_names = [n for n, p in module.named_parameters() if p.requires_grad]
        self.lik_names = [n for n, p in likelihood.named_parameters() if p.requires_grad]
        self.n_members = len(members)
        self.parameters = [torch.stack([m[k].detach() for m in members]).requires_grad_(True)
                           for k in range(len(members[0]))]
        self._log_prior = _LogPrior(likelihood)
        self.virial_wanted = False
        self.virial = None
        self.data_weight = None
        self.data_value = None

    @property
    def network_parameters(self) -> list[Tensor]:
        return self.parameters[: len(self.net_names)]

    @property
    def n_parameters_per_member(self) -> int:
        """``D``: the numbers one member's position holds (the network's and the likelihood's)."""
        return sum(p[0].numel() for p in self.parameters)

    @property
    def parameter_names(self) -> list[str]:
        """Names of :attr:`parameters`: the network's, then the likelihood's prefixed ``likelihood.``."""
        return list(self.net_names) + [f"likelihood.{n}" for n in self.lik_names]

    def outputs(self, X: Tensor, parameters: Sequence[Tensor] | None = None) -> Tensor:
        """Network outputs of every member on ``X``: shape ``(S, n, n_outputs)``."""
        params = list(self.network_parameters if parameters is None else parameters[: len(self.net_names)])
        return batched_outputs(self.module, self.net_names, params, X)

    def _batched_terms(self) -> bool:
        """Whether the likelihood and the prior have batched forms (plain tensor expressions, no vmap)."""
        return hasattr(self.likelihood, "log_likelihood_chains") and hasattr(self.prior, "log_prob_chains")

    def _data_term(self, X: Tensor, y: Tensor) -> Tensor:
        """``-(N/|S|) log p(y|x, theta_s, phi_s) - log p(phi_s)`` of every member through the batched forms."""
        return _data_potential(self.likelihood, self.n_data, self.outputs(X), y,
                               self.parameters[len(self.net_names):])

    def set_data_weight(self, weight: Tensor | None) -> None:
        """Weight every member's data term by ``weight`` (shape ``(S,)``; None: unweighted) in the potentials that
        follow (:attr:`data_weight`)."""
        if weight is not None:
            weight = torch.as_tensor(weight).detach().reshape(-1)
            if weight.numel() != self.n_members:
                raise ValueError(f"data_weight needs one weight per member ({self.n_members}), got {weight.numel()}.")
        self.data_weight = weight

    def _weighted(self, u_data: Tensor, log_prior: Tensor) -> Tensor:
        """``w u_data - log_prior`` with :attr:`data_weight` ``w`` (recording :attr:`data_value`), or the plain sum."""
        w = self.__dict__.get("data_weight")
        if w is None:
            return u_data - log_prior
        self.data_value = u_data.detach()
        return w.to(u_data.dtype) * u_data - log_prior

    def value(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """The ``S`` mini-batch potentials, shape ``(S,)`` (differentiable; the data terms weighted by
        :attr:`data_weight` where set)."""
        X, y = batch
        if self._batched_terms():
            return self._weighted(self._data_term(X, y), self.prior.log_prob_chains(self.network_parameters))
        out = self.outputs(X)
        lik_params = self.parameters[len(self.net_names):]
        lik_names, prior = self.lik_names, self.prior

        def rest(net_ps, lik_ps, o):
            lik = dict(zip(lik_names, lik_ps))
            log_lik = torch.func.functional_call(self.likelihood, lik, (o, y))
            log_prior_phi = torch.func.functional_call(self._log_prior, {f"likelihood.{k}": v for k, v in lik.items()},
                                                       ())
            return -(self.n_data / y.shape[0]) * log_lik - log_prior_phi, prior.log_prob(list(net_ps))

        u_data, log_prior = torch.func.vmap(rest)(self.network_parameters, lik_params, out)
        return self._weighted(u_data, log_prior)

    def value_and_grad(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, list[Tensor]]:
        """``((S,) potentials, gradients shaped like parameters)``: every member's own gradient."""
        prior_grad = getattr(self.prior, "grad_log_prob_chains", None)
        if prior_grad is None or not self._batched_terms():
            with torch.enable_grad():
                u = self.value(batch)
                grads = torch.autograd.grad(u.sum(), self.parameters)
            self._record_virial(grads)
            return u.detach(), list(grads)
        # the prior's gradient in closed form, added in place: autograd, where it runs at all, goes through the
        # network and the likelihood only
        X, y = batch
        net = self.network_parameters
        u_data, grads = self._data_term_and_grad(X, y)
        with torch.no_grad():
            both = getattr(self.prior, "log_prob_and_grad_chains", None)  # (the value from the gradient)
            log_prior, prior_grads = both(net) if both is not None else (self.prior.log_prob_chains(net), prior_grad(net))
            w = self.__dict__.get("data_weight")
            if w is not None:  # every member's data gradient weighted by its own weight
                torch._foreach_mul_(grads, [w.to(g.dtype).reshape((-1,) + (1,) * (g.ndim - 1)) for g in grads])
            u = self._weighted(u_data, log_prior)
            torch._foreach_sub_(grads[: len(net)], prior_grads)
        self._record_virial(grads)
        return u, grads

    def _data_term_and_grad(self, X: Tensor, y: Tensor) -> tuple[Tensor, list[Tensor]]:
        """:meth:`_data_term` (detached) and its gradient in every parameter.

        A network with ``vjp_chains`` (the MLP) gives its forward and its backward without autograd; the
        likelihood's part is then its closed form ``potential_and_grad_chains`` when it has one (the categorical
        and the Gaussian), otherwise autograd from the network's outputs on (a graph of a few nodes). Other
        networks run autograd through the whole term. The values and gradients are autograd's, kernel for kernel
        (checked bit for bit in the tests); the engine's overhead is what goes: a default fit's gradient took 330
        (breast cancer's 30-100-2 MLP, categorical) and 404 (diabetes' 10-100-1, Gaussian) microseconds with
        autograd, 190 and 228 without.
        """
        vjp_chains = getattr(self.module, "vjp_chains", None)
        pulled = vjp_chains(self.network_parameters, X) if vjp_chains is not None else None
        if pulled is None:
            with torch.enable_grad():
                u = self._data_term(X, y)
                # (a summed seed, not grad_outputs=ones: torch's first autograd.grad with grad_outputs in a process
                # imports its symbolic-shapes machinery, 0.27 s of every script's first fit)
                return u.detach(), list(torch.autograd.grad(u.sum(), self.parameters))
        outputs, vjp = pulled
        lik = self.parameters[len(self.net_names):]
        closed = getattr(self.likelihood, "potential_and_grad_chains", None)
        closed = None if closed is None else closed(outputs, y, lik, self.n_data)
        if closed is not None:
            u, cotangent, lik_grads = closed
            return u, vjp(cotangent) + list(lik_grads)
        leaf = outputs.requires_grad_(True)  # (made without a graph: a leaf)
        with torch.enable_grad():
            u = _data_potential(self.likelihood, self.n_data, leaf, y, lik)
            grads = torch.autograd.grad(u.sum(), [leaf, *lik])
        return u.detach(), vjp(grads[0]) + list(grads[1:])

    def _record_virial(self, grads) -> None:
        """:attr:`virial` from the gradients just taken, when wanted (one dot product per tensor and member)."""
        if self.__dict__.get("virial_wanted"):
            with torch.no_grad():
                dots = [torch.linalg.vecdot(p.detach().reshape(p.shape[0], -1), g.reshape(g.shape[0], -1))
                        for p, g in zip(self.parameters, grads)]
                self.virial = torch.stack(dots).sum(0) / self.n_parameters_per_member

    def functional(self):
        """The potentials as a pure function, for a compiled transition: ``fn(parameters, X, y, factors, offset)``
        -> ``(S,)``, ``parameters`` all of :attr:`parameters` (as tensors, not these leaves) and ``(factors,
        offset)`` the prior's :meth:`quadratic_form` (:meth:`prior_form`); None when the likelihood or the prior
        has no batched closed form."""
        if not self._batched_terms() or not hasattr(self.prior, "quadratic_form"):
            return None
        module, likelihood, names, n_data = self.module, self.likelihood, list(self.net_names), self.n_data

        def potentials(parameters, X, y, factors, offset):
            net, lik = parameters[: len(names)], parameters[len(names):]
            u = _data_potential(likelihood, n_data, batched_outputs(module, names, net, X), y, lik)
            return u + 0.5 * quadratic_terms(factors, net) - offset

        return potentials

    def permute_members(self, index: Tensor) -> None:
        """The members' positions were permuted (``new[s] = old[index[s]]``, a replica exchange): permute the
        prior's own per-member state with them (its ``permute_members``, e.g.
        :meth:`~bayesnet.priors.HierarchicalPrior.permute_members`; nothing for a prior without)."""
        permute = getattr(self.prior, "permute_members", None)
        if permute is not None:
            permute(index)

    def prior_form(self) -> tuple[list[Tensor], Tensor]:
        """The prior's current ``(factors, offset)`` (:meth:`functional`'s last arguments)."""
        return self.prior.quadratic_form(self.network_parameters)

    @torch.no_grad()
    def scale_move(self, batches, rng, log_sd: float = 0.15) -> Tensor | None:
        r"""One Metropolis scale move per parameter tensor, every member at once (the warm-up's: see
        :func:`bayesnet.samplers.warmup.scale_moves`); None for a prior without (``scale_log_ratio``).

        Tensor ``k``'s proposal is :math:`\theta_k \to e^{s}\theta_k`, :math:`\tau_g \to e^{-2s}\tau_g` for each
        of its precisions (one, or one per input for the input layer), :math:`s \sim N(0, \text{log\_sd}^2)`: a
        layer and its precisions move together along the ridge :math:`\tau_g|\theta_g|^2 \approx n_g`, which the
        Gibbs steps (one of them fixed at a time) cross in steps of :math:`\sqrt{2/n_g}`. The log acceptance ratio is :math:`\hat\Delta - \hat\sigma^2/2 + r`:
        :math:`\hat\Delta` the change of the log-likelihood estimated on ``batches`` (their ``B`` rows
        concatenated, scaled to the ``n_data`` rows), :math:`\hat\sigma^2 = (N^2/B)(1 - B/N)` times the
        variance of the rows' changes its estimated variance (the penalty method of Ceperley and Dewing 1999,
        which corrects a Gaussian error of the estimate; without it the noise accepts moves the full data would
        refuse, measured: digits' accuracy 0.97 -> 0.95), :math:`r` the prior's
        :meth:`~bayesnet.priors.HierarchicalPrior.scale_log_ratio`. On the full data it is the exact Metropolis
        test.

        Returns
        -------
        Tensor, shape (S,)
            The fraction of the moves each member accepted.
        """
        ratio = getattr(self.prior, "scale_log_ratio", None)
        if ratio is None or not batches or not self._batched_terms():
            return None
        X, y = _rows(batches)
        net, lik = self.network_parameters, self.parameters[len(self.net_names):]
        S, B = net[0].shape[0], y.shape[0]
        # the rows stand for the N rows of the data, each counted N/B times; the warm-up's last batches may give rows
        # more than once (on the full data, four copies of it: counted as 4N rows before, the likelihood's change
        # was four times its value and the noise penalty, negative, a bonus; a reviewer's finding)
        N = self.n_data
        per_chain = S // rng.n_chains

        def rows():  # (S, B) float64
            return self.likelihood.pointwise_log_likelihood(self.outputs(X), y, lik).double()

        current = rows()
        accepted = torch.zeros(S, dtype=torch.float64, device=current.device)
        for k, p in enumerate(net):
            shape = (-1,) + (1,) * (p.ndim - 1)
            s = log_sd * rng.normal(per_chain, torch.float64).reshape(S)
            log_u = torch.log(rng.uniform(per_chain, torch.float64).reshape(S))
            old = p.detach().clone()
            p.mul_(torch.exp(s).to(p.dtype).reshape(shape))
            proposed = rows()
            change = proposed - current
            estimate = (N / B) * change.sum(1)
            variance = (N * N / B) * max(1.0 - B / N, 0.0) * change.var(1, correction=1) if B > 1 else 0.0
            ok = log_u < estimate - 0.5 * variance + ratio(net, k, s)  # NaN: rejected
            p.copy_(torch.where(ok.reshape(shape), p, old))
            self.prior.rescale(net, k, s, ok)
            current = torch.where(ok.unsqueeze(1), proposed, current)
            accepted += ok
        return accepted / len(net)

    def hyperparameter_terms(self) -> Tensor | None:
        """The part of every member's log prior that depends on the prior's hyperparameters alone, shape ``(S,)``
        (:meth:`~bayesnet.priors.HierarchicalPrior.hyperparameter_terms`), or None for a prior without
        hyperparameters. ``potential + hyperparameter_terms`` is the potential of the positions given the
        hyperparameters, whose level does not drift with them (the divergence monitor watches it)."""
        terms = getattr(self.prior, "hyperparameter_terms", None)
        return None if terms is None else terms(self.network_parameters)

    @torch.no_grad()
    def likelihood_update(self, batches, rng, lag: float | None = None) -> dict:
        """Draw the likelihood's own parameters (a regressor's noise variance) of every member from their
        conditional given the network's outputs on ``batches`` (their rows together standing for the ``n_data``
        rows; :meth:`~bayesnet.likelihoods.GaussianLikelihood.conditional_draw`), in place; a member whose draw is
        not finite keeps its values. With ``lag``, a value is replaced only where it lies above its draw by more
        than ``lag`` times the conditional's standard deviation (the likelihood's ``conditional_spread``; every
        value, without one). The warm-up's (:func:`bayesnet.samplers.warmup.settle_likelihood`).

        Returns
        -------
        dict of int to Tensor
            For each parameter tensor drawn (its index in :attr:`parameters`), the members whose values changed,
            bool ``(S,)``; empty, with nothing changed, for a likelihood without such a draw (categorical) or
            without parameters."""
        draw = getattr(self.likelihood, "conditional_draw", None)
        lik = self.parameters[len(self.net_names):]
        if draw is None or not lik or not batches:
            return {}
        X, y = _rows(batches)
        new = draw(self.outputs(X), y, lik, self.n_data, rng)
        if new is None:
            return {}
        spread = getattr(self.likelihood, "conditional_spread", None)
        margin = None if lag is None or spread is None else float(lag) * spread(self.n_data)
        moved = {}
        for k, (p, q) in enumerate(zip(lik, new)):
            finite = torch.isfinite(q).reshape(q.shape[0], -1).all(1).reshape((-1,) + (1,) * (q.ndim - 1))
            take = finite if margin is None else finite & (p.double() > q + margin)
            p.copy_(torch.where(take, q.to(p.dtype), p))
            moved[len(self.net_names) + k] = take.reshape(take.shape[0], -1).any(1)
        return moved

    @torch.no_grad()
    def likelihood_curvature_and_noise(self, batches, batch_rows: int) -> dict:
        """For each of the likelihood's own parameter tensors (its index in :attr:`parameters`), per member and
        coordinate: the potential's curvature, and the variance of its gradient on a mini-batch of ``batch_rows``
        rows drawn without replacement from the ``n_data``, ``N^2 s^2 (N - n) / (n (N - 1))`` with ``s^2`` the
        variance over rows of one row's gradient, both from the likelihood's
        :meth:`~bayesnet.likelihoods.GaussianLikelihood.parameter_curvature_and_noise` on the rows of ``batches``.
        Empty for a likelihood without parameters or without that method. The warm-up's
        (:func:`bayesnet.samplers.warmup.likelihood_mass`)."""
        terms = getattr(self.likelihood, "parameter_curvature_and_noise", None)
        lik = self.parameters[len(self.net_names):]
        if terms is None or not lik or not batches:
            return {}
        X, y = _rows(batches)
        found = terms(self.outputs(X), y, lik, self.n_data)
        if found is None:
            return {}
        N = self.n_data
        n = max(min(int(batch_rows), N), 1)
        share = N * N * (N - n) / (n * (N - 1)) if N > 1 else 0.0
        return {len(self.net_names) + k: (curv, share * row_variance)
                for k, (curv, row_variance) in enumerate(found)}

    def curvature_weight(self) -> Tensor | None:
        """The likelihood's :meth:`~bayesnet.likelihoods.GaussianLikelihood.curvature_weight` at the current
        positions, shape ``(S,)`` (how the data term's curvature scales with the likelihood's own parameters), or
        None for a likelihood without one (categorical)."""
        weight = getattr(self.likelihood, "curvature_weight", None)
        return None if weight is None else weight(self.parameters[len(self.net_names):])

    @property
    def gibbs_interval(self) -> int | None:
        """Steps between the prior's Gibbs updates (None: a prior without hyperparameters to update)."""
        return getattr(self.prior, "gibbs_interval", None) if hasattr(self.prior, "gibbs_update") else None

    def gibbs_update(self, rng, changes: bool = True):
        """Resample the prior's hyperparameters given the positions (a prior with ``gibbs_update``, such as
        :class:`~bayesnet.priors.HierarchicalPrior`); None for a prior without.

        Parameters
        ----------
        rng : ChainRandom
        changes : bool, default=True
            Whether the caller needs the changes returned (a sampler that caches the potential or its gradient);
            without, they are not computed and ``(None, None)`` comes back.

        Returns
        -------
        (delta_value, delta_grad) or None
            The change of every member's potential, shape ``(S,)``, and of its gradient, one tensor per
            parameter (zeros for the likelihood's), for samplers that cache them; ``(None, None)`` when not asked
            for or when the prior's ``gibbs_update`` reports none (returns None, or None for either part: a
            caching sampler then evaluates its potential anew); None for a prior without ``gibbs_update``.
        """
        update = getattr(self.prior, "gibbs_update", None)
        if update is None:
            return None
        net = self.network_parameters
        # (a prior whose gibbs_update predates the keyword is called as before; its change is then not used)
        change = update(net, rng, changes=False) if not changes and _takes_changes(update) else update(net, rng)
        # a prior that reports no change (None, or None for a part) has still moved its hyperparameters: (None,
        # None) makes a kernel that caches the potential or gradient evaluate it anew (Sampler.gibbs_step)
        delta_value, delta_grad = (None, None) if change is None else change
        if delta_value is None or delta_grad is None or not changes:
            return None, None
        rest = [torch.zeros_like(p) for p in self.parameters[len(self.net_names):]]
        return delta_value, list(delta_grad) + rest

    def halves(self, batch):
        """The two halves of a mini-batch (for the warm-up's gradient-noise estimate), or None when ``batch``
        is the full data (its gradient has no mini-batch noise) or too small to split."""
        X, y = batch
        n = y.shape[0]
        if n >= self.n_data or n < 4:
            return None
        h = n // 2
        return (X[:h], y[:h]), (X[h: 2 * h], y[h: 2 * h])

    def member(self, index: int) -> list[Tensor]:
        """The current position of member ``index`` (detached views)."""
        return [p.detach()[index] for p in self.parameters]
