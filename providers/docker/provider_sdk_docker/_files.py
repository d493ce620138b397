"""The files API of ``DockerProvider``: the Engine's archive endpoints and shell snippets.

Reads stream a one-member archive (never a whole file in memory) after a stat that
refuses directories and anything not a regular file (devices, FIFOs, sockets, or a
symlink to one) before a byte is read. Writes never replace a directory, and are atomic:
the file goes in under a temporary name in the same directory and is then renamed over
the target. Paths the archive endpoints cannot reach as processes see them (the
container's ``/dev``, ``/proc`` and ``/sys`` mounts, and the Engine-managed
``/etc/hosts``, ``/etc/hostname`` and ``/etc/resolv.conf``) are refused with a typed
error instead of landing somewhere else.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import datetime as dt
import json
import posixpath
import secrets
import tarfile
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from provider_sdk import errors
from provider_sdk.models import ExecResult, FileInfo, FileType
from provider_sdk_docker import _scripts
from provider_sdk_docker._engine import Engine
from provider_sdk_docker._processes import container_name
from provider_sdk_docker._tar import ArchiveReader, one_file_archive

__all__ = ["FilesMixin", "parse_time"]

SPOOL_IN_MEMORY = 8 << 20
#: How often a read is retried when the file changes under it (renamed over, rewritten).
READ_ATTEMPTS = 3

# Go's os.FileMode type bits, as the archive endpoint reports them.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_NOT_REGULAR = (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
_FILE_ERRORS: tuple[tuple[str, type[errors.SandboxError]], ...] = (
    ("no such file", errors.FileNotFound),
    ("not a directory", errors.NotADirectory),
    ("is a directory", errors.IsADirectory),
    ("cannot overwrite directory", errors.IsADirectory),
    ("file exists", errors.FileExists),
    ("directory not empty", errors.Conflict),
    ("permission denied", errors.PermissionDenied),
    ("read-only", errors.PermissionDenied),
    ("no space left on device", errors.QuotaExceeded),
    ("disk quota exceeded", errors.QuotaExceeded),
)
"""Error texts (lower case) from the Engine or the tools inside, and what they mean."""
#: Mounts the archive endpoints do not see as processes do.
_UNREACHABLE_TREES = ("/dev", "/proc", "/sys")
_DEV_FILESYSTEMS = ("/dev/shm/", "/dev/mqueue/")
_ENGINE_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
_FIND_TYPES = {b"f": FileType.FILE, b"d": FileType.DIRECTORY, b"l": FileType.SYMLINK}


class _PathMissing(Exception):
    pass


class _PathRefused(Exception):
    pass


class FilesMixin:
    """The file hooks of ``DockerProvider``."""

    name: ClassVar[str]
    _engine: Engine
    _workdirs: dict[str, str]
    _owners: dict[str, tuple[int, int]]

    if TYPE_CHECKING:
        from provider_sdk.models import SandboxInfo

        async def _inspect(self, sandbox_id: str) -> dict[str, Any]: ...
        async def _info(self, sandbox_id: str) -> SandboxInfo: ...
        async def _run(self, sandbox_id: str, script: str, *args: str,
                       user: str | None = None, stdin: bytes | None = None) -> ExecResult: ...

    async def _resolve(self, sandbox_id: str, path: str) -> str:
        if not path.startswith("/"):
            workdir = self._workdirs.get(sandbox_id)
            if workdir is None:
                await self._info(sandbox_id)
                workdir = self._workdirs[sandbox_id]
            path = posixpath.join(workdir, path)
        return posixpath.normpath("/" + path.lstrip("/"))

    def _refuse_unreachable(self, path: str, sandbox_id: str, *, writing: bool) -> None:
        special = any(path == tree or path.startswith(tree + "/")
                      for tree in _UNREACHABLE_TREES)
        if special and not writing and path.startswith("/dev/") and \
                not path.startswith(_DEV_FILESYSTEMS):
            # The container's /dev holds devices (and symlinks to /proc): never files.
            raise errors.NotARegularFile(f"{path} is not a regular file (a device)",
                                         provider=self.name, sandbox_id=sandbox_id)
        if special or (writing and path in _ENGINE_FILES):
            raise errors.PermissionDenied(
                f"{path}: the files API cannot {'write' if writing else 'read'} this path "
                "(a mount the Engine manages, not the container's filesystem); use a "
                "command inside the sandbox", provider=self.name, sandbox_id=sandbox_id)

    async def _path_stat(self, sandbox_id: str, path: str) -> dict[str, Any] | None:
        """The Engine's stat of ``path`` (the final symlink not followed), or ``None``."""
        def head() -> dict[str, Any] | None:
            client = self._engine.client
            url = client._url("/containers/{0}/archive", container_name(sandbox_id))
            response = client.head(url, params={"path": path})
            if response.status_code == 404:  # no such path, or no such container
                raise _PathMissing
            if response.status_code == 500 and path != "/":
                raise _PathRefused(response.reason)
            client._raise_for_status(response)
            header = response.headers.get("X-Docker-Container-Path-Stat")
            if not header:
                return None
            stat: dict[str, Any] = json.loads(_b64(header))
            return stat

        try:
            return await self._engine.call(head, what=sandbox_id, sandbox_id=sandbox_id)
        except _PathMissing:
            await self._inspect(sandbox_id)  # the sandbox is there: the path is not
            return None
        except _PathRefused as exc:
            # A HEAD answer has no body to say why; the usual reason is a parent that
            # is not a directory, which the parent's own stat shows.
            parent = posixpath.dirname(path.rstrip("/")) or "/"
            above = await self._path_stat(sandbox_id, parent)
            if above is not None and not int(above.get("mode", 0)) & _MODE_DIR:
                raise errors.NotADirectory(f"{path}: Not a directory", provider=self.name,
                                           sandbox_id=sandbox_id) from None
            raise self._file_error(f"{path}: {exc}", sandbox_id) from None

    async def _regular_file(self, sandbox_id: str, path: str, target: str) -> str:
        """``target`` with its symlinks followed, checked to be a regular file."""
        for _ in range(40):
            self._refuse_unreachable(target, sandbox_id, writing=False)
            stat = await self._path_stat(sandbox_id, target)
            if stat is None:
                raise self._file_error(f"{path}: No such file or directory", sandbox_id)
            mode = int(stat.get("mode", 0))
            if mode & _MODE_DIR:
                raise errors.IsADirectory(f"{path} is a directory", provider=self.name,
                                          sandbox_id=sandbox_id)
            if mode & _MODE_NOT_REGULAR:
                raise errors.NotARegularFile(
                    f"{path} is not a regular file (a device, FIFO or socket)",
                    provider=self.name, sandbox_id=sandbox_id)
            if not mode & _MODE_SYMLINK:
                return target
            target = posixpath.normpath(posixpath.join(posixpath.dirname(target),
                                                       stat.get("linkTarget", "")))
        raise errors.InvalidInput(f"{path}: too many levels of symbolic links",
                                  provider=self.name, sandbox_id=sandbox_id)

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        resolved = await self._resolve(sandbox_id, path)
        for attempt in range(READ_ATTEMPTS):
            target = await self._regular_file(sandbox_id, path, resolved)
            try:
                chunks, _ = await self._engine.api(
                    "get_archive", container_name(sandbox_id), target, chunk_size=1 << 20,
                    what=sandbox_id, sandbox_id=sandbox_id)
                reader = await self._engine.call(ArchiveReader, chunks)
            except errors.SandboxNotFound:
                # A 404 here is the file gone between the stat and the read (renamed
                # over, removed) unless the sandbox itself is gone: look again.
                await self._inspect(sandbox_id)
                if attempt + 1 < READ_ATTEMPTS:
                    continue
                raise self._file_error(f"{path}: No such file or directory",
                                       sandbox_id) from None
            except (tarfile.TarError, EOFError, OSError) as exc:
                if attempt + 1 < READ_ATTEMPTS:
                    continue
                raise errors.SandboxError(f"{path}: the file changed while it was read "
                                          f"({type(exc).__name__})", provider=self.name,
                                          sandbox_id=sandbox_id) from exc
            break
        if not reader.member.isfile():
            await self._engine.call(reader.close)
            raise errors.NotARegularFile(f"{path} is not a regular file", provider=self.name,
                                         sandbox_id=sandbox_id)
        try:
            while True:
                try:
                    data = await self._engine.call(reader.read)
                except (tarfile.TarError, EOFError, OSError) as exc:
                    raise errors.SandboxError(
                        f"{path}: the file changed while it was read ({type(exc).__name__})",
                        provider=self.name, sandbox_id=sandbox_id) from exc
                if not data:
                    break
                yield data
        finally:
            with anyio.CancelScope(shield=True):
                await self._engine.call(reader.close)

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        target = await self._resolve(sandbox_id, path)
        parent, name = posixpath.split(target)
        self._refuse_unreachable(target, sandbox_id, writing=True)
        stat = await self._path_stat(sandbox_id, target) if name else {"mode": _MODE_DIR}
        if stat is not None and int(stat.get("mode", 0)) & _MODE_DIR:
            raise errors.IsADirectory(f"{path} is a directory", provider=self.name,
                                      sandbox_id=sandbox_id)
        temporary = f".{name[:200]}.psdk-{secrets.token_hex(6)}"
        with errors.reported_as(target, posixpath.join(parent, temporary), temporary):
            await self._write_through(sandbox_id, path, target, temporary, chunks)

    async def _write_through(self, sandbox_id: str, path: str, target: str, temporary: str,
                             chunks: AsyncIterator[bytes]) -> None:
        """Put the content in ``temporary``, beside ``target``, then rename it over."""
        parent = posixpath.dirname(target)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
            size = 0
            async for chunk in chunks:
                size += len(chunk)
                if size > SPOOL_IN_MEMORY:
                    await anyio.to_thread.run_sync(spool.write, chunk)
                else:
                    spool.write(chunk)
            uid, gid = await self._owner(sandbox_id)
            for attempt in range(2):
                try:
                    await self._put(sandbox_id, parent, lambda: one_file_archive(
                        temporary, spool, size, uid=uid, gid=gid))
                    break
                except errors.FileNotFound:
                    if attempt:
                        raise
                    await self._mkdir(sandbox_id, parent, parents=True, exist_ok=True)
                except errors.SandboxError:
                    # A full disk can leave part of the temporary file: it must not
                    # keep the room it took.
                    with anyio.CancelScope(shield=True), \
                            contextlib.suppress(errors.SandboxError):
                        await self._remove(sandbox_id, posixpath.join(parent, temporary),
                                           recursive=False)
                    raise
        moved = await self._run(sandbox_id, _scripts.REPLACE,
                                posixpath.join(parent, temporary), target)
        if not moved.ok:
            raise self._file_error(f"{path}: {moved.stderr.strip() or 'not written'}",
                                   sandbox_id)

    async def _put(self, sandbox_id: str, directory: str,
                   archive: Callable[[], Iterator[bytes]]) -> None:
        def put() -> None:
            client = self._engine.client
            url = client._url("/containers/{0}/archive", container_name(sandbox_id))
            response = client.put(url, params={"path": directory}, data=archive())
            if response.status_code == 404 and "no such container" not in response.text.lower():
                raise _PathMissing
            if response.status_code in (400, 403, 500):
                raise _PathRefused(response.text)
            client._raise_for_status(response)

        try:
            await self._engine.call(put, what=sandbox_id, sandbox_id=sandbox_id)
        except _PathMissing:
            raise errors.FileNotFound(f"{directory}: No such file or directory",
                                      provider=self.name, sandbox_id=sandbox_id) from None
        except _PathRefused as exc:
            raise self._file_error(f"{directory}: {exc}", sandbox_id) from None

    async def _owner(self, sandbox_id: str) -> tuple[int, int]:
        """The uid and gid that files written through the API get: the sandbox user's."""
        if sandbox_id not in self._owners:
            result = await self._run(sandbox_id, 'printf "%s %s" "$(id -u)" "$(id -g)"')
            uid, _, gid = result.stdout.partition(" ")
            self._owners[sandbox_id] = (int(uid), int(gid)) if result.ok else (0, 0)
        return self._owners[sandbox_id]

    async def _files_op(self, sandbox_id: str, script: str, *args: str) -> ExecResult:
        """Run a files script on ``args`` (paths first); its failure names the first path,
        the caller's, where the tool's message names only a part of it."""
        result = await self._run(sandbox_id, script, *args)
        if not result.ok:
            message = result.stderr.strip() or f"exit {result.exit_code}"
            if f"'{args[0]}'" not in message and f"{args[0]}:" not in message:
                message = f"{args[0]}: {message}"
            raise self._file_error(message, sandbox_id)
        return result

    def _file_error(self, message: str, sandbox_id: str) -> errors.SandboxError:
        for text, cls in _FILE_ERRORS:
            if text in message.lower():
                return cls(message, provider=self.name, sandbox_id=sandbox_id)
        return errors.SandboxError(message, provider=self.name, sandbox_id=sandbox_id)

    async def _list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        directory = await self._resolve(sandbox_id, path)
        result = await self._files_op(sandbox_id, _scripts.LIST_DIR, directory)
        fields = result.stdout_bytes.split(b"\0")
        entries = []
        for head, link in zip(fields[0::2], fields[1::2], strict=False):
            kind, size, mode, mtime, name = head.split(b"/", 4)
            entries.append(FileInfo(
                path=posixpath.join(directory, name.decode("utf-8", "surrogateescape")),
                type=_FIND_TYPES.get(kind, FileType.OTHER), size=int(size),
                mode=int(mode, 8),
                modified_at=dt.datetime.fromtimestamp(float(mtime), dt.timezone.utc),
                symlink_target=link.decode("utf-8", "surrogateescape") or None))
        return sorted(entries, key=lambda e: e.path)

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        target = await self._resolve(sandbox_id, path)
        stat = await self._path_stat(sandbox_id, target)
        if stat is None:
            raise errors.FileNotFound(f"{path}: No such file or directory",
                                      provider=self.name, sandbox_id=sandbox_id)
        mode = int(stat.get("mode", 0))
        kind = FileType.DIRECTORY if mode & _MODE_DIR else \
            FileType.SYMLINK if mode & _MODE_SYMLINK else \
            FileType.FILE if not mode & 0xFFFF_0000 else FileType.OTHER
        return FileInfo(path=target, type=kind, size=int(stat.get("size", 0)),
                        mode=mode & 0o7777, modified_at=parse_time(stat.get("mtime")),
                        symlink_target=stat.get("linkTarget") or None
                        if kind == FileType.SYMLINK else None)

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        target = await self._resolve(sandbox_id, path)
        await self._files_op(sandbox_id, _scripts.MKDIR, target, _flag(parents),
                             _flag(exist_ok))

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        target = await self._resolve(sandbox_id, path)
        await self._files_op(sandbox_id, _scripts.REMOVE, target, _flag(recursive))

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        await self._files_op(sandbox_id, _scripts.RENAME, await self._resolve(sandbox_id, src),
                             await self._resolve(sandbox_id, dst))


def _flag(value: bool) -> str:
    return "1" if value else "0"


def _b64(text: str) -> str:
    return base64.b64decode(text + "=" * (-len(text) % 4)).decode()


def parse_time(value: str | None) -> dt.datetime | None:
    """An Engine timestamp (RFC 3339, nanoseconds) as a datetime; ``None`` if unreadable."""
    import re

    if not value:
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None
