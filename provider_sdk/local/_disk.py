"""Disk quotas for local sandboxes: each writable layer is its own small filesystem.

A sandbox's own files (its root, or for a template sandbox the overlay's ``upper`` and
``work`` directories) live on an ext4 filesystem in a sparse file of ``disk_mb`` MiB,
``<sandbox>/disk.img``, loop-mounted on the host. Writes past it fail inside with
ENOSPC, and the host's disk holds at most the image's size. The blank image is made
once per home (``base/blank-<MiB>.img``) and copied sparsely for each sandbox, so a
create costs a copy of a few MiB of metadata and one mount.

The mount lives in the host's mount namespace: it outlives the process that made it,
is unmounted when the sandbox is killed, and is made again when a sandbox whose
processes are gone (after a host restart) is started from its files. Mounting needs
root; elsewhere (:func:`available` is false) there is no quota and ``disk_mb`` is
refused.

A volume made where mounting is possible is such a filesystem too, of
:data:`VOLUME_MB` (``<volume>/disk.img``, mounted on its ``data`` directory): it is
bounded, and a sandbox's mount table shows a device for it, not the volume's path in the
home (a bind of a plain directory shows where it lives). Elsewhere, and for volumes made
by an older version, a volume is a plain directory and is not bounded.

This module knows images, mounts and paths; it starts no sandbox.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from provider_sdk import errors
from provider_sdk.disks import (
    IMAGE,
    mount,
    no_space,
    sparse_copy,
    unmount,
)

if TYPE_CHECKING:
    from provider_sdk.local._records import SandboxRecord

DEFAULT_DISK_MB = 4096
"""The writable layer's size when the spec gives no ``Resources.disk_mb``."""
VOLUME_MB = 16384
"""A volume's size where volumes are filesystems of their own."""
LAYER = "layer"
"""Where a template sandbox's image is mounted (its ``upper`` and ``work`` inside)."""


def has_quota(meta: SandboxRecord) -> bool:
    """Whether a sandbox record has a quota'd layer (records made without one, where
    mounting is not possible or by an older version, are plain directories)."""
    return bool(meta.resources.disk_mb)


def mount_point(directory: Path, template: str) -> Path:
    """Where a sandbox's image is mounted: its root, or the directory holding a
    template sandbox's overlay layer."""
    return directory / ("root" if template == "default" else LAYER)


def overlay_dirs(directory: Path, meta: SandboxRecord) -> tuple[Path, Path]:
    """A template sandbox's overlay ``upper`` and ``work`` directories."""
    base = directory / LAYER if has_quota(meta) else directory
    return base / "upper", base / "work"


def own_files(directory: Path, meta: SandboxRecord) -> Path:
    """The directory holding the files a sandbox wrote (what a snapshot keeps)."""
    if meta.template == "default":
        return directory / "root"
    return overlay_dirs(directory, meta)[0]


def make(directory: Path, template: str, blank_image: Path) -> Path:
    """Give a new sandbox its own copy of the blank image, mounted; return the mount
    point (empty)."""
    image = directory / IMAGE
    sparse_copy(blank_image, image)
    target = mount_point(directory, template)
    target.mkdir(exist_ok=True)
    mount(image, target)
    return target


def ensure_mounted(
directory: Path, meta: SandboxRecord) -> None:
    """Mount a quota'd sandbox's image if it is not (after a host restart)."""
    if not has_quota(meta):
        return
    target = mount_point(directory, meta.template)
    if not os.path.ismount(target):
        mount(directory / IMAGE, target)


def make_volume(directory: Path, blank_image: Path) -> None:
    """Give a new volume its own copy of the blank image, mounted on ``data``."""
    sparse_copy(blank_image, directory / IMAGE)
    (directory / "data").mkdir()
    mount(directory / IMAGE, directory / "data")


def ensure_volume_mounted(directory: Path) -> None:
    """Mount a volume's image if it has one and it is not mounted (after a host
    restart); a plain-directory volume is left as it is."""
    if (directory / IMAGE).is_file() and not os.path.ismount(directory / "data"):
        mount(directory / IMAGE, directory / "data")


def unmount_all(directory: Path) -> None:
    """Unmount whatever this module mounted in a sandbox's directory (kill, and a
    failed create). A mount still busy is detached lazily: it goes when its last user
    does, and the directory can be removed now."""
    for name in ("root", LAYER):
        target = directory / name
        if os.path.ismount(target):
            unmount(target)


def full_error(exc: OSError, *, doing: str, provider: str,
               sandbox_id: str | None = None) -> errors.QuotaExceeded:
    """The typed error for a full home: what was being done and where."""
    return errors.QuotaExceeded(
        f"{doing} failed: the local provider's state directory is out of disk space "
        f"({exc.strerror or exc})", provider=provider, sandbox_id=sandbox_id)


@contextlib.contextmanager
def typed_full(*, doing: str, provider: str,
               sandbox_id: str | None = None) -> Iterator[None]:
    """Turn a full home (ENOSPC/EDQUOT) into ``QuotaExceeded``."""
    try:
        yield
    except OSError as exc:
        if no_space(exc):
            raise full_error(exc, doing=doing, provider=provider,
                             sandbox_id=sandbox_id) from exc
        raise
