"""A replica that dies costs seconds, not minutes: the owner it was creating for can be
acquired again once its claim runs out (``claim_ttl``, 10 s by default: claims are
renewed while their work goes on, so they can be short), and a pool member it took but
never handed out is killed once it is too old, by the pool's rounds or by ``reap()``.
Claims expire with the member they guard: none is kept for a year."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from memory_provider import MemoryProvider, Store

from provider_sdk.local import LocalProvider
from provider_sdk.manager import (
    OWNER_LABEL,
    MemoryStore,
    SandboxManager,
    SQLiteStore,
    WarmPool,
    reap,
)
from provider_sdk.manager.pool import taken_claim
from provider_sdk.provider import SandboxProvider

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("crash_worker.py")
MAX_AGE = 2.0
CHECK = 0.5  # check_timeout and claim_ttl: a taken claim lasts 1 s past the member's age
BOUND = 15.0


async def test_an_owner_whose_creator_died_is_acquired_within_the_claim_ttl(
        provider: LocalProvider, store: SQLiteStore, db_path: Path) -> None:
    await store.get("alice")  # the file exists

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(WORKER), str(provider.home),
                                 str(db_path), "alice"], stdout=subprocess.PIPE, text=True)

    creator = await anyio.to_thread.run_sync(start)
    try:
        assert creator.stdout is not None
        with anyio.fail_after(60):
            line = await anyio.to_thread.run_sync(creator.stdout.readline)
        assert line == "creating\n"
    finally:
        creator.send_signal(signal.SIGKILL)
        creator.wait()
    died = time.monotonic()
    sandbox = await SandboxManager(provider, store).acquire("alice", timeout=BOUND)
    assert time.monotonic() - died < 10 + 3  # the default claim_ttl, and the work
    assert [i.id for i in await provider.list()] == [sandbox.id]  # the one it made
    assert sandbox.metadata[OWNER_LABEL] == "alice"


def _pool(provider: SandboxProvider, store: MemoryStore | SQLiteStore, *,
          interval: float) -> WarmPool:
    return WarmPool(provider, size=1, store=store, max_age=MAX_AGE, interval=interval,
                    check_timeout=CHECK, claim_ttl=CHECK)


async def _gone(provider: SandboxProvider, sandbox_id: str, *,
                reaping: MemoryStore | SQLiteStore | None = None) -> float:
    """Seconds until ``sandbox_id`` is gone (reaping it now and then with ``reaping``)."""
    start = time.monotonic()
    with anyio.fail_after(BOUND):
        while sandbox_id in {i.id for i in await provider.list()}:
            if reaping is not None:
                await reap(provider, reaping)
            await anyio.sleep(0.1)
    return time.monotonic() - start


async def test_a_member_taken_by_a_taker_that_died_is_killed_by_the_pools_rounds(
        provider: LocalProvider, store: SQLiteStore) -> None:
    async with _pool(provider, store, interval=0.1) as pool:
        await pool.wait_filled(BOUND)
        taker = _pool(provider, store, interval=0.1)  # the same pool, in another replica
        await taker.check()
        with anyio.fail_after(BOUND):  # a member older than MAX_AGE is not taken: the next
            while (taken := await taker._take_one()) is None:  # noqa: ASYNC110 (a poll)
                await anyio.sleep(0.05)
        # Its claim is taken, and the taker dies.
        orphan = taken.id
        assert await _gone(provider, orphan) < MAX_AGE + 2 * CHECK + 3
        with anyio.fail_after(BOUND):  # the round that killed it lets its claim go
            while await store.claimed(taken_claim(orphan)):  # noqa: ASYNC110 (a poll)
                await anyio.sleep(0.05)


@pytest.mark.parametrize("kind", ["labels (local)", "store only (memory)"])
async def test_a_member_taken_by_a_taker_that_died_is_reaped_once_too_old(
        kind: str, provider: LocalProvider, memory: Store) -> None:
    where: SandboxProvider = provider if kind.startswith("labels") else MemoryProvider()
    store = MemoryStore()
    async with _pool(where, store, interval=60) as pool:
        await pool.wait_filled(BOUND)
        taken = await pool._take_one()  # its claim taken, and the taker dies
        assert taken is not None
        orphan = taken.id
    assert await _gone(where, orphan, reaping=store) < MAX_AGE + 2 * CHECK + 3
    assert not await store.claimed(taken_claim(orphan))


@pytest.mark.parametrize("kind", ["labels (local)", "store only (memory)"])
async def test_a_handed_out_member_outlives_its_claims(
        kind: str, provider: LocalProvider, memory: Store) -> None:
    where: SandboxProvider = provider if kind.startswith("labels") else MemoryProvider()
    store = MemoryStore()
    async with _pool(where, store, interval=60) as pool:
        await pool.wait_filled(BOUND)
        mine = await pool.claim()
    with anyio.fail_after(BOUND):  # its claim runs out with its age
        while await store.claimed(taken_claim(mine.id)):  # noqa: ASYNC110 (a poll)
            await anyio.sleep(0.1)
    await _pool(where, store, interval=60).check()  # another run's round leaves it...
    assert await reap(where, store) == []  # ...and so does the reaper
    assert (await mine.exec(["echo", "mine"])).stdout == "mine\n"
    await mine.kill()
