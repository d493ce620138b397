"""What a :class:`~provider_sdk.manager.WarmPool` and its rounds (``_pool_rounds``)
share: the pool's provider, store and settings, the spec it makes members for, and what
this process knows of its members (the free ones as last seen, those seen handed out).

The pool hands members out of this state and the rounds refill it; neither reaches into
the other. This module must not know any provider or store by name.
"""

from __future__ import annotations

import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.manager._clock import StoreClock
from provider_sdk.manager._errors import Failures
from provider_sdk.manager._pool_members import made_claim
from provider_sdk.manager.store import BindingStore
from provider_sdk.models import SandboxInfo, SandboxSpec
from provider_sdk.provider import SandboxProvider

__all__ = ["PoolState"]


@attrs.define(kw_only=True, eq=False)
class PoolState:
    """A pool's settings (as ``WarmPool`` documents them) and its view of its members."""

    provider: SandboxProvider
    store: BindingStore
    name: str
    size: int
    max_age: float
    paused: bool
    interval: float
    claim_ttl: float
    token: str
    """The token of this pool's own claims (refill, alive)."""
    failures: Failures
    clock: StoreClock
    spec: SandboxSpec
    """The spec members are made for now."""
    free: dict[str, SandboxInfo] = attrs.Factory(dict)
    """The free members as last seen, oldest first."""
    taken: set[str] = attrs.Factory(set)
    """Members seen handed out (that never changes)."""

    async def made_here(self, sandbox_id: str) -> bool:
        """Whether this pool's store can tell if the member was handed out: always
        where the provider labels members as it hands them out (``metadata.update``),
        elsewhere only if the member was made through this store (:func:`made_claim`).
        A member it cannot tell about is never handed out, drained or killed."""
        return self.provider.supports(Capability.METADATA_UPDATE) \
            or await self.store.claimed(made_claim(sandbox_id))
