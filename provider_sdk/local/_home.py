"""The local provider's state directory: where sandboxes, snapshots and volumes live.

Layout under the home (``PSDK_HOME``; default ``$XDG_DATA_HOME/psdk``)::

    sandboxes/<id>/meta.json     the spec it was made from, and its launch identity
    sandboxes/<id>/root/         its writable root filesystem
    sandboxes/<id>/agent.json    the agent's config (copied into the sandbox at start)
    sandboxes/<id>/agent.sock    the agent's socket (never visible inside)
    sandboxes/<id>/exit-<token>  the exit status of one launch, written by the host side
    snapshots/<id>/meta.json, root/
    volumes/<name>/meta.json, data/
    templates/<id>/meta.json, root/   an image's filesystem (read-only lower layer)

A sandbox made from a template has ``upper/`` and ``work/`` (its overlay layer) beside
``root/`` (then only the mount point), and its snapshots hold that layer.

Everything is plain files, so any process (another ``psdk``, the same program after a
restart) sees the same sandboxes. Each object has a lock (``.lock`` in its directory,
``flock``) that every process using the home shares; a task that holds it (and the
threads it runs) takes it again at no cost, so a step inside another one does not wait
for itself. This module owns paths, metadata and those locks, nothing else.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio

STAGING = ".new-"
"""Prefix of a record's directory while :meth:`Home.claim` names it."""
ABANDONED_AFTER = 60.0
"""Seconds after which an unlocked hidden directory is taken as abandoned."""

_HELD: contextvars.ContextVar[frozenset[Path]] = contextvars.ContextVar(
    "psdk_local_held_locks", default=frozenset())
"""The object directories whose lock the current task (and the threads it runs)
holds."""


class Home:
    """Paths and metadata files under one state directory."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        for sub in ("sandboxes", "snapshots", "volumes", "templates"):
            (self.path / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.path, 0o700)
        self.tag = hashlib.sha256(str(self.path).encode()).hexdigest()[:8]
        """Distinguishes this home's cgroups from another home's."""

    def sandbox(self, sandbox_id: str) -> Path:
        return self.path / "sandboxes" / sandbox_id

    def snapshot(self, snapshot_id: str) -> Path:
        return self.path / "snapshots" / snapshot_id

    def volume(self, name: str) -> Path:
        return self.path / "volumes" / name

    def template(self, template_id: str) -> Path:
        return self.path / "templates" / template_id

    def new_id(self, kind: str) -> str:
        """A fresh id; the directory is created so the id cannot be taken twice."""
        while True:
            new = secrets.token_hex(6)
            path = self.path / kind / new
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                continue
            return new

    def claim(self, kind: str) -> tuple[str, Claim]:
        """A fresh id whose directory appears already locked by the caller, so nobody
        takes a record being made for an abandoned one (see :meth:`busy`).

        The directory is made and locked under a hidden name, then renamed into place.
        Release the claim when the record is complete (or before removing it).
        """
        staging = self.path / kind / f"{STAGING}{secrets.token_hex(8)}"
        staging.mkdir(mode=0o700)
        fd = os.open(staging / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            while True:
                new = secrets.token_hex(6)
                if (self.path / kind / new).exists():
                    continue
                try:
                    os.rename(staging, self.path / kind / new)
                except OSError as exc:  # taken meanwhile (a non-empty directory)
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
                    continue
                return new, Claim(fd, self.path / kind / new)
        except BaseException:
            os.close(fd)
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def ids(self, kind: str) -> list[str]:
        return sorted(p.name for p in (self.path / kind).iterdir()
                      if not p.name.startswith(".") and (p / "meta.json").is_file())

    def all_ids(self, kind: str) -> list[str]:
        """Every object directory, with or without a readable ``meta.json``."""
        return sorted(p.name for p in (self.path / kind).iterdir()
                      if not p.name.startswith(".") and p.is_dir())

    def abandoned_claims(self, kind: str) -> list[Path]:
        """Hidden directories left by a creator that died before naming its record,
        or by a removal that died half way: nobody holds their lock, and they are
        older than :data:`ABANDONED_AFTER` (a claim is made, then locked, in an
        instant that a lock alone cannot cover)."""
        old = time.time() - ABANDONED_AFTER
        found = []
        for path in (self.path / kind).iterdir():
            if not path.name.startswith((STAGING, ".deleted-")):
                continue
            try:
                if path.stat().st_mtime < old and not self.busy(path):
                    found.append(path)
            except FileNotFoundError:
                continue
        return found


    def busy(self, directory: Path) -> bool:
        """Whether another process (or another claim here) holds the object's lock now:
        a record being made or changed. Never blocks."""
        try:
            fd = os.open(directory / ".lock", os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    @contextlib.contextmanager
    def lock(self, directory: Path) -> Iterator[None]:
        """An exclusive lock on one object, shared by every process using this home
        (taken at no cost where this task holds it already)."""
        if directory in _HELD.get():
            yield
            return
        fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with _holding(directory):
                yield
        finally:
            os.close(fd)

    @contextlib.asynccontextmanager
    async def hold(self, directory: Path) -> AsyncIterator[None]:
        """:meth:`lock`, for async code: the wait polls on anyio's clock, so a
        cancellation ends it. An object removed meanwhile is not locked (what runs
        inside finds it gone)."""
        if directory in _HELD.get():
            yield
            return
        try:
            fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except (FileNotFoundError, NotADirectoryError):
            yield
            return
        try:
            pause = 0.001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await anyio.sleep(pause)
                    pause = min(pause * 2, 0.05)
            with _holding(directory):
                yield
        finally:
            os.close(fd)


@contextlib.contextmanager
def _holding(directory: Path) -> Iterator[None]:
    token = _HELD.set(_HELD.get() | {directory})
    try:
        yield
    finally:
        _HELD.reset(token)


class Claim:
    """The lock its creator holds on a record being made (:meth:`Home.claim`); the
    creating task holds it as its own until :meth:`release`."""

    def __init__(self, fd: int, directory: Path) -> None:
        self._fd: int | None = fd
        self._held: contextvars.Token[frozenset[Path]] | None = _HELD.set(
            _HELD.get() | {directory})
        self._directory = directory

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._held is not None:
            held, self._held = self._held, None
            try:
                _HELD.reset(held)
            except ValueError:  # released from another context than the claim's
                _HELD.set(_HELD.get() - {self._directory})


def read_meta(directory: Path) -> dict[str, Any] | None:
    """An object's metadata, or ``None`` if it does not exist (or is half made)."""
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None



def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    """Replace an object's metadata atomically (readers never see half a file)."""
    tmp = directory / f".meta.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(meta, f)
    os.replace(tmp, directory / "meta.json")


def now() -> dt.datetime:
    """The current time, as records store it (UTC)."""
    return dt.datetime.now(dt.timezone.utc)
