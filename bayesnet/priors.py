"""Priors over network weights."""

from __future__ import annotations

import copy
import math
from numbers import Integral, Real
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["GaussianPrior", "FanInPrior", "HierarchicalPrior", "make_prior", "PRIOR_NAMES", "tempers"]


class GaussianPrior:
    r"""Isotropic Gaussian prior :math:`\theta_k \sim \mathcal N(0, s^2)` on every weight and bias.

    Parameters
    ----------
    scale : float, default=1.0
        Prior standard deviation :math:`s > 0`, in the units of the weights.

    Raises
    ------
    ValueError
        If ``scale`` is not a finite positive number.

    Notes
    -----
    ``log_prob`` drops the normalising constant :math:`-\tfrac{D}{2}\log(2\pi s^2)`,
    which does not depend on the weights. This is the weight prior of Chandra et al. 2019
    eq. (5) (variance :math:`\sigma^2 = s^2`) and of Luo et al. 2018's experiments.
    """

    def __init__(self, scale: float = 1.0):
        if isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"prior scale must be a finite number > 0, got {scale!r}.")
        self.scale = float(scale)

    def log_prob(self, parameters: Sequence[Tensor]) -> Tensor:
        """``-sum(theta**2) / (2 s**2)`` as a 0-d tensor (differentiable)."""
        total = sum((p * p).sum() for p in parameters)
        return -0.5 * total / (self.scale**2)

    def log_prob_chains(self, parameters: Sequence[Tensor]) -> Tensor:
        """``log_prob`` of ``S`` members at once: tensors with a leading member axis -> (S,)."""
        return -0.5 * squared_norms(parameters).sum(1) / (self.scale**2)

    def grad_log_prob_chains(self, parameters: Sequence[Tensor]) -> list[Tensor]:
        """Gradient of ``log_prob`` in closed form, ``-theta / s**2``, one tensor per parameter."""
        return torch._foreach_mul(list(parameters), -1.0 / self.scale**2)

    def quadratic_form(self, parameters: Sequence[Tensor]) -> tuple[list[Tensor], Tensor]:
        """``(factors, offset)`` with ``log_prob_chains = -sum_k factors[k] |theta_k|^2 / 2 + offset``, as tensors
        (the compiled transition takes them as inputs): here ``1 / s^2`` for every tensor and 0."""
        return _constant_form(self, [1.0 / self.scale**2] * len(parameters), parameters[0])

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_forms", None)
        return state

    def __repr__(self) -> str:
        return f"GaussianPrior(scale={self.scale!r})"


