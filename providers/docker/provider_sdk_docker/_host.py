"""Process control from the host: each exec in a cgroup of its own, killed from outside.

When the Engine runs on this host (its containers' processes are in this host's
``/proc`` and their cgroup v1 hierarchies are writable here), every command a sandbox
runs is moved, right after it starts, into a freezer cgroup of its own nested in the
container's (``<container>/psdk-<name>``). A process cannot leave a cgroup from inside
the container (``/sys/fs/cgroup`` is read-only there), so ``setsid``, double forks, a
cleared environment or another user change nothing: a timeout or a kill freezes that
cgroup, SIGKILLs every process in it from the host and thaws it. Nothing runs inside
the container to do it: no image tool, no fork in a full pids cgroup, no Engine call.

An exec starts held: a ``sh`` wrapper (:data:`~provider_sdk_docker._scripts.HOLD`)
stops itself before it runs the command, is moved while stopped, and only then is let
go (:meth:`HostControl.launch`), so not even a command that forks at once runs a moment
outside its cgroup. The Engine tells the exec's pid; where it does not in time, the
wrapper is found by its name among the runtime's children (:meth:`HostControl.find_held`).
What another client's ``docker exec`` orphans to the container's PID 1 stays in the
container's own cgroup; every timeout or kill ends such processes too ("escaped"),
sparing PID 1, the keep-alive process (its oldest child) and commands that other clients
are still running.

Storage is the host's business too: whether the Engine can hold a container's files to a
size (``storage_opt size``) depends on its storage driver and, for overlay2, on the
filesystem under it, which only this host's mounts tell (:func:`engine_has_disk_quotas`).

Everything here blocks (cgroupfs, ``/proc``, the Engine's ``info``): call it from a
worker thread, or once at start-up.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import signal
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from provider_sdk_docker._scripts import HOLD

__all__ = ["GROUP_PREFIX", "HostControl", "disk_quotas_possible", "engine_has_disk_quotas",
           "host_control_possible"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "psdk-"
_POLL = 0.01
_HOLD_POLL = 0.0005
STALE_AFTER = 120.0
_MAX_CHAIN = 4096


def host_control_possible(base_url: str) -> bool:
    """Whether this process could control an Engine's containers from the host: the
    Engine is reached over a local socket and the cgroup v1 freezer is writable here."""
    return base_url.startswith(("unix://", "http+unix://")) and \
        os.access(CGROUP_ROOT / "freezer", os.W_OK) and \
        (CGROUP_ROOT / "freezer" / "cgroup.procs").exists()


def engine_has_disk_quotas(base_url: str) -> bool:
    """Whether the Engine at ``base_url`` (on this host) can limit a writable layer's
    size; ``False`` when it cannot be asked."""
    try:
        client = docker.APIClient(base_url=base_url, version="auto", timeout=5)
        try:
            info = client.info()
        finally:
            client.close()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
        return False
    return disk_quotas_possible(info)


def disk_quotas_possible(info: Mapping[str, Any], mountinfo: str | None = None) -> bool:
    """Whether the Engine that ``docker info`` describes (running on this host) can hold a
    container's files to a size (``storage_opt size``): the btrfs driver (a qgroup per
    container), or overlay2 whose storage is on XFS mounted with project quotas.
    ``mountinfo`` is this host's ``/proc/self/mountinfo`` (read when not given)."""
    if info.get("Driver") == "btrfs":
        return True
    root = info.get("DockerRootDir")
    if info.get("Driver") != "overlay2" or not isinstance(root, str) or not root:
        return False
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return False
    storage = posixpath.join(root, "overlay2")
    best: tuple[int, str, str] | None = None  # the deepest mount holding the storage
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts, tail = fields.split(), rest.split()
        if len(parts) < 5 or len(tail) < 3:
            continue
        point = parts[4].replace("\\040", " ")
        holds = storage == point or storage.startswith(point.rstrip("/") + "/")
        if holds and (best is None or len(point) >= best[0]):  # a later mount hides
            best = (len(point), tail[0], tail[2])
    if best is None:
        return False
    _, fstype, options = best
    return fstype == "xfs" and bool({"prjquota", "pquota"} & set(options.split(",")))


