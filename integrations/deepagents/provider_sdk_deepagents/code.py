"""``CodeSandboxProvider``: deepagents-code's sandbox provider over provider-sdk.

deepagents-code finds it through its ``deepagents_code.sandbox_providers`` entry point
as ``psdk``, makes it with no arguments, and passes the ``params`` of its config's
``[sandboxes.providers.psdk]`` table to :meth:`CodeSandboxProvider.get_or_create`. The
class has the shape of deepagents-code's ``SandboxProvider`` without importing it
(deepagents-code is an application, not a library this package depends on).

With an ``owner``, a :class:`~provider_sdk.manager.SandboxManager` stands behind it: the
owner's sandbox is found again (cache, binding store, metadata tag) after a restart of
the agent, and stays resident when the agent's session ends.

This module owns that mapping; sandbox operations are :class:`ProviderSandbox`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio.to_thread
import attrs

from provider_sdk import SandboxProvider
from provider_sdk.manager import BindingStore, SandboxManager, open_store
from provider_sdk.models import SandboxSpec
from provider_sdk.portal import Portal
from provider_sdk_deepagents.sandbox import (
    DEFAULT_TIMEOUT,
    Cleanup,
    ProviderSandbox,
    _open_provider,
)

__all__ = ["ENTRY_POINT_NAME", "WORKING_DIR", "CodeSandboxProvider"]

ENTRY_POINT_NAME = "psdk"
"""The provider's name in deepagents-code (``--sandbox psdk``)."""

WORKING_DIR = "/home/user"
"""The working directory deepagents-code tells the agent about: the default one of
the local, Docker (with the catalog's templates) and E2B sandboxes."""


@attrs.frozen
class _Made:
    """How a sandbox this object returned was made: what ``delete`` needs to reach it."""

    provider: str | None
    options: Mapping[str, Any] = attrs.field(repr=False)  # may hold credentials
    owner: str | None
    backend: ProviderSandbox


