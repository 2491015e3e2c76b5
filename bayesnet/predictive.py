"""Posterior predictive: network outputs over the retained draws, evaluated in blocks.

The draws are copied to the device once per call and evaluated in blocks of
``draws x rows`` by the network's batched ``forward_chains`` (``vmap`` over
``functional_call`` for networks without one), never by one
``load_state_dict`` per draw. Every reduction (class probabilities and their
quantiles, regression means, standard deviations and mixture intervals) is
done block by block, so memory is bounded by the block size whatever the
number of rows. A draw whose output is not finite for a row is left out of
that row's average (and counted); a row with no finite draw raises.
"""

from __future__ import annotations

import math
import warnings
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from .networks import wide_products
from .posterior import batched_outputs

__all__ = ["PosteriorPredictive", "mixture_quantile"]


class PosteriorPredictive:
    """Outputs of a network under ``D`` posterior draws, block by block.

    Parameters
    ----------
    module : torch.nn.Module
        The architecture (its own parameters are not used).
    names : sequence of str
        The module's trainable parameter names, in ``named_parameters`` order.
    draws : sequence of Tensor
        One tensor per name, shape ``(D, *param.shape)`` (on the CPU).
    device : torch.device
    min_rows : int, default=1024
        At least this many rows per block (products over fewer rows run far below the processor's speed).
    cpu_budget : int, default=2**20
        Activations a block may hold on a CPU (4 MiB: about a core's cache, measured fastest by
        ``benchmarks/predict_throughput.py``); on a GPU a 32nd of the free memory's bytes.
    """

    def __init__(self, module: nn.Module, names: Sequence[str], draws: Sequence[Tensor], device,
                 min_rows: int = 1024, cpu_budget: int = 2**20):
        self.module = module
        self.names = list(names)
        self.device = torch.device(device)
        self.params = [p.to(self.device, non_blocking=True) for p in draws]
        self.n_draws = int(self.params[0].shape[0]) if self.params else 0
        self.min_rows = int(min_rows)
        self.cpu_budget = int(cpu_budget)
        self.n_nonfinite = 0  # (draw, row) pairs left out so far

    def budget(self) -> int:
        """Activations (float32 numbers) a block may hold."""
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return max(2**24, free // 32)
        return self.cpu_budget

    def activations_per_row(self, sample_shape) -> int:
        """Activations the network holds at once for one input row (its ``activations_per_row`` when it has
        one, else its widest layer)."""
        per_row = getattr(self.module, "activations_per_row", None)
        if per_row is not None:
            return int(per_row(tuple(sample_shape)))
        return max((p.shape[0] for p in self.module.parameters() if p.ndim >= 1), default=1)

    def block_shape(self, n_rows: int, per_row: int) -> tuple[int, int]:
        """``(draws, rows)`` per evaluated block: as many draws as fit the budget with at least ``min_rows``
        rows, and as many rows as fit with that many draws."""
        budget = self.budget()
        D = max(self.n_draws, 1)
        rows = min(n_rows, max(self.min_rows, budget // max(1, D * per_row)))
        draws = int(min(D, max(1, budget // max(1, rows * per_row))))
        rows = min(n_rows, max(rows, budget // max(1, draws * per_row)))  # what the draw count leaves over
        return draws, max(1, int(rows))

    def outputs(self, X: np.ndarray) -> Iterator[tuple[int, Tensor]]:
        """``(first_row, block)`` with ``block`` the raw outputs ``(D, rows, n_outputs)`` on the device."""
        draws, rows = self.block_shape(len(X), self.activations_per_row(X.shape[1:]))
        self.module.eval()
        with torch.no_grad(), wide_products():
            for lo in range(0, len(X), rows):
                xb = torch.as_tensor(X[lo: lo + rows]).to(self.device, non_blocking=True)
                yield lo, torch.cat([batched_outputs(self.module, self.names, [p[d: d + draws] for p in self.params], xb)
                                     for d in range(0, self.n_draws, draws)])

    def _finite(self, out: Tensor) -> Tensor:
        """``(D, rows)`` mask of the draws whose outputs are finite for each row; raises if a row has none."""
        finite = torch.isfinite(out).all(dim=-1)
        bad = int((~finite).sum())
        if bad:
            self.n_nonfinite += bad
            if not bool(finite.any(dim=0).all()):
                raise ValueError("the network's outputs are not finite under any posterior draw for some rows: "
                                 "the inputs are far outside the training data's range, or the chains diverged "
                                 "(see fit_status_).")
        return finite

    def warn_nonfinite(self, fate: str = "were left out of the averages", stacklevel: int = 3) -> None:
        """Warn once per call if some (draw, row) outputs were not finite, saying what became of them."""
        if self.n_nonfinite:
            warnings.warn(f"{self.n_nonfinite} (draw, row) network outputs were not finite and {fate}; the inputs "
                          "may be far outside the training data's range.", RuntimeWarning, stacklevel=stacklevel)

    # ------------------------------------------------------------------ #
    def class_probabilities(self, X: np.ndarray, level: float | None = None):
        """Mean class probabilities over the draws (softmax in float64), and with ``level`` the equal-tailed
        ``(1 - level)/2`` and ``(1 + level)/2`` quantiles across draws.

        Returns
        -------
        proba : ndarray (n, K); lower, upper : ndarrays (n, K) or None
        """
        means, lowers, uppers = [], [], []
        for _, out in self.outputs(X):
            finite = self._finite(out)
            proba = torch.softmax(out.double(), dim=-1)
            if bool(finite.all()):
                means.append(proba.mean(dim=0).cpu().numpy())
                if level is not None:
                    lower, upper = np.quantile(proba.cpu().numpy(), [(1 - level) / 2, (1 + level) / 2], axis=0)
                    lowers.append(lower), uppers.append(upper)
                continue
            w = finite.to(proba.dtype).unsqueeze(-1)
            means.append(((torch.nan_to_num(proba) * w).sum(0) / w.sum(0)).cpu().numpy())
            if level is not None:
                masked = torch.where(finite.unsqueeze(-1), proba, torch.full_like(proba, float("nan"))).cpu().numpy()
                lower, upper = np.nanquantile(masked, [(1 - level) / 2, (1 + level) / 2], axis=0)
                lowers.append(lower), uppers.append(upper)
        self.warn_nonfinite()
        proba = np.concatenate(means)
        if level is None:
            return proba, None, None
        return proba, np.concatenate(lowers), np.concatenate(uppers)

    def gaussian_mixture(self, X: np.ndarray, noise_std: Tensor, std: bool = False, level: float | None = None):
        """Predictive mean, standard deviation and equal-tailed interval of the mixture
        ``(1/D) sum_d N(f_d(x), sigma_d^2)``, in the network's (standardised) units.

        Parameters
        ----------
        X : ndarray
        noise_std : Tensor, shape (D, k)
            Each draw's observation-noise standard deviation.
        std : bool
            Also the standard deviation ``sqrt(mean_d sigma_d^2 + var_d f_d)``.
        level : float or None
            Also the interval's bounds (:func:`mixture_quantile`).

        Returns
        -------
        mean, std, lower, upper : ndarrays (n, k) (None where not asked for)
        """
        sigma = noise_std.to(self.device, torch.float64)[:, None, :]  # (D, 1, k)
        # a draw whose noise is not a finite positive number is left out like a non-finite output (NaN * 0 = NaN)
        noisy = (torch.isfinite(sigma) & (sigma > 0)).all(dim=-1)  # (D, 1)
        sigma = torch.where(torch.isfinite(sigma) & (sigma > 0), sigma, torch.ones_like(sigma))
        parts = {"mean": [], "std": [], "lower": [], "upper": []}
        for _, out in self.outputs(X):
            out = torch.where(noisy.unsqueeze(-1), out, torch.full_like(out, float("nan")))
            finite = self._finite(out)
            f = out.double()
            w = finite.to(f.dtype).unsqueeze(-1)  # (D, rows, 1)
            n = w.sum(0)
            f0 = torch.where(finite.unsqueeze(-1), f, torch.zeros_like(f))
            mean = (f0 * w).sum(0) / n
            parts["mean"].append(mean.cpu().numpy())
            if std:
                var = ((f0 - mean) ** 2 * w).sum(0) / n + (sigma ** 2 * w).sum(0) / n
                parts["std"].append(var.sqrt().cpu().numpy())
            if level is not None:
                for key, q in (("lower", (1 - level) / 2), ("upper", (1 + level) / 2)):
                    parts[key].append(mixture_quantile(f0, sigma.expand_as(f0), q, finite).cpu().numpy())
        self.warn_nonfinite()
        return tuple(np.concatenate(v) if v else None for v in parts.values())


def mixture_quantile(means: Tensor, stds: Tensor, q: float, weights: Tensor | None = None,
                     iterations: int = 40, tol: float = 1e-10) -> Tensor:
    """Quantile ``q`` of the equal-weight Gaussian mixture over the leading axis, by safeguarded Newton.

    Parameters
    ----------
    means, stds : Tensor, shape (D, ...)
        The components; ``stds > 0``.
    q : float
        In (0, 1).
    weights : Tensor of bool, shape (D, ...) or (D, rows), optional
        Components to include (all by default).
    iterations : int, default=40
        At most this many steps; each keeps a bracket on which the CDF changes sign and falls back to
        bisection when Newton's step leaves it, so the result is deterministic and converges (quadratically
        near the root; a handful of steps from the moment-matched start).
    tol : float, default=1e-10
        Stop when every step is below ``tol`` times the components' largest sd.

    Returns
    -------
    Tensor, shape ``means.shape[1:]``
    """
    if weights is None:
        w = torch.ones_like(means)
    else:
        w = weights.to(means.dtype)
        w = w.reshape(w.shape + (1,) * (means.ndim - w.ndim)).expand_as(means)
    n = w.sum(0)
    mu = (means * w).sum(0) / n
    var = ((means - mu) ** 2 * w).sum(0) / n + (stds ** 2 * w).sum(0) / n
    z = math.sqrt(2.0) * torch.special.erfinv(torch.tensor(2.0 * q - 1.0, dtype=means.dtype))
    x = mu + z * var.sqrt()
    big = torch.where(w > 0, stds, torch.zeros_like(stds)).max(dim=0).values
    lo = torch.where(w > 0, means - 9 * stds, torch.full_like(means, float("inf"))).min(dim=0).values
    hi = torch.where(w > 0, means + 9 * stds, torch.full_like(means, -float("inf"))).max(dim=0).values
    x = x.clamp(lo, hi)
    inv_sqrt_2pi = 1.0 / math.sqrt(2.0 * math.pi)
    for _ in range(iterations):
        zc = (x - means) / stds
        cdf = (torch.special.ndtr(zc) * w).sum(0) / n - q
        pdf = (torch.exp(-0.5 * zc * zc) / stds * w).sum(0) * inv_sqrt_2pi / n
        lo = torch.where(cdf < 0, x, lo)
        hi = torch.where(cdf < 0, hi, x)
        newton = x - cdf / pdf.clamp_min(torch.finfo(x.dtype).tiny)
        # inclusive: a converged iterate (CDF already 0 to rounding, so x became an end of the bracket) stays
        inside = (newton >= lo) & (newton <= hi) & torch.isfinite(newton)
        new = torch.where(inside, newton, 0.5 * (lo + hi))
        done = bool(((new - x).abs() <= tol * big).all())
        x = new
        if done:
            break
    return x
