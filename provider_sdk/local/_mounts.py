"""The mounts a local sandbox's bubblewrap binds, made where it can reach them.

Where the provider runs as root, bubblewrap runs as the sandbox's own host id
(``_ids``), which cannot enter the home (root's, mode 0700): the sandbox's root, its
volumes and a template's filesystem are bound first into a :class:`Staging`
directory only that id may enter, outside the home. A volume (stored with the shared
slot's ids) and a template (stored with the image's own ids) are bound *idmapped*, so
each sandbox sees their files as owned by its own ids. bubblewrap's new mount
namespace keeps its copies of these mounts; the host's are detached as soon as it has
made them.

The binds are made with ``open_tree``, ``mount_setattr`` and ``move_mount`` (Linux 5.12
and later), called through the C library: no process is started for them. The sandbox's
device nodes are made here too, on a tmpfs of their own (:meth:`Staging.devices`), so
that none is the host's. This module knows mounts and paths; it starts nothing and
decides no ids.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import stat
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["STAGING_ROOT", "Staging", "bind", "detach", "sweep"]

STAGING_ROOT = Path("/run/psdk")
"""Where staging directories are made (mode 0711: nobody may list them)."""

# System call numbers: the same on x86_64 and aarch64 (the "generic" table since 5.2).
_OPEN_TREE, _MOVE_MOUNT, _MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE = 1
_O_CLOEXEC = 0o2000000
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_IDMAP = 0x100000
_MNT_DETACH = 2
_MS_NOSUID = 0x2
_MS_NOEXEC = 0x8

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str, path: Path) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what} {path}: {os.strerror(code)}")
    return result


def bind(source: Path, target: Path, *, userns: int | None = None,
         read_only: bool = False) -> None:
    """Bind ``source`` (and what is mounted below it) on ``target``; idmapped through
    the user namespace ``userns`` (a descriptor) if given: a file owned by id ``k`` in
    that namespace shows as owned by the host id ``k`` maps to."""
    tree = _check(_libc.syscall(_OPEN_TREE, _AT_FDCWD, os.fsencode(source),
                                _OPEN_TREE_CLONE | _O_CLOEXEC | _AT_RECURSIVE),
                  "cannot bind", source)
    try:
        flags = (_MOUNT_ATTR_IDMAP if userns is not None else 0) | (
            _MOUNT_ATTR_RDONLY if read_only else 0)
        if flags:
            attr = _MountAttr(flags, 0, 0, userns if userns is not None else 0)
            _check(_libc.syscall(_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH | _AT_RECURSIVE,
                                 ctypes.byref(attr), ctypes.sizeof(attr)),
                   "cannot map the ids of", source)
        _check(_libc.syscall(_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(target),
                             _MOVE_MOUNT_F_EMPTY_PATH), "cannot mount on", target)
    finally:
        os.close(tree)


def detach(target: Path) -> None:
    """Detach the mount on ``target`` (lazily: whoever still uses it keeps it)."""
    if _libc.umount2(os.fsencode(target), _MNT_DETACH) < 0:
        code = ctypes.get_errno()
        if code not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            raise OSError(code, f"cannot unmount {target}: {os.strerror(code)}")


class Staging:
    """A directory outside the home that only ``owner`` (a host id) may enter, for the
    mounts one start of a sandbox binds: made by :meth:`open`, emptied and removed by
    :meth:`close` (whatever was bound in it is detached)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mounts: list[Path] = []

    @classmethod
    def open(cls, owner: int) -> Staging:
        """A new staging directory, named for this process (``PID-RANDOM``): only a
        process that is gone leaves one for :func:`sweep` to remove."""
        STAGING_ROOT.mkdir(mode=0o711, parents=True, exist_ok=True)
        os.chmod(STAGING_ROOT, 0o711)
        path = STAGING_ROOT / f"{os.getpid()}-{secrets.token_hex(8)}"
        path.mkdir(mode=0o700)
        os.chown(path, owner, owner)
        return cls(path)

    def place(self, name: str) -> Path:
        """An empty directory in the staging directory, to mount on."""
        target = self.path / name
        target.mkdir(mode=0o700)
        return target

    def devices(self, name: str, nodes: Mapping[str, tuple[int, int]]) -> Path:
        """A small tmpfs at ``name`` holding new device nodes, ``name/<node>`` for each
        of ``nodes`` (major, minor), mode 0666 and owned by this process (root): a
        sandbox's own, so that what it does to them (times, even) is not done to the
        host's. Its path."""
        target = self.place(name)
        if _libc.mount(b"psdk-dev", os.fsencode(target), b"tmpfs", _MS_NOSUID | _MS_NOEXEC,
                       b"mode=0755,size=16k,nr_inodes=16") < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot mount a tmpfs on {target}: {os.strerror(code)}")
        self._mounts.append(target)
        for node, (major, minor) in nodes.items():
            os.mknod(target / node, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(target / node, 0o666)
        return target

    def bind(self, name: str, source: Path, *, userns: int | None = None,
             read_only: bool = False) -> Path:
        """``source`` bound (idmapped through ``userns``) at ``name``; its path."""
        target = self.place(name)
        bind(source, target, userns=userns, read_only=read_only)
        self._mounts.append(target)
        return target

    def close(self) -> None:
        """Detach every mount made here and remove the directory (idempotent). Only
        empty directories are removed: one whose mount would not go stays, and its
        files with it, rather than be deleted through the mount."""
        for target in reversed(self._mounts):
            with contextlib.suppress(OSError):
                detach(target)
        self._mounts.clear()
        _remove_empty(self.path)


def _starter(name: str) -> int | None:
    """The pid a staging directory is named for, if it is named ``PID-RANDOM``."""
    pid, sep, _random = name.partition("-")
    return int(pid) if sep and pid.isdigit() and pid[0] != "0" else None


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a new one with a reused pid counts: its
    directory then waits for that one to end)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_empty(path: Path) -> None:
    """Remove ``path`` and the empty directories in it; never descend into a mount."""
    with contextlib.suppress(OSError):
        for entry in path.iterdir():
            with contextlib.suppress(OSError):
                entry.rmdir()
        path.rmdir()


def sweep(older_than: float = 300.0) -> None:
    """Remove the staging directories of processes that died while starting a
    sandbox. A directory whose process is alive is a start under way, however old it
    looks (a clock that jumps ahead must not end another process's start); one named
    otherwise (by an older release) goes once older than ``older_than`` seconds. Their
    mounts are detached first; bubblewrap holds its own copies."""
    if not STAGING_ROOT.is_dir():
        return
    old = time.time() - older_than
    for entry in STAGING_ROOT.iterdir():
        try:
            pid = _starter(entry.name)
            if pid is not None and _alive(pid):
                continue
            if pid is None and entry.stat().st_mtime >= old:
                continue
            for inner in entry.iterdir():
                with contextlib.suppress(OSError):
                    detach(inner)
        except OSError:
            continue
        _remove_empty(entry)
