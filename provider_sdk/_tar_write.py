"""A local directory tree as a tar archive, written to a file object as it is walked.

The walk never follows a symbolic link: each directory is opened relative to its
parent's descriptor with ``O_NOFOLLOW``, each file likewise, so a link (whatever it
points at, inside the tree or out) goes into the archive as a link, and a path swapped
for a link during the walk is refused rather than followed. Permission bits and
modification times are kept; owners are not (the archive names none). A file with
several names in the tree goes in once, the others as hard links to it. A device, FIFO
or socket is refused: a copy of a tree carries files, directories and links.

This module runs in a worker thread (see :mod:`provider_sdk._tar_pipe`); it does no I/O
but the local files' and the output's.
"""

from __future__ import annotations

import os
import stat
import tarfile
from typing import BinaryIO

from provider_sdk.errors import NotARegularFile

__all__ = ["archive_tree"]

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def archive_tree(root: str, out: BinaryIO) -> None:
    """Write the tree at ``root`` (the directory itself followed if it is a link, as
    named) to ``out`` as a tar stream; member names are relative, ``.`` the root."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            _Walk(tar, root).directory(root_fd, ".", os.fstat(root_fd))
    finally:
        os.close(root_fd)


class _Walk:
    def __init__(self, tar: tarfile.TarFile, root: str) -> None:
        self._tar = tar
        self._root = root
        self._seen: dict[tuple[int, int], str] = {}

    def directory(self, fd: int, name: str, st: os.stat_result) -> None:
        self._tar.addfile(_member(name, tarfile.DIRTYPE, st))
        with os.scandir(fd) as entries:
            children = sorted(entry.name for entry in entries)
        for child in children:
            self.entry(fd, child, child if name == "." else f"{name}/{child}")

    def entry(self, parent: int, child: str, name: str) -> None:
        st = os.stat(child, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            member = _member(name, tarfile.SYMTYPE, st)
            member.linkname = os.readlink(child, dir_fd=parent)
            self._tar.addfile(member)
        elif stat.S_ISDIR(st.st_mode):
            fd = os.open(child, _OPEN_DIR, dir_fd=parent)
            try:
                self.directory(fd, name, os.fstat(fd))
            finally:
                os.close(fd)
        elif stat.S_ISREG(st.st_mode):
            self.file(parent, child, name)
        else:
            raise NotARegularFile(f"{os.path.join(self._root, name)}: a device, FIFO or "
                                  "socket; a directory is copied with its files, "
                                  "directories and symbolic links only")

    def file(self, parent: int, child: str, name: str) -> None:
        fd = os.open(child, _OPEN_FILE, dir_fd=parent)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped since it was listed
                raise NotARegularFile(f"{os.path.join(self._root, name)}: changed into "
                                      "something other than a file while it was copied")
            os.set_blocking(fd, True)
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self._seen:
                member = _member(name, tarfile.LNKTYPE, st)
                member.linkname = self._seen[key]
                self._tar.addfile(member)
                return
            if st.st_nlink > 1:
                self._seen[key] = name
            member = _member(name, tarfile.REGTYPE, st)
            member.size = st.st_size
            self._tar.addfile(member, f)


def _member(name: str, kind: bytes, st: os.stat_result) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.mode = stat.S_IMODE(st.st_mode)
    member.mtime = int(st.st_mtime)
    return member
