"""``acquire(timeout=T)`` returns or raises within T (and half a second), whatever the
store does: SQLite held by another process, Redis paused, PostgreSQL locked, each in
the middle of a create; a frozen agent costs ``health_timeout``, not the agent's own
timeout; a command with a timeout ends within it even if its sandbox is paused under it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from provider_sdk.errors import CommandTimeout, OperationTimeout
from provider_sdk.local import LocalProvider
from provider_sdk.manager import (
    BindingStore,
    PostgresStore,
    RedisStore,
    SandboxManager,
    SQLiteStore,
)
from provider_sdk.models import SandboxInfo, SandboxSpec, SandboxState

pytestmark = pytest.mark.anyio

TIMEOUT = 1.5
SLACK = 0.5


class _FreezeOnCreate(LocalProvider):
    """A local provider that runs ``freeze`` (the store goes away) once a create is
    done, before the manager binds what it made."""

    def __init__(self, home: Path) -> None:
        super().__init__(home=home)
        self.freeze: Callable[[], Awaitable[None]] | None = None

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        info = await super()._create(spec)
        if self.freeze is not None:
            await self.freeze()
        return info


@pytest.fixture
async def freezing(home: Path) -> AsyncIterator[_FreezeOnCreate]:
    provider = _FreezeOnCreate(home)
    try:
        yield provider
    finally:
        provider.freeze = None
        for info in await provider.list():
            await provider.kill(info.id)


async def _acquire_times_out(provider: LocalProvider, store: BindingStore) -> float:
    manager = SandboxManager(provider, store)
    start = time.monotonic()
    with pytest.raises(OperationTimeout):
        await manager.acquire("alice", timeout=TIMEOUT)
    return time.monotonic() - start


async def test_sqlite_held_by_another_process(freezing: _FreezeOnCreate,
                                              store: SQLiteStore, db_path: Path) -> None:
    await store.get("alice")  # the file exists, in WAL mode
    def hold() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", "import sqlite3, sys, time\n"
             "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
             "db.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(30)",
             str(db_path)], stdout=subprocess.PIPE, text=True)

    holder = await anyio.to_thread.run_sync(hold)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        took = await _acquire_times_out(freezing, store)
    finally:
        holder.kill()
        holder.wait()
    assert took < TIMEOUT + SLACK


@pytest.mark.slow
async def test_redis_paused_in_the_middle_of_a_create(freezing: _FreezeOnCreate,
                                                      redis_store: RedisStore) -> None:
    async def pause() -> None:
        async with redis_store._redis() as client:
            await client.execute_command("CLIENT", "PAUSE", "3000", "WRITE")

    freezing.freeze = pause
    took = await _acquire_times_out(freezing, redis_store)
    assert took < TIMEOUT + SLACK


async def test_postgres_locked_in_the_middle_of_a_create(
        freezing: _FreezeOnCreate, postgres_store: PostgresStore) -> None:
    import psycopg

    await postgres_store.get("alice")  # the tables exist
    locked, done = anyio.Event(), anyio.Event()

    async def hold(conn: Any) -> None:
        async with conn.transaction():
            table = postgres_store.table
            await conn.execute(f"LOCK TABLE {table}, {table}_claims IN ACCESS EXCLUSIVE MODE")
            locked.set()
            with anyio.move_on_after(5):
                await done.wait()

    async with await psycopg.AsyncConnection.connect(postgres_store._dsn.reveal(),
                                                     autocommit=True) as conn, \
            anyio.create_task_group() as tg:
        async def lock() -> None:
            tg.start_soon(hold, conn)
            await locked.wait()

        freezing.freeze = lock
        try:
            took = await _acquire_times_out(freezing, postgres_store)
        finally:
            done.set()
    assert took < TIMEOUT + SLACK


# ------------------------------------------------------------------ agent


class _Frozen:
    """One process frozen in a freezer cgroup of its own: its state is D (not T: no
    signal stopped it), as a process stuck in the kernel would be."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cgroup = Path(f"/sys/fs/cgroup/freezer/psdk-test-frozen-{pid}")
        self.home_cgroup = next(
            line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text()
            .splitlines() if line.split(":", 2)[1] == "freezer")

    def __enter__(self) -> _Frozen:
        self.cgroup.mkdir()
        (self.cgroup / "cgroup.procs").write_text(str(self.pid))
        (self.cgroup / "freezer.state").write_text("FROZEN")
        return self

    def __exit__(self, *exc_info: object) -> None:
        (self.cgroup / "freezer.state").write_text("THAWED")
        back = Path("/sys/fs/cgroup/freezer") / self.home_cgroup.lstrip("/")
        try:
            (back / "cgroup.procs").write_text(str(self.pid))
        except OSError:  # its cgroup is gone (the sandbox was killed)
            Path("/sys/fs/cgroup/freezer/cgroup.procs").write_text(str(self.pid))
        self.cgroup.rmdir()


@pytest.mark.slow
async def test_a_frozen_agent_costs_the_health_timeout_then_is_replaced(
        provider: LocalProvider, store: SQLiteStore) -> None:
    first = await SandboxManager(provider, store).acquire("alice")
    agent = provider._sandboxes.read(first.id).launch
    assert agent is not None
    assert agent.agent_pid is not None
    async with SandboxManager(provider, store, health_timeout=1.5) as fresh:  # a replica
        with _Frozen(agent.agent_pid):
            start = time.monotonic()
            with capture_logs() as logs:
                again = await fresh.acquire("alice", timeout=30)
            took = time.monotonic() - start
    assert again.id != first.id
    assert took < 1.5 + 2.5  # the probe's bound, and a create
    assert [e["outcome"] for e in logs
            if e["event"] == "sandbox.manager.store.failed"] == ["unhealthy"]


# ---------------------------------------------------------------- commands


@pytest.mark.slow
async def test_a_command_paused_under_it_ends_within_its_timeout(
        provider: LocalProvider, store: SQLiteStore) -> None:
    sandbox = await SandboxManager(provider, store).acquire("alice")

    async def pause_soon() -> None:
        await anyio.sleep(0.3)
        await (await provider.connect(sandbox.id, resume=False)).pause()

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(pause_soon)
        with pytest.raises(CommandTimeout) as caught:
            await sandbox.exec("echo started; sleep 30", timeout=1.5)
    took = time.monotonic() - start
    assert took < 1.5 + 1.0
    assert caught.value.result is not None
    assert (await provider.get_info(sandbox.id)).state == SandboxState.RUNNING
