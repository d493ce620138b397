"""The provider registry: entry points in group ``provider_sdk.providers``, loaded lazily.

A plugin is imported only when asked for by name. Each class is validated when loaded:
it subclasses :class:`SandboxProvider`, implements every required hook, and implements
the hooks of exactly the capabilities it declares. ``register()`` adds a provider
in-process (tests, notebooks) and wins over an entry point of the same name.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from importlib.metadata import entry_points

from provider_sdk.capabilities import HOOKS, IMPLIES, Capability
from provider_sdk.distributions import CORE, install_hint
from provider_sdk.errors import ConfigError, ProviderNotFound
from provider_sdk.provider import SandboxProvider

__all__ = ["GROUP", "available", "check_provider_class", "load", "register", "unregister"]

GROUP = "provider_sdk.providers"

# Where the well-known providers live, for the hint in "not installed" errors.
_DISTRIBUTIONS = {
    "local": CORE,
    "docker": "sandbox-provider-sdk-docker",
    "e2b": "sandbox-provider-sdk-e2b",
    "cube": "sandbox-provider-sdk-e2b",
    "daytona": "sandbox-provider-sdk-daytona",
}

_registered: dict[str, Callable[[], object]] = {}
_loaded: dict[str, type[SandboxProvider]] = {}


def register(name: str, provider: type[SandboxProvider] | str) -> None:
    """Register a provider class (or a ``"module:attr"`` path) under ``name`` in-process."""
    if isinstance(provider, str):
        path = provider

        def loader() -> object:
            module, _, attr = path.partition(":")
            return getattr(importlib.import_module(module), attr)

        _registered[name] = loader
    else:
        check_provider_class(provider, name)
        _registered[name] = lambda: provider
    _loaded.pop(name, None)


def unregister(name: str) -> None:
    """Forget an in-process registration (entry points are untouched)."""
    _registered.pop(name, None)
    _loaded.pop(name, None)


def _entry_points() -> dict[str, Callable[[], object]]:
    return {ep.name: ep.load for ep in entry_points(group=GROUP)}


def available() -> list[str]:
    """Names of every installed or registered provider, sorted; nothing is imported."""
    return sorted({*_entry_points(), *_registered})


def load(name: str) -> type[SandboxProvider]:
    """The validated provider class registered as ``name``.

    Raises:
        ProviderNotFound: no such provider, or it failed to import; the message says
            what to install and lists the installed providers.
        ConfigError: the class breaks the provider rules.
    """
    if name in _loaded:
        return _loaded[name]
    loaders = {**_entry_points(), **_registered}
    installed = tuple(sorted(loaders))
    if name not in loaders:
        dist = _DISTRIBUTIONS.get(name)
        install = f"; install it with: {install_hint(dist)}" if dist else ""
        raise ProviderNotFound(
            f"no provider named {name!r}{install}; installed: {', '.join(installed) or 'none'}",
            installed=installed,
        )
    try:
        obj = loaders[name]()
    except (ImportError, AttributeError) as exc:  # no module, or no such class in it
        dist = _DISTRIBUTIONS.get(name)
        again = f"{dist}: {install_hint(dist)}" if dist else "the distribution that provides it"
        raise ProviderNotFound(
            f"provider {name!r} failed to import ({exc}); reinstall {again}",
            installed=installed,
        ) from exc
    cls = check_provider_class(obj, name)
    _loaded[name] = cls
    return cls


def check_provider_class(obj: object, name: str) -> type[SandboxProvider]:
    """Validate a provider class against the interface's rules; return it.

    Raises:
        ConfigError: naming the rule that is broken.
    """
    if not (isinstance(obj, type) and issubclass(obj, SandboxProvider)):
        raise ConfigError(f"provider {name!r}: {obj!r} is not a SandboxProvider subclass")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise ConfigError(f"provider {name!r}: {obj.__qualname__} does not implement {missing}")
    if not isinstance(getattr(obj, "name", None), str):
        raise ConfigError(f"provider {name!r}: {obj.__qualname__}.name must be a string")
    caps = obj.capabilities
    if not isinstance(caps, frozenset) or not all(isinstance(c, Capability) for c in caps):
        raise ConfigError(
            f"provider {name!r}: capabilities must be a frozenset of Capability members")
    for cap, hooks in HOOKS.items():
        for hook in hooks:
            overridden = getattr(obj, hook) is not getattr(SandboxProvider, hook)
            if overridden != (cap in caps):
                state = "declared but does not implement" if not overridden else \
                    "implements, without declaring the capability for,"
                raise ConfigError(f"provider {name!r}: {obj.__qualname__} {state} {hook}() "
                                  f"({cap})")
    for cap, needs in IMPLIES.items():
        if cap in caps and not needs <= caps:
            lacking = ", ".join(sorted(str(c) for c in needs - caps))
            raise ConfigError(f"provider {name!r}: {cap} needs {lacking}")
    return obj
