"""The memory provider's files API: the sandbox's tree as its commands see it, every path
resolved inside its root (see :mod:`._paths`)."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import posixpath
import secrets
import stat
from collections.abc import AsyncIterator

from provider_sdk.errors import IsADirectory, NotARegularFile
from provider_sdk.models import FileInfo

from ._box import CHUNK, NAME
from ._paths import absolute, errors, file_info, makedirs, open_in, parent_of, remove_tree
from ._store import Store


class MemoryFiles:
    """Files over the shared :class:`~._store.Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        box = self.store.running(sandbox_id)
        path = absolute(box, path)
        with errors(box, path):
            # O_NONBLOCK: a FIFO is opened without waiting for a writer, then refused.
            fd = open_in(box, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectory(f"{path} is a directory", provider=NAME,
                                   sandbox_id=sandbox_id)
            if not stat.S_ISREG(mode):
                raise NotARegularFile(f"{path} is not a regular file (a device, FIFO or "
                                      "socket): it cannot be read", provider=NAME,
                                      sandbox_id=sandbox_id)
            os.set_blocking(fd, True)
            while data := os.read(fd, CHUNK):
                yield data
        finally:
            os.close(fd)

    async def write_file(self, sandbox_id: str, path: str,
                         chunks: AsyncIterator[bytes]) -> None:
        """Write to a temporary file beside ``path``, then rename it over ``path``."""
        box = self.store.running(sandbox_id)
        path = absolute(box, path)
        name, tmp = posixpath.basename(path), f".psdk-write-{secrets.token_hex(6)}"
        with errors(box, path):
            parent = makedirs(box, posixpath.dirname(path))
        try:
            with errors(box, path):
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False)
                                    .st_mode):
                        raise IsADirectoryError(errno.EISDIR, "is a directory")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644,
                             dir_fd=parent)
            try:
                with os.fdopen(fd, "wb", buffering=0) as file:
                    async for chunk in chunks:
                        view = memoryview(chunk)
                        while view:
                            view = view[file.write(view) or 0:]
                with errors(box, path):
                    os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=parent)
        finally:
            os.close(parent)

    async def list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        box = self.store.running(sandbox_id)
        path = absolute(box, path)
        with errors(box, path):
            fd = open_in(box, path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                found = []
                for name in os.listdir(fd):
                    with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                        found.append(file_info(fd, name, posixpath.join(path, name)))
                return found
            finally:
                os.close(fd)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        box = self.store.running(sandbox_id)
        path = absolute(box, path)
        with errors(box, path), parent_of(box, path) as (parent, name):
            return file_info(parent, name, path)

    async def mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                    exist_ok: bool) -> None:
        box = self.store.running(sandbox_id)
        path = absolute(box, path)
        with errors(box, path), parent_of(box, path, make=parents) as (parent, name):
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                if not (exist_ok and stat.S_ISDIR(os.stat(name, dir_fd=parent).st_mode)):
                    raise

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        box = self.store.running(sandbox_id)
        path = absolute(box, path)
        with errors(box, path), parent_of(box, path) as (parent, name):
            if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=parent)
            elif recursive:
                remove_tree(parent, name)
            else:
                os.rmdir(name, dir_fd=parent)

    async def rename(self, sandbox_id: str, src: str, dst: str) -> None:
        box = self.store.running(sandbox_id)
        src, dst = absolute(box, src), absolute(box, dst)
        with errors(box, src), parent_of(box, src) as (src_dir, src_name):
            os.stat(src_name, dir_fd=src_dir, follow_symlinks=False)
            with errors(box, dst), parent_of(box, dst, make=True) as (dst_dir, dst_name):
                os.replace(src_name, dst_name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