class CodeSandboxProvider:
    """deepagents-code's ``SandboxProvider`` on any provider-sdk provider.

    Parameters of :meth:`get_or_create` come from deepagents-code's config::

        [sandboxes.providers.psdk.params]
        provider = "docker"          # the one field that picks the backend
        owner = "alice"              # optional: one resident sandbox per owner
    """

    def __init__(self) -> None:
        self._made: dict[str, _Made] = {}

    def __repr__(self) -> str:
        return f"<CodeSandboxProvider sandboxes={len(self._made)}>"

    @property
    def metadata(self) -> Any:
        """deepagents-code's ``SandboxProviderMetadata`` for this provider, when
        deepagents-code is installed (its registry reads it); else ``None``."""
        try:
            from deepagents_code.integrations.sandbox_provider import (  # type: ignore[import-not-found]
                SandboxProviderMetadata,
            )
        except ImportError:
            return None
        return SandboxProviderMetadata(name=ENTRY_POINT_NAME, working_dir=WORKING_DIR,
                                       supports_sandbox_id=True,
                                       supports_snapshot_name=False,
                                       backend_module="provider_sdk_deepagents")

    def get_or_create(self, *, sandbox_id: str | None = None, provider: str | None = None,
                      owner: str | None = None, store: str | None = None,
                      provider_options: Mapping[str, Any] | None = None,
                      timeout: int = DEFAULT_TIMEOUT, **spec_fields: Any) -> ProviderSandbox:
        """The sandbox ``sandbox_id``, the ``owner``'s sandbox, or a new one.

        Args:
            sandbox_id: reopen this sandbox (resumed if paused).
            provider: an installed provider's name; ``None``: the configured default
                (``PSDK_PROVIDER``, ``psdk.toml``, else ``"local"``).
            owner: find or make the owner's resident sandbox with a
                :class:`~provider_sdk.manager.SandboxManager`.
            store: the manager's binding store, as a URL (``sqlite:///PATH``,
                ``redis://...``, ``postgresql://...``, ``memory:``); ``None``:
                ``PSDK_MANAGER_STORE``, else the default SQLite file.
            provider_options: options for the provider's constructor.
            timeout: seconds a command may run when ``execute`` gets no ``timeout``.
            **spec_fields: :class:`~provider_sdk.SandboxSpec` fields for a new sandbox.

        Raises:
            SandboxNotFound: no sandbox ``sandbox_id`` (a ``LookupError``).
            ProviderNotFound: no provider by that name is installed.
        """
        options = dict(provider_options or {})
        loop = Portal.start(name="provider-sdk-deepagents")
        cleanups: list[Cleanup] = []
        try:
            provider_obj = loop.call(_open_provider, provider, options)
            cleanups.append(provider_obj.aclose)
            if sandbox_id is not None:
                sandbox = loop.call(provider_obj.connect, sandbox_id)
            elif owner is not None:
                bindings = open_store(store)
                cleanups.append(bindings.aclose)
                manager = SandboxManager(provider_obj, bindings,
                                         spec=SandboxSpec(**spec_fields))
                cleanups.append(manager.aclose)
                sandbox = loop.call(manager.acquire, owner)
            else:
                sandbox = loop.call(_create, provider_obj, SandboxSpec(**spec_fields))
        except BaseException:
            try:
                loop.call(_run_all, cleanups)
            finally:
                loop.close()
            raise
        backend = ProviderSandbox(sandbox, loop=loop, timeout=timeout,
                                  cleanups=tuple(cleanups))
        self._made[backend.id] = _Made(provider=provider, options=options,
                                       owner=owner if sandbox_id is None else None,
                                       backend=backend)
        return backend

    def delete(self, *, sandbox_id: str, owner: str | None = None,
               provider: str | None = None, store: str | None = None,
               provider_options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        """End a sandbox.

        A sandbox this object got for an owner is resident: deleting it by id only
        closes this process's handle, and the owner gets it back from the next
        ``get_or_create``. Pass ``owner`` to release the owner instead: its binding is
        dropped and its sandboxes killed. Any other sandbox is killed; an unknown id is
        not an error. ``provider`` and ``provider_options`` reach a sandbox this object
        did not make (default: the configured provider).
        """
        made = self._made.pop(sandbox_id, None)
        name = provider if provider is not None else made.provider if made else None
        options = dict(provider_options or (made.options if made else {}))
        if owner is not None:
            if made is not None:
                made.backend.close()
            _release(name, options, owner, store)
        elif made is not None and made.owner is not None:
            made.backend.close()
        elif made is not None and not made.backend.closed:
            made.backend.delete()
        else:
            _kill(name, options, sandbox_id)

    async def aget_or_create(self, *, sandbox_id: str | None = None,
                             **kwargs: Any) -> ProviderSandbox:
        """:meth:`get_or_create` in a worker thread: the backend's provider runs in a
        loop of its own, whatever loop awaits this."""
        return await anyio.to_thread.run_sync(
            lambda: self.get_or_create(sandbox_id=sandbox_id, **kwargs))

    async def adelete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        """:meth:`delete` in a worker thread."""
        await anyio.to_thread.run_sync(lambda: self.delete(sandbox_id=sandbox_id, **kwargs))


async def _create(provider: SandboxProvider, spec: SandboxSpec) -> Any:
    return await provider.create(spec)


async def _run_all(cleanups: list[Cleanup]) -> None:
    while cleanups:
        await cleanups.pop()()


def _kill(provider: str | None, options: dict[str, Any], sandbox_id: str) -> None:
    async def kill() -> None:
        async with await _open_provider(provider, options) as opened:
            await opened.kill(sandbox_id)

    loop = Portal.start(name="provider-sdk-deepagents")
    try:
        loop.call(kill)
    finally:
        loop.close()


def _release(provider: str | None, options: dict[str, Any], owner: str,
             store: str | None) -> None:
    async def release() -> None:
        bindings: BindingStore = open_store(store)
        try:
            async with await _open_provider(provider, options) as opened:
                await SandboxManager(opened, bindings).release(owner)
        finally:
            await bindings.aclose()

    loop = Portal.start(name="provider-sdk-deepagents")
    try:
        loop.call(release)
    finally:
        loop.close()
