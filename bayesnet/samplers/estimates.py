"""The estimates the warm-up adapts from (:mod:`bayesnet.samplers.warmup`), and the flat layout it keeps them in.

* :func:`mass_from_moments`: the diagonal mass from a window's gradient and position moments (the secant rule);
* :func:`curvature`: each member's largest preconditioned curvature, by power iteration on finite-difference
  Hessian-vector products of one mini-batch;
* :func:`noise_fraction`: the gradient's mini-batch noise variance in preconditioned units (not a fraction);
* :func:`diagonal_curvature`: Hutchinson's estimate of the Hessian's diagonal (the first mass).

Every estimate is per member (chain, replica or walker) and draws its random numbers from each chain's own
stream, so that one chain's estimate never depends on the chains beside it.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from ..plan import ChainLayout

__all__ = ["member_view", "mask_like", "member_mask", "regrad", "flatten", "views", "mass_from_moments", "curvature",
           "noise_fraction", "diagonal_curvature", "MASS_FLOOR"]

def member_view(t: Tensor, like: Tensor) -> Tensor:
    """Broadcast a per-member tensor, shape ``()`` or ``(S,)``, against a parameter tensor ``(S, ...)``."""
    return t.reshape(t.shape + (1,) * (like.ndim - t.ndim))


def mask_like(flags: Tensor, like: Tensor) -> Tensor:
    """A per-member bool tensor ``(S,)`` shaped like a per-member quantity ``like`` (a step size, a
    thermostat: shape ``(S,)``, or ``()`` without a member axis, then true if any flag is)."""
    return flags.reshape(like.shape) if like.ndim else flags.any().reshape(())


def member_mask(members: Tensor, like: Tensor, layout: ChainLayout) -> Tensor:
    """A bool mask over the member axis, shape ``(S,)``, broadcast against ``like`` (without a member axis: one
    value, true if any is)."""
    return member_view(members, like) if layout.n_members is not None else members.any().reshape(())


@torch.no_grad()
def regrad(grad: Sequence[Tensor] | None, members: Tensor, potential, batch, layout: ChainLayout):
    """``grad`` (a cached gradient) recomputed on ``batch`` at the current position where ``members`` is true,
    the others' entries kept bit for bit; None stays None (the next step computes it)."""
    if grad is None:
        return None
    _, fresh = potential.value_and_grad(batch)
    return [torch.where(member_mask(members, g, layout), f.detach(), g) for f, g in zip(fresh, grad)]


def flatten(tensors: Sequence[Tensor], layout: ChainLayout) -> Tensor:
    """One buffer laid out as the momenta's: chain-major ``(S, D / S)`` with a member axis, else ``(D,)``."""
    if layout.n_members is None:
        return torch.cat([t.reshape(-1) for t in tensors])
    return torch.cat([t.reshape(layout.n_members, -1) for t in tensors], dim=1)


def views(flat: Tensor, like: Sequence[Tensor]) -> list[Tensor]:
    """Views of a flat buffer shaped like ``like`` (see :func:`flatten`)."""
    if flat.ndim == 1:
        return [c.view_as(p) for c, p in zip(flat.split([p.numel() for p in like]), like)]
    return [c.view(p.shape) for c, p in zip(flat.split([p[0].numel() for p in like], dim=1), like)]


def _per_member_reduce(tensors: Sequence[Tensor], layout: ChainLayout, fn) -> Tensor:
    """Apply a reduction over each member's coordinates of all tensors: ``fn(flat (S, D))`` -> (S,)."""
    S = layout.n_members
    if S is None:
        return fn(torch.cat([t.reshape(1, -1) for t in tensors], dim=1)).reshape(())
    return fn(torch.cat([t.reshape(S, -1) for t in tensors], dim=1))


#: masses are floored at this fraction of the member's median: a coordinate whose gradient barely varied (a
#: weight on an input that is almost always zero) would otherwise get an unbounded step
MASS_FLOOR = 1e-2


