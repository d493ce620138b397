"""Pools in several replicas share one binding store and never share a member: each
replica's claims, made at once, get distinct sandboxes, and together they keep no more
members than the pool's size. Run against a real SQLite file, Redis and PostgreSQL,
each replica with a connection of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from memory_provider import MemoryProvider, Store

from provider_sdk.manager import (
    POOL_LABEL,
    BindingStore,
    PostgresStore,
    RedisStore,
    SQLiteStore,
    WarmPool,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 20.0


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def shared(request: pytest.FixtureRequest) -> BindingStore:
    """A store of each kind in turn (the test's first replica's connection)."""
    name = "store" if request.param == "sqlite" else f"{request.param}_store"
    store: BindingStore = request.getfixturevalue(name)
    return store


@pytest.fixture
async def stores(shared: BindingStore) -> AsyncIterator[list[BindingStore]]:
    """Three connections to one store, as three replicas would hold."""
    more: list[BindingStore]
    if isinstance(shared, SQLiteStore):
        more = [SQLiteStore(shared.path) for _ in range(2)]
    elif isinstance(shared, RedisStore):
        more = [RedisStore(shared._url, prefix=shared.prefix) for _ in range(2)]
    else:
        assert isinstance(shared, PostgresStore)
        more = [PostgresStore(shared._dsn, table=shared.table) for _ in range(2)]
    try:
        yield [shared, *more]
    finally:
        for store in more:
            await store.aclose()


def _members(memory: Store) -> set[str]:
    return {k for k, b in memory.boxes.items() if POOL_LABEL in b.info.metadata}


async def test_replicas_never_hand_out_the_same_member(memory: Store,
                                                       stores: list[BindingStore]) -> None:
    a = WarmPool(MemoryProvider(), size=6, store=stores[0], interval=60)
    b = WarmPool(MemoryProvider(), size=6, store=stores[1], interval=60)
    async with a:
        await a.wait_filled(BOUND)
        async with b:
            await b.wait_filled(BOUND)  # b sees a's members as its own free ones
            assert set(a._free) == set(b._free) == _members(memory)
            members = set(a._free)
            got: list[str] = []

            async def claim(pool: WarmPool) -> None:
                got.append((await pool.claim()).id)

            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(claim, a)
                    tg.start_soon(claim, b)
    assert len(got) == len(set(got)) == 16
    assert members <= set(got)


async def test_replicas_together_keep_no_more_than_the_size(
        memory: Store, stores: list[BindingStore]) -> None:
    pools = [WarmPool(MemoryProvider(), size=3, store=s, interval=0.02) for s in stores]
    async with pools[0], pools[1], pools[2]:
        most = await _most(memory, claimed=0)
        await pools[0].claim()
        await pools[1].claim()
        most = max(most, await _most(memory, claimed=2))
    assert most == 3


async def _most(memory: Store, *, claimed: int) -> int:
    """The most members, less the ``claimed`` ones, seen until the replicas have made
    the pool's size (on a loaded machine that may take a while), then for a second
    more: fifty rounds of each replica, to make one too many."""
    most = 0
    with anyio.fail_after(BOUND):
        while most < 3:
            most = max(most, len(_members(memory)) - claimed)
            await anyio.sleep(0.005)
    with anyio.move_on_after(1.0):
        while True:
            most = max(most, len(_members(memory)) - claimed)
            await anyio.sleep(0.005)
    return most
