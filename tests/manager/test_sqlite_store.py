"""The SQLite binding store's switch of a new file to WAL: retried on anyio's clock while
another connection holds the database, given up with a typed error naming the file,
and stopped by a cancellation at once."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from provider_sdk.errors import Unavailable
from provider_sdk.manager import Binding, SQLiteStore

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
