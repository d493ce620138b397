"""The places bubblewrap mounts on in a sandbox's own files, checked before it starts.

bubblewrap makes the directories and files it mounts on, and follows symlinks on the
way, while the host's root is still in reach (at ``/oldroot``): a symlink the sandbox's
code left in its own files (its root, or a template sandbox's layer) could make it
create a directory or a file wherever the id it runs as may write on the host. Before
each start, while none of the sandbox's processes runs, :func:`check` walks every path
bubblewrap mounts on through the sandbox's layers: a symlink, or anything but a
directory, on the way in the sandbox's own layer is refused (``SandboxError`` naming
it); one where a file is bound over is removed (bubblewrap makes a plain file there). A
template's own files are trusted (its symlinks come from a Dockerfile); a volume's
place that passes through one is refused. What is missing is left to bubblewrap, which
makes it through the sandbox's own view. Blocking; this module starts nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from provider_sdk import errors

__all__ = ["RESERVED", "check", "check_volume_targets"]

_OPAQUE = "trusted.overlay.opaque"
RESERVED = ("/proc", "/dev", "/sys", "/etc/psdk", "/.psdk", "/etc/hosts", "/etc/hostname",
            "/etc/ld.so.preload")
"""Places that are the sandbox's own mounts (its processes, devices, the agent and what
starts it): no volume is mounted on one, under one, or over one."""


def check_volume_targets(targets: Sequence[str], *, provider: str,
                         sandbox_id: str | None = None) -> None:
    """Refuse (``InvalidInput``) a volume target that is not a plain absolute path (no
    ``.``, ``..`` or empty component, not ``/``), that is on, under or over one of
    :data:`RESERVED`, or that is another's or lies under another's: a volume inside a
    volume has its mount point made in files every sandbox that mounts the outer one
    may shape, while they run."""
    for target in targets:
        parts = target.split("/")[1:]
        if not target.startswith("/") or target == "/" or any(
                part in ("", ".", "..") for part in parts):
            raise errors.InvalidInput(
                f"a volume's mount path must be a plain absolute path (no '.', '..' or "
                f"'//', not '/'), got {target!r}", provider=provider, sandbox_id=sandbox_id)
        for reserved in RESERVED:
            if _within(target, reserved) or _within(reserved, target):
                raise errors.InvalidInput(
                    f"a volume cannot be mounted at {target}: {reserved} is the sandbox's "
                    "own", provider=provider, sandbox_id=sandbox_id)
    for index, target in enumerate(targets):
        for other in targets[index + 1:]:
            if _within(target, other) or _within(other, target):
                raise errors.InvalidInput(
                    f"volumes cannot be mounted at {other} and {target}: one would be "
                    "mounted inside the other", provider=provider, sandbox_id=sandbox_id)


def _within(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip("/") + "/")


def check(layers: Sequence[Path], *, directories: Iterable[str], files: Iterable[str],
          volumes: Iterable[str], provider: str, sandbox_id: str) -> None:
    """Check each of ``directories``, ``files`` (bound over: a symlink there is removed)
    and ``volumes`` (directories a volume is mounted on) against ``layers``: the
    sandbox's own files first, then a template's below (an overlay's layers, top
    first). Raises ``SandboxError`` for a path that leads through a symlink or a file
    of the sandbox's own, or for a volume's that leads through a template's symlink."""
    for path in directories:
        _check(layers, path, bound_file=False, volume=False, provider=provider,
               sandbox_id=sandbox_id)
    for path in files:
        _check(layers, path, bound_file=True, volume=False, provider=provider,
               sandbox_id=sandbox_id)
    for path in volumes:
        _check(layers, path, bound_file=False, volume=True, provider=provider,
               sandbox_id=sandbox_id)


def _check(layers: Sequence[Path], path: str, *, bound_file: bool, volume: bool,
           provider: str, sandbox_id: str) -> None:
    parts = [part for part in path.split("/") if part]
    own, lower = layers[0], (layers[1] if len(layers) > 1 else None)
    for index, name in enumerate(parts):
        last = index == len(parts) - 1
        own, lower = own / name, (lower / name if lower is not None else None)
        found = _lstat(own)
        if found is not None:
            if stat.S_ISCHR(found.st_mode) and found.st_rdev == 0:
                return  # deleted in this layer (an overlay whiteout): bubblewrap makes it
            if last and bound_file:
                if stat.S_ISLNK(found.st_mode):
                    own.unlink()
                return
            if not stat.S_ISDIR(found.st_mode):
                raise _refused(path, "/" + "/".join(parts[:index + 1]), provider, sandbox_id)
            if lower is not None and _opaque(own):
                lower = None  # the layer hides the template's below
            continue
        below = _lstat(lower) if lower is not None else None
        if below is None:
            return  # missing in every layer: bubblewrap makes it
        if not stat.S_ISDIR(below.st_mode):
            if volume and not last:
                raise errors.InvalidInput(
                    f"a volume cannot be mounted at {path}: the template's "
                    f"/{'/'.join(parts[:index + 1])} is not a directory (mount it where "
                    "the path leads instead)", provider=provider, sandbox_id=sandbox_id)
            return  # the template's own: trusted


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, _OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _refused(path: str, where: str, provider: str, sandbox_id: str) -> errors.SandboxError:
    return errors.SandboxError(
        f"the sandbox cannot start: something is mounted at {path}, and its own {where} "
        "is not a directory (a symlink or a file its code left there), which nothing is "
        "mounted through; kill the sandbox, or make a new one", provider=provider,
        sandbox_id=sandbox_id)
