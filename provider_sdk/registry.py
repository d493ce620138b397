"""The provider registry: entry points in group ``provider_sdk.providers``, loaded lazily.

A plugin is imported only when asked for by name. Each class is validated when loaded:
it subclasses :class:`SandboxProvider` and declares its capabilities as a frozenset that
holds what each of them needs (``IMPLIES``); that its roles have the part of exactly the
capabilities it declares is checked when it is made (:mod:`provider_sdk.roles`).

A plugin may also declare its capabilities as data in the module its entry point names,
kept light (no vendor SDK imported there): a mapping ``PROVIDER_CAPABILITIES`` from the
entry point's attribute (the class name) to a frozenset of :class:`Capability`.
:func:`declared_capabilities` reads it without importing the class, so ``psdk
providers`` answers at once; :func:`load` checks that the class declares the same.

``register()`` adds a provider in-process (tests, notebooks) and wins over an entry
point of the same name. A name of the form ``package.module:Class`` that is neither
loads that class from where it is importable: a provider being written can be tried
(``psdk run --provider mine:MyProvider``) and tested (``psdk contract``) before it is
packaged.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING

from provider_sdk.capabilities import HOOKS, IMPLIES, Capability
from provider_sdk.distributions import CORE, install_hint
from provider_sdk.errors import ConfigError, ProviderNotFound

if TYPE_CHECKING:
    from provider_sdk.provider import SandboxProvider

__all__ = ["DECLARATION", "GROUP", "available", "check_provider_class",
           "declared_capabilities", "load", "register", "unregister"]

DECLARATION = "PROVIDER_CAPABILITIES"
"""The name of the capabilities declared as data in an entry point's module."""

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
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
"""A provider named by where to import it (``package.module:Class``) rather than by an
entry point: a provider being written, before it is packaged."""


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


def _declared(name: str) -> frozenset[Capability] | None:
    """The capabilities the entry point ``name``'s module declares as data, if it does."""
    loader = _entry_points().get(name)
    point = getattr(loader, "__self__", None)
    if name in _registered or not isinstance(point, EntryPoint) or not point.attr:
        return None
    try:
        module = importlib.import_module(point.module)
    except ImportError:
        return None  # load() reports it, with what to install
    table = getattr(module, DECLARATION, None)
    found = table.get(point.attr) if isinstance(table, dict) else None
    return found if isinstance(found, frozenset) else None


def declared_capabilities(name: str) -> frozenset[Capability]:
    """The capabilities provider ``name`` declares, without importing its class where its
    entry point's module declares them as data (``PROVIDER_CAPABILITIES``); otherwise
    the class is loaded (and validated) to ask it.

    Raises:
        ProviderNotFound: as :func:`load`.
        ConfigError: as :func:`load`.
    """
    if name in _loaded:
        return _loaded[name].capabilities
    found = _declared(name)
    if found is None:
        return load(name).capabilities
    return frozenset(Capability(c) for c in found)


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
    if name not in loaders and _IMPORT_PATH.fullmatch(name):
        module, _, attr = name.partition(":")  # a provider not packaged (yet)
        loaders[name] = lambda: getattr(importlib.import_module(module), attr)
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
    declared = _declared(name)
    if declared is not None and frozenset(Capability(c) for c in declared) != cls.capabilities:
        raise ConfigError(f"provider {name!r}: {DECLARATION} in its entry point's module "
                          f"does not match {cls.__qualname__}.capabilities")
    _loaded[name] = cls
    return cls


def _hook_based(cls: type[SandboxProvider]) -> bool:
    """Whether a provider class overrides the base's hooks itself, as providers did
    before roles (:mod:`provider_sdk.roles`): then it overrides every hook of the
    sandboxes and of exec. A provider made of roles is checked against its capabilities
    when it is made; a subclass of one that overrides a hook or two to watch or change
    the calls (``super()`` passes them to the roles) is still made of roles."""
    from provider_sdk.provider import SandboxProvider

    return all(getattr(cls, hook) is not getattr(SandboxProvider, hook)
               for hook in ("_create", "_info", "_list", "_kill", "_exec"))


def check_provider_class(obj: object, name: str) -> type[SandboxProvider]:
    """Validate a provider class against the interface's rules; return it.

    Raises:
        ConfigError: naming the rule that is broken.
    """
    from provider_sdk.provider import SandboxProvider

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
    if _hook_based(obj):
        for cap, hooks in HOOKS.items():
            for hook in hooks:
                overridden = getattr(obj, hook) is not getattr(SandboxProvider, hook)
                if overridden != (cap in caps):
                    state = "declared but does not implement" if not overridden else \
                        "implements, without declaring the capability for,"
                    raise ConfigError(f"provider {name!r}: {obj.__qualname__} {state} "
                                      f"{hook}() ({cap})")
    for cap, needs in IMPLIES.items():
        if cap in caps and not needs <= caps:
            lacking = ", ".join(sorted(str(c) for c in needs - caps))
            raise ConfigError(f"provider {name!r}: {cap} needs {lacking}")
    return obj
