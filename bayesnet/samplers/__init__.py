"""Sampling kernels, one module per algorithm, and their registry.

Use :func:`make_sampler` (or the estimators' ``sampler=`` parameter) with one
of :func:`available_samplers`. :mod:`.base` holds the contract every kernel
follows, :mod:`.registry` the names, :mod:`.random` the per-chain random streams, :mod:`.warmup` the
adaptation during burn-in (from the estimates of :mod:`.estimates`), :mod:`.tempering` the replica exchange.
"""

from ..plan import ChainLayout, RunPlan
from .base import (
    DivergenceError,
    MomentumState,
    Potential,
    Sampler,
    SamplerState,
    Stat,
    StepInfo,
)
from .registry import (
    DEFAULT_SAMPLER,
    available_samplers,
    get_sampler_class,
    make_sampler,
    register_sampler,
    sampler_class,
    unregister_sampler,
)
from .random import ChainRandom
from .baoab import BAOAB
from .sghmc import SGHMC
from .sgld import SGLD
from .sgnht import SGNHT
from .hmc import HMC
from .tacthmc import TACTHMC
from .pt_langevin import PTLangevin
from .eqn import EQN

__all__ = [
    "DEFAULT_SAMPLER",
    "ChainLayout",
    "ChainRandom",
    "DivergenceError",
    "MomentumState",
    "Potential",
    "RunPlan",
    "Sampler",
    "SamplerState",
    "Stat",
    "StepInfo",
    "available_samplers",
    "get_sampler_class",
    "make_sampler",
    "register_sampler",
    "sampler_class",
    "unregister_sampler",
    "BAOAB",
    "HMC",
    "SGHMC",
    "SGLD",
    "SGNHT",
    "TACTHMC",
    "PTLangevin",
    "EQN",
]
