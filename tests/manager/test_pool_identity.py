"""A claim gives the caller's labels where the provider changes labels after create
(``metadata.update``): on the local provider (real bubblewrap) a claimed member, and a
miss, carry them; a manager's pooled sandbox carries its owner label, so a lost binding
heals through the ``list`` level to the same sandbox. On a provider without
``metadata.update`` a claim with labels is refused before any member is taken."""

from __future__ import annotations

from typing import Any

import pytest
from memory_provider import MemoryProvider, Store
from structlog.testing import capture_logs

from provider_sdk.errors import InvalidInput, UnsupportedCapability
from provider_sdk.local import LocalProvider
from provider_sdk.manager import (
    OWNER_LABEL,
    POOL_LABEL,
    MemoryStore,
    SandboxManager,
    SQLiteStore,
    WarmPool,
)
from provider_sdk.models import SandboxSpec

pytestmark = pytest.mark.anyio

BOUND = 60.0


def _level(logs: list[dict[str, Any]]) -> str:
    done = [e for e in logs if e["event"] == "sandbox.manager.acquire.complete"]
    assert len(done) == 1, logs
    return str(done[0]["level"])


@pytest.mark.slow
async def test_a_claim_labels_the_member_and_a_miss(provider: LocalProvider) -> None:
    spec = SandboxSpec(metadata={"tier": "free"})
    idle = WarmPool(provider, spec, size=1, name="idle")  # never run: every claim misses
    async with WarmPool(provider, spec, size=1, interval=60) as pool:
        await pool.wait_filled(BOUND)
        (member,) = pool._free
        async with await pool.claim(metadata={"user": "alice", "tier": "paid"},
                                    env={"USER_ID": "alice"}) as hit, \
                await idle.claim(metadata={"user": "bob"}) as miss:
            assert hit.id == member
            assert hit.metadata["user"] == "alice"
            assert hit.metadata["tier"] == "paid"  # the caller's over the spec's
            assert hit.metadata[POOL_LABEL] == "default"  # the pool's own stay
            assert (await hit.exec("echo $USER_ID")).stdout == "alice\n"
            for user, sandbox_id in (("alice", hit.id), ("bob", miss.id)):
                found = await provider.list(metadata={"user": user})
                assert [i.id for i in found] == [sandbox_id]
            assert (await provider.get_info(miss.id)).metadata == {
                "tier": "free", "user": "bob"}


async def test_a_claim_cannot_set_the_pools_labels(provider: LocalProvider) -> None:
    pool = WarmPool(provider, size=1)
    for label in (POOL_LABEL, "psdk.pool.spec", "psdk.pool.expires"):
        with pytest.raises(InvalidInput, match="the pool tags its members"):
            await pool.claim(metadata={label: "x"})
    with pytest.raises(InvalidInput, match="'='"):
        await pool.claim(metadata={"a=b": "x"})
    assert await provider.list() == []  # refused before anything was made


async def test_a_lost_binding_of_a_pooled_sandbox_heals_through_the_owner_label(
        provider: LocalProvider, store: SQLiteStore) -> None:
    async with WarmPool(provider, size=1, store=store, interval=60) as pool, \
            SandboxManager(provider, store, pool=pool) as manager:
        await pool.wait_filled(BOUND)
        (member,) = pool._free
        with capture_logs() as logs:
            sandbox = await manager.acquire("alice")
        assert _level(logs) == "pool"
        assert sandbox.id == member
        assert sandbox.metadata[OWNER_LABEL] == "alice"
        tagged = await provider.list(metadata={OWNER_LABEL: "alice"})
        assert [i.id for i in tagged] == [member]
        assert await store.delete("alice")  # the binding is lost
        manager.forget("alice")
        with capture_logs() as logs:
            again = await manager.acquire("alice")
        assert _level(logs) == "list"
        assert again.id == member
        binding = await store.get("alice")
        assert binding is not None
        assert binding.sandbox_id == member  # healed
        assert (await again.exec("echo same")).stdout == "same\n"


async def test_without_metadata_update_a_claim_with_labels_is_refused(
        memory: Store) -> None:
    async with WarmPool(MemoryProvider(), size=1, interval=0.05) as pool:
        await pool.wait_filled(BOUND)
        free = set(pool._free)
        with pytest.raises(UnsupportedCapability) as caught:
            await pool.claim(metadata={"user": "alice"})
        assert caught.value.capability == "metadata.update"
        assert set(pool._free) == free  # no member was taken
        async with await pool.claim(env={"USER_ID": "alice"}) as sandbox:
            assert sandbox.id in free


async def test_without_metadata_update_a_pooled_sandbox_is_bound_only(
        memory: Store) -> None:
    store = MemoryStore()
    async with WarmPool(MemoryProvider(), size=1, store=store, interval=60) as pool, \
            SandboxManager(MemoryProvider(), store, pool=pool) as manager:
        await pool.wait_filled(BOUND)
        (member,) = pool._free
        sandbox = await manager.acquire("alice")
        assert sandbox.id == member
        assert OWNER_LABEL not in sandbox.metadata
        assert await store.delete("alice")
        manager.forget("alice")
        with capture_logs() as logs:
            again = await manager.acquire("alice")
        assert _level(logs) == "create"  # the list level cannot find it
        assert again.id != member
