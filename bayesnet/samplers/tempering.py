"""Replica exchange for :class:`~bayesnet.samplers.pt_langevin.PTLangevin`: the tempering ensemble's state, its
geometric ladder and the swap move (Chandra et al. 2019, Algorithm 1 and Sec. 3.5)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import SamplerState

__all__ = ["PTLangevinState", "geometric_ladder", "swap_log_acceptance", "swap_neighbours", "rate"]


@dataclass(kw_only=True)
class PTLangevinState(SamplerState):
    """:class:`SamplerState` of a tempering ensemble, ``S = C R`` members (replicas) on the leading axis.

    Attributes
    ----------
    beta : Tensor, shape (R,)
        The ladder's inverse temperatures.
    cold : Tensor of bool, shape (S,)
        Replica 0 (temperature 1) of every chain.
    value : Tensor, shape (S,), or None
        ``U`` at the current positions, once evaluated; with ``tempered="likelihood"`` the member's own potential
        ``beta U_D + U_P`` at the ``cache_beta`` it was taken under.
    grad : list of Tensor, each (S, n_k), or None
        ``grad U`` at the current positions (of ``value``'s potential), valid where ``grad_valid``.
    data_value : Tensor, shape (S,), or None
        With ``tempered="likelihood"``: the unweighted data term ``U_D`` at the current positions (what a swap
        compares).
    cache_beta : Tensor, shape (S,), or None
        With ``tempered="likelihood"``: the data weight ``value`` and ``grad`` were taken under (it travels with the
        position on a swap; the next step brings the cache to its slot's weight).
    grad_valid : Tensor of bool, shape (S,)
    mh_attempts, mh_accepts : Tensor of int64, shape (C, R)
        Metropolis-Hastings counts per ladder slot.
    swap_attempts, swap_accepts : Tensor of int64, shape (C, R - 1)
        Exchange counts per neighbouring pair.
    swap_events : int
    log_step : Tensor, shape (S,)
        Each ladder slot's log proposal sd (adapted during the warm-up, then frozen).
    batched : bool
        Whether the positions carry the member axis (False only for one replica without ``n_chains``).
    """

    beta: Tensor
    cold: Tensor
    grad_valid: Tensor
    mh_attempts: Tensor
    mh_accepts: Tensor
    swap_attempts: Tensor
    swap_accepts: Tensor
    log_step: Tensor
    batched: bool
    value: Tensor | None = None
    grad: list[Tensor] | None = None
    data_value: Tensor | None = None
    cache_beta: Tensor | None = None
    swap_events: int = 0

    @property
    def n_members(self) -> int:
        return self.cold.numel()


def geometric_ladder(n_replicas: int, max_temperature: float) -> list[float]:
    """Temperatures ``T_m = max_temperature ** (m / (R - 1))``, ``m = 0..R-1`` (``[1.0]`` for ``R = 1``).

    The geometric progression of Chandra et al. 2019 Sec. 3.5: ``T_0 = 1`` is the
    posterior, ``T_{R-1} = max_temperature`` the hottest replica.
    """
    if n_replicas == 1:
        return [1.0]
    return [float(max_temperature) ** (m / (n_replicas - 1)) for m in range(n_replicas)]


def swap_log_acceptance(beta_i: Tensor, beta_j: Tensor, u_i: Tensor, u_j: Tensor) -> Tensor:
    r"""Log acceptance of exchanging the positions of two replicas (Chandra et al. 2019 Algorithm 1 Step 2.2).

    Replica ``i`` at inverse temperature :math:`\beta_i` holds a position of
    potential :math:`U_i`, replica ``j`` one of :math:`U_j`; exchanging them
    is accepted with probability :math:`\min(1, \exp(\log a))`,

    .. math::

        \log a = \log\frac{\pi_i(\theta_j)\,\pi_j(\theta_i)}{\pi_i(\theta_i)\,\pi_j(\theta_j)}
               = (\beta_i - \beta_j)(U_i - U_j),
        \qquad \pi_m(\theta) \propto e^{-\beta_m U(\theta)}.

    Broadcasts; a non-finite result (an infinite potential) becomes ``-inf``, i.e. a rejection.
    """
    log_a = (beta_i - beta_j) * (u_i - u_j)
    return torch.where(torch.isfinite(log_a), log_a, torch.full_like(log_a, -math.inf))


def swap_neighbours(state: PTLangevinState, n_replicas: int, members: list, energy: Tensor | None = None,
                    permuted=None) -> Tensor:
    """One swap event (Chandra et al. 2019 Algorithm 1 Step 2) on the even or odd neighbour pairs of every
    chain's ladder, ``members`` the position tensors ``(S, ...)``; returns the accepted fraction per chain, shape
    ``(C,)``. Each chain's uniforms come from its own stream.

    ``energy`` (S,) is what the inverse temperatures multiply in the members' targets: the potential ``U``
    (``state.value``, the default) when the whole posterior is tempered, the data term ``U_D`` when the likelihood
    only is. The positions and every per-member cache move together; ``permuted(index)``, when given, is called
    with the permutation (``new[s] = old[index[s]]``) for state kept outside (the prior's hyperparameters)."""
    R = int(n_replicas)
    S = state.n_members
    C = S // R
    theta = members
    device, dtype = theta[0].device, theta[0].dtype
    parity = state.swap_events % 2 if R > 2 else 0
    state.swap_events += 1
    lower = torch.arange(parity, R - 1, 2, device=device)  # (P,) first replica of each pair
    upper = lower + 1
    beta = state.beta
    u = (state.value if energy is None else energy).view(C, R)
    log_a = swap_log_acceptance(beta[lower], beta[upper], u[:, lower], u[:, upper])  # (C, P)
    log_v = torch.log(state.rng.uniform(len(lower), dtype))  # (C, P), each chain from its own stream
    accept = log_v < log_a
    perm = torch.arange(R, device=device).repeat(C, 1)  # (C, R): new slot m takes old member perm[c, m]
    perm[:, lower] = torch.where(accept, upper, lower)
    perm[:, upper] = torch.where(accept, lower, upper)
    index = (perm + R * torch.arange(C, device=device).unsqueeze(1)).reshape(S)
    for t in theta:
        t.copy_(t[index])
    state.value = state.value[index]
    if state.grad is not None:
        state.grad = [g[index] for g in state.grad]
    state.grad_valid = state.grad_valid[index]
    if state.data_value is not None:
        state.data_value = state.data_value[index]
    if state.cache_beta is not None:
        state.cache_beta = state.cache_beta[index]
    if permuted is not None:
        permuted(index)
    state.swap_attempts[:, lower] += 1
    state.swap_accepts[:, lower] += accept
    return accept.to(dtype).mean(1)


def rate(hits: Tensor, attempts: Tensor) -> Tensor:
    """``hits / attempts`` as float64, NaN where nothing was attempted."""
    attempts = attempts.double()
    return torch.where(attempts > 0, hits.double() / attempts.clamp(min=1), torch.full_like(attempts, math.nan))
