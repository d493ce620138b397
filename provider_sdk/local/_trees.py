"""Directory trees of a local home: copied, removed, walked and measured whole.

Sandbox roots, snapshots and templates are plain directory trees; these helpers keep
owners, modes and special files when copying, and never let a reader see a tree half
removed. A sandbox's own files are its code's to shape: walking them (:func:`walk`)
goes by directory descriptors and never follows a symlink or opens anything but a
directory, and copying them while the sandbox may run (:func:`copy_confined`) confines
``cp`` to a namespace that holds nothing else of the host.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from provider_sdk.local import _system

__all__ = ["copy_confined", "copy_tree", "disk_usage", "make_dirs_within", "remove_tree",
           "walk"]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a root filesystem, keeping owners, modes, links and special files. For a
    tree nothing changes meanwhile (a snapshot, a template); a sandbox's live files go
    through :func:`copy_confined`."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    _copied(["cp", "-a", "--reflink=auto", "--", str(src), str(dst)], src,
            env={**os.environ, "LC_ALL": "C"})


def copy_confined(src: Path, dst: Path, *, bwrap: str) -> None:
    """:func:`copy_tree` of a sandbox's own files, which its code may change while they
    are copied: ``cp`` runs in bubblewrap with ``src`` (read-only), ``dst`` and the
    host's ``/usr`` as its only files, so a directory swapped for a symlink on the way
    leads to nothing of the host's. Run as root it keeps owners and extended attributes
    (an overlay layer's); otherwise, as ``copy_tree`` would, what the user may keep."""
    dst.mkdir(parents=True)
    user = [] if os.geteuid() == 0 else ["--unshare-user"]
    argv = [bwrap, *user, "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--die-with-parent", *_system.system_argv(),
            "--ro-bind", str(src), "/psdk-from", "--bind", str(dst), "/psdk-to",
             "cp", "-a", "--reflink=auto", "--", "/psdk-from/.", "/psdk-to/"]
    _copied(argv, src, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})


def _copied(argv: list[str], src: Path, *, env: dict[str, str]) -> None:
    done = subprocess.run(argv, capture_output=True, check=False, env=env)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        full = "No space left on device" in message or "Disk quota exceeded" in message
        raise OSError(errno.ENOSPC if full else errno.EIO, f"copying {src} failed: {message}")


def make_dirs_within(root: Path, relative: str,
                     owner: tuple[int, int] | None = None) -> None:
    """``mkdir -p`` of ``relative`` under ``root`` that never follows a symlink: a
    sandbox's files (a snapshot's, say) may hold one pointing anywhere on the host. A
    component that is a symlink or not a directory ends it quietly: the sandbox sees
    what it made there. The directories it makes get ``owner`` (uid, gid) if given."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in (p for p in relative.split("/") if p not in ("", ".")):
            if part == "..":
                return
            made = False
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
                made = True
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                return
            if made and owner is not None:
                os.fchown(inner, *owner)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove a directory tree, first moving it aside so no reader sees it half gone."""
    if not path.exists():
        return
    aside = path.with_name(f".deleted-{path.name}-{secrets.token_hex(4)}")
    path.rename(aside)
    (aside / "meta.json").unlink(missing_ok=True)
    shutil.rmtree(aside, ignore_errors=True)


MAX_DEPTH = 1024
"""Directories deep a walk goes (it holds a descriptor for each level)."""


def walk(root: Path) -> Iterator[tuple[int, str, os.stat_result]]:
    """Every entry under ``root`` (not ``root`` itself), as its directory's descriptor,
    its name and its ``lstat``: depth first, by descriptors only (one per level),
    opening directories alone, never through a symlink. An entry removed meanwhile is
    left out, and so is a directory swapped for something else before it is opened;
    running out of descriptors, or a tree deeper than :data:`MAX_DEPTH`, raises
    ``OSError``, never a walk that skips part of the tree unsaid."""
    stack: list[tuple[int, Iterator[str]]] = []
    try:
        top = os.open(root, _DIRECTORY)
        stack.append((top, iter(_names(top))))
        while stack:
            fd, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield fd, name, st
            if not stat.S_ISDIR(st.st_mode):
                continue
            if len(stack) >= MAX_DEPTH:
                raise OSError(errno.ELOOP, f"{root} holds directories nested deeper than "
                                           f"{MAX_DEPTH}")
            try:
                inner = os.open(name, _DIRECTORY, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    continue  # swapped or removed since it was listed
                raise
            stack.append((inner, iter(_names(inner))))
    finally:
        for fd, _names_left in stack:
            os.close(fd)


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries]


def disk_usage(root: Path, *, within: float = 5.0) -> int | None:
    """Bytes the files under ``root`` occupy (allocated blocks, not apparent sizes;
    each file once, however many names it has), or ``None`` where the walk cannot
    finish within ``within`` seconds (a tree that keeps changing under it)."""
    deadline = time.monotonic() + within
    seen: set[tuple[int, int]] = set()
    total = 0
    for _fd, _name, st in walk(root):
        if time.monotonic() > deadline:
            return None
        if stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
    return total
