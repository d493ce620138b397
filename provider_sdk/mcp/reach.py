"""Which sandboxes an MCP client can reach: the server's scope, or one owner's sandbox.

A client of ``psdk mcp`` never names an arbitrary sandbox of the backend. Every tool
that takes a sandbox id goes through a :class:`Reach`, which hands out only the
sandboxes the server's configuration allows:

* :class:`ScopeReach` (the default): the sandboxes that carry the server's scope label,
  :data:`SCOPE_LABEL` set to the scope's name. Sandboxes the server creates get it; any
  other sandbox, whoever made it, is refused exactly as one that does not exist
  (:class:`~provider_sdk.errors.SandboxNotFound`), so a client learns nothing of it. A
  refused sandbox is not touched: its info is read, it is not connected to, resumed or
  killed.
* :class:`OwnerReach` (``--owner``): one owner's resident sandbox, held by a
  :class:`~provider_sdk.manager.SandboxManager`. Creating returns it (made on first
  use), killing releases it, and any other id is refused the same way.
* :class:`TenantReach` (``--owners-file``): each client its own owner, the one its
  credential names; for that client, it is that owner's :class:`OwnerReach`.

A tool asks :meth:`Reach.for_client` for the reach of the client whose request it
serves: the client as the transport authenticated it (``None`` when the transport names
no client, as on stdio).

This module decides who reaches what; it must not know MCP.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping
from typing import Protocol

from provider_sdk.errors import InvalidInput, PermissionDenied, SandboxNotFound
from provider_sdk.labels import check_labels
from provider_sdk.manager import SandboxManager, check_owner
from provider_sdk.models import SandboxInfo, SandboxSpec
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

__all__ = ["DEFAULT_SCOPE", "RESERVED_PREFIX", "SCOPE_LABEL", "ClientReach", "OwnerReach",
           "Reach", "ScopeReach", "TenantReach"]

SCOPE_LABEL = "psdk.mcp.scope"
"""The label that puts a sandbox in an MCP server's scope; its value is the scope's name."""
DEFAULT_SCOPE = "default"
"""The scope of a server that names none."""
RESERVED_PREFIX = "psdk."
"""Labels a client may not set: the SDK's own (the scope's, the manager's owner)."""


class ClientReach(Protocol):
    """The sandboxes one client may use, and how they come and go."""

    async def create(self, *, template: str | None, labels: Mapping[str, str],
                     env: Mapping[str, str]) -> Sandbox:
        """A new sandbox in reach (for an owner: the owner's sandbox)."""

    async def open(self, sandbox_id: str | None) -> Sandbox:
        """The sandbox ``sandbox_id``, if in reach.

        Raises:
            SandboxNotFound: there is no such sandbox, or it is out of reach.
            InvalidInput: no id where one is needed.
        """

    async def list(self) -> builtins.list[SandboxInfo]:
        """The sandboxes in reach."""

    async def kill(self, sandbox_id: str | None) -> str:
        """Kill the sandbox ``sandbox_id`` if in reach; return its id."""


class Reach(Protocol):
    """What one server's clients may reach: for each client, a :class:`ClientReach`."""

    @property
    def description(self) -> str:
        """What a client reaches, in a few words (for the server's instructions)."""

    def for_client(self, client: str | None) -> ClientReach:
        """What ``client`` (as its transport authenticated it, ``None`` if it names
        none) reaches.

        Raises:
            PermissionDenied: the client may reach nothing here.
        """


def _not_found(sandbox_id: str, provider: str, where: str) -> SandboxNotFound:
    return SandboxNotFound(f"no sandbox {sandbox_id!r} {where}", provider=provider,
                           sandbox_id=sandbox_id)


def check_client_labels(labels: Mapping[str, str], provider: str) -> None:
    """Refuse labels a client may not set (those under :data:`RESERVED_PREFIX`)."""
    for key in labels:
        if key.startswith(RESERVED_PREFIX):
            raise InvalidInput(f"labels: {key!r} is reserved (keys starting with "
                               f"{RESERVED_PREFIX!r} are the SDK's own)", provider=provider)