def _made_once(prior, key, make):
    """``make()``, made once per ``key`` and kept on the prior (tensors of constants on the parameters' device: a
    copy to a GPU each step would synchronise it)."""
    cache = prior.__dict__.setdefault("_forms", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _constant_form(prior, factors: list[float], like: Tensor) -> tuple[list[Tensor], Tensor]:
    """``(factors, 0)`` as tensors on ``like``'s device and dtype, made once."""
    return _made_once(prior, ("form", tuple(factors), like.device, like.dtype),
                      lambda: ([like.new_tensor(f) for f in factors], like.new_zeros(())))


def squared_norms(parameters: Sequence[Tensor]) -> Tensor:
    """Every member's squared norm of every tensor, :math:`|\\theta_{s,k}|^2`: tensors ``(S, ...)`` -> ``(S, K)``
    (differentiable). One product-sum per tensor: a step's prior value is a few launches, not five per tensor."""
    flat = [p.reshape(p.shape[0], -1) for p in parameters]
    return torch.stack([torch.linalg.vecdot(f, f) for f in flat], 1)


def _factor_vector(prior, factors: list[float], like: Tensor) -> Tensor:
    """``factors`` as one ``(K,)`` tensor on ``like``'s device and dtype, made once."""
    return _made_once(prior, ("vector", tuple(factors), like.device, like.dtype), lambda: like.new_tensor(factors))


def _fan_in(shape: Sequence[int]) -> int | None:
    """Inputs per output unit of a weight tensor of one member's ``shape`` (``(out, in, *kernel)``): the
    product of all but the first dimension; None for a bias (one dimension)."""
    if len(shape) < 2:
        return None
    return max(1, math.prod(shape[1:]))


class FanInPrior:
    r"""Gaussian prior scaled by each layer's fan-in: :math:`w \sim \mathcal N(0, g^2/n_{in})` for every
    weight of a layer with :math:`n_{in}` inputs per unit, :math:`b \sim \mathcal N(0, s_b^2)` for biases.

    With inputs of unit variance, every layer's pre-activations then have variance of order one a priori,
    whatever its width (Neal 1996, Sec. 2.2, scales the hidden-to-output weights so; the "standard
    parametrisation" priors of Lee et al. 2018 scale every layer so): an isotropic N(0, 1) prior
    instead makes a unit of a 100-input layer start with pre-activations of variance 100 and lets wide
    layers diffuse.

    Parameters
    ----------
    gain : float, default=1.0
        :math:`g > 0`: prior sd of a weight times :math:`\sqrt{n_{in}}`.
    bias_scale : float, default=1.0
        :math:`s_b > 0`: prior sd of a bias.

    Notes
    -----
    A tensor with two or more dimensions, one member's shape ``(out, in, *kernel)``, is a weight with
    :math:`n_{in}` = the product of all but its first dimension (a convolution's ``in * kernel``, a
    recurrent layer's ``in`` or ``hidden``); a one-dimensional tensor is a bias. ``log_prob`` drops the
    normalising constants.
    """

    def __init__(self, gain: float = 1.0, bias_scale: float = 1.0):
        for name, v in (("gain", gain), ("bias_scale", bias_scale)):
            if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}.")
        self.gain = float(gain)
        self.bias_scale = float(bias_scale)

    def variances(self, shapes: Sequence[Sequence[int]]) -> list[float]:
        """Prior variance :math:`c_k` of each tensor's entries, from one member's shapes."""
        key = tuple(tuple(s) for s in shapes)
        cache = self.__dict__.setdefault("_variances", {})
        if key not in cache:
            cache[key] = [self.bias_scale**2 if _fan_in(s) is None else self.gain**2 / _fan_in(s) for s in key]
        return cache[key]

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_variances", None)
        state.pop("_forms", None)
        return state

    def scales(self, shapes: Sequence[Sequence[int]]) -> list[float]:
        """Prior sd of each tensor's entries (the square roots of :meth:`variances`)."""
        return [math.sqrt(v) for v in self.variances(shapes)]

    def log_prob(self, parameters: Sequence[Tensor]) -> Tensor:
        """``-sum_k |theta_k|^2 / (2 c_k)`` of one member, as a 0-d tensor (differentiable)."""
        c = self.variances([p.shape for p in parameters])
        return -0.5 * sum((p * p).sum() / ck for p, ck in zip(parameters, c))

    def log_prob_chains(self, parameters: Sequence[Tensor]) -> Tensor:
        """``log_prob`` of ``S`` members at once: tensors with a leading member axis -> (S,)."""
        c = self.variances([p.shape[1:] for p in parameters])
        return -0.5 * (squared_norms(parameters) * _factor_vector(self, [1.0 / ck for ck in c], parameters[0])).sum(1)

    def grad_log_prob_chains(self, parameters: Sequence[Tensor]) -> list[Tensor]:
        """Gradient of ``log_prob_chains`` in closed form, ``-theta_k / c_k``."""
        c = self.variances([p.shape[1:] for p in parameters])
        return [p * (-1.0 / ck) for p, ck in zip(parameters, c)]

    def quadratic_form(self, parameters: Sequence[Tensor]) -> tuple[list[Tensor], Tensor]:
        """``(factors, offset)`` with ``log_prob_chains = -sum_k factors[k] |theta_k|^2 / 2 + offset``: ``1 / c_k``
        and 0 (see :meth:`GaussianPrior.quadratic_form`)."""
        c = self.variances([p.shape[1:] for p in parameters])
        return _constant_form(self, [1.0 / ck for ck in c], parameters[0])

    def __repr__(self) -> str:
        return f"FanInPrior(gain={self.gain!r}, bias_scale={self.bias_scale!r})"


