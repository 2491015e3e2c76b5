"""Priors over network weights."""

from __future__ import annotations

import math
from numbers import Real
from typing import Sequence

import torch
from torch import Tensor

__all__ = ["GaussianPrior", "make_prior"]


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
    which does not depend on the weights. This is the weight prior of paper 003
    eq. (5) (variance :math:`\sigma^2 = s^2`) and of paper 000's experiments.
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
        total = sum((p * p).reshape(p.shape[0], -1).sum(1) for p in parameters)  # p * p: cheaper backward than square()
        return -0.5 * total / (self.scale**2)

    def grad_log_prob_chains(self, parameters: Sequence[Tensor]) -> list[Tensor]:
        """Gradient of ``log_prob`` in closed form, ``-theta / s**2``, one tensor per parameter."""
        return torch._foreach_mul(list(parameters), -1.0 / self.scale**2)

    def __repr__(self) -> str:
        return f"GaussianPrior(scale={self.scale!r})"


def make_prior(prior: "float | GaussianPrior") -> GaussianPrior:
    """Turn an estimator's ``prior_scale`` (a float or a prior object) into a prior.

    Raises
    ------
    ValueError
        If a float is not finite and positive.
    TypeError
        If ``prior`` is neither a number nor an object with ``log_prob``.
    """
    if hasattr(prior, "log_prob"):
        return prior  # type: ignore[return-value]
    if isinstance(prior, Real) and not isinstance(prior, bool):
        return GaussianPrior(float(prior))
    raise TypeError(f"prior_scale must be a positive float or a prior object with log_prob(), got {prior!r}.")
