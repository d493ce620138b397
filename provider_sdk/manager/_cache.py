"""Level 1 of the lookup chain: this process's LRU cache of handles.

An entry is trusted, with no I/O, until a command through its handle fails on the data
plane or the manager pauses its sandbox (:meth:`Cache.suspect`). What the process knows
of a sandbox's use is kept apart, with its lease (``_leases``).

This module must not talk to a store or a provider itself.
"""

from __future__ import annotations

import collections

import attrs

from provider_sdk.manager.handle import ManagedSandbox

__all__ = ["Cache"]


@attrs.define
class _Entry:
    """A cached handle, and whether it must be checked before it is handed out again."""

    sandbox: ManagedSandbox
    suspect: bool = False


class Cache:
    """The cache of a ``SandboxManager``: handles remembered, suspected, forgotten, for
    at most ``size`` owners (the least recently used go first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()

    def get(self, owner: str) -> _Entry | None:
        """The owner's entry, if it has one (its place in the order is kept)."""
        return self._entries.get(owner)

    def touch(self, owner: str) -> None:
        """The owner's entry was used: it goes last."""
        self._entries.move_to_end(owner)

    def drop(self, owner: str) -> None:
        """Forget the owner's entry, whichever sandbox it holds."""
        self._entries.pop(owner, None)

    def remember(self, sandbox: ManagedSandbox) -> None:
        self._entries[sandbox.owner] = _Entry(sandbox=sandbox)
        self._entries.move_to_end(sandbox.owner)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def suspect(self, owner: str, sandbox_id: str) -> None:
        entry = self._entries.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            entry.suspect = True

    def forget(self, owner: str, sandbox_id: str) -> None:
        entry = self._entries.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            del self._entries[owner]
