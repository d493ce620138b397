"""Where a client's sandboxes come from: a provider it opens by name, a provider the
caller gives, or a ``SandboxManager`` and an owner.

This module owns making, reattaching to and letting go of sandboxes; it knows nothing
of the Agents SDK's sessions and no provider by name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import anyio

from provider_sdk import config
from provider_sdk.capabilities import Capability
from provider_sdk.errors import ConfigError, NotFound, SandboxNotRunning
from provider_sdk.manager import SandboxManager
from provider_sdk.models import SandboxSpec, SandboxState
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

__all__ = ["ProviderSource"]

_GONE = (SandboxState.KILLED, SandboxState.STOPPED, SandboxState.ERROR)


class ProviderSource:
    """The provider behind a client, opened on first use, in the loop that uses it."""

    def __init__(self, provider: str | SandboxProvider | SandboxManager | None, *,
                 provider_options: Mapping[str, Any] | None, owner: str | None) -> None:
        self._manager: SandboxManager | None = None
        self._provider: SandboxProvider | None = None
        self._name: str | None = None
        self._options = dict(provider_options or {})
        self.owner = owner
        if isinstance(provider, SandboxManager):
            if owner is None:
                raise ConfigError("a SandboxManager needs an owner: "
                                  "ProviderSandboxClient(manager, owner=...)")
            self._manager = provider
            self._provider = provider.provider
        elif isinstance(provider, SandboxProvider):
            self._provider = provider
        elif provider is None or isinstance(provider, str):
            self._name = config.provider_name(provider)
        else:
            raise ConfigError("provider must be a provider's name, a SandboxProvider or a "
                              f"SandboxManager, got {type(provider).__name__}")
        if owner is not None and self._manager is None:
            raise ConfigError("owner is for a SandboxManager; a provider has no owners")
        if self._options and self._name is None:
            raise ConfigError("provider_options are for a provider opened by name")
        self._owns_provider = self._name is not None
        self._lock = anyio.Lock()

    @property
    def name(self) -> str:
        """The provider's name."""
        if self._provider is not None:
            return self._provider.name
        assert self._name is not None
        return self._name

    @property
    def managed(self) -> bool:
        """Whether sandboxes are an owner's, in a ``SandboxManager``."""
        return self._manager is not None

    async def provider(self) -> SandboxProvider:
        """The provider, opened now if it is opened by name."""
        async with self._lock:
            if self._provider is None:
                self._provider = await config.open_provider(self._name, **self._options
                                                            ).__aenter__()
            return self._provider

    async def create(self, spec: SandboxSpec) -> Sandbox:
        """A new sandbox, or the owner's."""
        if self._manager is not None:
            assert self.owner is not None
            return await self._manager.acquire(self.owner)
        provider = await self.provider()
        return await provider.create(spec)

    async def reattach(self, sandbox_id: str) -> Sandbox | None:
        """The sandbox ``sandbox_id``, resumed if it is paused; ``None`` if it is gone.
        For an owner: the owner's sandbox, whichever it now is."""
        if self._manager is not None:
            return await self.create(SandboxSpec())
        provider = await self.provider()
        try:
            sandbox = await provider.connect(sandbox_id)
        except (NotFound, SandboxNotRunning):
            return None
        if sandbox.info.state in _GONE:
            return None
        return sandbox

    async def let_go(self, sandbox: Sandbox, on_exit: str) -> None:
        """What becomes of a session's sandbox when its run ends: an owner's stays as it
        is; others are killed, paused (where the provider can) or kept."""
        if self._manager is not None or on_exit == "keep":
            return
        if on_exit == "pause" and sandbox.provider.supports(Capability.PAUSE):
            with contextlib.suppress(NotFound, SandboxNotRunning):
                await sandbox.pause()
            return
        if on_exit == "kill":
            await sandbox.kill()

    async def aclose(self) -> None:
        """Close the provider if this source opened it (it opens again on next use)."""
        if not self._owns_provider:
            return
        async with self._lock:
            provider, self._provider = self._provider, None
            if provider is not None:
                await provider.aclose()
