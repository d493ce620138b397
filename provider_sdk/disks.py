"""Bounded filesystems for sandboxes: ext4 images in sparse files, loop-mounted on the
host. A sandbox's writes into one fail with ENOSPC at its size, and the host's disk holds
at most that.

One blank image per size is formatted once (:func:`blank`) and copied sparsely
(:func:`sparse_copy`) for each filesystem, so making one costs a copy of a few MiB of
metadata and a mount. Mounting needs root and loop devices (:func:`available`). The
local provider bounds its sandboxes' writable layers and its volumes with them, the
Docker provider its sandboxes' own directories where the Engine's storage has no quotas.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import subprocess
from pathlib import Path

__all__ = ["IMAGE", "available", "blank", "copy_into", "mount", "no_space", "sparse_copy",
           "unmount"]

IMAGE = "disk.img"
"""The image's file name, beside what it holds."""
_MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
_TOOLS = ("mkfs.ext4", "debugfs", "mount", "umount")

_NO_SPACE = "No space left on device"


def available() -> bool:
    """Whether this process can make and mount bounded filesystems (root, loop devices,
    ``mkfs.ext4``)."""
    return (os.geteuid() == 0 and Path("/dev/loop-control").exists()
            and all(_which(tool) for tool in _TOOLS))


def _which(tool: str) -> str | None:
    return shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")


def blank(base: Path, mb: int) -> Path:
    """The blank image of ``mb`` MiB, made once (concurrent first makers race
    safely: each formats its own file and the first rename wins)."""
    image = base / f"blank-{mb}.img"
    if image.is_file():
        return image
    base.mkdir(parents=True, exist_ok=True)
    staging = base / f".blank-{os.getpid()}-{secrets.token_hex(6)}.img"
    try:
        with open(staging, "xb") as f:
            f.truncate(mb << 20)
        # No reserved blocks: the sandbox's user may be root, and its quota is exact.
        # Lazy init keeps the sparse file small and mkfs fast.
        _run([_which("mkfs.ext4") or "mkfs.ext4", "-q", "-F", "-m", "0",
              "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", "-L", "psdk",
              str(staging)], what="formatting a sandbox disk image")
        _without_lost_found(staging)
        if image.exists():
            staging.unlink()
        else:
            os.replace(staging, image)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return image


def _without_lost_found(image: Path) -> None:
    """Remove ``lost+found`` so a sandbox's ``/`` shows only its own files (edited in
    the image, unmounted: a maker killed half way leaves no mount behind)."""
    _run([_which("debugfs") or "debugfs", "-w", "-R", "rmdir lost+found", str(image)],
         what="preparing a sandbox disk image")


def sparse_copy(src: Path, dst: Path) -> None:
    """Copy a sparse file's data extents only (in the kernel; a reflink where the
    filesystem can), keeping its holes: no process is started for it."""
    with open(src, "rb") as source, open(dst, "xb") as target:
        size = os.fstat(source.fileno()).st_size
        target.truncate(size)
        offset = 0
        while offset < size:
            try:
                data = os.lseek(source.fileno(), offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole is left
                    return
                raise
            hole = os.lseek(source.fileno(), data, os.SEEK_HOLE)
            while data < hole:
                copied = os.copy_file_range(source.fileno(), target.fileno(), hole - data,
                                            data, data)
                if copied == 0:
                    raise OSError(errno.EIO, f"{src} shrank while being copied")
                data += copied
            offset = hole


def mount(image: Path, target: Path) -> None:
    """Loop-mount an ext4 image on ``target`` in the host's mount namespace."""
    _run([_which("mount") or "mount", "-t", "ext4", "-o", _MOUNT_OPTIONS, "--", str(image),
          str(target)], what="mounting the sandbox's disk image")


def unmount(target: Path) -> None:
    """Unmount ``target``; one still busy is detached lazily (it goes when its last user
    does)."""
    umount = _which("umount") or "umount"
    done = subprocess.run([umount, "--", str(target)], capture_output=True, check=False)
    if done.returncode != 0 and os.path.ismount(target):
        _run([umount, "-l", "--", str(target)], what="unmounting a sandbox's disk image")


def copy_into(src: Path, dst: Path) -> None:
    """Copy a directory's contents into an existing directory (a mount point),
    keeping owners, modes, links and special files."""
    _run(["cp", "-a", "--reflink=auto", "--", f"{src}/.", str(dst)],
         what=f"copying {src}")


def _run(argv: list[str], *, what: str) -> None:
    done = subprocess.run(argv, capture_output=True, check=False,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        code = errno.ENOSPC if _NO_SPACE in message else errno.EIO
        raise OSError(code, f"{what} failed: {message}")


def no_space(exc: BaseException) -> bool:
    """Whether an error means the home's filesystem is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
