"""Level 1 of the lookup chain: this process's LRU cache of handles.

An entry is trusted, with no I/O, until a command through its handle fails on the data
plane or the manager pauses its sandbox (``_suspect``). What the process knows of a
sandbox's use is kept apart, with its lease (``_leases``).

This module must not talk to a store or a provider itself.
"""

from __future__ import annotations

import collections

import attrs

from provider_sdk.manager.handle import ManagedSandbox

__all__ = ["CacheMixin"]


@attrs.define
class _Entry:
    """A cached handle, and whether it must be checked before it is handed out again."""

    sandbox: ManagedSandbox
    suspect: bool = False


class CacheMixin:
    """The cache of ``SandboxManager``: handles remembered, suspected, forgotten."""

    cache_size: int
    _cache: collections.OrderedDict[str, _Entry]

    def _remember(self, sandbox: ManagedSandbox) -> None:
        self._cache[sandbox.owner] = _Entry(sandbox=sandbox)
        self._cache.move_to_end(sandbox.owner)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _suspect(self, owner: str, sandbox_id: str) -> None:
        entry = self._cache.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            entry.suspect = True

    def _forget(self, owner: str, sandbox_id: str) -> None:
        entry = self._cache.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            del self._cache[owner]