class ScopeReach:
    """The sandboxes labelled with the scope ``scope`` (:data:`SCOPE_LABEL`); those it
    creates start from ``template`` unless the client names one."""

    def __init__(self, provider: SandboxProvider, scope: str, *,
                 template: str | None = None) -> None:
        check_labels({SCOPE_LABEL: scope}, field="scope", internal=provider.internal_labels,
                     provider=provider.name)
        self.provider = provider
        self.scope = scope
        self.template = template
        self.created: builtins.list[str] = []
        """Ids of the sandboxes this instance created, oldest first."""

    @property
    def description(self) -> str:
        return (f"the sandboxes of scope {self.scope!r} on the {self.provider.name} "
                f"provider (label {SCOPE_LABEL}={self.scope})")

    def for_client(self, client: str | None) -> ScopeReach:
        """The same scope, whoever the client is."""
        return self

    async def create(self, *, template: str | None, labels: Mapping[str, str],
                     env: Mapping[str, str]) -> Sandbox:
        check_client_labels(labels, self.provider.name)
        spec = SandboxSpec(template=template or self.template, env=dict(env),
                           metadata={**labels, SCOPE_LABEL: self.scope})
        sandbox = await self.provider.create(spec)
        self.created.append(sandbox.id)
        return sandbox

    async def _check(self, sandbox_id: str | None) -> str:
        if sandbox_id is None:
            raise InvalidInput("sandbox_id is required: sandbox_list shows the sandboxes "
                               "in reach", provider=self.provider.name)
        info = await self.provider.get_info(sandbox_id)
        if info.metadata.get(SCOPE_LABEL) != self.scope:
            raise _not_found(sandbox_id, self.provider.name, f"in scope {self.scope!r}")
        return sandbox_id

    async def open(self, sandbox_id: str | None) -> Sandbox:
        return await self.provider.connect(await self._check(sandbox_id))

    async def list(self) -> builtins.list[SandboxInfo]:
        return await self.provider.list(metadata={SCOPE_LABEL: self.scope})

    async def kill(self, sandbox_id: str | None) -> str:
        checked = await self._check(sandbox_id)
        await self.provider.kill(checked)
        return checked


class OwnerReach:
    """One owner's resident sandbox, through a sandbox manager."""

    def __init__(self, manager: SandboxManager, owner: str) -> None:
        self.manager = manager
        self.owner = owner

    @property
    def description(self) -> str:
        return (f"one sandbox: the resident sandbox of owner {self.owner!r} on the "
                f"{self.manager.provider.name} provider")

    def for_client(self, client: str | None) -> OwnerReach:
        """The same owner, whoever the client is."""
        return self

    async def create(self, *, template: str | None, labels: Mapping[str, str],
                     env: Mapping[str, str]) -> Sandbox:
        if template is not None or labels or env:
            raise InvalidInput(
                f"this server binds each session to owner {self.owner!r}'s resident "
                "sandbox: its template, labels and environment are the server's; create "
                "takes none", provider=self.manager.provider.name)
        return await self.manager.acquire(self.owner)

    async def _bound_id(self) -> str | None:
        binding = await self.manager.binding(self.owner)
        if binding is None or binding.provider != self.manager.provider.name:
            return None
        return binding.sandbox_id

    async def open(self, sandbox_id: str | None) -> Sandbox:
        if sandbox_id is not None and sandbox_id != await self._bound_id():
            raise _not_found(sandbox_id, self.manager.provider.name,
                             f"bound to owner {self.owner!r}")
        return await self.manager.acquire(self.owner)

    async def list(self) -> builtins.list[SandboxInfo]:
        bound = await self._bound_id()
        if bound is None:
            return []
        try:
            return [await self.manager.provider.get_info(bound)]
        except SandboxNotFound:
            return []

    async def kill(self, sandbox_id: str | None) -> str:
        bound = await self._bound_id()
        if bound is None or (sandbox_id is not None and sandbox_id != bound):
            raise _not_found(sandbox_id or "(none)", self.manager.provider.name,
                             f"bound to owner {self.owner!r}")
        await self.manager.release(self.owner)
        return bound


class TenantReach:
    """Each client its own owner's resident sandbox, through one sandbox manager: the
    client's name, as its transport authenticated it, is the owner."""

    def __init__(self, manager: SandboxManager, owners: Collection[str]) -> None:
        for owner in owners:
            check_owner(owner)
        self.manager = manager
        self.owners = frozenset(owners)

    @property
    def description(self) -> str:
        return (f"one sandbox per client: the resident sandbox of the owner its token "
                f"names ({len(self.owners)} owners), on the {self.manager.provider.name} "
                "provider")

    def for_client(self, client: str | None) -> OwnerReach:
        """``client``'s owner's reach.

        Raises:
            PermissionDenied: ``client`` is none of the owners.
        """
        if client is None or client not in self.owners:
            raise PermissionDenied("this server binds each client to the owner its token "
                                   "names, and this request names none",
                                   provider=self.manager.provider.name)
        return OwnerReach(self.manager, client)
