"""The host's system directories, as a bubblewrap that runs a host program needs them.

A sandbox sees the host's ``/usr`` read-only, and the top-level system directories
(``/bin``, ``/lib``...) as the same read-only binds or, on merged-``/usr`` systems, the
same symlinks; so do the throwaway bubblewraps that probe the host and copy a sandbox's
files. This module lists them; it starts nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PYTHON_ALIAS", "SYSTEM_DIRS", "has_python", "python_alias_argv", "system_argv",
           "system_links"]

SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level host directories a shell and Python need. Nothing else of the host is
visible."""

PYTHON_ALIAS = "/usr/local/bin/python"
"""Where a sandbox that sees the host's ``/usr`` finds ``python`` when the host has none:
``python`` names ``python3`` in every provider's default template."""
LOCAL_BIN = Path(PYTHON_ALIAS).parent


def system_links() -> dict[str, str]:
    """Top-level host directories that are symlinks (merged /usr): a sandbox's root has
    the same links, made once with the root (bubblewrap refuses to make them again)."""
    return {name: os.readlink(Path("/") / name) for name in SYSTEM_DIRS
            if (Path("/") / name).is_symlink()}


def system_argv() -> list[str]:
    """bubblewrap options showing the host's ``/usr`` read-only and each top-level
    system directory as a read-only bind, or as its symlink (for a root of bubblewrap's
    own making, not one that has the links already)."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{name}"]
    return argv


def _host_python() -> bool:
    return os.path.lexists("/usr/bin/python") or os.path.lexists(PYTHON_ALIAS)


def _alias_place() -> bool:
    return LOCAL_BIN.is_dir() and not LOCAL_BIN.is_symlink()


def has_python() -> bool:
    """Whether a sandbox that sees the host's ``/usr`` runs ``python``: the host's own,
    or the one :func:`python_alias_argv` adds."""
    return _host_python() or _alias_place()


def python_alias_argv() -> list[str]:
    """bubblewrap options (after the ``/usr`` bind) giving a sandbox a ``python`` that
    runs ``/usr/bin/python3``, where the host's ``/usr`` has no ``python``: the
    sandbox's ``/usr/local/bin`` becomes a read-only tmpfs holding each of the host's
    entries there (bound read-only, a symlink made again as one) and ``python``, a
    symlink to ``python3``. Nothing where the host has a ``python`` of its own, or no
    ``/usr/local/bin`` to mount on."""
    if _host_python() or not _alias_place():
        return []
    argv = ["--perms", "0755", "--tmpfs", str(LOCAL_BIN)]
    for entry in sorted(LOCAL_BIN.iterdir()):
        inside = str(LOCAL_BIN / entry.name)
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry), inside]
        else:
            argv += ["--ro-bind-try", str(entry), inside]
    return [*argv, "--symlink", "/usr/bin/python3", PYTHON_ALIAS,
            "--remount-ro", str(LOCAL_BIN)]
