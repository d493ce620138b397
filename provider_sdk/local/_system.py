"""The host's system directories, as a bubblewrap that runs a host program needs them.

A sandbox sees the host's ``/usr`` read-only, and the top-level system directories
(``/bin``, ``/lib``...) as the same read-only binds or, on merged-``/usr`` systems, the
same symlinks; so do the throwaway bubblewraps that probe the host and copy a sandbox's
files. This module lists them; it starts nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SYSTEM_DIRS", "system_argv", "system_links"]

SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level host directories a shell and Python need. Nothing else of the host is
visible."""


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
