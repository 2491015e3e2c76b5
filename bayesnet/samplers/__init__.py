"""Sampling kernels, one module per algorithm, and their registry.

Use :func:`make_sampler` (or the estimators' ``sampler=`` parameter) with one
of :func:`available_samplers`.
"""

from .base import (
    DivergenceError,
    Potential,
    Sampler,
    SamplerState,
    StepInfo,
    available_samplers,
    get_sampler_class,
    make_sampler,
    register_sampler,
)
from .baoab import BAOAB
from .sghmc import SGHMC
from .sgld import SGLD
from .sgnht import SGNHT
from .hmc import HMC
from .tacthmc import TACTHMC
from .pt_langevin import PTLangevin
from .eqn import EQN

__all__ = [
    "DivergenceError",
    "Potential",
    "Sampler",
    "SamplerState",
    "StepInfo",
    "available_samplers",
    "get_sampler_class",
    "make_sampler",
    "register_sampler",
    "BAOAB",
    "HMC",
    "SGHMC",
    "SGLD",
    "SGNHT",
    "TACTHMC",
    "PTLangevin",
    "EQN",
]
