"""The sampler registry: the names ``sampler=`` accepts, and how a name, class or instance becomes a sampler."""

from __future__ import annotations

import inspect
from typing import Any

from .base import Sampler

__all__ = ["DEFAULT_SAMPLER", "register_sampler", "unregister_sampler", "available_samplers", "get_sampler_class", "sampler_class",
           "make_sampler"]

#: the sampler the estimators use when ``sampler`` is not given
DEFAULT_SAMPLER = "sghmc"

_REGISTRY: dict[str, type[Sampler]] = {}


def register_sampler(cls: type[Sampler]) -> type[Sampler]:
    """Class decorator that makes a sampler available under ``cls.name``.

    Raises
    ------
    ValueError
        If ``cls.name`` is empty, or its ``stats`` lack the common ``potential`` field.
    """
    if not cls.name:
        raise ValueError("a registered sampler needs a non-empty `name`")
    if "potential" not in cls.stats:
        raise ValueError(f"sampler {cls.name!r}: `stats` must declare the common 'potential' field.")
    if not inspect.isclass(cls) or not issubclass(cls, Sampler):
        raise TypeError("register_sampler takes a Sampler subclass.")
    _REGISTRY[cls.name] = cls
    return cls


def unregister_sampler(name: str) -> None:
    """Remove a registered sampler (for tests that register their own)."""
    _REGISTRY.pop(name, None)


def available_samplers() -> list[str]:
    """Names of the registered samplers, sorted."""
    return sorted(_REGISTRY)


def get_sampler_class(name: str) -> type[Sampler]:
    """Look up a sampler class by name.

    Raises
    ------
    ValueError
        If ``name`` is not registered; the message lists the valid names.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown sampler {name!r}; valid names are {available_samplers()}.") from None


def sampler_class(sampler: "str | Sampler | type[Sampler]") -> type[Sampler]:
    """The class of a sampler given as a name, class or instance."""
    if isinstance(sampler, Sampler):
        return type(sampler)
    if isinstance(sampler, type) and issubclass(sampler, Sampler):
        return sampler
    return get_sampler_class(sampler)


def make_sampler(sampler: "str | Sampler | type[Sampler]", **params: Any) -> Sampler:
    """Resolve ``sampler`` (a name, class or instance) into a new, validated instance.

    ``params`` override an instance's hyperparameters; the instance itself is not changed.
    """
    cls = sampler_class(sampler)
    if isinstance(sampler, Sampler):
        params = {**sampler.get_params(), **params}
    return cls.from_params(**params)