class HostControl:
    """One running container's processes and cgroups, as this host sees them."""

    def __init__(self, container_id: str, init_pid: int, freezer: Path,
                 memory: Path | None) -> None:
        self.container_id = container_id
        self.init_pid = init_pid
        self.freezer = freezer
        self.memory = memory

    @classmethod
    def locate(cls, container_id: str, init_pid: int) -> HostControl | None:
        """The container whose PID 1 is host pid ``init_pid``, or ``None`` when it is not
        on this host (a remote Engine, another PID namespace) or its cgroups are not
        writable here."""
        if init_pid <= 0:
            return None
        try:
            lines = Path(f"/proc/{init_pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        paths: dict[str, str] = {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(","):
                paths[controller] = path
        freezer_path = paths.get("freezer", "")
        # The pid must be this container's: a remote Engine's pid means nothing here.
        if container_id not in freezer_path:
            return None
        freezer = CGROUP_ROOT / "freezer" / freezer_path.lstrip("/")
        if not os.access(freezer / "cgroup.procs", os.W_OK):
            return None
        memory = CGROUP_ROOT / "memory" / paths.get("memory", "").lstrip("/")
        return cls(container_id, init_pid, freezer,
                   memory if (memory / "memory.oom_control").exists() else None)

    def alive(self) -> bool:
        """Whether the container's PID 1 is still the one this was made for."""
        try:
            return self.container_id in Path(f"/proc/{self.init_pid}/cgroup").read_text()
        except OSError:
            return False

    # ------------------------------------------------------------ containment

    def contain(self, name: str, pid: int, *, deadline: float) -> None:
        """Move host process ``pid`` and its descendants into cgroup ``name``.

        Children forked before the move stay behind, so the subtree is moved again until
        a pass finds nothing left outside; a command that forks faster than that (a fork
        bomb) is moved with the container frozen for that one pass. A lone process that
        keeps turning up outside is the runtime still joining it to the container's
        cgroups: it is moved again after a moment, never with the container frozen (an
        exec started by anyone meanwhile would find the container paused).
        """
        group = self._group(name)
        group.mkdir(exist_ok=True)
        moved = 0
        for _ in range(3):
            moved = self._move_subtree(group, pid)
            if not moved:
                return
        if moved == 1:
            while self._move_subtree(group, pid) and time.monotonic() < deadline:
                time.sleep(0.005)
            return
        was = _state(self.freezer)
        if was == "THAWED":
            _set_state(self.freezer, "FROZEN", deadline)
        try:
            while self._move_subtree(group, pid) and time.monotonic() < deadline:
                pass
        finally:
            if was == "THAWED":
                _set_state(self.freezer, "THAWED", deadline)

    def launch(self, name: str, pid: int, *, deadline: float) -> None:
        """Move host process ``pid``, an exec held by its wrapper, into cgroup ``name``,
        then let it run its command.

        The move waits (until ``deadline``) for the runtime to have started the wrapper
        and for the wrapper to have stopped itself. A wrapper that something else let go
        early is contained as it runs, as :meth:`contain` does for any process.
        """
        seen = False
        while time.monotonic() < deadline:
            state = _hold_state(pid)
            if state in ("held", "gone") or (state == "other" and seen):
                break
            seen = seen or state == "starting"
            time.sleep(_HOLD_POLL)
        try:
            self.contain(name, pid, deadline=deadline)
        finally:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)

    def find_held(self, name: str, *, deadline: float) -> int | None:
        """The host pid of the exec whose wrapper is named ``name`` (its ``$0``), for
        when the Engine does not tell it in time; ``None`` if none shows by ``deadline``.

        Only a process whose parent is outside the container counts: an exec's parent
        is the runtime's, while any process the sandbox's code starts, however it names
        itself, has its parent inside.
        """
        wanted = [HOLD.encode(), name.encode()]
        while True:
            for pid in _procs(self.freezer):
                if pid == self.init_pid:  # never an exec, however it names itself
                    continue
                try:
                    argv = _argv(pid)
                    parent = _table([pid]).get(pid, (0, 0))[0]
                    if argv[2:4] != wanted or not parent:
                        continue
                    with open(f"/proc/{parent}/cgroup") as cgroups:
                        if self.container_id not in cgroups.read():
                            return pid
                except OSError:
                    continue
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL)

    def _move_subtree(self, group: Path, pid: int) -> int:
        """Move what of ``pid``'s subtree is not in ``group``; how many were moved."""
        # Whatever is not moved yet is still in the container's own cgroup: only its
        # members need a look, not every process of the host.
        outside = _table(_procs(self.freezer))
        left = _subtree(outside, pid)
        # A zombie cannot be moved: only moves that happened count.
        return sum(_move(group, member) for member in left)

    def rename(self, name: str, new_name: str) -> None:
        """Give cgroup ``name`` another name (a background process's, once known)."""
        with contextlib.suppress(OSError):
            self._group(name).rename(self._group(new_name))

    def release(self, name: str) -> None:
        """Remove cgroup ``name`` if nothing is left in it, and any other empty ones.

        Processes a command left running on purpose (a daemon) keep their cgroup, so a
        later kill of the sandbox's escaped processes does not count them; empty cgroups
        of other commands are removed once older than STALE_AFTER seconds.
        """
        with contextlib.suppress(OSError):
            self._group(name).rmdir()
        # Others' only once surely not an exec's that is still being set up.
        stale = time.time() - STALE_AFTER
        with contextlib.suppress(OSError):
            for entry in self.freezer.iterdir():
                with contextlib.suppress(OSError):
                    if entry.name.startswith(GROUP_PREFIX) and entry.is_dir() and \
                            entry.stat().st_mtime < stale:
                        entry.rmdir()

    def exists(self, name: str) -> bool:
        """Whether cgroup ``name`` is there."""
        return self._group(name).is_dir()

    # ------------------------------------------------------------------ kills

    def kill(self, name: str, *, deadline: float) -> bool:
        """SIGKILL every process in cgroup ``name`` and every escaped process.

        The cgroup is frozen first, so nothing in it forks while it is listed. Returns
        whether everything was gone by ``deadline`` (a ``time.monotonic()`` value).
        """
        group = self._group(name)
        if group.is_dir():
            _set_state(group, "FROZEN", deadline)
            _signal(_procs(group))
            _set_state(group, "THAWED", deadline)
        while time.monotonic() < deadline:
            left = (_procs(group) if group.is_dir() else []) + self.escaped()
            if not left:
                with contextlib.suppress(OSError):
                    group.rmdir()
                return True
            _signal(left)
            time.sleep(_POLL)
        return False

    def escaped(self) -> list[int]:
        """Processes in the container's own cgroup orphaned to its PID 1 (and their
        descendants), except the keep-alive process's tree."""
        members = [p for p in _procs(self.freezer) if p != self.init_pid]
        if not members:
            return []
        table = _table()
        children = sorted((start, pid) for pid, (ppid, start) in table.items()
                          if ppid == self.init_pid)
        keepalive = children[0][1] if children else -1
        found = []
        for pid in members:
            top = _top_below(table, pid, self.init_pid)
            if top is not None and top != keepalive:
                found.append(pid)
        return found

    # ----------------------------------------------------------------- memory

    def oom_kills(self) -> int | None:
        """How many processes the container's memory cgroup has killed so far."""
        if self.memory is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return None

    def _group(self, name: str) -> Path:
        if "/" in name or not name.startswith(GROUP_PREFIX):
            raise ValueError(f"not an exec cgroup name: {name!r}")
        return self.freezer / name