def mass_from_moments(moments: Sequence[Tensor], count: int, layout: ChainLayout, layerwise: bool,
                      dtype: torch.dtype, previous: Tensor | None = None) -> Tensor:
    """Inverse mass ``m = 1 / M`` (a flat buffer) from a window's moments, guarded (module docstring).

    ``M_i = sd(g_i) / sd(theta_i)`` over the window: the curvature that links the gradient's spread to the
    position's (for a quadratic potential exactly its diagonal, whether or not the chain has reached
    equilibrium; the gradient's noise adds to it, which slows the noisy coordinates). With a count of one
    (the start's Hessian diagonal, passed as squared "gradients") it is ``sqrt`` of that."""
    k = len(moments) // 4
    n = max(count, 1)
    g1, g2, t1, t2 = (moments[i * k:(i + 1) * k] for i in range(4))
    if count < 2:
        M_parts = [torch.sqrt(m2 / n) for m2 in g2]
    else:
        var_g = [(b / n - (a / n) ** 2).clamp_min(0.0) for a, b in zip(g1, g2)]
        var_t = [(b / n - (a / n) ** 2).clamp_min(0.0) for a, b in zip(t1, t2)]
        M_parts = [torch.sqrt(vg / vt) for vg, vt in zip(var_g, var_t)]
    if layerwise:
        M_parts = [(acc.reshape(acc.shape[0], -1).mean(1).reshape((acc.shape[0],) + (1,) * (acc.ndim - 1))
                    .expand_as(acc) if layout.n_members is not None else acc.mean().expand_as(acc)) for acc in M_parts]
    M = flatten(M_parts, layout).double()
    tiny = torch.finfo(torch.float32).tiny
    valid = torch.isfinite(M) & (M > tiny) & (M < 1.0 / tiny)
    median = torch.nanmedian(torch.where(valid, M, torch.full_like(M, math.nan)), dim=-1, keepdim=True).values
    before = None if previous is None else 1.0 / previous.double()
    # an invalid entry keeps its previous mass (the median without one); a member with no valid entry at all
    # (every gradient of its window non-finite) keeps its previous mass, or unit mass
    fallback = median if before is None else before
    M = torch.where(valid, M, fallback)
    M = torch.maximum(M, MASS_FLOOR * median)
    lost = ~torch.isfinite(median).expand_as(M)
    M = torch.where(lost, before if before is not None else torch.ones_like(M), M)
    return (1.0 / M).to(dtype).contiguous()


@torch.no_grad()
def curvature(potential, batch, position: Sequence[Tensor], inverse_mass: Sequence[Tensor] | None,
              layout: ChainLayout, rng, n_iter: int = 10, radius: float = 0.01, start_vector=None,
              return_vector: bool = False, transform=None):
    """The largest curvature of each member's preconditioned potential, ``lambda_max(m^{1/2} H m^{1/2})``, by
    power iteration on finite-difference Hessian-vector products on ``batch``.

    The probe moves every member by ``radius`` in preconditioned units (a hundredth of a posterior standard
    deviation when ``m`` matches the posterior's scale: small enough that a ReLU network's units keep their
    state); positions are restored afterwards.

    ``transform``, a symmetric linear map ``B`` on vectors shaped like the positions (in the mass's coordinates,
    member by member), makes it ``lambda_max(B m^{1/2} H m^{1/2} B)``: the curvature a step preconditioned by
    ``B`` as well meets (eqn's walkers' covariance). The probe then moves along ``m^{1/2} B v`` rescaled to the
    same length ``radius``, whatever ``B`` stretches it by.

    Returns
    -------
    Tensor, shape (S,) or ()
        Non-finite where a member's gradient was not finite.
    list of Tensor
        With ``return_vector``: the last iterate, to start the iteration on another batch from
        (``start_vector``), which then needs fewer iterations.
    """
    from .integrators import gaussian_like

    sqrt_m = views(inverse_mass.sqrt(), position) if inverse_mass is not None else \
        [torch.ones_like(p) for p in position]
    start = [p.detach().clone() for p in position]
    _, g0 = potential.value_and_grad(batch)
    g0 = [g.detach().clone() for g in g0]
    v = gaussian_like(position, rng, layout) if start_vector is None else start_vector
    lam = None

    def norm(vs):
        n = _per_member_reduce(vs, layout, lambda x: x.norm(dim=1)).clamp_min(1e-30)
        return [member_view(n, x) if layout.n_members is not None else n for x in vs]

    def unit(vs):
        return [x / n for x, n in zip(vs, norm(vs))]

    v = unit(v)
    try:
        for _ in range(n_iter):
            w = v if transform is None else transform(v)  # B v, and a probe of length radius along it
            r = [radius] * len(w) if transform is None else [radius / n for n in norm(w)]
            for p, s0, s, x, rk in zip(position, start, sqrt_m, w, r):
                p.copy_(s0 + rk * s * x)
            _, g1 = potential.value_and_grad(batch)
            hv = [s * (a - b) / rk for s, a, b, rk in zip(sqrt_m, g1, g0, r)]  # m^1/2 H m^1/2 w
            if transform is not None:
                hv = transform(hv)  # B m^1/2 H m^1/2 B v
            lam = _per_member_reduce([x * h for x, h in zip(v, hv)], layout, lambda x: x.sum(dim=1))
            v = unit(hv)
    finally:
        for p, s0 in zip(position, start):
            p.copy_(s0)
    return (lam.abs(), v) if return_vector else lam.abs()


