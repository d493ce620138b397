"""Directory trees of a local home: copied, removed and measured whole.

Sandbox roots, snapshots and templates are plain directory trees; these helpers keep
owners, modes and special files when copying, and never let a reader see a tree half
removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import subprocess
from pathlib import Path

__all__ = ["copy_tree", "disk_usage", "make_dirs_within", "remove_tree"]


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a root filesystem, keeping owners, modes, links and special files."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["cp", "-a", "--reflink=auto", "--", str(src), str(dst)],
                          capture_output=True, check=False, env={**os.environ, "LC_ALL": "C"})
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


def disk_usage(root: Path) -> int:
    """Bytes the files under ``root`` occupy (allocated blocks, not apparent sizes)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total
