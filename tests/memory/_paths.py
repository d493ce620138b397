"""Paths of a memory sandbox, resolved on the host inside its root as its processes see
it (``/proc/<pid>/root``, with ``openat2`` and ``RESOLVE_IN_ROOT``: neither ``..`` nor a
symlink leads out), and the OS errors met there as the SDK's."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import errno
import os
import posixpath
import stat
from collections.abc import Callable, Iterator

from provider_sdk.errors import (
    Conflict,
    FileExists,
    FileNotFound,
    IsADirectory,
    NotADirectory,
    PermissionDenied,
    SandboxError,
)
from provider_sdk.models import FileInfo, FileType

from ._box import NAME, Box

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_OPENAT2 = 437  # the same number on every architecture
_RESOLVE_NO_MAGICLINKS, _RESOLVE_IN_ROOT = 0x02, 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def open_in(box: Box, path: str, flags: int) -> int:
    """Open ``path`` of the sandbox, every component resolved inside its root."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(box.root_fd),
                       ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                       ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


def makedirs(box: Box, path: str) -> int:
    """Open directory ``path`` of the sandbox (``O_PATH``), making what is missing."""
    try:
        return _open_dir(box, path)
    except FileNotFoundError:
        if path == "/":
            raise
    parent = makedirs(box, posixpath.dirname(path))
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(posixpath.basename(path), 0o755, dir_fd=parent)
    finally:
        os.close(parent)
    return _open_dir(box, path)


@contextlib.contextmanager
def parent_of(box: Box, path: str, *, make: bool = False) -> Iterator[tuple[int, str]]:
    """The open parent directory of ``path`` and its last component (``.`` for ``/``)."""
    if path == "/":
        parent, name = _open_dir(box, "/"), "."
    else:
        dirname, name = posixpath.split(path)
        parent = (makedirs if make else _open_dir)(box, dirname)
    try:
        yield parent, name
    finally:
        os.close(parent)


def _open_dir(box: Box, path: str) -> int:
    return open_in(box, path, os.O_PATH | os.O_DIRECTORY)


_ERRORS: dict[int, Callable[..., SandboxError]] = {
    errno.ENOENT: FileNotFound, errno.ELOOP: FileNotFound, errno.ENOTDIR: NotADirectory,
    errno.EISDIR: IsADirectory, errno.EEXIST: FileExists, errno.ENOTEMPTY: Conflict,
    errno.EACCES: PermissionDenied, errno.EPERM: PermissionDenied,
    errno.EROFS: PermissionDenied, errno.EXDEV: Conflict, errno.EBUSY: Conflict,
}


@contextlib.contextmanager
def errors(box: Box, path: str) -> Iterator[None]:
    """OS errors as the SDK's, naming the caller's path (never a temporary file)."""
    try:
        yield
    except SandboxError:
        raise
    except OSError as exc:
        kind = _ERRORS.get(exc.errno or 0, SandboxError)
        raise kind(f"{path}: {os.strerror(exc.errno or errno.EIO)}", provider=NAME,
                   sandbox_id=box.info.id) from None


def file_info(parent: int, name: str, path: str) -> FileInfo:
    """What ``name`` in directory ``parent`` is, reported as ``path``; a final symlink
    is not followed."""
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    modified = dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return FileInfo(path=path, type=FileType.SYMLINK, size=st.st_size, mode=mode,
                        modified_at=modified, symlink_target=os.readlink(name, dir_fd=parent))
    kind = FileType.DIRECTORY if stat.S_ISDIR(st.st_mode) else \
        FileType.FILE if stat.S_ISREG(st.st_mode) else FileType.OTHER
    return FileInfo(path=path, type=kind, size=st.st_size if kind == FileType.FILE else 0,
                    mode=mode, modified_at=modified)


def remove_tree(parent: int, name: str) -> None:
    """Remove directory ``name`` and everything in it, following no symlink."""
    for _path, dirs, files, fd in os.fwalk(name, topdown=False, dir_fd=parent):
        for entry in files:
            os.unlink(entry, dir_fd=fd)
        for entry in dirs:
            try:
                os.rmdir(entry, dir_fd=fd)
            except NotADirectoryError:  # a symlink to a directory
                os.unlink(entry, dir_fd=fd)
    os.rmdir(name, dir_fd=parent)


def absolute(box: Box, path: str) -> str:
    """``path`` of the sandbox made absolute against its working directory."""
    path = posixpath.normpath(posixpath.join(box.workdir, path))
    return path[1:] if path.startswith("//") else path
