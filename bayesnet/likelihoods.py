"""Observation models p(y | x, theta) for classifiers and regressors.

Likelihoods are ``torch.nn.Module`` objects (they serve as the skorch
``criterion_``), whose ``forward(output, y)`` returns the *sum* of the
log-likelihoods over the rows of a batch. A likelihood may have its own
sampled parameters (the Gaussian observation noise) with their own prior,
returned by :meth:`log_prior`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["CategoricalLikelihood", "GaussianLikelihood"]


def _own_forms(likelihood, cls) -> bool:
    """Whether ``likelihood`` evaluates :meth:`log_likelihood_chains` and :meth:`log_prior_chains` as ``cls``
    does, so that ``cls``'s closed form (``potential_and_grad_chains``) is their gradient: a subclass that
    changes either one has the posterior fall back to autograd."""
    kind = type(likelihood)
    return kind.log_likelihood_chains is cls.log_likelihood_chains and kind.log_prior_chains is cls.log_prior_chains


class CategoricalLikelihood(nn.Module):
    r"""Categorical likelihood on logits: :math:`\log p(y|x,\theta) = \log\mathrm{softmax}(f_\theta(x))_y`.

    The multinomial model of Chandra et al. 2019 Sec. 3.2 (eqs. 6-7) with a softmax link.
    """

    #: the gain of the fan-in prior that ``prior_scale="auto"`` gives a sampler that tempers (where the
    #: hierarchical prior, which learns each layer's scale, is improper): logits of a few units express the
    #: confidence the data support, and at gain 1 the draws stayed underconfident. Measured with tacthmc and
    #: pt-langevin on five tabular tasks, the MNIST-1D CNN, a sequence RNN and a three-layer MLP
    #: (benchmarks/README.md, "The tempering samplers' prior"): log loss 0.32 -> 0.16 on digits, 0.34 -> 0.24 on
    #: the CNN, 0.27 -> 0.16 on the RNN. Gain 4 did better on the one-layer networks but worse than 1 with three
    #: hidden layers (the gain compounds with depth): 2 is better than 1 on every network measured
    fan_in_gain = 2.0

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """Sum of log-likelihoods; ``logits`` (n, n_classes), ``y`` (n,) int64 class indices."""
        return -F.cross_entropy(logits, y, reduction="sum")

    def log_prior(self) -> Tensor | float:
        """No parameters of its own: 0."""
        return 0.0

    def log_likelihood_chains(self, logits: Tensor, y: Tensor, parameters=()) -> Tensor:
        """Summed log-likelihood of ``S`` members at once: ``logits`` (S, n, K), ``y`` (n,) -> (S,)."""
        # the log-softmax picked at the labels: the values of cross_entropy's, in three launches (and their
        # backward) where the pointwise form takes six; one expression for every S
        S, n, _ = logits.shape
        return logits.log_softmax(-1).gather(2, y.view(1, n, 1).expand(S, n, 1)).sum((1, 2))

    def potential_and_grad_chains(self, logits: Tensor, y: Tensor, parameters, n_data: int):
        """The likelihood's part of every member's potential, ``-(N/n) log p(y | logits)`` (``n`` rows standing
        for ``N``), with its gradient in closed form, no graph: ``(values (S,), d/d logits (S, n, K), [])``. The
        kernels autograd runs for :meth:`log_likelihood_chains` (the labels' one-hot scattered, then log-softmax's
        backward): values and gradient are autograd's bit for bit. None (the caller then runs autograd) for a subclass
        with its own ``log_likelihood_chains`` or ``log_prior_chains``."""
        if not _own_forms(self, CategoricalLikelihood):
            return None
        S, n, _ = logits.shape
        weight = -(n_data / n)
        with torch.no_grad():
            log_p = logits.log_softmax(-1)
            index = y.view(1, n, 1).expand(S, n, 1)
            values = weight * log_p.gather(2, index).sum((1, 2))
            seed = torch.full((S, 1, 1), weight, dtype=logits.dtype, device=logits.device).expand(S, n, 1)
            picked = torch.zeros_like(logits).scatter_add_(2, index, seed)
            return values, torch._log_softmax_backward_data(picked, log_p, -1, logits.dtype), []

    def pointwise_log_likelihood(self, logits: Tensor, y: Tensor, parameters=()) -> Tensor:
        """Each row's log-likelihood under each of ``S`` members: ``logits`` (S, n, K), ``y`` (n,) -> (S, n)."""
        S, n, K = logits.shape  # one expression for every S: a member's value does not depend on S
        return -F.cross_entropy(logits.reshape(S * n, K), y.expand(S, n).reshape(-1), reduction="none").view(S, n)

    def log_prior_chains(self, parameters=()) -> Tensor | float:
        """0 for every member."""
        return 0.0

    def predict(self, logits: Tensor) -> Tensor:
        """Class probabilities, shape (n, n_classes)."""
        return torch.softmax(logits, dim=-1)


