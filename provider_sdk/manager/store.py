"""Binding stores: who owns which sandbox, shared by every manager that uses the store.

A store keeps one :class:`Binding` per owner and short-lived *claims*. Two operations
must be atomic in every store, because they are what keeps one sandbox per owner across
processes and application replicas:

- :meth:`BindingStore.put` is a compare-and-set on :attr:`Binding.version`: a write
  based on a stale read fails instead of overwriting a newer binding;
- :meth:`BindingStore.claim` lets exactly one caller hold a named claim until it
  releases it or its time-to-live runs out; the manager creates, heals and replaces a
  sandbox only while it holds the owner's claim, and a binding it writes then is
  *fenced* by that claim (``put(..., fence=(name, token))``): checked in the same atomic
  step, so a creator whose claim ran out cannot bind, and the reaper, holding the claim,
  knows that nobody binds the sandbox it is about to kill.

Claims expire by the store's own clock (Redis's, PostgreSQL's, SQLite's reading of the
machine's), never by a replica's: :meth:`BindingStore.time` reads it, for the times the
manager writes into bindings and labels.

This module holds the interface, the value type and :class:`MemoryStore`; each other
store lives in its own module and imports its driver only when constructed, so the core
needs none of them. :func:`~provider_sdk.manager.stores.open_store` opens any of them
from a URL. It must not know any provider.
"""

from __future__ import annotations

import abc
import builtins
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from provider_sdk.manager._claims import check_fence, check_owner
from provider_sdk.models import _env_map

__all__ = ["Binding", "BindingStore", "MemoryStore", "default_store_path"]

T = TypeVar("T", bound="BindingStore")


def _keys_only(value: Mapping[str, str]) -> str:
    # Owner environments often hold credentials: reprs show names only.
    return "{" + ", ".join(f"{k!r}: '***'" for k in value) + "}"


def _str_tuple(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


@attrs.frozen(kw_only=True)
class Binding:
    """One owner's resident sandbox, as a store keeps it."""

    owner: str
    """The owner: a user id, a session id, whatever the application binds on."""
    sandbox_id: str
    """The bound sandbox."""
    provider: str
    """The provider that runs it."""
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_env_map, repr=_keys_only)
    """Environment set through the manager's sandbox; applied under each call's own."""
    snapshots: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """Snapshot ids taken by the manager's policy, oldest first."""
    snapshot_at: float | None = None
    """Unix time of the newest snapshot."""
    last_used: float = 0.0
    """Unix time of the last acquire or command, as far as the store has heard."""
    paused: bool = False
    """Whether the manager paused it for being idle."""
    version: int = 0
    """Bumped by every successful :meth:`BindingStore.put`; ``0``: never stored."""

    def to_json(self) -> str:
        """The fields a store keeps beside owner, sandbox id, provider and version."""
        return json.dumps({"env": dict(self.env), "snapshots": list(self.snapshots),
                           "snapshot_at": self.snapshot_at, "last_used": self.last_used,
                           "paused": self.paused}, separators=(",", ":"))

    @classmethod
    def from_row(cls, owner: str, sandbox_id: str, provider: str, version: int,
                 data: str | bytes) -> Binding:
        """Rebuild a binding from a store's row (the inverse of :meth:`to_json`)."""
        fields = json.loads(data)
        return cls(owner=owner, sandbox_id=sandbox_id, provider=provider, version=int(version),
                   env=fields.get("env", {}), snapshots=fields.get("snapshots", ()),
                   snapshot_at=fields.get("snapshot_at"),
                   last_used=float(fields.get("last_used", 0.0)),
                   paused=bool(fields.get("paused", False)))


