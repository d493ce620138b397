"""What every part of a :class:`~provider_sdk.manager.SandboxManager` shares: its
provider, its store, the store's clock, the count of background failures, the claims'
time to live, and the compare-and-set of one owner's binding.

The parts (``_cache``, ``_lookup``, ``_leases``, ``_policies``, ``_housekeeping``) are
handed this one object, and whatever else each needs, when the manager makes them; none
of them reaches into the manager. This module must not know any provider or store by
name, and holds no state of its own beyond what it is given.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from provider_sdk.errors import Conflict
from provider_sdk.manager._clock import StoreClock
from provider_sdk.manager._errors import Failures
from provider_sdk.manager.store import Binding, BindingStore
from provider_sdk.provider import SandboxProvider

__all__ = ["Shared"]


@attrs.frozen(kw_only=True)
class Shared:
    """The manager's provider and store, and what its parts read of both."""

    provider: SandboxProvider
    store: BindingStore
    clock: StoreClock
    failures: Failures
    claim_ttl: float
    """Seconds a claim outlives the process that held it."""

    async def update(self, owner: str, sandbox_id: str,
                     change: Callable[[Binding], Binding]) -> Binding | None:
        """Apply ``change`` to the owner's binding while it binds ``sandbox_id``
        (compare-and-set, retried); ``None`` if it is gone or bound elsewhere."""
        for _ in range(20):
            current = await self.store.get(owner)
            if current is None or current.sandbox_id != sandbox_id:
                return None
            stored = await self.store.put(change(current))
            if stored is not None:
                return stored
        raise Conflict(f"owner {owner!r}: the binding keeps changing",
                       provider=self.provider.name, sandbox_id=sandbox_id)
