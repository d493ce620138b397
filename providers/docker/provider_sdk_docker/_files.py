"""The files role of ``DockerProvider`` (:class:`DockerFiles`): the Engine's archive
endpoints (``_archive``) and shell snippets.

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

import builtins
import contextlib
import datetime as dt
import posixpath
import re
import secrets
import tarfile
import tempfile
from collections.abc import AsyncIterator

import anyio

from provider_sdk import errors
from provider_sdk.models import ExecResult, FileInfo, FileType
from provider_sdk_docker import _scripts
from provider_sdk_docker._archive import (
    MODE_DIR,
    MODE_NOT_REGULAR,
    MODE_SYMLINK,
    file_error,
    path_stat,
    put,
)
from provider_sdk_docker._commands import DockerCommands
from provider_sdk_docker._labels import container_name
from provider_sdk_docker._shared import Shared
from provider_sdk_docker._tar import ArchiveReader, one_file_archive

__all__ = ["DockerFiles", "parse_time"]

SPOOL_IN_MEMORY = 8 << 20
#: How often a read is retried when the file changes under it (renamed over, rewritten).
READ_ATTEMPTS = 3
#: Mounts the archive endpoints do not see as processes do.
_UNREACHABLE_TREES = ("/dev", "/proc", "/sys")
_DEV_FILESYSTEMS = ("/dev/shm/", "/dev/mqueue/")
_ENGINE_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
_FIND_TYPES = {b"f": FileType.FILE, b"d": FileType.DIRECTORY, b"l": FileType.SYMLINK}


class DockerFiles:
    """The files API of one ``DockerProvider``'s sandboxes.

    Args:
        shared: the provider's Engine, settings and caches.
        commands: its commands role, which runs the shell snippets.
    """

    def __init__(self, shared: Shared, commands: DockerCommands) -> None:
        self._shared = shared
        self._engine = shared.engine
        self._commands = commands
        self.name = shared.name

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

    async def _regular_file(self, sandbox_id: str, path: str, target: str) -> str:
        """``target`` with its symlinks followed, checked to be a regular file."""
        for _ in range(40):
            self._refuse_unreachable(target, sandbox_id, writing=False)
            stat = await path_stat(self._shared, sandbox_id, target)
            if stat is None:
                raise file_error(self._shared, f"{path}: No such file or directory",
                                 sandbox_id)
            mode = int(stat.get("mode", 0))
            if mode & MODE_DIR:
                raise errors.IsADirectory(f"{path} is a directory", provider=self.name,
                                          sandbox_id=sandbox_id)
            if mode & MODE_NOT_REGULAR:
                raise errors.NotARegularFile(
                    f"{path} is not a regular file (a device, FIFO or socket)",
                    provider=self.name, sandbox_id=sandbox_id)
            if not mode & MODE_SYMLINK:
                return target
            target = posixpath.normpath(posixpath.join(posixpath.dirname(target),
                                                       stat.get("linkTarget", "")))
        raise errors.InvalidInput(f"{path}: too many levels of symbolic links",
                                  provider=self.name, sandbox_id=sandbox_id)

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """A file's bytes in chunks, streamed from a one-member archive."""
        resolved = await self._shared.resolve(sandbox_id, path)
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
                await self._shared.inspect(sandbox_id)
                if attempt + 1 < READ_ATTEMPTS:
                    continue
                raise file_error(self._shared, f"{path}: No such file or directory",
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

    async def write_file(self, sandbox_id: str, path: str,
                         chunks: AsyncIterator[bytes]) -> None:
        """Write a file whole, atomically, making its parents."""
        target = await self._shared.resolve(sandbox_id, path)
        parent, name = posixpath.split(target)
        self._refuse_unreachable(target, sandbox_id, writing=True)
        stat = await path_stat(self._shared, sandbox_id, target) if name \
            else {"mode": MODE_DIR}
        if stat is not None and int(stat.get("mode", 0)) & MODE_DIR:
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
                    await put(self._shared, sandbox_id, parent, lambda: one_file_archive(
                        temporary, spool, size, uid=uid, gid=gid))
                    break
                except errors.FileNotFound:
                    if attempt:
                        raise
                    await self.mkdir(sandbox_id, parent, parents=True, exist_ok=True)
                except errors.SandboxError:
                    # A full disk can leave part of the temporary file: it must not
                    # keep the room it took.
                    with anyio.CancelScope(shield=True), \
                            contextlib.suppress(errors.SandboxError):
                        await self.remove(sandbox_id, posixpath.join(parent, temporary),
                                       recursive=False)
                    raise
        moved = await self._commands.run(sandbox_id, _scripts.REPLACE,
                                         posixpath.join(parent, temporary), target)
        if not moved.ok:
            raise file_error(self._shared,
                             f"{path}: {moved.stderr.strip() or 'not written'}", sandbox_id)

    async def _owner(self, sandbox_id: str) -> tuple[int, int]:
        """The uid and gid that files written through the API get: the sandbox user's."""
        owners = self._shared.owners
        if sandbox_id not in owners:
            result = await self._commands.run(sandbox_id,
                                              'printf "%s %s" "$(id -u)" "$(id -g)"')
            uid, _, gid = result.stdout.partition(" ")
            owners[sandbox_id] = (int(uid), int(gid)) if result.ok else (0, 0)
        return owners[sandbox_id]

    async def _files_op(self, sandbox_id: str, script: str, *args: str) -> ExecResult:
        """Run a files script on ``args`` (paths first); its failure names the first path,
        the caller's, where the tool's message names only a part of it."""
        result = await self._commands.run(sandbox_id, script, *args)
        if not result.ok:
            message = result.stderr.strip() or f"exit {result.exit_code}"
            if f"'{args[0]}'" not in message and f"{args[0]}:" not in message:
                message = f"{args[0]}: {message}"
            raise file_error(self._shared, message, sandbox_id)
        return result

    async def list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        """A directory's entries (not recursive)."""
        directory = await self._shared.resolve(sandbox_id, path)
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

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        """Stat without following a final symlink."""
        target = await self._shared.resolve(sandbox_id, path)
        stat = await path_stat(self._shared, sandbox_id, target)
        if stat is None:
            raise errors.FileNotFound(f"{path}: No such file or directory",
                                      provider=self.name, sandbox_id=sandbox_id)
        mode = int(stat.get("mode", 0))
        kind = FileType.DIRECTORY if mode & MODE_DIR else \
            FileType.SYMLINK if mode & MODE_SYMLINK else \
            FileType.FILE if not mode & 0xFFFF_0000 else FileType.OTHER
        return FileInfo(path=target, type=kind, size=int(stat.get("size", 0)),
                        mode=mode & 0o7777, modified_at=parse_time(stat.get("mtime")),
                        symlink_target=stat.get("linkTarget") or None
                        if kind == FileType.SYMLINK else None)

    async def mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                    exist_ok: bool) -> None:
        """Make a directory."""
        target = await self._shared.resolve(sandbox_id, path)
        await self._files_op(sandbox_id, _scripts.MKDIR, target, _flag(parents),
                             _flag(exist_ok))

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        """Remove a file, or a directory."""
        target = await self._shared.resolve(sandbox_id, path)
        await self._files_op(sandbox_id, _scripts.REMOVE, target, _flag(recursive))

    async def rename(self, sandbox_id: str, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing a file there."""
        resolve = self._shared.resolve
        await self._files_op(sandbox_id, _scripts.RENAME, await resolve(sandbox_id, src),
                             await resolve(sandbox_id, dst))


def _flag(value: bool) -> str:
    return "1" if value else "0"


def parse_time(value: str | None) -> dt.datetime | None:
    """An Engine timestamp (RFC 3339, nanoseconds) as a datetime; ``None`` if unreadable."""
    if not value:
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None