class HierarchicalPrior(FanInPrior):
    r"""Precisions with Gamma hyperpriors, one per layer and one per input, resampled by Gibbs steps
    (automatic relevance determination, Neal 1996, Sec. 2.2 and 3.2; MacKay 1992).

    The weights are divided into groups :math:`g`, each with its own precision :math:`\tau_g`:

    .. math::

        \theta_g \mid \tau_g \sim \mathcal N(0, c_k/\tau_g), \qquad
        \tau_g \sim \mathrm{Gamma}(a, b),

    with :math:`c_k` the fan-in variance of :class:`FanInPrior` for the tensor :math:`k` the group belongs to
    (so :math:`\tau = 1` is that prior). Every parameter tensor (a layer's weights, its biases) is one group,
    except the input layer's weights with ``input_relevance=True``: there the weights out of each input (one
    column of a dense layer's ``(out, in)`` matrix, one input channel of a convolution's, one input feature of a
    recurrent layer's input weights) form a group, Neal's automatic relevance determination, so that an input
    the data do not use is shrunk, and one on a larger scale than the others gets smaller weights. Each chain
    carries its own :math:`\tau` (shape ``(S, G)``); the samplers move :math:`\theta` given :math:`\tau`, and
    every ``gibbs_interval`` steps :meth:`gibbs_update` draws :math:`\tau` from its exact conditional,

    .. math::

        \tau_g \mid \theta \sim \mathrm{Gamma}\big(a + n_g/2,\ b + |\theta_g|^2/(2 c_k)\big),

    so that the data set each group's scale. The composition of an exact Gibbs step with a kernel that
    leaves :math:`p(\theta \mid \tau)` invariant leaves the joint invariant (Neal 1996, Sec. 3.2).

    Only at temperature 1: tempered, the joint :math:`p(\theta, \tau)^{1/T}` of a layer with many weights
    is improper above :math:`T = 1` (its density grows with the layer's norm) and, below, draws every layer
    towards zero (its mode in :math:`|\theta_k|^2` is :math:`2bT/(1-T)`); the estimators refuse it with a
    sampler that tempers the prior. A sampler that tempers the likelihood only, :math:`p(y \mid \theta)^{1/T}
    p(\theta \mid \tau) p(\tau)` (:class:`~bayesnet.samplers.PTLangevin` with ``tempered="likelihood"``; a
    regressor's noise-variance prior is tempered with its likelihood), keeps it proper at every temperature, and
    the Gibbs step's conditional is then the same at every rung.

    Parameters
    ----------
    gain, bias_scale : float, default=1.0
        As :class:`FanInPrior`: the scale at :math:`\tau = 1`.
    precision_shape : float, default=1.0
        :math:`a \ge 1`.
    precision_rate : float, default=1.0
        :math:`b > 0`. The default :math:`\mathrm{Gamma}(1, 1)` has mean 1 (the fan-in prior) and lets a layer's
        scale range over orders of magnitude.
    gibbs_interval : int, default=10
        Sampler steps between Gibbs updates (a layer's :math:`\tau` given thousands of weights moves little
        in a step; an update costs a few small operations per tensor).
    input_relevance : bool, default=True
        One precision per input for the input layer's weights (the first parameter tensor with two or more
        dimensions, ``(out, in, ...)`` per member, and more than one input); False gives that tensor one
        precision, as every other tensor has.

    Attributes
    ----------
    precision : Tensor, shape (S, G), or None
        The current :math:`\tau` of every member (None until first used: all 1), its columns in
        :meth:`groups` order: tensor by tensor, the input layer's inputs in order.

    Notes
    -----
    The potential includes :math:`\tau`'s terms, :math:`-\log p(\theta_g \mid \tau_g) - \log p(\tau_g) =
    \tau_g |\theta_g|^2/(2c_k) - (a - 1 + n_g/2)\log\tau_g + b\tau_g`, so that potentials of different
    members compare (a Metropolis test compares potentials).

    Measured on the defaults panel (benchmarks/README.md, "Relevance of the inputs"), one precision per input
    against one for the whole input layer, 13 tabular rows on four seeds: the NLL lower on 34 of the 52 rows,
    the ECE unchanged on average, friedman1's RMSE (five of its ten inputs are noise) 5 % lower on every seed.
    """

    def __init__(self, gain: float = 1.0, bias_scale: float = 1.0, precision_shape: float = 1.0,
                 precision_rate: float = 1.0, gibbs_interval: int = 10, input_relevance: bool = True):
        super().__init__(gain, bias_scale)
        if isinstance(gibbs_interval, bool) or not isinstance(gibbs_interval, Integral) or gibbs_interval < 1:
            raise ValueError(f"gibbs_interval must be an int >= 1, got {gibbs_interval!r}.")
        self.gibbs_interval = int(gibbs_interval)
        for name, v, ok, words in (("precision_shape", precision_shape, lambda x: x >= 1, ">= 1"),
                                   ("precision_rate", precision_rate, lambda x: x > 0, "> 0")):
            if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v) or not ok(v):
                raise ValueError(f"{name} must be a finite number {words}, got {v!r}.")
        if not isinstance(input_relevance, (bool, np.bool_)):
            raise ValueError(f"input_relevance must be True or False, got {input_relevance!r}.")
        self.precision_shape = float(precision_shape)
        self.precision_rate = float(precision_rate)
        self.input_relevance = bool(input_relevance)
        self.precision: Tensor | None = None

    def groups(self, shapes: Sequence[Sequence[int]]) -> list[int]:
        """How many precisions each tensor has, from one member's ``shapes``: the input layer's number of inputs
        (``shape[1]``) with ``input_relevance``, 1 for every other tensor. ``sum`` of it is ``G``."""
        key = (self.input_relevance, tuple(tuple(s) for s in shapes))
        cache = self.__dict__.setdefault("_groups", {})
        if key not in cache:
            counts, first = [1] * len(key[1]), True
            for k, shape in enumerate(key[1]):
                if first and len(shape) >= 2:
                    first = False
                    if self.input_relevance and shape[1] > 1:
                        counts[k] = int(shape[1])
            cache[key] = counts
        return cache[key]

    def _layout(self, parameters: Sequence[Tensor]) -> tuple[list[int], int | None]:
        """``(groups per tensor, index of the tensor with one precision per input or None)``."""
        counts = self.groups([p.shape[1:] for p in parameters])
        grouped = next((k for k, g in enumerate(counts) if g > 1), None)
        return counts, grouped

    def _tau(self, parameters: Sequence[Tensor]) -> Tensor:
        S, G = parameters[0].shape[0], sum(self._layout(parameters)[0])
        if self.precision is None or self.precision.shape != (S, G):
            self.precision = torch.ones(S, G, dtype=torch.float64, device=parameters[0].device)
        return self.precision

    def _columns(self, parameters: Sequence[Tensor]) -> list[slice]:
        """Per tensor, its columns of :attr:`precision`."""
        out, at = [], 0
        for g in self._layout(parameters)[0]:
            out.append(slice(at, at + g))
            at += g
        return out

    def _tau_forms(self, parameters: Sequence[Tensor]) -> dict:
        """What the step reads of the precisions, in the parameters' dtype, made once per precision (no launches
        per step): ``"matrix"`` ``tau_k / c_k`` of the tensors with one precision, shape ``(S, K)`` (0 in the
        column of the tensor with one per input); ``"inputs"`` that tensor's ``tau_g / c_k``, ``(S, in)``, or
        None, and ``"grouped"`` its index (or None); ``"factors"`` every tensor's ``tau / c`` shaped to broadcast
        against it, and ``"negated"`` their negatives; ``"rest"`` the ``tau`` terms, ``(S,)``. Made anew after a
        Gibbs draw (a new tensor), an in-place change of ``precision``, a change of dtype, of the parameters'
        shapes or of ``input_relevance``."""
        hit, tau, dtype = self.__dict__.get("_tau_cache"), self.precision, parameters[0].dtype
        key = (self.input_relevance, tuple(p.shape for p in parameters))
        if hit is not None and hit[0] is tau and hit[1] == tau._version and hit[2] == dtype and hit[4] == key:
            return hit[3]  # (without the layout's Python: every step)
        tau = self._tau(parameters)  # (a new tensor where the layout changed)
        counts, grouped = self._layout(parameters)
        scaled = tau / self._group_variances(parameters, tau)
        cols = self._columns(parameters)
        matrix = torch.stack([scaled[:, sl].sum(1) if k != grouped else torch.zeros_like(scaled[:, 0])
                              for k, sl in enumerate(cols)], 1).to(dtype)
        factors = []
        for k, (p, sl) in enumerate(zip(parameters, cols)):
            if k == grouped:  # (S, 1, in, 1, ...): one factor per input column
                factors.append(scaled[:, sl].to(dtype).reshape((-1, 1, counts[k]) + (1,) * (p.ndim - 3)).contiguous())
            else:
                factors.append(matrix[:, k].contiguous().reshape((-1,) + (1,) * (p.ndim - 1)))
        forms = {"matrix": matrix, "inputs": None if grouped is None else scaled[:, cols[grouped]].to(dtype),
                 "factors": factors, "negated": [-f for f in factors], "grouped": grouped,
                 "rest": self._tau_terms(tau, parameters).to(dtype)}
        self._tau_cache = (tau, tau._version, dtype, forms, key)
        return forms

    def _group_variances(self, parameters: Sequence[Tensor], like: Tensor) -> Tensor:
        """Every group's fan-in variance :math:`c_k` (its tensor's), ``(G,)`` on ``like``'s device and dtype (made
        once)."""
        counts = self._layout(parameters)[0]
        c = self.variances([p.shape[1:] for p in parameters])
        return _factor_vector(self, [ck for ck, g in zip(c, counts) for _ in range(g)], like)

    def _sizes(self, parameters: Sequence[Tensor], device) -> Tensor:
        """Every group's entries per member, :math:`n_g`, as a float64 ``(G,)`` tensor on ``device`` (made once)."""
        def make():
            counts = self._layout(parameters)[0]
            sizes = [math.prod(p.shape[1:]) // g for p, g in zip(parameters, counts) for _ in range(g)]
            return torch.tensor(sizes, dtype=torch.float64, device=device)

        # made once per shape: building the sizes at every call (a member tensor indexed once per group, 33 times
        # for breast cancer's inputs) cost 1.5 % of a default fit
        return _made_once(self, ("sizes", self.input_relevance, tuple(p.shape for p in parameters), device), make)

    def _tau_terms(self, tau: Tensor, parameters: Sequence[Tensor]) -> Tensor:
        r""":math:`\sum_g (a - 1 + n_g/2)\log\tau_g - b\tau_g` per member, ``(S,)``, float64."""
        n = self._sizes(parameters, tau.device)
        return ((self.precision_shape - 1.0 + 0.5 * n) * torch.log(tau) - self.precision_rate * tau).sum(1)

    @staticmethod
    def _input_squares(p: Tensor) -> Tensor:
        """The squared norm of the weights out of each input, ``(S, in)``, of a tensor ``(S, out, in, ...)``."""
        q = p * p
        return q.sum(dim=[1] + list(range(3, p.ndim)))

    def _scaled_squares(self, parameters: Sequence[Tensor], like: Tensor) -> Tensor:
        r""":math:`|\theta_g|^2 / c_k` per member and group, ``(S, G)``, float64."""
        grouped = self._layout(parameters)[1]
        if grouped is None:
            return squared_norms(parameters).double() / self._group_variances(parameters, like)
        cols = [self._input_squares(p) if k == grouped else squared_norms([p]) for k, p in enumerate(parameters)]
        return torch.cat(cols, 1).double() / self._group_variances(parameters, like)

    def _energy(self, parameters: Sequence[Tensor], tau: Tensor, sq: Tensor | None = None) -> Tensor:
        """``-log p(theta | tau) - log p(tau)`` per member, (S,), float64 for the tau terms; ``sq`` the
        :meth:`_scaled_squares` when the caller has them."""
        sq = self._scaled_squares(parameters, tau) if sq is None else sq
        return 0.5 * (tau * sq).sum(1) - self._tau_terms(tau, parameters)

    def log_prob(self, parameters: Sequence[Tensor]) -> Tensor:
        raise TypeError("HierarchicalPrior holds one precision per member: it is evaluated through log_prob_chains "
                        "(a likelihood with log_likelihood_chains).")

    def log_prob_chains(self, parameters: Sequence[Tensor]) -> Tensor:
        """``-(energy)`` of ``S`` members, (S,), in the parameters' dtype (differentiable in them)."""
        forms = self._tau_forms(parameters)
        grouped = forms["grouped"]
        quad = (squared_norms(parameters) * forms["matrix"]).sum(1)
        if grouped is not None:  # (its column of "matrix" is 0)
            quad = quad + torch.linalg.vecdot(self._input_squares(parameters[grouped]), forms["inputs"])
        return forms["rest"] - 0.5 * quad

    def grad_log_prob_chains(self, parameters: Sequence[Tensor]) -> list[Tensor]:
        """``-tau theta / c``, per group."""
        return torch._foreach_mul(list(parameters), self._tau_forms(parameters)["negated"])

    def log_prob_and_grad_chains(self, parameters: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """:meth:`log_prob_chains` and :meth:`grad_log_prob_chains` together (not differentiable), the value from
        the gradient: ``rest + <theta, g> / 2`` with ``g = -tau theta / c``, whatever the groups. The products
        ``theta * g`` of every tensor are laid side by side, ``(S, D)``, and summed per member in one reduction (a
        small network's step is mostly per-operation overhead: 7 operations where a dot product per tensor took 16
        for the default MLP's four tensors); a member's value does not depend on ``S`` at one intra-op thread
        (with more, torch splits one member's long reduction across them)."""
        forms = self._tau_forms(parameters)
        parameters = list(parameters)
        grads = torch._foreach_mul(parameters, forms["negated"])
        S = parameters[0].shape[0]
        dots = torch.cat([q.reshape(S, -1) for q in torch._foreach_mul(grads, parameters)], 1).sum(1)
        return forms["rest"] + 0.5 * dots, grads

    def hyperparameter_terms(self, parameters: Sequence[Tensor]) -> Tensor:
        r"""The terms of every member's log prior that depend on :math:`\tau` alone, :math:`\sum_g (a - 1 +
        n_g/2)\log\tau_g - b\tau_g`, shape ``(S,)``, in the parameters' dtype (the same tensor until the next
        Gibbs step).

        The potential is the data term plus :math:`\sum_g \tau_g|\theta_g|^2/(2c_k)` minus these terms. At
        equilibrium given :math:`\tau` the quadratic part averages :math:`\sum_g n_g/2` whatever :math:`\tau`
        is, while these terms move with it: a chain whose layers are still growing towards their posterior scale
        (over thousands of steps; see the user guide) sees its potential rise by :math:`(n_g/2)` per unit of
        :math:`-\log\tau_g` without leaving its typical set. The divergence monitor adds them back.
        """
        return self._tau_forms(parameters)["rest"]

    def quadratic_form(self, parameters: Sequence[Tensor]) -> tuple[list[Tensor], Tensor]:
        """``(factors, offset)`` with ``log_prob_chains = -sum_k sum(factors[k] * theta_k^2) / 2 + offset``: every
        member's ``tau_k / c_k``, shape ``(S,)``, for a tensor with one precision, ``(S, 1, in, 1, ...)`` for the
        one with a precision per input, and the ``tau`` terms, ``(S,)`` (they change with each Gibbs step; see
        :meth:`GaussianPrior.quadratic_form`)."""
        forms = self._tau_forms(parameters)
        grouped = forms["grouped"]
        return [f if k == grouped else f.reshape(-1) for k, f in enumerate(forms["factors"])], forms["rest"]

    def scale_log_ratio(self, parameters: Sequence[Tensor], k: int, s: Tensor) -> Tensor:
        r"""The prior's part of the log acceptance ratio of a scale move of tensor ``k`` (the warm-up's,
        :meth:`~bayesnet.posterior.ChainPosterior.scale_move`): :math:`\theta_k \to e^{s}\theta_k`,
        :math:`\tau_g \to e^{-2s}\tau_g` for each of its groups, per member, ``s`` of shape ``(S,)``, float64.

        The move keeps every :math:`\tau_g|\theta_g|^2` and so the Gaussian's exponent; with the Jacobian
        :math:`e^{n_k s}` of :math:`\theta_k` the normalisers' :math:`(n_g/2)\log\tau_g` cancel and what remains
        is, per group, the Gamma hyperprior's change and :math:`\tau_g`'s Jacobian, :math:`-2as - b\tau_g(e^{-2s}
        - 1)`. The data term's change is the caller's.
        """
        tau = self._tau(parameters)[:, self._columns(parameters)[k]]
        per_group = -2.0 * self.precision_shape * s.unsqueeze(1) - self.precision_rate * tau * torch.expm1(
            -2.0 * s).unsqueeze(1)
        return per_group.sum(1)

    def rescale(self, parameters: Sequence[Tensor], k: int, s: Tensor, accept: Tensor) -> None:
        r"""Apply the accepted members' scale move to tensor ``k``'s precisions (``tau_g * exp(-2 s)``; see
        :meth:`scale_log_ratio`); the caller scales the positions."""
        tau = self._tau(parameters).clone()
        cols = self._columns(parameters)[k]
        tau[:, cols] = torch.where(accept.unsqueeze(1), tau[:, cols] * torch.exp(-2.0 * s).unsqueeze(1), tau[:, cols])
        self.precision = tau

    def permute_members(self, index: Tensor) -> None:
        """The members' positions were exchanged, ``new[s] = old[index[s]]`` (a replica exchange of
        :class:`~bayesnet.samplers.PTLangevin` with ``tempered="likelihood"``): each member's :math:`\tau` goes
        with its position."""
        if self.precision is not None:
            self.precision = self.precision[index.to(self.precision.device)]

    @torch.no_grad()
    def gibbs_update(self, parameters: Sequence[Tensor], rng, changes: bool = True):
        r"""Draw every member's :math:`\tau` from its conditional (class docstring). The samplers call it every
        ``gibbs_interval`` steps.

        Parameters
        ----------
        parameters : sequence of Tensor
            The network's parameters, each ``(S, ...)``.
        rng : ChainRandom
            The chains' streams (members ``c * m ... (c + 1) * m - 1`` are chain ``c``'s).
        changes : bool, default=True
            Whether to compute the changes below (only a sampler that caches the potential or its gradient needs
            them; the draw is the same either way).

        Returns
        -------
        delta_value : Tensor, shape (S,), or None
            The change of every member's potential (None without ``changes``).
        delta_grad : list of Tensor, or None
            The change of the potential's gradient, per parameter tensor (None without ``changes``).
        """
        if not self.precision_shape >= 1:  # (checked when made; here for one set by hand since: on the host)
            raise ValueError(f"precision_shape must be >= 1, got {self.precision_shape!r}.")
        tau_old = self._tau(parameters).clone()
        sq = self._scaled_squares(parameters, tau_old)  # once: the draw and both energies use it
        n = self._sizes(parameters, sq.device)
        shape = (self.precision_shape + 0.5 * n).expand_as(sq).contiguous()
        rate = self.precision_rate + 0.5 * sq
        tau = rng.gamma(shape, check=False) / rate  # (a >= 1, checked above on the host: no device read)
        tau = torch.where(torch.isfinite(tau) & (tau > 0), tau, tau_old)  # a non-finite chain keeps its own
        if not changes:
            self.precision = tau
            return None, None
        before = self._energy(parameters, tau_old, sq)
        old = self._tau_forms(parameters)["factors"]
        self.precision = tau
        delta_value = (self._energy(parameters, tau, sq) - before).to(parameters[0].dtype)
        # the gradient's change theta (tau - tau') / c, per group: the factors' differences (views of one
        # matrix and the input layer's columns), one launch
        new = self._tau_forms(parameters)["factors"]
        delta_grad = torch._foreach_mul(list(parameters), torch._foreach_sub(new, old))
        return delta_value, delta_grad

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_tau_cache", None)
        state.pop("_groups", None)
        return state

    def __setstate__(self, state):
        state.setdefault("input_relevance", False)  # pickled before the inputs had precisions of their own
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (f"HierarchicalPrior(gain={self.gain!r}, bias_scale={self.bias_scale!r}, "
                f"precision_shape={self.precision_shape!r}, precision_rate={self.precision_rate!r}, "
                f"gibbs_interval={self.gibbs_interval!r}, input_relevance={self.input_relevance!r})")


#: the names ``prior_scale`` accepts besides a number or a prior object ("auto" is resolved by :func:`make_prior`)
PRIOR_NAMES = {"fan_in": FanInPrior, "hierarchical": HierarchicalPrior}


def tempers(sampler) -> bool:
    """Whether ``sampler`` samples the prior at any temperature other than 1: its ``prior_temperature_range``
    (a sampler that tempers the likelihood only samples the prior at 1), else its ``temperature_range``."""
    if sampler is None:
        return False
    span = getattr(sampler, "prior_temperature_range", None) or sampler.temperature_range
    return tuple(float(t) for t in span()) != (1.0, 1.0)


def make_prior(prior: "float | str | object", sampler=None, likelihood=None):
    """Turn an estimator's ``prior_scale`` into a prior.

    A float is :class:`GaussianPrior` (that sd on every weight); "fan_in" is :class:`FanInPrior`;
    "hierarchical" is :class:`HierarchicalPrior`; "auto" is "hierarchical" for a ``sampler`` that samples
    the prior at temperature 1 throughout (:func:`tempers`: one that tempers the likelihood only does) and, for
    one that tempers it (a tempered hierarchical prior is improper above temperature 1), the fan-in prior at the
    ``likelihood``'s ``fan_in_gain`` (2 for the categorical likelihood's logits, 1 for standardised regression
    targets and without a likelihood). An object with
    ``log_prob`` is copied (a fit's own: a prior may keep per-chain state).

    Raises
    ------
    ValueError
        If a float is not finite and positive, a string is not one of the names, "hierarchical" is asked
        of a sampler that tempers the prior, or a prior with hyperparameters (``gibbs_update``) has no
        ``permute_members`` under a sampler that exchanges its members' positions (``exchanges_members``).
    TypeError
        If ``prior`` is none of these.
    """
    if hasattr(prior, "log_prob"):
        prior = copy.deepcopy(prior)
    elif isinstance(prior, str):
        if prior == "auto" and tempers(sampler):
            return FanInPrior(gain=float(getattr(likelihood, "fan_in_gain", 1.0)))
        if prior == "auto":
            prior = "hierarchical"
        if prior not in PRIOR_NAMES:
            raise ValueError(f"prior_scale must be a positive float, 'auto', one of {sorted(PRIOR_NAMES)} or a prior "
                             f"object, got {prior!r}.")
        prior = PRIOR_NAMES[prior]()
    elif isinstance(prior, Real) and not isinstance(prior, bool):
        return GaussianPrior(float(prior))
    else:
        raise TypeError(f"prior_scale must be a positive float, 'auto', one of {sorted(PRIOR_NAMES)} or a prior object "
                        f"with log_prob(), got {prior!r}.")
    if hasattr(prior, "gibbs_update") and tempers(sampler):
        low, high = sampler.temperature_range()
        hint = getattr(sampler, "untempered_prior_hint", lambda: None)()
        own = f" (or {hint})" if hint else ""
        raise ValueError(f"a hierarchical prior needs the sampler at temperature 1 throughout; {sampler.name} samples "
                         f"at temperatures from {low:g} up to {high:g} (a tempered hierarchical prior is improper "
                         "above 1 and shrinks every layer below). Use prior_scale='auto', 'fan_in' or a number, or an "
                         f"untempered sampler{own}.")
    if hasattr(prior, "gibbs_update") and getattr(sampler, "exchanges_members", False) and getattr(
            prior, "permute_members", None) is None:
        raise ValueError(f"{sampler.name} exchanges positions between its replicas, and the prior "
                         f"{type(prior).__name__} keeps hyperparameters per member without a permute_members(index) "
                         "to exchange them with the positions. Give the prior that method, or use a prior without "
                         "hyperparameters.")
    return prior
