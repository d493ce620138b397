"""``SQLiteStore``: bindings in one SQLite file, the embedded default.

Every process on the machine that opens the same file shares the bindings. Writes and
claims run in ``BEGIN IMMEDIATE`` transactions, which SQLite serializes across
processes, so a compare-and-set or a claim is atomic. The file is in WAL mode: readers
never wait for a writer. Claims expire by SQLite's reading of the machine's clock
(``julianday('now')``), which every process on the machine shares.

Calls run in a worker thread, so a busy database never blocks the event loop, and each
thread call waits at most a few milliseconds for another process's write: the wait for a
busy database (up to ``busy_timeout``) is a series of such calls with pauses between
them on anyio's clock (:mod:`provider_sdk.retry`), so a cancellation or a caller's
deadline stops it at once instead of a thread holding on. Uses only the standard
library's ``sqlite3``.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from provider_sdk.errors import Unavailable
from provider_sdk.manager._claims import check_fence, check_owner
from provider_sdk.manager.store import Binding, BindingStore
from provider_sdk.retry import Attempts, Backoff

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bindings (
    owner TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    version INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    name TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    expires REAL NOT NULL
);
"""
# The pauses between attempts on a database another connection holds (the switch to
# WAL, a write).
_BUSY_BACKOFF = Backoff(initial=0.005, factor=2.0, cap=0.1, jitter=0.5)
_ATTEMPT_MS = 20
"""Milliseconds one thread call waits for another connection's write (SQLite's own
busy handler) before it gives the wait back to the event loop."""
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""SQLite's clock, in Unix seconds: the machine's, whoever reads it."""


class _Locked(Exception):
    """Another connection held the database for the whole of one attempt."""


def _busy(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY,
                                                      sqlite3.SQLITE_LOCKED) \
        or "locked" in str(exc)


class SQLiteStore(BindingStore):
    """Bindings in the SQLite file at ``path`` (created, with its directory, if absent).

    Args:
        path: the database file. Share it between processes on one machine; for
            several machines use :class:`~provider_sdk.manager.RedisStore` or
            :class:`~provider_sdk.manager.PostgresStore`.
        busy_timeout: seconds a write waits for another process's write to finish
            before raising :class:`~provider_sdk.errors.Unavailable`; also how long
            opening a new file keeps retrying its switch to WAL while another
            connection holds the database. A cancellation ends the wait at once.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self._busy_timeout = busy_timeout
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<SQLiteStore {str(self.path)!r}>"

    # ------------------------------------------------------------------ plumbing

    async def _open(self) -> None:
        """Open the file, switched to WAL, unless open already.

        The switch takes an exclusive lock that SQLite's busy handler does not wait
        for, so processes opening one new file at once retry it: each attempt is one
        quick thread call, the pauses between them are on anyio's clock.

        Raises:
            Unavailable: another connection held the database for all of
                ``busy_timeout``.
        """
        if self._db is not None:
            return
        tries = Attempts(_BUSY_BACKOFF, timeout=self._busy_timeout)
        locked: _Locked | None = None
        async for _ in tries:
            try:
                await anyio.to_thread.run_sync(self._open_once)
                return
            except _Locked as exc:
                locked = exc
        raise Unavailable(
            f"binding store {self.path}: another connection held the database for "
            f"{self._busy_timeout:g} s ({tries.made} attempts) while it was being switched "
            "to WAL mode; retry later, or raise busy_timeout", provider="") from locked

    def _open_once(self) -> None:
        """One attempt to open the file (``_Locked`` if another connection holds it)."""
        with self._lock:
            self._open_held()

    def _open_held(self) -> None:
        """:meth:`_open_once` with the lock held."""
        if self._db is not None:
            return
        try:
            self._db = self._connect()
        except sqlite3.OperationalError as exc:  # I/O, not a database
            raise Unavailable(f"binding store {self.path}: {exc}", provider="") from exc

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=_ATTEMPT_MS / 1000, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("PRAGMA busy_timeout = 0")  # the switch fails at once, not later
            try:
                db.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc):
                    raise
                raise _Locked(str(exc)) from exc
            db.execute(f"PRAGMA busy_timeout = {_ATTEMPT_MS}")
            db.execute("PRAGMA synchronous=NORMAL")
            try:
                with _transaction(db):
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                raise _Locked(str(exc)) from exc
        except BaseException:
            db.close()
            raise
        return db

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the connection, in a worker thread; a database another connection
        holds is tried again, between pauses, for up to ``busy_timeout``."""
        await self._open()

        def call() -> T:
            with self._lock:
                try:
                    if self._db is None:  # closed meanwhile: open again, once
                        self._open_held()
                    assert self._db is not None
                    return fn(self._db)
                except sqlite3.OperationalError as exc:  # busy past the attempt, I/O
                    if _busy(exc):
                        raise _Locked(str(exc)) from exc
                    raise Unavailable(f"binding store {self.path}: {exc}", provider="") from exc

        try:  # the common case: one call
            return await anyio.to_thread.run_sync(call)
        except _Locked as exc:
            locked = exc
        tries = Attempts(_BUSY_BACKOFF, timeout=self._busy_timeout, pause_first=True)
        async for _ in tries:
            try:
                return await anyio.to_thread.run_sync(call)
            except _Locked as exc:
                locked = exc
        raise Unavailable(f"binding store {self.path}: another connection held the database "
                          f"for {self._busy_timeout:g} s ({tries.made} attempts): {locked}; "
                          "retry later, or raise busy_timeout", provider="") from locked

    # ------------------------------------------------------------------ bindings

    async def get(self, owner: str) -> Binding | None:
        check_owner(owner)

        def get(db: sqlite3.Connection) -> Binding | None:
            row = db.execute("SELECT owner, sandbox_id, provider, version, data FROM bindings "
                             "WHERE owner = ?", (owner,)).fetchone()
            return Binding.from_row(*row) if row else None

        return await self._run(get)

    async def put(self, binding: Binding, *,
                  fence: tuple[str, str] | None = None) -> Binding | None:
        check_owner(binding.owner)
        check_fence(fence)

        def put(db: sqlite3.Connection) -> Binding | None:
            with _transaction(db):
                row = db.execute("SELECT version FROM bindings WHERE owner = ?",
                                 (binding.owner,)).fetchone()
                if (row[0] if row else 0) != binding.version:
                    return None
                if fence is not None and db.execute(
                        f"SELECT 1 FROM claims WHERE name = ? AND token = ? AND expires > {_NOW}",
                        fence).fetchone() is None:
                    return None
                db.execute("INSERT OR REPLACE INTO bindings VALUES (?, ?, ?, ?, ?)",
                           (binding.owner, binding.sandbox_id, binding.provider,
                            binding.version + 1, binding.to_json()))
            return Binding.from_row(binding.owner, binding.sandbox_id, binding.provider,
                                    binding.version + 1, binding.to_json())

        return await self._run(put)

    async def delete(self, owner: str, *, version: int | None = None) -> bool:
        check_owner(owner)

        def delete(db: sqlite3.Connection) -> bool:
            if version is None:
                cur = db.execute("DELETE FROM bindings WHERE owner = ?", (owner,))
            else:
                cur = db.execute("DELETE FROM bindings WHERE owner = ? AND version = ?",
                                 (owner, version))
            return cur.rowcount > 0

        return await self._run(delete)

    async def list(self) -> builtins.list[Binding]:
        def list_(db: sqlite3.Connection) -> builtins.list[Binding]:
            rows = db.execute("SELECT owner, sandbox_id, provider, version, data "
                              "FROM bindings ORDER BY owner").fetchall()
            return [Binding.from_row(*row) for row in rows]

        return await self._run(list_)

    # -------------------------------------------------------------------- claims

    async def claim(self, name: str, token: str, ttl: float) -> bool:
        def claim(db: sqlite3.Connection) -> bool:
            with _transaction(db):
                row = db.execute(f"SELECT token, expires > {_NOW} FROM claims WHERE name = ?",
                                 (name,)).fetchone()
                if row is not None and row[0] != token and row[1]:
                    return False
                db.execute(f"INSERT OR REPLACE INTO claims VALUES (?, ?, {_NOW} + ?)",
                           (name, token, ttl))
            return True

        return await self._run(claim)

    async def release(self, name: str, token: str) -> None:
        await self._run(lambda db: db.execute(
            "DELETE FROM claims WHERE name = ? AND token = ?", (name, token)))

    async def claimed(self, name: str) -> bool:
        def claimed(db: sqlite3.Connection) -> bool:
            row = db.execute(f"SELECT 1 FROM claims WHERE name = ? AND expires > {_NOW}",
                             (name,)).fetchone()
            return row is not None

        return await self._run(claimed)

    async def time(self) -> float:
        return await self._run(lambda db: float(db.execute(f"SELECT {_NOW}").fetchone()[0]))

    async def aclose(self) -> None:
        def close() -> None:
            with self._lock:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        await anyio.to_thread.run_sync(close)


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE``: take the write lock first, so a read-then-write is atomic."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
