"""The processes of a memory sandbox, seen from the host: finding them (by PID
namespace), stopping them for a pause, reading their resource use, and killing a
command's whole tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from provider_sdk import scripts

from ._box import Box

END_GRACE = 5.0
"""Seconds ``nsenter`` is given to exit by itself once what it ran inside was killed
(:func:`kill_inside`), before it is killed too."""


def members(box: Box) -> Iterator[str]:
    """The host pids (as /proc entries) of the sandbox's processes."""
    namespace = os.readlink(f"/proc/{box.init}/ns/pid")
    for pid in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if pid.isdigit() and os.readlink(f"/proc/{pid}/ns/pid") == namespace:
                yield pid


def freeze(box: Box) -> None:
    """Stop every process of the sandbox, memory kept, sweeping again until a sweep finds
    none it had not stopped (one may fork while the first are stopped)."""
    stopped: set[str] = set()
    while more := set(members(box)) - stopped:
        for pid in more:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGSTOP)
        while any(_state(pid) not in ("T", "Z", "X", "") for pid in more):
            time.sleep(0.001)  # the signal takes effect a moment later
        stopped |= more


def thaw(box: Box) -> None:
    """Let every process of the sandbox go on (``SIGCONT``)."""
    for pid in members(box):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGCONT)


def _state(pid: str) -> str:
    """A process's state letter (``T``: stopped), or empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


def usage(box: Box) -> tuple[int, float]:
    """Resident memory (bytes) and CPU time (seconds) of the sandbox's processes."""
    memory, ticks = 0, 0
    for pid in members(box):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
            memory += next((int(line.split()[1]) << 10 for line in status.splitlines()
                            if line.startswith("VmRSS:")), 0)
    return memory, ticks / os.sysconf("SC_CLK_TCK")


def disk_usage(root: str) -> int:
    """Bytes the files of a root directory occupy (mounts aside)."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


def spawn(argv: list[str], env: dict[str, str], out: int,
          err: int) -> subprocess.Popen[bytes]:
    """Start a background process writing to ``out`` and ``err`` (closed here), in a
    session of its own, with a stdin pipe."""
    try:
        return subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                start_new_session=True)
    finally:
        os.close(out)
        os.close(err)


def killpg(pid: int) -> None:
    """Kill the process group ``pid`` leads, if there is one."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def kill_holders(box: Box, pipes: set[int]) -> None:
    """Kill (with their trees) the sandbox's processes that hold one of ``pipes`` (by
    inode) open."""
    links = {f"pipe:[{inode}]" for inode in pipes}
    for pid in members(box):
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in links
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                kill_tree(int(pid))


def kill_inside(pid: int) -> bool:
    """Kill what runs inside the sandbox for the command whose host process (``nsenter``)
    is ``pid``: the trees of its children there. ``nsenter`` then reaps its child and
    exits by itself (it stops itself when its child stops, as the tree kill stops it
    first: it is woken). Killed first, it would leave that child a zombie of the host's
    init, reaped whenever that init gets to it, and the sandbox's end waits for every
    process of its namespace to be reaped. Whether it had a child there (one that has
    none yet is still entering the sandbox: it will not exit by itself)."""
    children = _children(pid)
    for child in children:
        kill_tree(child)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    return bool(children)


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s children."""
    found = []
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if name.isdigit() and int(Path(f"/proc/{name}/stat").read_text()
                                      .rpartition(")")[2].split()[1]) == pid:
                found.append(int(name))
    return found


def kill_tree(pid: int) -> None:
    """Kill the command whose host process (``nsenter``) is ``pid`` and every process it
    started, ``setsid`` and double forks included (the core's tree kill, run on the host:
    the command's orphans are reparented inside its tree, see
    :data:`._bwrap.SUBREAPER`)."""
    subprocess.run(scripts.kill_tree_argv(pid), stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
