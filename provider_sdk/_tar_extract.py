"""A tar stream unpacked into a local directory, refusing whatever would land outside it.

The archive comes from a sandbox, so it is read as hostile. Every member's path is
relative and free of ``..`` or it is refused; each directory on its way is opened
relative to its parent's descriptor with ``O_NOFOLLOW``, so no member is ever written
through a symbolic link or a file, whether the archive made the link or the destination
already held it. A member goes to a temporary name in its directory and is renamed over
its own name once whole, so a link or file there is replaced, never written through.
Links are made as they are, pointing wherever they point (inside the tree or out): they
are never followed. A hard link must name a member before it, inside the destination.
A device or FIFO is refused, and so are the archive's own extended headers past
:data:`HEADER_LIMIT` bytes, which the reader would otherwise hold whole, and sparse
files: a few bytes of sparse map stand for any number of zeros, which would be written
out in full, and a map the reader would hold as long as the archive runs on.

Permission bits are kept, but for setuid, setgid and sticky bits and write for group
and others, which are dropped: the files belong to the local user now, and a sandbox
does not open them (or the destination itself, whose bits are the archive's ``.``) to
every local user. Modification times are kept; directories get theirs once
their contents are in. What is refused raises :class:`~provider_sdk.errors.UnsafeArchive`
before any byte of that member is written; members before it stay.

This module runs in a worker thread (see :mod:`provider_sdk._tar_pipe`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tarfile
from collections.abc import Iterator
from typing import IO, Any, BinaryIO

from provider_sdk.errors import IsADirectory, UnsafeArchive

__all__ = ["HEADER_LIMIT", "extract_archive"]

HEADER_LIMIT = 1 << 20
"""Largest extended header (a pax header, a GNU long name or link) an archive may hold."""
_LONG = frozenset({tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                   tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK})
_SPARSE = tarfile.GNUTYPE_SPARSE
_MODE = 0o755
"""The permission bits a member may set: none for setuid, setgid, sticky, or writes by
group or others."""
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Bounded(tarfile.TarInfo):
    """A member header that refuses an extended header past :data:`HEADER_LIMIT`,
    and a sparse file in any of its formats, before the reader loads them."""

    def _proc_member(self, tarfile: tarfile.TarFile) -> Any:
        if self.type in _LONG and self.size > HEADER_LIMIT:
            raise UnsafeArchive(f"{self.name}: an extended header of {self.size} bytes "
                                f"(at most {HEADER_LIMIT})")
        if self.type == _SPARSE:
            self._sparse(self)
        return super()._proc_member(tarfile)  # type: ignore[misc]

    # The pax forms of a sparse file (GNU 0.0, 0.1 and 1.0), read after the pax header.
    def _proc_gnusparse_00(self, next: tarfile.TarInfo, *_: object) -> None:
        self._sparse(next)

    def _proc_gnusparse_01(self, next: tarfile.TarInfo, *_: object) -> None:
        self._sparse(next)

    def _proc_gnusparse_10(self, next: tarfile.TarInfo, *_: object) -> None:
        self._sparse(next)

    @staticmethod
    def _sparse(member: tarfile.TarInfo) -> None:
        raise UnsafeArchive(f"member {member.name!r} is a sparse file: only files, "
                            "directories and links are unpacked")


def extract_archive(source: BinaryIO, dest: str) -> None:
    """Unpack the tar stream ``source`` into ``dest`` (made, with its parents, if absent)."""
    os.makedirs(dest, exist_ok=True)
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _Unpack(root, dest).run(source)
    except tarfile.TarError as exc:  # a stream that is no tar archive, or breaks off
        raise UnsafeArchive(f"not a tar archive: {exc}") from None
    finally:
        os.close(root)


def _parts(name: str, what: str) -> list[str]:
    """``name``'s components below the destination; refuses one that leaves it."""
    if name.startswith("/"):
        raise UnsafeArchive(f"{what} {name!r} is an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"{what} {name!r} climbs out with '..'")
    return parts


class _Unpack:
    def __init__(self, root: int, dest: str) -> None:
        self._root = root
        self._dest = dest
        self._path: list[str] = []
        """The path the archive is in: each directory in :attr:`_open` is on it."""
        self._open: list[tuple[int, int, float]] = []
        """The directories the archive has named and not yet left, outermost first: each
        one's depth on :attr:`_path`, and the mode and time it gets once left (its
        contents, unpacked meanwhile, would change the time, and its mode may bar
        them). An archive lists a directory's contents right after it, so this holds
        one path, never the tree: a tree of many, or deep, directories costs nothing
        here."""

    def run(self, source: BinaryIO) -> None:
        with tarfile.open(fileobj=source, mode="r|", tarinfo=_Bounded) as tar:
            while (member := tar.next()) is not None:
                self.member(tar, member)
                # The reader keeps every header it reads; none is needed again.
                tar.members.clear()  # type: ignore[attr-defined]
        self._leave(-1)

    def _leave(self, depth: int) -> None:
        """Finish each open directory deeper than ``depth``, innermost first."""
        while self._open and self._open[-1][0] > depth:
            level, mode, mtime = self._open.pop()
            with self._opened(self._path[:level]) as fd:
                os.chmod(fd, mode)
                os.utime(fd, (mtime, mtime))
        del self._path[max(depth, 0):]

    def member(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        parts = _parts(member.name, "member")
        common = 0
        for have, want in zip(self._path, parts, strict=False):
            if have != want:
                break
            common += 1
        self._leave(common)  # the directories this member is not in
        if member.isdir():
            if parts:
                with self._opened(parts[:-1]) as parent:
                    self._directory(parent, parts[-1])
            if self._open and self._open[-1][0] == len(parts):  # named again
                self._open.pop()
            self._open.append((len(parts), member.mode & _MODE, member.mtime))
            self._path = parts
            return
        if not parts:
            raise UnsafeArchive(f"member {member.name!r} is not a directory but names the "
                                "destination itself")
        if not (member.isfile() or member.issym() or member.islnk()):
            raise UnsafeArchive(f"member {member.name!r} is a device or FIFO: "
                                "only files, directories and links are unpacked")
        link = _parts(member.linkname, "hard link target") if member.islnk() else None
        with self._opened(parts[:-1]) as parent:
            temporary = f".psdk-{secrets.token_hex(6)}"
            try:
                if member.issym():
                    os.symlink(member.linkname, temporary, dir_fd=parent)
                elif link is not None:
                    self._hard_link(link, member, parent, temporary)
                else:
                    data = tar.extractfile(member)
                    assert data is not None  # a regular file's
                    self._file(parent, temporary, data, member)
                self._replace(parent, temporary, parts[-1], member.name)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=parent)
                raise

    def _directory(self, parent: int, name: str) -> None:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            os.mkdir(name, 0o700, dir_fd=parent)
            return
        if stat.S_ISDIR(st.st_mode):
            os.chmod(name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=parent,
                     follow_symlinks=False)
            return
        os.unlink(name, dir_fd=parent)  # a link or file where the archive has a directory
        os.mkdir(name, 0o700, dir_fd=parent)

    def _file(self, parent: int, temporary: str, data: IO[bytes],
              member: tarfile.TarInfo) -> None:
        fd = os.open(temporary, _CREATE, 0o600, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(data, out, 1 << 20)
            os.chmod(fd, member.mode & _MODE)
            out.flush()
            os.utime(fd, (member.mtime, member.mtime))

    def _hard_link(self, link: list[str], member: tarfile.TarInfo, parent: int,
                   temporary: str) -> None:
        if not link:
            raise UnsafeArchive(f"member {member.name!r} links to the destination itself")
        with self._opened(link[:-1]) as source:
            try:
                os.link(link[-1], temporary, src_dir_fd=source, dst_dir_fd=parent,
                        follow_symlinks=False)
            except FileNotFoundError:
                raise UnsafeArchive(f"member {member.name!r} is a hard link to "
                                    f"{member.linkname!r}, which the archive did not "
                                    "hold before it") from None

    def _replace(self, parent: int, temporary: str, name: str, member: str) -> None:
        try:
            os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
        except IsADirectoryError:
            raise IsADirectory(f"{os.path.join(self._dest, member)}: a directory where "
                               "the archive has a file or link") from None

    @contextlib.contextmanager
    def _opened(self, parts: list[str]) -> Iterator[int]:
        """The directory at ``parts`` below the destination, each step without
        following a link; missing steps are made."""
        fd = os.dup(self._root)
        try:
            for index, part in enumerate(parts):
                try:
                    step = os.open(part, _OPEN_DIR, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    step = os.open(part, _OPEN_DIR, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise UnsafeArchive(
                        f"{'/'.join(parts[:index + 1])!r} is a symbolic link or a file: "
                        "nothing is unpacked through it") from None
                os.close(fd)
                fd = step
            yield fd
        finally:
            os.close(fd)