class BindingStore(abc.ABC):
    """Where bindings and claims live. Use it with ``async with`` or call :meth:`aclose`.

    Implementations translate their driver's errors: a store that cannot be reached
    raises :class:`~provider_sdk.errors.Unavailable`.
    """

    @abc.abstractmethod
    async def get(self, owner: str) -> Binding | None:
        """The owner's binding, or ``None``."""

    @abc.abstractmethod
    async def put(self, binding: Binding, *,
                  fence: tuple[str, str] | None = None) -> Binding | None:
        """Store ``binding`` if the stored one still has ``binding.version``.

        ``version == 0`` means "only if there is none". With ``fence=(name, token)``,
        also only if ``token`` holds the claim ``name`` now, checked in the same atomic
        step. Returns the stored binding (its version bumped), or ``None`` when another
        writer got there first (or the claim is not ``token``'s).
        """

    @abc.abstractmethod
    async def delete(self, owner: str, *, version: int | None = None) -> bool:
        """Remove the owner's binding (only at ``version``, if given); whether it did."""

    @abc.abstractmethod
    async def list(self) -> builtins.list[Binding]:
        """Every binding in the store."""

    @abc.abstractmethod
    async def claim(self, name: str, token: str, ttl: float) -> bool:
        """Take the claim ``name`` for ``ttl`` seconds, unless someone else holds it.

        Claiming again with the holder's own token renews it. Returns whether
        ``token`` holds the claim now.
        """

    @abc.abstractmethod
    async def release(self, name: str, token: str) -> None:
        """Give up the claim ``name`` if ``token`` holds it."""

    @abc.abstractmethod
    async def claimed(self, name: str) -> bool:
        """Whether anyone holds the claim ``name`` now."""

    async def time(self) -> float:
        """The store's clock, in Unix seconds: the clock its claims expire by, which
        every replica sharing the store reads alike. The default is this machine's."""
        return time.time()

    async def aclose(self) -> None:
        """Release connections. Safe to call twice."""

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class MemoryStore(BindingStore):
    """Bindings in this process's memory: for tests and single-process tools.

    Nothing survives the process, and other processes do not see it.
    """

    def __init__(self) -> None:
        self._bindings: dict[str, Binding] = {}
        self._claims: dict[str, tuple[str, float]] = {}

    def __repr__(self) -> str:
        return f"<MemoryStore {len(self._bindings)} bindings>"

    async def get(self, owner: str) -> Binding | None:
        return self._bindings.get(check_owner(owner))

    async def put(self, binding: Binding, *,
                  fence: tuple[str, str] | None = None) -> Binding | None:
        check_fence(fence)
        current = self._bindings.get(check_owner(binding.owner))
        if (current.version if current else 0) != binding.version:
            return None
        if fence is not None and not self._holds(*fence):
            return None
        stored = attrs.evolve(binding, version=binding.version + 1)
        self._bindings[binding.owner] = stored
        return stored

    async def delete(self, owner: str, *, version: int | None = None) -> bool:
        current = self._bindings.get(check_owner(owner))
        if current is None or (version is not None and current.version != version):
            return False
        del self._bindings[owner]
        return True

    async def list(self) -> builtins.list[Binding]:
        return builtins.list(self._bindings.values())

    async def claim(self, name: str, token: str, ttl: float) -> bool:
        now = time.monotonic()
        held = self._claims.get(name)
        if held is not None and held[0] != token and held[1] > now:
            return False
        self._claims[name] = (token, now + ttl)
        return True

    async def release(self, name: str, token: str) -> None:
        held = self._claims.get(name)
        if held is not None and held[0] == token:
            del self._claims[name]

    async def claimed(self, name: str) -> bool:
        held = self._claims.get(name)
        return held is not None and held[1] > time.monotonic()

    def _holds(self, name: str, token: str) -> bool:
        held = self._claims.get(name)
        return held is not None and held[0] == token and held[1] > time.monotonic()


def default_store_path() -> Path:
    """Where the default :class:`~provider_sdk.manager.SQLiteStore` keeps its file:
    ``$XDG_DATA_HOME/psdk/manager.sqlite3`` (``~/.local/share/psdk/...``)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "psdk" / "manager.sqlite3"


def _safe(url: str) -> str:
    """``url`` with its user information (which may hold a password) masked."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