class GaussianLikelihood(nn.Module):
    r"""Gaussian likelihood with a sampled observation-noise variance.

    :math:`y_{ik} \sim \mathcal N(f_\theta(x_i)_k, \sigma_k^2)` with
    :math:`\gamma_k = \log\sigma_k^2` a parameter that the sampler moves along
    with the weights, under an inverse-gamma prior
    :math:`\sigma_k^2 \sim \mathrm{IG}(a, b)`. In :math:`\gamma` the prior
    density, Jacobian included, is :math:`\log p(\gamma) = -a\gamma - b e^{-\gamma} + c`
    (Karagiannis's SGLD notes Sec. 4; Chandra et al. 2019 eq. 5 with :math:`\nu_1 = a - 1`,
    :math:`\nu_2 = b`).

    Parameters
    ----------
    n_outputs : int, default=1
        Number of target columns; each has its own noise variance.
    noise_shape : float, default=1.0
        Inverse-gamma shape :math:`a > 0` (Karagiannis's SGLD notes uses 1).
    noise_scale : float, default=0.1
        Inverse-gamma scale :math:`b > 0`, in target units squared (targets are
        standardised by the regressors, so 0.1 puts the prior mode of
        :math:`\sigma^2` at 0.05 of the target variance). It adds ``b`` to half
        the residual sum of squares in the noise variance's conditional, which
        keeps a noise-free target's noise variance from collapsing (default fits
        of a small recurrent regressor on a noise-free target: 0.01 let 2 of
        36 on 160-250 rows diverge, 1e-3 5 of 28, 0.1 none of 80), at a cost
        where the fit is very precise: Mackey-Glass's half residual sum of
        squares is about 0.18, so 0.1 inflates its noise variance about 1.5x.
    init_noise_variance : float, default=0.1
        Starting value of :math:`\sigma^2`.
    """

    #: the gain of the fan-in prior that ``prior_scale="auto"`` gives a sampler that tempers: 1, as the targets
    #: are standardised (a wider prior raised diabetes' RMSE, 55.9 -> 59.7 at gain 2, 62.2 at 4; see
    #: :attr:`CategoricalLikelihood.fan_in_gain`)
    fan_in_gain = 1.0

    def __init__(self, n_outputs: int = 1, noise_shape: float = 1.0, noise_scale: float = 0.1,
                 init_noise_variance: float = 0.1):
        super().__init__()
        for name, value in (("noise_shape", noise_shape), ("noise_scale", noise_scale),
                            ("init_noise_variance", init_noise_variance)):
            if not (math.isfinite(value) and value > 0):  # (NaN fails both)
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
        self.noise_shape = float(noise_shape)
        self.noise_scale = float(noise_scale)
        self.log_noise_variance = nn.Parameter(torch.full((n_outputs,), math.log(init_noise_variance)))

    def forward(self, mean: Tensor, y: Tensor) -> Tensor:
        """Sum of log-likelihoods; ``mean`` and ``y`` both (n, n_outputs)."""
        gamma = self.log_noise_variance
        resid2 = (y - mean).square()
        n = y.shape[0]
        return -0.5 * (n * (gamma.sum() + y.shape[1] * math.log(2 * math.pi)) + (resid2 * torch.exp(-gamma)).sum())

    def log_prior(self) -> Tensor:
        """``sum_k -a gamma_k - b exp(-gamma_k)`` (inverse-gamma prior in log-variance)."""
        gamma = self.log_noise_variance
        return (-self.noise_shape * gamma - self.noise_scale * torch.exp(-gamma)).sum()

    def log_likelihood_chains(self, mean: Tensor, y: Tensor, parameters) -> Tensor:
        """Summed log-likelihood of ``S`` members at once: ``mean`` (S, n, k), ``y`` (n, k), ``parameters`` =
        ``[log_noise_variance (S, k)]`` -> (S,)."""
        (gamma,) = parameters
        n, k = y.shape
        resid2 = (y - mean).square().sum(1)  # (S, k)
        return -0.5 * (n * (gamma.sum(1) + k * math.log(2 * math.pi)) + (resid2 * torch.exp(-gamma)).sum(1))

    def potential_and_grad_chains(self, mean: Tensor, y: Tensor, parameters, n_data: int):
        r"""The likelihood's part of every member's potential, :math:`-(N/n) \log p(y | \mu, \gamma) - \log
        p(\gamma)` (``n`` rows standing for ``N``), with its gradient in closed form, no graph: ``(values (S,),
        d/d mean (S, n, k), [d/d log_noise_variance (S, k)])``: :math:`-(N/n)(y - \mu) e^{-\gamma}` and
        :math:`a - b e^{-\gamma} + \tfrac{N}{2n}(n - |y - \mu|^2 e^{-\gamma})`. Evaluated in the order autograd
        evaluates :meth:`log_likelihood_chains` and :meth:`log_prior_chains`: values and gradients are autograd's
        bit for bit. None (the caller then runs autograd) for a subclass with its own ``log_likelihood_chains``
        or ``log_prior_chains``."""
        if not _own_forms(self, GaussianLikelihood):
            return None
        (gamma,) = parameters
        n, k = y.shape
        weight = -(n_data / n)
        with torch.no_grad():
            diff = y - mean
            resid2 = diff.square().sum(1)  # (S, k)
            precision = torch.exp(-gamma)
            log_lik = -0.5 * (n * (gamma.sum(1) + k * math.log(2 * math.pi)) + (resid2 * precision).sum(1))
            scaled = self.noise_scale * precision
            values = weight * log_lik - (-self.noise_shape * gamma - scaled).sum(1)
            seed = torch.full((gamma.shape[0], 1), weight, dtype=gamma.dtype, device=gamma.device)
            half = seed * -0.5
            d_mean = diff * (seed * precision).unsqueeze(1)
            d_gamma = ((self.noise_shape - scaled) - (half * resid2) * precision) + half * n
            return values, d_mean.to(mean.dtype), [d_gamma.to(gamma.dtype)]  # (a float64 y: the inputs' dtypes,
            # as autograd returns them)

    def pointwise_log_likelihood(self, mean: Tensor, y: Tensor, parameters) -> Tensor:
        """Each row's log-likelihood under each of ``S`` members: ``mean`` (S, n, k), ``y`` (n, k),
        ``parameters`` = ``[log_noise_variance (S, k)]`` -> (S, n)."""
        (gamma,) = parameters
        k = y.shape[1]
        resid2 = (y - mean).square() * torch.exp(-gamma).unsqueeze(1)  # (S, n, k)
        return -0.5 * (gamma.sum(1, keepdim=True) + k * math.log(2 * math.pi) + resid2.sum(2))

    @torch.no_grad()
    def conditional_draw(self, mean: Tensor, y: Tensor, parameters, n_data: int, rng) -> list[Tensor] | None:
        r"""Every member's ``log_noise_variance`` drawn from its conditional given the network's outputs: the
        inverse-gamma prior is conjugate, so :math:`\sigma_k^2 \mid \theta \sim \mathrm{IG}(a + N/2,\; b +
        \tfrac{N}{2n}|y_k - \mu_k|^2)`, the ``n`` rows of ``y`` (n, k) standing for ``N = n_data`` (exact on the
        full data). ``mean`` (S, n, k); ``parameters`` = ``[log_noise_variance (S, k)]``; ``rng`` the chains'
        :class:`~bayesnet.samplers.random.ChainRandom` (each chain's draw from its own stream). Returns the new
        ``[log_noise_variance]`` (float64; non-finite where a member's outputs were), or None for a subclass with
        its own forms or a shape :math:`a + N/2` below 1."""
        if not _own_forms(self, GaussianLikelihood):
            return None
        (gamma,) = parameters
        n = y.shape[0]
        N = int(n_data)  # (rows given more than once, as the warm-up's last full batches are, count N/n each)
        alpha = self.noise_shape + 0.5 * N
        if alpha < 1.0:  # (the vectorised gamma draw takes shapes >= 1; N >= 2 rows give them)
            return None
        resid2 = (y.double() - mean.double()).square().sum(1)  # (S, k)
        rate = self.noise_scale + 0.5 * (N / n) * resid2
        draw = rng.gamma(torch.full_like(resid2, alpha), check=False).reshape(resid2.shape)
        return [torch.log(rate / draw)]

    @torch.no_grad()
    def parameter_curvature_and_noise(self, mean: Tensor, y: Tensor, parameters, n_data: int) -> list | None:
        r"""What the warm-up's mass for ``log_noise_variance`` needs (:func:`bayesnet.samplers.warmup.likelihood_mass`):
        per member and output, the potential's curvature in :math:`\gamma_k` on the ``n_data`` rows that ``y``
        (n, k) stands for, and the variance over rows of one row's gradient in it, :math:`(z_i - 1)/2` with
        :math:`z_i = (y_{ik} - \mu_{ik})^2 e^{-\gamma_k}`. Both are taken at the smaller of the member's
        :math:`\gamma_k` and its conditional's mode :math:`\gamma^* = \log\frac{b + R/2}{a + N/2}` (``R`` the
        residual sum of squares scaled to ``N`` rows), where the curvature is :math:`a + N/2`: a noise variance
        above its mode is on its way down, and its bound must hold where it is going. The curvature is
        :math:`(b + R/2) e^{-\gamma}`. ``mean`` (S, n, k); ``parameters`` = ``[log_noise_variance (S, k)]``.
        Returns ``[(curvature (S, k), row variance (S, k))]`` in float64, or None for a subclass with its own
        forms."""
        if not _own_forms(self, GaussianLikelihood):
            return None
        (gamma,) = parameters
        n = y.shape[0]
        resid2 = (y.double() - mean.double()).square()  # (S, n, k)
        rate = self.noise_scale + 0.5 * (n_data / n) * resid2.sum(1)  # b + R/2, (S, k)
        mode = torch.log(rate / (self.noise_shape + 0.5 * n_data))
        at = torch.minimum(gamma.detach().double(), mode)
        precision = torch.exp(-at)
        z = resid2 * precision.unsqueeze(1)
        row_variance = (0.5 * z).var(1, correction=1) if n > 1 else torch.zeros_like(rate)
        return [(rate * precision, row_variance)]

    def conditional_spread(self, n_data: int) -> float:
        r"""The standard deviation of ``log_noise_variance`` under its conditional
        (:meth:`conditional_draw`) on ``n_data`` rows: :math:`\sqrt{\psi_1(a + N/2)}` (the trigamma function),
        about :math:`\sqrt{2/N}`."""
        return float(torch.special.polygamma(1, torch.tensor(self.noise_shape + 0.5 * int(n_data),
                                                              dtype=torch.float64)).sqrt())

    def curvature_weight(self, parameters) -> Tensor:
        r"""The factor by which the data term's curvature scales with the noise, per member: the largest
        :math:`1/\sigma_k^2 = e^{-\gamma_k}`, ``[log_noise_variance (S, k)]`` -> (S,), float64. The warm-up measures the
        curvature at one point and compares this factor there with its average over the window
        (:mod:`bayesnet.samplers.warmup`, "The step size")."""
        (gamma,) = parameters
        return torch.exp(-gamma.detach().double()).amax(-1)  # (float64: in float32 it is 0 from gamma = 104 on)

    def log_prior_chains(self, parameters) -> Tensor:
        """The inverse-gamma log prior of every member, ``[log_noise_variance (S, k)]`` -> (S,)."""
        (gamma,) = parameters
        return (-self.noise_shape * gamma - self.noise_scale * torch.exp(-gamma)).sum(1)
