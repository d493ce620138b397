"""Replicas do not trust each other's wall clocks: a replica whose clock runs a minute
ahead does not pause a sandbox in the middle of another replica's long command (the use
lease expires by the store's clock, Redis's or PostgreSQL's), and times the manager
writes are the store's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from provider_sdk.local import LocalProvider
from provider_sdk.manager import BindingStore, PostgresStore, RedisStore, SandboxManager
from provider_sdk.models import SandboxState

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("sweep_worker.py")
IDLE_PAUSE = 2.0


async def _long_command_under_a_skewed_sweeper(provider: LocalProvider, store: BindingStore,
                                               kind: str, url: str, namespace: str) -> None:
    async with SandboxManager(provider, store, idle_pause=IDLE_PAUSE) as manager:
        sandbox = await manager.acquire("alice")
        def start() -> subprocess.Popen[str]:
            return subprocess.Popen(
                [sys.executable, str(WORKER), str(provider.home), kind, url, namespace,
                 "60", str(IDLE_PAUSE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True)

        sweeper = await anyio.to_thread.run_sync(start)
        try:
            assert sweeper.stdout is not None
            assert sweeper.stdin is not None
            with anyio.fail_after(30):
                line = await anyio.to_thread.run_sync(sweeper.stdout.readline)
            assert line == "ready\n"
            start = time.monotonic()
            with anyio.fail_after(20):  # paused under it, it would hang
                result = await sandbox.exec("sleep 5; echo done")
            took = time.monotonic() - start
            assert (await provider.get_info(sandbox.id)).state == SandboxState.RUNNING
            sweeper.stdin.write("stop\n")
            sweeper.stdin.flush()
            out, _ = await anyio.to_thread.run_sync(lambda: sweeper.communicate(timeout=30))
        finally:
            if sweeper.poll() is None:
                sweeper.kill()
                sweeper.wait()
    assert result.stdout == "done\n"
    assert took < 5 + 1.5
    assert json.loads(out) == []


async def test_a_replica_a_minute_ahead_does_not_pause_a_command_on_redis(
        provider: LocalProvider, redis_store: RedisStore) -> None:
    await _long_command_under_a_skewed_sweeper(provider, redis_store, "redis",
                                               redis_store._url.reveal(), redis_store.prefix)


async def test_a_replica_a_minute_ahead_does_not_pause_a_command_on_postgres(
        provider: LocalProvider, postgres_store: PostgresStore) -> None:
    await _long_command_under_a_skewed_sweeper(provider, postgres_store, "postgres",
                                               postgres_store._dsn.reveal(),
                                               postgres_store.table)


async def test_times_in_bindings_are_the_stores_not_this_replicas(
        provider: LocalProvider, redis_store: RedisStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)  # this replica is an hour off
    await SandboxManager(provider, redis_store).acquire("alice")
    monkeypatch.setattr(time, "time", real)
    binding = await redis_store.get("alice")
    assert binding is not None
    assert abs(binding.last_used - await redis_store.time()) < 5
