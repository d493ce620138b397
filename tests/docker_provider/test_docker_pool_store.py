"""Warm pools on Docker, whose labels are fixed at create, run again with other stores:
a member handed out is never handed out again, drained, killed as an extra or reaped by
a pool or reaper whose store did not make it (a new in-memory store, another SQLite
file), and a pool run again with the same SQLite store still reuses the free members."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from provider_sdk_docker import DockerProvider

from provider_sdk.manager import POOL_LABEL, MemoryStore, SQLiteStore, WarmPool, reap
from provider_sdk.models import Resources, SandboxSpec
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

BOUND = 60.0
AGE = 4.0  # seconds the first run's members are young
LONG = 600.0
SPEC = SandboxSpec(resources=Resources(cpu=0.5))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def provider() -> AsyncIterator[DockerProvider]:
    provider = DockerProvider()
    yield provider
    await provider.aclose()


@pytest.fixture
async def name(provider: DockerProvider) -> AsyncIterator[str]:
    """A pool name of the test's own; every member left is killed afterwards."""
    made = f"store-{secrets.token_hex(4)}"
    yield made
    with anyio.CancelScope(shield=True):
        for info in await provider.list(metadata={POOL_LABEL: made}):
            await provider.kill(info.id)


async def _alices(provider: DockerProvider, name: str, store: MemoryStore | SQLiteStore,
                  *, max_age: float) -> tuple[Sandbox, set[str]]:
    """Run a pool of two, hand one member to alice, who writes a file in it; return it
    and the members left free when the pool stops."""
    async with WarmPool(provider, SPEC, size=2, store=store, name=name, interval=60,
                        max_age=max_age) as pool:
        await pool.wait_filled(BOUND)
        alice = await pool.claim()
        await alice.files.write("/tmp/owner", "alice")
        await pool.wait_filled(BOUND)  # one made in alice's place
    free = {i.id for i in await provider.list(metadata={POOL_LABEL: name})} - {alice.id}
    return alice, free


async def _still_alices(alice: Sandbox) -> None:
    assert await alice.files.read_text("/tmp/owner") == "alice"


async def test_a_pool_with_a_new_memory_store_leaves_handed_out_members_alone(
        provider: DockerProvider, name: str) -> None:
    alice, _free = await _alices(provider, name, MemoryStore(), max_age=AGE)
    async with WarmPool(provider, SPEC, size=1, store=MemoryStore(), name=name,
                        interval=60, max_age=AGE) as again:
        await again.wait_filled(BOUND)
        await again.check()  # a round that counts extras
        bob = await again.claim()
        assert bob.id != alice.id
        await bob.files.write("/tmp/owner", "bob")
        await again.drain()
    await _still_alices(alice)
    await anyio.sleep(AGE)  # every member is past its age now
    victims = await reap(provider, MemoryStore())
    assert alice.id not in {v.id for v in victims}
    await _still_alices(alice)
    assert await bob.files.read_text("/tmp/owner") == "bob"


@pytest.mark.parametrize("how", ["drain", "round", "reap"])
async def test_nothing_with_a_new_memory_store_kills_a_handed_out_member(
        provider: DockerProvider, name: str, how: str) -> None:
    alice, _free = await _alices(provider, name, MemoryStore(), max_age=AGE)
    again = WarmPool(provider, SPEC, size=1, store=MemoryStore(), name=name,
                     interval=60, max_age=AGE)
    if how == "drain":
        await again.drain()
    else:
        await anyio.sleep(AGE)  # alice's member is past its age: a free one would go
        if how == "round":
            await again.check()
            await again.drain()
        else:
            assert alice.id not in {v.id for v in await reap(provider, MemoryStore())}
    await _still_alices(alice)


async def test_the_same_sqlite_store_reuses_free_members_and_another_leaves_them(
        provider: DockerProvider, name: str, tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite3"
    async with SQLiteStore(path) as first:
        alice, free = await _alices(provider, name, first, max_age=LONG)
    assert len(free) == 2  # the one left and the one made in alice's place
    async with SQLiteStore(tmp_path / "other.sqlite3") as other, \
            WarmPool(provider, SPEC, size=1, store=other, name=name, interval=60,
                     max_age=LONG) as elsewhere:
        await elsewhere.wait_filled(BOUND)
        await elsewhere.check()  # a round that counts extras
        stranger = await elsewhere.claim()
        assert stranger.id not in {alice.id, *free}
        await elsewhere.drain()
        await stranger.kill()
    listed = {i.id for i in await provider.list(metadata={POOL_LABEL: name})}
    assert {alice.id, *free} <= listed
    await _still_alices(alice)
    async with SQLiteStore(path) as same:
        async with WarmPool(provider, SPEC, size=2, store=same, name=name, interval=60,
                            max_age=AGE) as again:
            await again.wait_filled(BOUND)
            bob = await again.claim()
            assert bob.id in free  # reused: made in the first run, never handed out
            await again.wait_filled(BOUND)  # one of its own, young for AGE seconds only
        await anyio.sleep(AGE + 0.5)
        left = {i.id for i in await provider.list(metadata={POOL_LABEL: name})}
        assert not {v.id for v in await reap(provider, MemoryStore())} & left
        reaped = {v.id for v in await reap(provider, same)}
        assert reaped  # the free member the second run made, past its age
        assert reaped <= left - {alice.id, bob.id}
    await _still_alices(alice)
    assert (await bob.exec("true")).ok
