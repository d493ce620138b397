"""What the local provider can leave on the host after its sandboxes are gone: cgroups,
mounts, sandbox directories and processes of one state directory. Tests that race
lifecycle steps (a kill against a resume, a replica killed mid-create) check that none
is left."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")


def leftovers(home: Path) -> dict[str, list[str]]:
    """What is left of the sandboxes of ``home``, by kind (empty lists: nothing)."""
    home = home.absolute()
    prefix = f"psdk-{hashlib.sha256(str(home).encode()).hexdigest()[:8]}-"
    cgroups = sorted(f"{c.name}/{g.name}" for c in CGROUPS.iterdir() if c.is_dir()
                     for g in c.iterdir() if g.name.startswith(prefix))
    mounts = sorted(line.split()[1] for line in Path("/proc/self/mounts").read_text()
                    .splitlines() if line.split()[1].startswith(str(home)))
    sandboxes = home / "sandboxes"
    directories = sorted(p.name for p in sandboxes.iterdir()) if sandboxes.is_dir() else []
    processes = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
            if prefix in (proc / "cgroup").read_text() or str(sandboxes) in cmdline:
                processes.append(f"{proc.name} {cmdline[:80]}")
    return {"cgroups": cgroups, "mounts": mounts, "directories": directories,
            "processes": processes}


def nothing_left(home: Path) -> dict[str, list[str]]:
    """:func:`leftovers`, keeping only the kinds that have something."""
    return {kind: found for kind, found in leftovers(home).items() if found}
