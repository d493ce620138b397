"""The binding store's clock, as one process reads it.

Replicas compare times that other replicas wrote: when a binding was last used or
snapshotted, when a pool's member is too old to hand out. A replica's own wall clock can
be wrong by minutes, so none of those is read from it: :class:`StoreClock` estimates the
store's clock (:meth:`~provider_sdk.manager.BindingStore.time`: Redis's ``TIME``,
PostgreSQL's clock, SQLite's reading of the machine's) from this process's monotonic
clock and an offset measured now and then. Claims and leases need no estimate: they
expire by the store's clock itself.

This module must not know any store or provider by name.
"""

from __future__ import annotations

import time

from provider_sdk.manager.store import BindingStore

__all__ = ["StoreClock"]

RESYNC = 300.0
"""Seconds after which the offset to the store's clock is measured again."""


class StoreClock:
    """The store's time, as this process estimates it: its monotonic clock plus the
    offset measured at the last :meth:`sync` (at most one round trip's error)."""

    def __init__(self, store: BindingStore) -> None:
        self._store = store
        self._offset: float | None = None
        self._synced = 0.0

    async def now(self) -> float:
        """The store's time now, in Unix seconds; measures the offset first if it is
        unknown or old."""
        if self._offset is None or time.monotonic() - self._synced > RESYNC:
            await self.sync()
        assert self._offset is not None
        return time.monotonic() + self._offset

    def cached(self) -> float | None:
        """The store's time now, from the last measured offset (no I/O); ``None``
        until one was measured."""
        return None if self._offset is None else time.monotonic() + self._offset

    async def sync(self) -> None:
        """Measure the offset between this process's monotonic clock and the store's."""
        before = time.monotonic()
        stored = await self._store.time()
        after = time.monotonic()
        self._offset = stored - (before + after) / 2
        self._synced = after