@torch.no_grad()
def noise_fraction(potential, batch, inverse_mass: Sequence[Tensor] | None, layout: ChainLayout,
                   transform=None) -> Tensor | None:
    """The mini-batch noise of the gradient in preconditioned units, per member: the mean over coordinates of
    ``m_i * Var_i`` (a variance, not a fraction, whatever the name: the samplers' step rules compare it with the
    heat a step may add), with ``Var`` the gradient noise of ``batch`` estimated from its two halves
    (``(g_a - g_b)^2 / 4``, one draw per coordinate: the mean over coordinates steadies it). None when the
    potential cannot split its batch or the batch is the full data. ``transform`` (see :func:`curvature`):
    the noise as the step applies it, ``B m^{1/2} (g_a - g_b) / 2``, squared (eqn's ``B_i`` amplifies the noise
    along the walkers' spread by up to its stretch)."""
    halves = getattr(potential, "halves", None)
    parts = halves(batch) if halves is not None else None
    if parts is None:
        return None
    _, ga = potential.value_and_grad(parts[0])
    ga = [g.detach().clone() for g in ga]
    _, gb = potential.value_and_grad(parts[1])
    if transform is not None:
        root = views(inverse_mass.sqrt(), ga) if inverse_mass is not None else [1.0] * len(ga)
        var = [x.float().square() for x in transform([r * (a - b) / 2.0 for r, a, b in zip(root, ga, gb)])]
        return _per_member_reduce(var, layout, lambda x: torch.nan_to_num(x, nan=0.0).mean(dim=1))
    var = [(a - b).float().square() / 4.0 for a, b in zip(ga, gb)]
    if inverse_mass is not None:
        var = [v * m.float() for v, m in zip(var, views(inverse_mass, var))]
    return _per_member_reduce(var, layout, lambda x: torch.nan_to_num(x, nan=0.0).mean(dim=1))


@torch.no_grad()
def diagonal_curvature(potential, batch, position: Sequence[Tensor], layout: ChainLayout, rng,
                       n_probes: int = 8) -> list[Tensor]:
    """Hutchinson's estimate of each member's Hessian diagonal, ``mean_k v_k * (H v_k)`` with Rademacher
    ``v_k`` (Bekas, Kokiopoulou and Saad 2007), the products by finite differences of gradients on ``batch``;
    positions are restored afterwards. Unlike the gradient's square, it does not depend on how far the start
    is from the mode: the warm-up's first mass."""
    start = [p.detach().clone() for p in position]
    _, g0 = potential.value_and_grad(batch)
    g0 = [g.detach().clone() for g in g0]
    rms = _per_member_reduce(start, layout, lambda x: x.float().square().mean(dim=1).sqrt())
    delta = 1e-3 * (rms + 1e-3)
    total = [torch.zeros_like(p, dtype=torch.float32) for p in position]
    try:
        for _ in range(n_probes):
            signs = [torch.where(u < 0.5, -1.0, 1.0).to(p.dtype) for u, p in zip(_uniform_like(position, rng, layout),
                                                                               position)]
            for p, s0, v in zip(position, start, signs):
                d = member_view(delta, p) if layout.n_members is not None else delta
                p.copy_(s0 + d.to(p.dtype) * v)
            _, g1 = potential.value_and_grad(batch)
            for acc, a, b, v, p in zip(total, g1, g0, signs, position):
                d = member_view(delta, p) if layout.n_members is not None else delta
                acc.add_((v * (a - b) / d.to(a.dtype)).float())
    finally:
        for p, s0 in zip(position, start):
            p.copy_(s0)
    return [(acc / n_probes).abs() for acc in total]


def _uniform_like(tensors: Sequence[Tensor], rng, layout: ChainLayout) -> list[Tensor]:
    """Uniform numbers on [0, 1) shaped like ``tensors``, each chain's from its own stream."""
    total = sum(t.numel() for t in tensors)
    block = rng.uniform(total // layout.chains, tensors[0].dtype)
    flat = block.reshape(-1) if layout.n_members is None else block.reshape(layout.n_members, -1)
    return views(flat.contiguous(), tensors)
