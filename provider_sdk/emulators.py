"""Emulators: local servers that speak a vendor's wire protocol, backed by a neutral provider.

A vendor's provider (E2B, CubeSandbox, Daytona) is tested offline by pointing the vendor's
own, unmodified SDK at an emulator. Emulators are plugins, found through the entry-point
group ``provider_sdk.emulators`` exactly as providers are; an entry point names a
callable with the :class:`Emulator` signature. The name of an emulator is the name of the
provider it serves.

This module is what the core knows of them: their options, what a started one reports,
how one is found and run, and the label an emulator's sandboxes carry on its backend.
The emulators themselves, and the HTTP kit they are built on, are the distribution
``sandbox-provider-sdk-emulators`` (the core's ``emulators`` extra); this module never
imports it but through the entry points.

``psdk emulate NAME`` runs one in the foreground; ``psdk contract --provider NAME
--emulator`` starts one in-process and runs the contract suite against it::

    async with emulators.run("e2b", EmulatorOptions(api_key=Secret("k"))) as running:
        os.environ.update(running.environment())
        ...
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import entry_points
from typing import Protocol, cast

import attrs

from provider_sdk.config import Secret
from provider_sdk.distributions import install_hint
from provider_sdk.errors import ConfigError

__all__ = ["BACKING_LABEL", "DISTRIBUTION", "GROUP", "Emulator", "EmulatorOptions",
           "RunningEmulator", "available", "backing_labels", "emulated_by", "load", "run"]

DISTRIBUTION = "sandbox-provider-sdk-emulators"
"""The distribution of the project's emulators (``e2b``, ``cube``, ``daytona``)."""

GROUP = "provider_sdk.emulators"

BACKING_LABEL = "psdk.emulated"
"""The one label an emulator puts on each sandbox it runs on its backend,
``"<provider> <id>"``: the emulated sandbox it runs. The client's own labels stay with
the emulator, which serves them. ``psdk ls`` lists such a sandbox once, under the
emulated provider, when that provider is listed too."""


def backing_labels(provider: str, sandbox_id: str) -> dict[str, str]:
    """The labels of the backend's sandbox that runs ``provider``'s ``sandbox_id``."""
    return {BACKING_LABEL: f"{provider} {sandbox_id}"}


def emulated_by(metadata: Mapping[str, str]) -> tuple[str, str] | None:
    """``(provider, id)`` of the emulated sandbox a backend's sandbox runs, from its
    labels (see :data:`BACKING_LABEL`); ``None`` for any other sandbox."""
    provider, sep, sandbox_id = metadata.get(BACKING_LABEL, "").partition(" ")
    return (provider, sandbox_id) if sep and provider and sandbox_id else None

# The emulators of the project's own distribution, for the hint in "not installed" errors.
_DISTRIBUTIONS = dict.fromkeys(["e2b", "cube", "daytona"], DISTRIBUTION)


def _secret(value: str) -> Secret:
    return value if isinstance(value, Secret) else Secret(value)


def _optional_secret(value: str | None) -> Secret | None:
    return None if value is None else _secret(value)


@attrs.frozen(kw_only=True)
class EmulatorOptions:
    """How to run an emulator.

    Attributes:
        port: TCP port on 127.0.0.1 (``0`` picks a free one). Emulators never bind to
            any other address.
        backend: the neutral provider that runs the sandboxes (``local`` or ``docker``).
        api_key: the key clients must present; ``None`` lets the emulator read its
            vendor's usual setting (``E2B_API_KEY``, ...) and fail, naming it, if unset.
        faults: fault injection, ``NAME -> VALUE`` (each emulator documents its names).
    """

    port: int = 0
    backend: str = "local"
    api_key: Secret | None = attrs.field(default=None, converter=_optional_secret)
    faults: Mapping[str, str] = attrs.field(factory=dict, converter=dict)


@attrs.frozen(kw_only=True)
class RunningEmulator:
    """A started emulator.

    Attributes:
        name: the emulator's (and its provider's) name.
        url: the base URL it serves on, on 127.0.0.1.
        settings: the environment settings that point the provider at it (URLs,
            domains), without credentials.
        api_key_settings: names of the settings that carry the API key.
        api_key: the key it checks.
    """

    name: str
    url: str
    settings: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    api_key_settings: tuple[str, ...] = ()
    api_key: Secret = attrs.field(converter=_secret)

    def environment(self) -> dict[str, str]:
        """Every setting the provider needs, the API key's included (revealed)."""
        return {**self.settings, **dict.fromkeys(self.api_key_settings, self.api_key.reveal())}


class Emulator(Protocol):
    """What an entry point in :data:`GROUP` names: start on enter, stop on exit."""

    def __call__(self, options: EmulatorOptions, /) -> AbstractAsyncContextManager[
            RunningEmulator]:
        """An async context manager that serves until it is exited."""
        ...


def _entry_points() -> dict[str, Callable[[], object]]:
    return {ep.name: ep.load for ep in entry_points(group=GROUP)}


def available() -> list[str]:
    """Names of every installed emulator, sorted; nothing is imported."""
    return sorted(_entry_points())


def load(name: str) -> Emulator:
    """The emulator named ``name``.

    Raises:
        ConfigError: none is installed under that name (the message says what to
            install and lists what is installed), or it failed to import.
    """
    loaders = _entry_points()
    if name not in loaders:
        dist = _DISTRIBUTIONS.get(name)
        install = (f": it is in the distribution {dist}; install it with: "
                   f"{install_hint(dist)}") if dist else ""
        installed = ", ".join(sorted(loaders)) or "none"
        raise ConfigError(f"no emulator named {name!r}{install}; installed: {installed}")
    try:
        obj = loaders[name]()
    except (ImportError, AttributeError) as exc:
        dist = _DISTRIBUTIONS.get(name)
        again = f"{dist}: {install_hint(dist)}" if dist else "the distribution that provides it"
        raise ConfigError(f"emulator {name!r} failed to import ({exc}); reinstall {again}") \
            from exc
    if not callable(obj):
        raise ConfigError(f"emulator {name!r}: {obj!r} is not callable")
    return cast(Emulator, obj)


@asynccontextmanager
async def run(name: str, options: EmulatorOptions | None = None) -> AsyncIterator[
        RunningEmulator]:
    """Start the emulator ``name``; stop it when the block exits.

    Raises:
        ConfigError: no such emulator, or its port on 127.0.0.1 is taken (the message
            names the port).
    """
    options = options or EmulatorOptions()
    async with contextlib.AsyncExitStack() as stack:
        try:
            running = await stack.enter_async_context(load(name)(options))
        except Exception as exc:
            if not _address_in_use(exc):
                raise
            raise ConfigError(f"emulator {name!r}: port {options.port} on 127.0.0.1 is "
                              "already in use; pick another with --port, or 0 for any free "
                              "one") from exc
        yield running


def _address_in_use(exc: BaseException) -> bool:
    """Whether ``exc`` is, or groups (an emulator's task group), EADDRINUSE."""
    if isinstance(exc, OSError):
        return exc.errno == errno.EADDRINUSE
    return any(_address_in_use(e) for e in getattr(exc, "exceptions", ()))
