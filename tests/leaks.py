"""A pytest plugin: the run fails when its tests leave something behind on this machine.

What it watches, taken once when the run starts and once when it ends (after every
worker has finished, so after every module- and session-scoped fixture was torn down):
the local provider's cgroups (``/sys/fs/cgroup/<controller>/psdk-<home tag>-<id>``: a
sandbox still running, or one whose cleanup was lost), and on each Docker Engine the
tests use, the Docker provider's containers (label ``psdk.sandbox``), its volumes
(``psdk-...``) and its snapshot and template images (``psdk-snapshot:...``,
``psdk-template-...``). What appeared in between and is still there, after a grace period
for cleanup that finishes in the background, is left behind.

Under pytest-xdist only the controller takes the inventories: a worker's view at its
own end would count what the other worker is still using, and a module's shared sandbox
is in use until its module ends, so nothing is checked per test or per worker.

The Docker Engine and the cgroup tree are shared with every other process on the
machine, so what appeared is this run's only where it can tell: a cgroup whose home tag
belongs to a psdk home under this run's base temporary directory is this run's. For the
rest, a background thread looks, every second, for another test run or ``psdk`` on the
machine (a process running pytest, nox or psdk outside this run's process tree, or one
such a process started, as the other workers of the run that started this one): if it
saw none, everything that appeared is this run's and fails it; if it saw one, what
cannot be told apart is reported as a warning instead, never as a failure of this run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Inventory", "foreign_runs"]

CGROUPS = Path("/sys/fs/cgroup")
#: How long cleanup that finishes in the background (a frozen tree killed after a grace
#: period) may take before what it removes counts as left behind
#: (``PSDK_TEST_LEAK_GRACE`` seconds, if set).
GRACE = 30.0
_WATCHED = ("pytest", "nox", "provider_sdk.cli", "psdk")


class Inventory:
    """What this machine holds that a test may leave behind, as ``kind: name`` strings."""

    @staticmethod
    def take() -> set[str]:
        found = {f"cgroup: {c.name}" for c in _cgroups()}
        for host in _engines():
            found |= _docker(host)
        return found


def _cgroups() -> list[Path]:
    with contextlib.suppress(OSError):
        return sorted(p for controller in CGROUPS.iterdir() if controller.is_dir()
                      for p in controller.glob("psdk-*") if p.is_dir())
    return []


def _engines() -> list[str | None]:
    return [None, *([q] if (q := os.environ.get("PSDK_TEST_DOCKER_QUOTA_HOST")) else [])]


def _docker(host: str | None) -> set[str]:
    """The Docker provider's objects on the Engine at ``host`` (none if it cannot be asked)."""
    try:
        import docker
        import docker.errors
        import requests.exceptions
    except ImportError:
        return set()
    where = f" on {host}" if host else ""
    try:
        client = docker.APIClient(base_url=host or os.environ.get("DOCKER_HOST")
                                  or "unix:///var/run/docker.sock", version="auto", timeout=30)
        containers = client.containers(all=True, filters={"label": "psdk.sandbox"})
        images = client.images()
        volumes = client.volumes().get("Volumes") or []
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return set()
    found = {f"container{where}: {c['Names'][0].lstrip('/')}" for c in containers}
    found |= {f"image{where}: {tag}" for image in images for tag in image.get("RepoTags") or []
              if tag.startswith(("psdk-snapshot:", "psdk-template-"))}
    found |= {f"volume{where}: {v['Name']}" for v in volumes if v["Name"].startswith("psdk-")}
    return found


def _home_tags(base: Path) -> set[str]:
    """The cgroup tags of the local provider's homes under ``base`` (see its ``Home``)."""
    tags = set()
    for sandboxes in base.rglob("sandboxes"):
        home = sandboxes.parent
        if (home / "snapshots").is_dir() and (home / "volumes").is_dir():
            tags.add(hashlib.sha256(str(home.absolute()).encode()).hexdigest()[:8])
    return tags


def foreign_runs(root: int) -> list[str]:
    """Test runs and ``psdk`` commands on this machine outside ``root``'s process tree
    (neither below ``root`` nor one of the processes that started it), and what such a
    run started: a pytest-xdist worker of the run that started ``root``, beside the one
    ``root`` runs in, is another run to it."""
    parents: dict[int, int] = {}
    watched: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            parents[pid] = _parent(pid)
        except OSError:
            continue
        words = [Path(w.decode(errors="replace")).name for w in argv if w]
        if any(w in _WATCHED or w.startswith("pytest") for w in words[:3]) or \
                "provider_sdk.cli" in words[:3]:
            watched[pid] = f"{pid} {' '.join(words[:4])}"
    above = _ancestors(root)
    found = []
    for pid in parents:
        if pid == root or pid in above:
            continue
        line = next((watched[p] for p in _lineage(pid, parents) if p in watched), None)
        if line is not None and root not in _lineage(pid, parents):
            found.append(line if pid in watched else f"{pid}, started by {line}")
    return found


def _lineage(pid: int, parents: dict[int, int]) -> list[int]:
    """``pid`` and the processes that started it, nearest first."""
    chain = []
    while pid > 1 and pid not in chain:
        chain.append(pid)
        pid = parents.get(pid, 0)
    return chain


def _parent(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(next((line.split()[1] for line in status.splitlines()
                     if line.startswith("PPid:")), "0"))


def _ancestors(pid: int) -> set[int]:
    found = set()
    while (pid := _parent(pid)) > 1:
        found.add(pid)
    return found


class _Watch:
    """The controller's inventories and what it saw of other runs meanwhile."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.before = Inventory.take()
        self.foreign: list[str] = foreign_runs(os.getpid())
        self.left: list[str] = []
        self.unsure: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._look, daemon=True)
        self._thread.start()

    def _look(self) -> None:
        while not self.foreign and not self._stop.wait(1.0):
            self.foreign = foreign_runs(os.getpid())

    def finish(self) -> None:
        self._stop.set()
        self._thread.join()
        tags = _home_tags(self.base)
        grace = float(os.environ.get("PSDK_TEST_LEAK_GRACE", GRACE))
        deadline = time.monotonic() + grace
        while True:
            new = Inventory.take() - self.before
            ours = {n for n in new if n.startswith("cgroup: ") and n.split("-")[1] in tags}
            # What fails the run gets the grace; another run's objects need not be waited on.
            pending = ours if self.foreign else new
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        rest = new - ours
        self.left = sorted(ours | (set() if self.foreign else rest))
        self.unsure = sorted(rest) if self.foreign else []


_KEY = pytest.StashKey[_Watch]()


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session.config):
        base = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        session.config.stash[_KEY] = _Watch(Path(base))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    watch = session.config.stash.get(_KEY, None)
    if watch is None:
        return
    watch.finish()
    if watch.left and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    watch = config.stash.get(_KEY, None)
    if watch is None:
        return
    if watch.left:
        terminalreporter.section("left behind by this run", red=True)
        for name in watch.left:
            terminalreporter.line(name)
    if watch.unsure:
        terminalreporter.section("appeared during this run, maybe another's", yellow=True)
        terminalreporter.line(f"another run was seen ({watch.foreign[0]}), so these do not "
                              "fail this one:")
        for name in watch.unsure:
            terminalreporter.line(name)
