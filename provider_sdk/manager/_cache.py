"""Level 1 of the lookup chain: this process's LRU cache of handles, and what it knows
about their use.

An entry is trusted, with no I/O, until a command through its handle fails on the data
plane or the manager pauses its sandbox (``_suspect``). Commands and file operations
through a handle count as use (``_in_use``); use is written to the binding store at most
every ``_touch_every`` seconds, by the housekeeper, off the caller's path.

This module must not talk to a store or a provider itself.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

import anyio.abc
import attrs

from provider_sdk.manager.handle import ManagedSandbox
from provider_sdk.manager.store import Binding

__all__ = ["CacheMixin"]


@attrs.define
class _Entry:
    """A cached handle and what this process knows about its use."""

    sandbox: ManagedSandbox
    last_used: float
    stored_used: float
    suspect: bool = False
    busy: int = 0


class CacheMixin:
    """The cache of ``SandboxManager``: handles remembered, used, suspected, forgotten."""

    cache_size: int
    _cache: collections.OrderedDict[str, _Entry]
    _touch_every: float
    _tg: anyio.abc.TaskGroup | None

    if TYPE_CHECKING:
        def _queue(self, work: Coroutine[Any, Any, Any]) -> None: ...
        async def _update(self, owner: str, sandbox_id: str,
                          change: Callable[[Binding], Binding]) -> Binding | None: ...

    def _remember(self, sandbox: ManagedSandbox) -> None:
        now = time.time()
        self._cache[sandbox.owner] = _Entry(sandbox=sandbox, last_used=now, stored_used=now)
        self._cache.move_to_end(sandbox.owner)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _used(self, owner: str, entry: _Entry) -> None:
        now = time.time()
        entry.last_used = now
        if now - entry.stored_used >= self._touch_every and self._tg is not None:
            entry.stored_used = now
            self._queue(self._update(owner, entry.sandbox.id,
                                     lambda b: attrs.evolve(b, last_used=now)))

    def _local_use(self, binding: Binding) -> float:
        entry = self._cache.get(binding.owner)
        if entry is None or entry.sandbox.id != binding.sandbox_id:
            return 0.0
        return entry.last_used

    @contextlib.contextmanager
    def _in_use(self, sandbox: ManagedSandbox) -> Iterator[None]:
        entry = self._cache.get(sandbox.owner)
        if entry is None or entry.sandbox is not sandbox:
            yield
            return
        entry.busy += 1
        self._used(sandbox.owner, entry)
        try:
            yield
        finally:
            entry.busy -= 1
            entry.last_used = time.time()

    def _suspect(self, owner: str, sandbox_id: str) -> None:
        entry = self._cache.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            entry.suspect = True

    def _forget(self, owner: str, sandbox_id: str) -> None:
        entry = self._cache.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            del self._cache[owner]
