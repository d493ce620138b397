"""The files role of ``E2BProvider`` (and ``CubeProvider``), through envd's filesystem
service.

Relative paths are taken from the sandbox's working directory. Reads refuse a device,
FIFO or socket (or a symlink to one) before a byte is read; the check goes out with the
read, not before it.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import AsyncIterator
from typing import Any

import anyio
import attrs
from e2b.sandbox.filesystem.filesystem import EntryInfo
from e2b.sandbox.filesystem.filesystem import FileType as E2BFileType

from provider_sdk import errors
from provider_sdk.checked_read import read_after_check
from provider_sdk.models import FileInfo, FileType
from provider_sdk.provider import Command
from provider_sdk.roles import Commands
from provider_sdk_e2b._remote import Handles, _Handle
from provider_sdk_e2b._session import Session

__all__ = ["E2BFiles"]

_SYMLINK_HOPS = 40
_READLINK_SECONDS = 30.0


class E2BFiles:
    """The files role (see the module).

    Args:
        session: what the provider's roles share.
        handles: opens a sandbox's data-plane clients (the control plane does).
        commands: runs ``readlink`` where envd tells a link only by what it leads to.
    """

    def __init__(self, session: Session, handles: Handles, commands: Commands) -> None:
        self.session = session
        self.handles = handles
        self.commands = commands

    def _path(self, handle: _Handle, path: str) -> str:
        if path.startswith("/") or handle.workdir is None:
            return path
        return posixpath.join(handle.workdir, path)

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        handle = await self.handles.handle(sandbox_id)
        target = self._path(handle, path)

        async def open_read() -> Any:
            with self.session.translate(sandbox_id, what="file", path=path):
                return await self.session.retrying(
                    lambda: handle.sandbox.files.read(target, format="stream"))

        async def close(reader: Any) -> None:
            await reader.aclose()

        reader = await read_after_check(
            functools.partial(self._refuse_special, sandbox_id, handle, target, path),
            open_read, close)
        try:
            with self.session.translate(sandbox_id, what="file", path=path):
                async for chunk in reader:
                    yield bytes(chunk)
        finally:
            with anyio.CancelScope(shield=True):
                await reader.aclose()

    async def _refuse_special(self, sandbox_id: str, handle: _Handle, target: str,
                              path: str) -> None:
        """Raise ``NotARegularFile`` for a device, FIFO or socket, or a symlink to one,
        before anything is read: envd would stream ``/dev/zero`` forever and block on a
        FIFO. One stat (plus one per symlink followed). What is missing or a directory is
        left to the read, which says so."""
        seen = target
        for _ in range(_SYMLINK_HOPS):
            with self.session.translate(sandbox_id, what="file", path=path):
                entry = await self.session.retrying(
                    functools.partial(handle.sandbox.files.get_info, seen))
            if entry.symlink_target == entry.path:
                return  # envd's link that leads nowhere names itself: the read says so
            if entry.symlink_target and entry.type == E2BFileType.SYMLINK:  # an older envd
                seen = posixpath.normpath(posixpath.join(posixpath.dirname(seen),
                                                         entry.symlink_target))
                continue
            if (_FILE_TYPES.get(entry.type) if entry.type else None) is None:
                raise errors.NotARegularFile(
                    f"{path}: not a regular file (a device, FIFO or socket); refused before "
                    "reading", provider=self.session.name, sandbox_id=sandbox_id)
            return

    async def write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        handle = await self.handles.handle(sandbox_id)
        with self.session.translate(sandbox_id, what="file", path=path):
            await handle.sandbox.files.write(self._path(handle, path), chunks)

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        handle = await self.handles.handle(sandbox_id)
        target = self._path(handle, path)
        with self.session.translate(sandbox_id, what="file", path=path):
            entries = await self.session.retrying(lambda: handle.sandbox.files.list(
                target, depth=1))
        return [_to_file_info(e) for e in entries]

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        handle = await self.handles.handle(sandbox_id)
        target = self._path(handle, path)
        with self.session.translate(sandbox_id, what="file", path=path):
            entry = await self.session.retrying(lambda: handle.sandbox.files.get_info(
                target))
        info = _to_file_info(entry)
        if info.type != FileType.SYMLINK:
            return info
        # envd describes a link by what it leads to; the link's own text is read inside.
        link = await self.commands.exec(sandbox_id, Command(argv=("readlink", "--", target),
                                                    timeout=_READLINK_SECONDS))
        if link.exit_code != 0:
            return info
        return attrs.evolve(info, symlink_target=link.stdout_bytes.decode(
            errors="surrogateescape").removesuffix("\n"))

    async def mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        handle = await self.handles.handle(sandbox_id)
        target = self._path(handle, path)
        if not parents:
            await self.stat(sandbox_id, posixpath.dirname(target.rstrip("/")) or "/")
        with self.session.translate(sandbox_id, what="file", path=path):
            made = await self.session.retrying(lambda: handle.sandbox.files.make_dir(
                target))
        if not made:
            info = await self.stat(sandbox_id, target)
            if not exist_ok or info.type != FileType.DIRECTORY:
                raise errors.FileExists(f"{path}: already exists", provider=self.session.name,
                                        sandbox_id=sandbox_id)

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        handle = await self.handles.handle(sandbox_id)
        target = self._path(handle, path)
        info = await self.stat(sandbox_id, target)  # envd removes a missing path quietly
        if not recursive and info.type == FileType.DIRECTORY and \
                await self.list_dir(sandbox_id, target):
            raise errors.Conflict(f"{path}: the directory is not empty (use recursive=True)",
                                  provider=self.session.name, sandbox_id=sandbox_id)
        with self.session.translate(sandbox_id, what="file", path=path):
            await self.session.retrying(lambda: handle.sandbox.files.remove(target))

    async def rename(self, sandbox_id: str, src: str, dst: str) -> None:
        handle = await self.handles.handle(sandbox_id)
        source, target = self._path(handle, src), self._path(handle, dst)
        with self.session.translate(sandbox_id, what="file", path=src):
            await self.session.retrying(lambda: handle.sandbox.files.rename(
                source, target))


_FILE_TYPES = {E2BFileType.FILE: FileType.FILE, E2BFileType.DIR: FileType.DIRECTORY,
               E2BFileType.SYMLINK: FileType.SYMLINK}


def _to_file_info(entry: EntryInfo) -> FileInfo:
    """A provider-sdk entry for one of envd's: a symlink (envd gives the type of what it
    leads to, and the resolved path) is a ``SYMLINK`` whose target is that path."""
    if entry.symlink_target:
        kind = FileType.SYMLINK
    else:
        kind = _FILE_TYPES.get(entry.type, FileType.OTHER) if entry.type else FileType.OTHER
    return FileInfo(path=entry.path, type=kind,
                    size=entry.size, mode=entry.mode & 0o7777,
                    modified_at=entry.modified_time, symlink_target=entry.symlink_target)

