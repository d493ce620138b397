"""The SQLite binding store: the switch of a new file to WAL, and a write another
connection holds up, each retried on anyio's clock (the pauses on a virtual clock where
their count is checked) and given up with a typed error naming the file; a cancellation
stops them at once. What a store leaves open, and what a failed write leaves behind."""

from __future__ import annotations

import os
import random
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from provider_sdk.errors import InvalidInput, Unavailable
from provider_sdk.manager import Binding, SQLiteStore
from provider_sdk.manager.sqlite_store import _busy

pytestmark = pytest.mark.anyio


@pytest.fixture
def held(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the (new, rollback-journal) database exclusively."""
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield holder
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()


def _binding() -> Binding:
    return Binding(owner="alice", sandbox_id="sb-1", provider="local", version=0)


async def test_the_switch_is_retried_until_the_other_connection_lets_go(
        db_path: Path, held: sqlite3.Connection) -> None:
    """Opening waits while the database is held, and goes on once it is released."""
    async with SQLiteStore(db_path, busy_timeout=30) as store:
        done = anyio.Event()

        async def put() -> None:
            assert await store.put(_binding()) is not None
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(put)
            await anyio.sleep(0.3)
            assert not done.is_set()  # still retrying: the file is held
            held.execute("COMMIT")
            with anyio.fail_after(5):
                await done.wait()
        assert (await store.get("alice")) is not None
        mode = sqlite3.connect(db_path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


async def test_the_switch_gives_up_after_busy_timeout_with_a_typed_error(
        db_path: Path, held: sqlite3.Connection) -> None:
    """Held for all of ``busy_timeout``: ``Unavailable``, naming the file, the wait and
    how many attempts were made."""
    async with SQLiteStore(db_path, busy_timeout=0.5) as store:
        started = anyio.current_time()
        with pytest.raises(Unavailable, match="WAL") as caught:
            await store.get("alice")
        # Retried, not refused at once: its last attempt fits in the wait, so it may
        # end a backoff step before the whole 0.5 s.
        assert 0.2 <= anyio.current_time() - started < 5
        message = str(caught.value)
        assert str(db_path) in message
        assert "0.5 s" in message
        attempts = re.search(r"\((\d+) attempts\)", message)
        assert attempts is not None
        assert int(attempts.group(1)) > 2
        held.execute("COMMIT")  # let go: the next call opens it
        assert await store.get("alice") is None


async def test_a_cancellation_stops_the_retries_at_once(
        db_path: Path, held: sqlite3.Connection) -> None:
    """The retries are pauses on anyio's clock between quick thread calls, so a cancel
    scope ends them without waiting out ``busy_timeout`` (or SQLite's busy handler)."""
    async with SQLiteStore(db_path, busy_timeout=30) as store:
        started = anyio.current_time()
        with anyio.move_on_after(0.2) as scope:
            await store.get("alice")
        assert scope.cancelled_caught
        assert anyio.current_time() - started < 2


def _virtual_clock() -> Any:
    """Run the test on trio with a clock that jumps to the next pause as soon as every
    task waits: the pauses cost no real time, and their count depends on nothing else."""
    return pytest.mark.parametrize(
        "anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])


def _pauses_in(seconds: float) -> int:
    """How many pauses the busy wait's schedule fits in ``seconds``: 5 ms, doubled
    after each attempt up to 0.1 s (jitter off)."""
    count, spent, pause = 0, 0.0, 0.005
    while spent + pause <= seconds:
        count, spent, pause = count + 1, spent + pause, min(pause * 2, 0.1)
    return count


@pytest.fixture
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pauses at their full length: the jitter's random fraction is 0."""
    monkeypatch.setattr(random, "random", lambda: 0.0)


@pytest.fixture
def writer(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection that made the file (in WAL mode, with the store's tables) and
    holds its write lock."""
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("CREATE TABLE bindings (owner TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL,"
                   " provider TEXT NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL)")
    holder.execute("CREATE TABLE claims (name TEXT PRIMARY KEY, token TEXT NOT NULL,"
                   " expires REAL NOT NULL)")
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield holder
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()


HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.read()
"""


def _open_files(path: Path) -> list[str]:
    """This process's file descriptors open on ``path`` (or its -wal and -shm files)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed meanwhile
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


@_virtual_clock()
@pytest.mark.usefixtures("no_jitter")
async def test_a_held_write_is_retried_on_the_schedule_until_busy_timeout(
        db_path: Path) -> None:
    """A write the other connection holds up for all of ``busy_timeout``: one attempt,
    then one after each pause that ends within it (5 ms, doubled up to 0.1 s)."""
    async with SQLiteStore(db_path, busy_timeout=1) as store:
        assert await store.get("alice") is None  # open, in WAL mode
        holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(Unavailable, match=rf"for 1 s \({_pauses_in(1)} attempts\)"):
                await store.put(_binding())
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert await store.put(_binding()) is not None


@_virtual_clock()
@pytest.mark.usefixtures("no_jitter")
async def test_the_switch_to_wal_waits_30_s_by_default(
        db_path: Path, held: sqlite3.Connection) -> None:
    """Held throughout: the first attempt, then one after each pause that ends within
    the default ``busy_timeout`` of 30 s."""
    store = SQLiteStore(db_path)
    with pytest.raises(Unavailable, match=rf"for 30 s \({_pauses_in(30) + 1} attempts\)"):
        await store.get("alice")
    await store.aclose()


async def test_a_write_another_connection_holds_up_waits_for_it(
        store: SQLiteStore, writer: sqlite3.Connection) -> None:
    """Past the first attempt and several retries, then done once the other lets go."""
    done = anyio.Event()

    async def put() -> None:
        assert await store.put(_binding()) is not None
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(put)
        await anyio.sleep(0.5)
        assert not done.is_set()  # still waiting: the other connection writes
        writer.execute("COMMIT")
        with anyio.fail_after(5):
            await done.wait()
    assert (await store.get("alice")) is not None


async def test_opening_a_file_another_connection_writes_to_waits_for_it(
        db_path: Path, writer: sqlite3.Connection) -> None:
    """A file in WAL mode already: the store's tables are made in a write transaction,
    which waits for the other connection's, like any write."""
    async with SQLiteStore(db_path, busy_timeout=30) as store:
        with anyio.move_on_after(0.5):
            await store.get("alice")
            pytest.fail("read the file before its tables were checked")
        writer.execute("COMMIT")
        with anyio.fail_after(5):
            assert await store.get("alice") is None


@pytest.fixture
def held_elsewhere(db_path: Path) -> Iterator[None]:
    """Another process holding the (new) database exclusively. (SQLite keeps a closed
    connection's descriptor open while another connection of the same process holds a
    lock on the file: the holder of a test of descriptors is another process.)"""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.usefixtures("held_elsewhere")
async def test_a_failed_switch_leaves_no_file_open(db_path: Path) -> None:
    """The connection of each failed attempt is closed, even while the error that tells
    of it is still held."""
    async with SQLiteStore(db_path, busy_timeout=0.2) as store:
        with pytest.raises(Unavailable, match="WAL") as caught:
            await store.get("alice")
        assert caught.value.__cause__ is not None
        assert _open_files(db_path) == []


async def test_a_closed_store_leaves_no_file_open(db_path: Path) -> None:
    """``aclose`` closes the connection: no descriptor is left on the file, and SQLite,
    closing the last connection, folds the WAL file back in and removes it."""
    store = SQLiteStore(db_path)
    assert await store.put(_binding()) is not None
    assert _open_files(db_path)
    await store.aclose()
    assert _open_files(db_path) == []
    assert not await anyio.Path(f"{db_path}-wal").exists()


async def test_a_store_closed_between_its_open_and_its_call_opens_again(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """``aclose`` from another task can run while a call waits for its worker thread:
    the call opens the file again and goes on."""
    assert await store.put(_binding()) is not None

    async def already_open() -> None:  # the check a call made before the close
        return None

    monkeypatch.setattr(store, "_open", already_open)
    await store.aclose()
    assert await store.get("alice") is not None


async def test_the_directory_of_a_new_file_is_made(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "bindings.sqlite3"
    async with SQLiteStore(path) as store:
        assert await store.put(_binding()) is not None
    assert path.is_file()


async def test_commits_are_not_synced_one_by_one(store: SQLiteStore) -> None:
    """In WAL mode, ``synchronous=NORMAL`` syncs at checkpoints only: a commit survives
    a crash of the process, and each write costs no fsync."""
    assert await store.get("alice") is None
    assert store._db is not None
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


async def test_a_version_past_256_is_compared_by_value(
        store: SQLiteStore, db_path: Path) -> None:
    """Python keeps one object of each small int only: 300 read from the file is another
    object than the caller's 300, and the put at that version still holds."""
    assert await store.put(_binding()) is not None
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("UPDATE bindings SET version = 300 WHERE owner = 'alice'")
    other.close()
    stored = await store.get("alice")
    assert stored is not None
    assert stored.version == 300
    again = await store.put(stored)
    assert again is not None
    assert again.version == 301


async def test_a_write_that_fails_inside_its_transaction_leaves_the_file_unlocked(
        store: SQLiteStore, db_path: Path) -> None:
    """A fence of the wrong shape fails in the middle of the put's transaction, which is
    rolled back: the store and other connections write on."""
    with pytest.raises((InvalidInput, sqlite3.Error)):
        await store.put(_binding(), fence=("only-one",))  # type: ignore[arg-type]
    other = sqlite3.connect(db_path, isolation_level=None, timeout=0.5)
    other.execute("BEGIN IMMEDIATE")  # not locked by a transaction left open
    other.execute("ROLLBACK")
    other.close()
    assert await store.put(_binding()) is not None


def test_a_busy_error_is_known_by_its_extended_code_or_its_message() -> None:
    """SQLite names a busy database by code (``SQLITE_BUSY`` and ``SQLITE_LOCKED``,
    also in their extended forms such as ``SQLITE_BUSY_RECOVERY``) and says so in its
    message; either is enough."""
    recovering = sqlite3.OperationalError("database is locked")
    recovering.sqlite_errorcode = sqlite3.SQLITE_BUSY_RECOVERY  # type: ignore[attr-defined]
    assert _busy(recovering)
    coded = sqlite3.OperationalError("busy")
    coded.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    assert _busy(coded)
    assert not _busy(sqlite3.OperationalError("disk I/O error"))


def test_the_path_may_be_named_and_busy_timeout_must_be() -> None:
    assert SQLiteStore(path="b.sqlite3").path == Path("b.sqlite3")
    with pytest.raises(TypeError):
        SQLiteStore("b.sqlite3", 5)  # type: ignore[misc]
