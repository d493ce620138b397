"""The v1 cgroups of a local sandbox: one directory per controller, holding its whole
process tree. The freezer pauses it with memory intact, memory and CPU limits apply,
and the pids controller stops fork bombs. Blocking calls, run in worker threads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from provider_sdk.models import Resources

__all__ = ["CGROUP_ROOT", "CONTROLLERS", "PIDS_MAX", "Cgroup"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("freezer", "memory", "cpu", "cpuacct", "pids")
PIDS_MAX = 4096


class Cgroup:
    """The v1 cgroups of one sandbox (one directory per controller)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def available() -> bool:
        """Whether every controller we use is mounted and writable."""
        return all(os.access(CGROUP_ROOT / c, os.W_OK) and (CGROUP_ROOT / c / "cgroup.procs")
                   .exists() for c in CONTROLLERS)

    def path(self, controller: str) -> Path:
        return CGROUP_ROOT / controller / self.name

    def create(self, resources: Resources) -> list[str]:
        """Create the cgroups with their limits; return their ``cgroup.procs`` files."""
        for c in CONTROLLERS:
            self.path(c).mkdir(exist_ok=True)
        self._write("pids", "pids.max", str(PIDS_MAX))
        if resources.memory_mb:
            limit = str(resources.memory_mb << 20)
            self._write("memory", "memory.limit_in_bytes", limit)
            # Memory plus swap at the same bound: swapping out cannot dodge the limit.
            if (self.path("memory") / "memory.memsw.limit_in_bytes").exists():
                self._write("memory", "memory.memsw.limit_in_bytes", limit)
        if resources.cpu:
            self._write("cpu", "cpu.cfs_period_us", "100000")
            self._write("cpu", "cpu.cfs_quota_us", str(int(resources.cpu * 100000)))
        return [str(self.path(c) / "cgroup.procs") for c in CONTROLLERS]

    def _write(self, controller: str, name: str, value: str) -> None:
        (self.path(controller) / name).write_text(value)

    def _read(self, controller: str, name: str) -> str | None:
        try:
            return (self.path(controller) / name).read_text().strip()
        except OSError:
            return None

    def exists(self) -> bool:
        return self.path("freezer").is_dir()

    def frozen(self) -> bool:
        return self._read("freezer", "freezer.state") in ("FROZEN", "FREEZING")

    def freeze(self, frozen: bool) -> None:
        """Freeze or thaw the whole tree and wait until the kernel says it is done."""
        want = "FROZEN" if frozen else "THAWED"
        deadline = time.monotonic() + 10
        while True:
            self._write("freezer", "freezer.state", want)
            if self._read("freezer", "freezer.state") == want:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"cgroup freezer did not reach {want}")
            time.sleep(0.002)

    def pids(self) -> list[int]:
        text = self._read("freezer", "cgroup.procs") or ""
        return [int(p) for p in text.split()]

    def memory(self) -> tuple[int | None, int | None]:
        """Memory in use and the limit (``None`` when unlimited)."""
        usage = self._read("memory", "memory.usage_in_bytes")
        limit = self._read("memory", "memory.limit_in_bytes")
        lim = int(limit) if limit and int(limit) < 1 << 60 else None
        return (int(usage) if usage else None), lim

    def oom_kills(self) -> int | None:
        """How many processes the kernel killed for this sandbox's memory limit, in
        its memory cgroup and any below it (``None`` where the kernel does not say).
        Read before and after every exec: a directory is listed only when its link
        count says it holds a cgroup (each one below adds a link)."""
        total, found = 0, False
        todo = [str(self.path("memory"))]
        while todo:
            directory = todo.pop()
            try:
                with open(f"{directory}/memory.oom_control") as control:
                    text = control.read()
                below = os.stat(directory).st_nlink > 2
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    total += int(value)
                    found = True
            if below:
                with contextlib.suppress(OSError), os.scandir(directory) as entries:
                    todo.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        return total if found else None

    def cpu_seconds(self) -> float | None:
        usage = self._read("cpuacct", "cpuacct.usage")
        return int(usage) / 1e9 if usage else None

    def destroy(self) -> None:
        """Kill what is left in the cgroups and remove them."""
        if not self.exists():
            return
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if self.frozen():
                self.freeze(False)
            time.sleep(0.005)
        for c in CONTROLLERS:
            try:
                self.path(c).rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                time.sleep(0.02)
                self.path(c).rmdir()
