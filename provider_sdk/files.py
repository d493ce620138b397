"""A sandbox's files (``sandbox.files``): read, write, stream, list, stat, make, remove,
rename, upload and download (of files and of directory trees), each validated, evented
and handed to the provider's hooks.

Paths are checked here (:func:`check_path`) for every handle that takes one.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Protocol, cast

import anyio

from provider_sdk import _dir_transfer
from provider_sdk._hooks import ProviderHooks
from provider_sdk._transfer import CHUNK, as_chunks, named, next_chunk
from provider_sdk._transfer import Data as Data  # write()'s argument type
from provider_sdk.errors import FileNotFound, FileTooLarge, InvalidInput, attributed
from provider_sdk.events import span
from provider_sdk.limits import OutputBuffer, check_limit
from provider_sdk.models import FileInfo, FileType

__all__ = ["Files", "check_path"]

_SIZE_CHECK_AFTER = 16 << 20  # bytes past which a read asks for the file's size first


class _Owner(Protocol):
    """What :class:`Files` needs of its sandbox (a :class:`~provider_sdk.sandbox.Sandbox`):
    the provider's hooks and the sandbox's id."""

    @property
    def provider(self) -> ProviderHooks: ...

    @property
    def id(self) -> str: ...


class Files:
    """File operations inside a sandbox. Paths are absolute, or relative to the
    sandbox's working directory; a path never reaches outside the sandbox."""

    def __init__(self, sandbox: _Owner) -> None:
        self._sandbox = sandbox
        self._provider = sandbox.provider

    @property
    def _id(self) -> str:
        return self._sandbox.id

    async def read(self, path: str, *, limit: int | None = None) -> bytes:
        """A file's whole content.

        At most ``limit`` bytes are loaded (default: the provider's
        :attr:`~provider_sdk.provider.SandboxProvider.read_limit`, 256 MiB): a larger
        file raises :class:`~provider_sdk.errors.FileTooLarge` and nothing is returned;
        use :meth:`stream` or :meth:`download` for it. A device, FIFO or socket raises
        :class:`~provider_sdk.errors.NotARegularFile`.
        """
        with attributed(self._provider.name, self._id):
            most = check_limit("limit", self._provider.read_limit if limit is None else limit)
        too_large = FileTooLarge(f"{path}: larger than the read limit of {most} bytes; "
                                 "stream it with files.stream() or files.download()",
                                 limit=most, provider=self._provider.name, sandbox_id=self._id)
        head = await self._read_at_most(path, min(most, _SIZE_CHECK_AFTER))
        if head is not None:
            return head
        # A large file: ask for its size (with no read open, which some backends
        # serialize against), so one far past the limit fails now instead of after
        # filling memory up to the limit; then read it again, whole.
        info = await self.stat(path)
        if info.type == FileType.FILE and info.size > most:
            raise too_large
        whole = await self._read_at_most(path, most)
        if whole is None:
            raise too_large
        return whole

    async def _read_at_most(self, path: str, most: int) -> bytes | None:
        """The file's content if it is at most ``most`` bytes, else ``None``."""
        kept = OutputBuffer(most)
        chunks = self.stream(path)
        try:
            async for chunk in chunks:
                kept.append(chunk)
                if kept.dropped:
                    return None
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        return kept.value()

    async def read_text(self, path: str, encoding: str = "utf-8", *,
                        limit: int | None = None) -> str:
        """A file's content decoded (strictly) as ``encoding``; ``limit`` as in :meth:`read`."""
        return (await self.read(path, limit=limit)).decode(encoding)

    async def stream(self, path: str) -> AsyncIterator[bytes]:
        """Yield a file's content in chunks, never holding it whole. Closing the stream
        before its end closes the provider's read at once (its connection, its open
        file), not whenever the garbage collector gets to it."""
        check_path(path, self._provider.name, self._id)
        async with span("files.read", self._provider.name, self._id):
            chunks = self._provider._read_file(self._id, path)
            try:
                async for chunk in chunks:
                    yield chunk
            finally:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()

    async def write(self, path: str, data: Data) -> None:
        """Write a file (replacing it), creating parent directories.

        ``data`` is bytes, text (UTF-8), or an (async) iterable of byte chunks.
        """
        check_path(path, self._provider.name, self._id)
        async with span("files.write", self._provider.name, self._id):
            await self._provider._write_file(self._id, path, as_chunks(data))

    async def list(self, path: str = ".") -> builtins.list[FileInfo]:
        """A directory's entries, sorted by name."""
        check_path(path, self._provider.name, self._id)
        async with span("files.list", self._provider.name, self._id):
            entries = await self._provider._list_dir(self._id, path)
        return sorted(entries, key=lambda e: e.path)

    async def stat(self, path: str) -> FileInfo:
        """Details of one path; :class:`~provider_sdk.errors.FileNotFound` if absent."""
        check_path(path, self._provider.name, self._id)
        async with span("files.stat", self._provider.name, self._id):
            return await self._provider._stat(self._id, path)

    async def exists(self, path: str) -> bool:
        """Whether the path exists."""
        try:
            await self.stat(path)
        except FileNotFound:
            return False
        return True

    async def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        """Create a directory (and its parents)."""
        check_path(path, self._provider.name, self._id)
        async with span("files.mkdir", self._provider.name, self._id):
            await self._provider._mkdir(self._id, path, parents=parents, exist_ok=exist_ok)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, or a directory (with its contents if ``recursive``).

        A non-empty directory without ``recursive`` is a
        :class:`~provider_sdk.errors.Conflict`, and nothing is removed.
        """
        check_path(path, self._provider.name, self._id)
        async with span("files.remove", self._provider.name, self._id):
            await self._provider._remove(self._id, path, recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``."""
        check_path(src, self._provider.name, self._id)
        check_path(dst, self._provider.name, self._id)
        async with span("files.rename", self._provider.name, self._id):
            await self._provider._rename(self._id, src, dst)

    async def upload(self, local_path: str | os.PathLike[str], path: str) -> None:
        """Copy a local file into the sandbox in chunks."""
        check_path(path, self._provider.name, self._id)

        async def chunks() -> AsyncIterator[bytes]:
            async with await anyio.open_file(local_path, "rb") as f:
                while chunk := await f.read(CHUNK):
                    yield chunk

        async with span("files.upload", self._provider.name, self._id):
            await self._provider._write_file(self._id, path, chunks())

    async def download(self, path: str, local_path: str | os.PathLike[str], *,
                       progress: Callable[[int], object] | None = None) -> None:
        """Copy a file out of the sandbox in chunks; the local file is replaced.

        Nothing is created until the first chunk has arrived, so a refused source
        (:class:`~provider_sdk.errors.NotARegularFile`, ``FileNotFound``) writes nothing.
        The content then goes to a hidden file beside ``local_path``, renamed over it
        once complete: an error, a cancellation or a signal leaves ``local_path`` as it
        was and no partial file. Local errors name ``local_path``, never that hidden file.
        ``progress``, if given, is called with the size of each chunk written.
        """
        target = os.fspath(local_path)
        chunks = cast("AsyncGenerator[bytes, None]", self.stream(path))
        try:
            first = await next_chunk(chunks)
            partial = os.path.join(os.path.dirname(target),
                                   f".{os.path.basename(target)}.psdk-{secrets.token_hex(4)}")
            try:
                with named(target):
                    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                                 0o666)
                try:
                    with named(target):
                        f = await anyio.open_file(fd, "wb")
                except BaseException:
                    os.close(fd)
                    raise
                async with f:
                    chunk: bytes | None = first or b""  # an empty file is a file
                    while chunk is not None:
                        with named(target):
                            await f.write(chunk)
                        if progress is not None:
                            progress(len(chunk))
                        chunk = await next_chunk(chunks)
                with named(target):
                    os.replace(partial, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(partial)
                raise
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.aclose()

    async def upload_dir(self, local_path: str | os.PathLike[str], path: str) -> None:
        """Copy the local directory tree ``local_path`` to ``path`` in the sandbox,
        streamed as a tar archive (the tree is never held in memory).

        ``path`` is made (with its parents) if absent; what the tree holds is written
        into it, replacing entries of the same name, and other entries are kept.
        Symbolic links are copied as links, wherever they point, and never followed,
        in the local tree or in the sandbox; permission bits and modification times
        are kept, owners become the sandbox user. A device, FIFO or socket in the
        tree raises :class:`~provider_sdk.errors.NotARegularFile` and nothing is
        unpacked. Needs ``tar`` in the sandbox.
        """
        check_path(path, self._provider.name, self._id)
        async with span("files.upload_dir", self._provider.name, self._id):
            await _dir_transfer.upload_dir(self._provider, self._id, os.fspath(local_path),
                                           path)

    async def download_dir(self, path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy the directory tree at ``path`` in the sandbox to ``local_path``,
        streamed as a tar archive and unpacked as it arrives.

        ``local_path`` is made (with its parents) if absent; entries of the same name
        are replaced, others kept. Symbolic links are made as links, wherever they
        point, and never followed: a member that would be written through a link or
        outside ``local_path`` (an absolute path, ``..``, a hard link out, a device)
        raises :class:`~provider_sdk.errors.UnsafeArchive` before it is written, and
        nothing outside ``local_path`` is touched. Permission bits (without setuid,
        setgid or sticky bits) and modification times are kept; the files belong to
        the local user. Needs ``tar`` in the sandbox.
        """
        check_path(path, self._provider.name, self._id)
        async with span("files.download_dir", self._provider.name, self._id):
            await _dir_transfer.download_dir(self._provider, self._id, path,
                                             os.fspath(local_path))


def check_path(path: str, provider: str, sandbox_id: str) -> None:
    """Refuse what cannot be a path: not a string, empty, or holding a NUL byte."""
    if not isinstance(path, str):
        raise InvalidInput(f"path: expected a string, got {type(path).__name__}",
                           provider=provider, sandbox_id=sandbox_id)
    if not path or "\0" in path:
        raise InvalidInput(f"path: {path!r} is empty or contains a NUL byte",
                           provider=provider, sandbox_id=sandbox_id)