def _procs(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _move(group: Path, pid: int) -> bool:
    try:
        (group / "cgroup.procs").write_text(str(pid))
    except OSError:  # it ended meanwhile
        return False
    return True


def _signal(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _state(group: Path) -> str:
    try:
        return (group / "freezer.state").read_text().strip()
    except OSError:
        return ""


def _set_state(group: Path, state: str, deadline: float) -> None:
    """Freeze or thaw a cgroup, waiting (until ``deadline``) for a freeze to complete."""
    with contextlib.suppress(OSError):
        (group / "freezer.state").write_text(state)
    while state == "FROZEN" and time.monotonic() < deadline:
        try:
            if (group / "freezer.state").read_text().strip() == "FROZEN":
                return
        except OSError:
            return
        time.sleep(_POLL)


def _argv(pid: int) -> list[bytes]:
    """Host process ``pid``'s command line; raises ``OSError`` once it is gone."""
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return cmdline.read().split(b"\0")


def _hold_state(pid: int) -> str:
    """Where an exec held by its wrapper is: ``held`` (stopped by the wrapper),
    ``starting`` (the wrapper on its way to stopping), ``other`` (not the wrapper: the
    runtime still setting it up, or its command already) or ``gone``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
        argv = _argv(pid)
    except OSError:
        return "gone"
    state = text[text.rfind(b")") + 2:][:1]
    if state in (b"Z", b"X"):
        return "gone"
    if argv[2:3] != [HOLD.encode()]:
        return "other"
    return "held" if state == b"T" else "starting"


def _table(pids: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
    """Live host processes (``pids``, or all): pid -> (parent pid, start time in ticks).

    Zombies are left out: they are in no cgroup and cannot be moved or killed.
    """
    table = {}
    names = [str(p) for p in pids] if pids is not None else \
        [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:
            continue
        # The name (field 2) may hold spaces and parentheses: split after its last ')'.
        fields = text[text.rfind(b")") + 2:].split()
        with contextlib.suppress(IndexError, ValueError):
            if fields[0] not in (b"Z", b"X"):
                table[int(name)] = (int(fields[1]), int(fields[19]))
    return table


def _subtree(table: dict[int, tuple[int, int]], root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root] if root in table else []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _top_below(table: dict[int, tuple[int, int]], pid: int, init: int) -> int | None:
    """The ancestor of ``pid`` (maybe itself) whose parent is ``init``; ``None`` when its
    parent chain leaves the container first (a command another client is running)."""
    for _ in range(_MAX_CHAIN):
        entry = table.get(pid)
        if entry is None or entry[0] <= 0:
            return None
        if entry[0] == init:
            return pid
        pid = entry[0]
    return None
