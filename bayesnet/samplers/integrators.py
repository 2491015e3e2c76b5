"""The A, B, O building blocks shared by every Langevin and Hamiltonian sampler.

Splitting the generator of underdamped Langevin dynamics as ``L = A + B + O``
(Heber et al. 2020 (TATi), Sec. 2, eqs. 10-13) gives three exactly solvable sub-steps. Every
sampler in :mod:`bayesnet.samplers` is a composition of these functions, so
that e.g. SGHMC is ``A B O`` (with a first-order friction), BAOAB is
``B A O A B`` and HMC's leapfrog is ``B A B``.

All functions act in place on *lists* of tensors (one tensor per network
parameter), use PyTorch's fused ``_foreach`` kernels, and never build an
autograd graph. Momenta are kept in *velocity-per-step* units
``r = p * h / m`` with ``eta = h**2 / m`` (Luo et al. 2018, Sec. 3.3), in which

* A:  ``theta <- theta + c * r``
* B:  ``r <- r - c * eta * grad U(theta)``
* O:  ``r <- a * r + sqrt((1 - a**2) * eta * T) * xi``,  ``xi ~ N(0, I)``

where ``c`` is the fraction of the step (1 or 1/2) and ``a`` the momentum
decay. In these units the kinetic energy is ``sum(r**2) / (2 * eta)`` and the
equilibrium kinetic temperature ``sum(r**2) / (eta * D)`` equals ``T``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from ..plan import ChainLayout
from .random import ChainRandom

__all__ = [
    "momentum_state",
    "gaussian_like",
    "normal_flat",
    "gaussian_momentum",
    "position_step",
    "gradient_step",
    "ornstein_uhlenbeck_step",
    "add_noise",
    "squared_norm",
    "numel",
    "chain_numel",
    "exact_ou_coefficients",
    "baoab_step",
]


def numel(tensors: Sequence[Tensor]) -> int:
    """Total number of elements ``D`` in a list of tensors."""
    return sum(t.numel() for t in tensors)


def chain_numel(tensors: Sequence[Tensor], layout: ChainLayout) -> int:
    """Parameters per member: ``D`` without a chain axis, ``D / S`` with ``S`` packed members."""
    return numel(tensors) // (layout.n_members or 1)


def normal_flat(rng: ChainRandom, layout: ChainLayout, total: int, dtype: torch.dtype) -> Tensor:
    """Standard normal noise for ``total`` numbers laid out like a flat buffer: ``(S, total / S)`` chain
    major with a chain axis, ``(total,)`` without; row block ``c`` comes from chain ``c``'s stream."""
    block = rng.normal(total // layout.chains, dtype)  # (C, total / C)
    if layout.n_members is None:
        return block.reshape(-1)
    return block.reshape(layout.n_members, -1)


def _split_like(flat: Tensor, tensors: Sequence[Tensor]) -> list[Tensor]:
    """Views (or copies, where the layout forbids a view) of ``flat`` shaped like ``tensors``."""
    if flat.ndim == 1:
        return [c.view_as(t) for c, t in zip(flat.split([t.numel() for t in tensors]), tensors)]
    sizes = [t[0].numel() for t in tensors]
    return [c.reshape(t.shape) for c, t in zip(flat.split(sizes, dim=1), tensors)]


def gaussian_like(tensors: Sequence[Tensor], rng: ChainRandom, layout: ChainLayout) -> list[Tensor]:
    """Standard normal noise shaped like ``tensors``, each chain's part from its own stream.

    Parameters
    ----------
    tensors : sequence of Tensor
        Templates for shape, dtype and device; with a chain axis each has a leading axis of ``S``.
    rng : ChainRandom
        The chains' streams (one per chain of ``layout``).
    layout : ChainLayout

    Returns
    -------
    list of Tensor
        ``xi_k ~ N(0, I)`` with ``xi_k.shape == tensors[k].shape``. The draw does not depend on how the
        parameters are grouped into tensors, nor on the other chains.
    """
    return _split_like(normal_flat(rng, layout, numel(tensors), tensors[0].dtype), tensors)


def gaussian_momentum(position: Sequence[Tensor], std: float, rng: ChainRandom,
                      layout: ChainLayout) -> tuple[list[Tensor], Tensor]:
    """Momenta ``std * xi`` shaped like ``position``, as views of one flat buffer.

    Parameters
    ----------
    position : sequence of Tensor
        Templates; with a chain axis each has a leading axis of ``S``.
    std : float
    rng : ChainRandom
    layout : ChainLayout

    Returns
    -------
    momentum : list of Tensor
        One view per position tensor.
    flat : Tensor, shape (D,) or chain-major (S, D / S)
        The buffer the views share: in-place updates of ``momentum`` show in it, so kinetic energies and
        refreshes take one operation per chain.
    """
    flat = normal_flat(rng, layout, numel(position), position[0].dtype).clone().mul_(std)
    return momentum_views(flat, position), flat


def momentum_state(state_class, momentum_std, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
                   precond, **fields):
    """A sampler's starting state whose momenta are views of one chain-major buffer (kinetic energies take one
    reduction per chain), drawn from each chain's stream and scaled to their equilibrium sd
    ``momentum_std(state)`` (the sampler's :meth:`~bayesnet.samplers.Sampler.momentum_std`); ``fields`` are the
    state class's own (a thermostat, dual-averaging statistics, ...)."""
    flat = normal_flat(rng, layout, numel(position), position[0].dtype).clone()
    state = state_class(position=position, layout=layout, rng=rng, momentum=momentum_views(flat, position),
                        flat_momentum=flat, precond=precond, **fields)
    flat.mul_(momentum_std(state))
    return state


def momentum_views(flat: Tensor, position: Sequence[Tensor]) -> list[Tensor]:
    """Views of a momentum buffer shaped like ``position`` (in-place updates of one show in the other).

    Parameters
    ----------
    flat : Tensor, shape (D,) or chain-major (S, D / S)
    position : sequence of Tensor
        Templates; with a 2-D ``flat`` each has a leading axis of ``S``.

    Returns
    -------
    list of Tensor
    """
    if flat.ndim == 1:
        return [c.view_as(p) for c, p in zip(flat.split([p.numel() for p in position]), position)]
    sizes = [p[0].numel() for p in position]
    return [c.view(p.shape) for c, p in zip(flat.split(sizes, dim=1), position)]


@torch.no_grad()
def position_step(position: Sequence[Tensor], momentum: Sequence[Tensor], fraction: float = 1.0) -> None:
    """A step: ``theta <- theta + fraction * r`` (Heber et al. 2020 (TATi), eq. 13, ``A_eps``)."""
    torch._foreach_add_(list(position), list(momentum), alpha=fraction)


@torch.no_grad()
def gradient_step(momentum: Sequence[Tensor], gradient: Sequence[Tensor], step_size: float) -> None:
    """B step: ``r <- r - step_size * grad`` (Heber et al. 2020 (TATi), eq. 13, ``B_eps``).

    Applied to positions instead of momenta it is a gradient-descent step,
    which is how SGLD uses it.
    """
    torch._foreach_add_(list(momentum), list(gradient), alpha=-step_size)


@torch.no_grad()
def add_noise(tensors: Sequence[Tensor], std: float, rng: ChainRandom, layout: ChainLayout,
              flat: Tensor | None = None) -> None:
    """``x <- x + std * xi`` with ``xi ~ N(0, I)`` from the chains' streams.

    ``flat``, when given, is the buffer whose views are ``tensors`` (:func:`gaussian_momentum`): the noise
    is then added in one operation.
    """
    if std <= 0.0:
        return
    if flat is not None:
        flat.add_(normal_flat(rng, layout, flat.numel(), flat.dtype).view_as(flat), alpha=std)
    else:
        torch._foreach_add_(list(tensors), gaussian_like(tensors, rng, layout), alpha=std)


@torch.no_grad()
def ornstein_uhlenbeck_step(momentum: Sequence[Tensor], decay: float, noise_std: float, rng: ChainRandom,
                            layout: ChainLayout, flat: Tensor | None = None) -> None:
    """O step: ``r <- decay * r + noise_std * xi`` (Heber et al. 2020 (TATi), eqs. 11-13, ``O_eps``).

    For the exact Ornstein-Uhlenbeck flow over a time ``h`` with friction
    ``gamma`` use ``decay = exp(-gamma * h)`` and
    ``noise_std = sqrt((1 - decay**2) * eta * T)``; SGHMC's first-order
    friction (Chen et al. 2014, eq. 15) uses ``decay = 1 - alpha`` and
    ``noise_std = sqrt(2 * (alpha - beta_hat) * eta * T)``.
    """
    if flat is not None:
        if decay != 1.0:
            flat.mul_(decay)
        add_noise(momentum, noise_std, rng, layout, flat)
        return
    if decay != 1.0:
        torch._foreach_mul_(list(momentum), decay)
    add_noise(momentum, noise_std, rng, layout)


@torch.no_grad()
def squared_norm(tensors: Sequence[Tensor], flat: Tensor | None = None) -> Tensor:
    """``sum_k ||x_k||^2`` as a 0-d tensor on the tensors' device.

    ``flat``, when given, is the buffer whose views are ``tensors`` (as
    returned by :func:`gaussian_momentum`); one reduction then suffices. A
    chain-major buffer ``(S, D / S)`` gives one value per member, shape ``(S,)``.
    """
    if flat is not None:
        return torch.dot(flat, flat) if flat.ndim == 1 else flat.square().sum(dim=1)
    norms = torch._foreach_norm(list(tensors))
    return torch.stack(norms).square().sum()


def baoab_step(position: Sequence[Tensor], momentum: Sequence[Tensor], flat: Tensor, gradient: Sequence[Tensor],
               kick: Sequence[Tensor], drift: Sequence[Tensor], decay: Tensor, noise: Tensor, potential, batch,
               rng: ChainRandom, layout: ChainLayout) -> tuple[Tensor, list[Tensor]]:
    """One BAOAB step ``B/2 A/2 O A/2 B/2`` in place (Leimkuhler and Matthews 2013; TATi eq. 13), with
    per-coordinate scales, so that it serves a diagonal mass and a step size per member.

    Parameters
    ----------
    position, momentum : sequence of Tensor
        ``theta`` and the momenta (updated in place); ``momentum`` are views of ``flat``.
    flat : Tensor
        The momenta's flat buffer, ``(S, D / S)`` or ``(D,)``.
    gradient : sequence of Tensor
        ``grad U`` at the starting position (the previous step's last gradient).
    kick, drift : sequence of Tensor
        Shaped like the positions: the B half step is ``p <- p - kick * grad U``, the A half step
        ``theta <- theta + drift * p`` (velocity form with inverse mass ``m`` and step ``h``: ``kick = h m / 2``,
        ``drift = h / 2``).
    decay : Tensor
        The O step's ``a = exp(-gamma h)`` per member, shape ``(S,)`` or ``()``.
    noise : Tensor
        The O step's noise scale laid out as ``flat`` (``sqrt((1 - a^2) T m)`` in the velocity form).
    potential : Potential
        Evaluated once, at the new position.
    batch : any
    rng : ChainRandom
    layout : ChainLayout

    Returns
    -------
    value, gradient
        ``U`` and ``grad U`` at the new position (the next step's starting gradient).
    """
    with torch.no_grad():
        torch._foreach_addcmul_(list(momentum), list(gradient), list(kick), value=-1.0)
        torch._foreach_addcmul_(list(position), list(momentum), list(drift))
        flat.mul_(decay.reshape(decay.shape + (1,) * (flat.ndim - decay.ndim)))
        flat.addcmul_(normal_flat(rng, layout, flat.numel(), flat.dtype).view_as(flat), noise)
        torch._foreach_addcmul_(list(position), list(momentum), list(drift))
    value, gradient = potential.value_and_grad(batch)
    with torch.no_grad():
        torch._foreach_addcmul_(list(momentum), list(gradient), list(kick), value=-1.0)
    return value, gradient


def friction_flow(friction: Tensor) -> Tensor:
    """A thermostat friction's exact flow over one step, ``e^{-z}`` (``z`` the friction times the time step, per
    chain): what the momenta are multiplied by. The papers' Euler step ``1 - z`` reverses and amplifies them above
    ``z = 2`` (Ding et al. 2014; Luo et al. 2018 Alg. 1 line 10); sgnht's friction, and tacthmc's with
    ``friction_step="exact"``."""
    return torch.exp(-friction)


def exact_ou_coefficients(friction: float, time_step: float, eta: float, temperature: float) -> tuple[float, float]:
    """Decay and noise of the exact O step in velocity-per-step units.

    Parameters
    ----------
    friction : float
        ``gamma`` (1 / time unit).
    time_step : float
        Duration ``h`` of the O step.
    eta : float
        ``h_full**2 / m`` of the momentum units in use.
    temperature : float
        ``T = 1 / beta``.

    Returns
    -------
    decay, noise_std : float
        ``a = exp(-gamma h)`` and ``sqrt((1 - a**2) eta T)``.
    """
    a = math.exp(-friction * time_step)
    return a, math.sqrt(max(1.0 - a * a, 0.0) * eta * temperature)
