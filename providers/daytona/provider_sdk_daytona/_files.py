"""The files API of ``DaytonaProvider``, through the toolbox's file calls.

Relative paths resolve from the sandbox's working directory (``DaytonaCalls.path``).
Reads refuse a device, FIFO or socket before a byte is read (the check goes out with
the read: one round trip), stream the file chunk by
chunk (each within ``request_timeout``), and can keep just the first bytes of a file
(``download_into``, which exec and background processes read their output with). A
failed call says why: missing, a directory, not running, permission denied.
"""

from __future__ import annotations

import builtins
import contextlib
import posixpath
import secrets
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import anyio
from daytona import AsyncSandbox, DaytonaError

from provider_sdk import errors, scripts
from provider_sdk.checked_read import read_after_check
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import FileInfo, FileType
from provider_sdk_daytona import _convert as convert
from provider_sdk_daytona._calls import DaytonaCalls
from provider_sdk_daytona._errors import PROVIDER, code_of, status_of

__all__ = ["DaytonaFiles"]

_SMALL_WRITE = 4 << 20


class DaytonaFiles:
    """The files role of ``DaytonaProvider`` (a :class:`provider_sdk.roles.Files`), over
    the toolbox's file calls; :meth:`download_into` is the commands' too."""

    name = PROVIDER

    def __init__(self, calls: DaytonaCalls) -> None:
        self._calls = calls

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        full = await self._calls.path(sandbox_id, path)
        chunks = self.download(sandbox_id, full)

        async def refuse_special() -> None:
            probe = scripts.probe_file_command(full)
            found = await self._calls.toolbox(sandbox_id,
                                              lambda s: s.process.exec(probe, timeout=30))
            if (found.result or "").strip() == "other":
                raise errors.NotARegularFile(
                    f"{full}: not a regular file (a device, FIFO or socket); refused before "
                    "reading", provider=self.name, sandbox_id=sandbox_id)

        async def first_chunk() -> list[bytes]:
            try:
                return [await chunks.__anext__()]
            except StopAsyncIteration:
                return []  # an empty file

        async def left_to_finally(_first: list[bytes]) -> None:
            pass  # the stream is closed below, read or not

        try:
            for chunk in await read_after_check(refuse_special, first_chunk,
                                                left_to_finally):
                yield chunk
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]

    async def download(self, sandbox_id: str, full: str) -> AsyncIterator[bytes]:
        """A file's bytes as the daemon streams them; each chunk within
        ``request_timeout`` (a FIFO with no writer does not hang the caller)."""
        sandbox = await self._calls.sandbox(sandbox_id)
        received = False
        try:
            with self._calls.deadline(sandbox_id, self._calls.request_timeout):
                stream = await sandbox.fs.download_file_stream(full)
            chunks = stream.__aiter__()
            try:
                while True:
                    with self._calls.deadline(sandbox_id, self._calls.request_timeout):
                        try:
                            chunk = await chunks.__anext__()
                        except StopAsyncIteration:
                            return
                    received = True
                    yield chunk
            finally:  # a reader that stopped early releases the connection now
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    with anyio.move_on_after(5, shield=True), \
                            contextlib.suppress(Exception):
                        await close()
        except DaytonaError as exc:
            if not received and code_of(exc) is None:
                # The SDK's stream refuses a part with no bytes ("No file data
                # received"): an empty file is a valid answer.
                with contextlib.suppress(errors.SandboxError):
                    info = await self.stat(sandbox_id, full)
                    if info.type == FileType.FILE and info.size == 0:
                        return
            raise await self._file_error(sandbox_id, full, exc) from exc
        except aiohttp.ClientResponseError as exc:
            # The SDK's download stream lets the HTTP error through untranslated.
            vendor = DaytonaError(exc.message, status_code=exc.status)
            raise await self._file_error(sandbox_id, full, vendor) from exc
        except aiohttp.ClientError as exc:
            raise errors.Unavailable(f"reading {full} failed: {exc}", provider=self.name,
                                     sandbox_id=sandbox_id) from exc

    async def download_into(self, sandbox_id: str, path: str, kept: OutputBuffer, *,
                             missing_ok: bool = True) -> None:
        """Keep the first ``kept.limit`` bytes of a file; count the rest from its size
        (what is past the limit is not downloaded)."""
        chunks = self.download(sandbox_id, path)
        try:
            async for chunk in chunks:
                kept.append(chunk)
                if kept.dropped:
                    break
        except errors.FileNotFound:
            if not missing_ok:
                raise
            return
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        if kept.dropped:
            with contextlib.suppress(errors.SandboxError):
                size = (await self.stat(sandbox_id, path)).size
                kept.dropped = max(kept.dropped, size - len(kept))

    async def _file_error(self, sandbox_id: str, path: str,
                          exc: DaytonaError) -> errors.SandboxError:
        """A file call failed: say why (missing, a directory, not running ...)."""
        error = await self._calls.toolbox_error(sandbox_id, exc)
        if type(error) in (errors.SandboxError, errors.InvalidInput, errors.Conflict):
            with contextlib.suppress(errors.SandboxError):
                info = await self.stat(sandbox_id, path)
                where: dict[str, Any] = {"provider": self.name, "sandbox_id": sandbox_id}
                if info.type == FileType.DIRECTORY:
                    return errors.IsADirectory(f"{path} is a directory", **where)
        return error

    async def write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        full = await self._calls.path(sandbox_id, path)
        if not posixpath.basename(full).isprintable():
            # The SDK sends the file's name in a multipart header, where control
            # characters are refused: upload under a plain name, then move it.
            staging = posixpath.join(posixpath.dirname(full),
                                     f".psdk-upload-{secrets.token_hex(8)}")
            with errors.reported_as(full, staging):
                await self.write_file(sandbox_id, staging, chunks)
                await self.rename(sandbox_id, staging, full)
            return
        head = bytearray()
        small = True
        async for chunk in chunks:
            head.extend(chunk)
            if len(head) > _SMALL_WRITE:
                small = False
                break
        # upload_file puts the whole path in a multipart header; upload_file_stream only
        # its last component.
        if small and full.isprintable():  # one request on the shared connection pool
            data = bytes(head)
            await self._upload(sandbox_id, full, lambda s: s.fs.upload_file(data, full))
            return

        async def everything() -> AsyncIterator[bytes]:
            yield bytes(head)
            async for rest in chunks:
                yield rest

        await self._upload(sandbox_id, full,
                           lambda s: s.fs.upload_file_stream(everything(), full))

    async def _upload(self, sandbox_id: str, path: str,
                      call: Callable[[AsyncSandbox], Awaitable[None]]) -> None:
        sandbox = await self._calls.sandbox(sandbox_id)
        try:
            await call(sandbox)
        except DaytonaError as exc:
            if status_of(exc) == 403 or "permission denied" in str(exc).lower() or \
                    "read-only" in str(exc).lower():
                raise errors.PermissionDenied(f"cannot write {path}: {exc}", provider=self.name,
                                              sandbox_id=sandbox_id) from exc
            raise await self._file_error(sandbox_id, path, exc) from exc

    async def list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        full = await self._calls.path(sandbox_id, path)
        sandbox = await self._calls.sandbox(sandbox_id)
        try:
            entries = await sandbox.fs.list_files(full)
        except DaytonaError as exc:
            error = await self._calls.toolbox_error(sandbox_id, exc)
            if not isinstance(error, (errors.NotFound, errors.SandboxNotRunning)):
                info = await self.stat(sandbox_id, full)
                if info.type != FileType.DIRECTORY:
                    raise errors.NotADirectory(f"{full} is not a directory", provider=self.name,
                                               sandbox_id=sandbox_id) from exc
            raise error from exc
        return [convert.to_file_info(posixpath.join(full, e.name), e) for e in entries]

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        full = await self._calls.path(sandbox_id, path)
        entry = await self._calls.toolbox(sandbox_id, lambda s: s.fs.get_file_info(full))
        info = convert.to_file_info(full, entry)
        if info.type == FileType.SYMLINK:
            target = await self._calls.toolbox(
                sandbox_id, lambda s: s.process.exec(f"readlink -- {shlex.quote(full)}"))
            info = FileInfo(path=info.path, type=info.type, size=info.size, mode=info.mode,
                            modified_at=info.modified_at,
                            symlink_target=(target.result or "").rstrip("\n") or None)
        return info

    async def mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        full = await self._calls.path(sandbox_id, path)
        where: dict[str, Any] = {"provider": self.name, "sandbox_id": sandbox_id}
        try:
            existing: FileInfo | None = await self.stat(sandbox_id, full)
        except errors.FileNotFound:
            existing = None
        if existing is not None:
            if existing.type != FileType.DIRECTORY or not exist_ok:
                raise errors.FileExists(f"{full} already exists", **where)
            return
        if not parents and not await self._exists(sandbox_id, posixpath.dirname(full)):
            raise errors.FileNotFound(f"{posixpath.dirname(full)}: no such directory", **where)
        await self._calls.toolbox(sandbox_id, lambda s: s.fs.create_folder(full, "755"))

    async def _exists(self, sandbox_id: str, path: str) -> bool:
        try:
            await self.stat(sandbox_id, path)
        except errors.FileNotFound:
            return False
        return True

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        full = await self._calls.path(sandbox_id, path)
        sandbox = await self._calls.sandbox(sandbox_id)
        try:
            await sandbox.fs.delete_file(full, recursive=recursive)
        except DaytonaError as exc:
            error = await self._calls.toolbox_error(sandbox_id, exc)
            if not recursive and not isinstance(error, (errors.NotFound,
                                                        errors.SandboxNotRunning)):
                raise errors.Conflict(f"{full} is a directory that is not empty (pass "
                                      "recursive=True)", provider=self.name,
                                      sandbox_id=sandbox_id) from exc
            raise error from exc

    async def rename(self, sandbox_id: str, src: str, dst: str) -> None:
        source = await self._calls.path(sandbox_id, src)
        target = await self._calls.path(sandbox_id, dst)
        await self._calls.toolbox(sandbox_id, lambda s: s.fs.move_files(source, target))
