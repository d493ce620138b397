"""The state every role of every ``MemoryProvider`` in this process shares: the records
of sandboxes, snapshots and volumes (:class:`Store`, one of them: :data:`STORE`), and
looking a sandbox or a process up in them."""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
from typing import Any

import attrs

from provider_sdk.errors import ProcessNotFound, SandboxNotFound, SandboxNotRunning
from provider_sdk.models import SandboxInfo, SandboxState

from ._box import NAME, Box, Proc
from ._bwrap import stop


@attrs.define
class Store:
    """Every sandbox, snapshot and volume of every MemoryProvider in this process."""

    boxes: dict[str, Box] = attrs.field(factory=dict)
    #: Snapshot id -> (sandbox id, host directory holding a copy of its root).
    snapshots: dict[str, tuple[str, str]] = attrs.field(factory=dict)
    #: Volume name -> its host directory.
    volumes: dict[str, str] = attrs.field(factory=dict)
    ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    opened: list[dict[str, Any]] = attrs.field(factory=list)
    closed: int = 0
    base: str = attrs.field(factory=lambda: tempfile.mkdtemp(prefix="psdk-memory-"))
    """The host directory under which roots, snapshots, volumes and outputs live."""

    def add_broken(self, sandbox_id: str, reason: str) -> None:
        """A record the provider cannot make sense of, listed as a broken ``ERROR`` one."""
        info = SandboxInfo(id=sandbox_id, provider=NAME, state=SandboxState.ERROR,
                           extra={"broken": reason})
        self.boxes[sandbox_id] = Box(info=info, root=tempfile.mkdtemp(dir=self.base))

    def add_special(self, sandbox_id: str, path: str, *, link_to: str | None = None) -> None:
        """A FIFO at ``path`` in a sandbox (or, with ``link_to``, a symlink to ``link_to``).
        Devices (``/dev/zero``) are there already."""
        where = self.boxes[sandbox_id].host(path)
        if link_to is None:
            os.mkfifo(where)
        else:
            os.symlink(link_to, where)

    def reset(self) -> None:
        """Kill every sandbox and forget every record; the files go with them."""
        self.clear()
        self.__init__()  # type: ignore[misc]

    def clear(self) -> None:
        """Kill every sandbox and remove everything under :attr:`base`."""
        for box in self.boxes.values():
            stop(box)
        shutil.rmtree(self.base, ignore_errors=True)

    def box(self, sandbox_id: str) -> Box:
        """A sandbox's record; ``SandboxNotFound`` if there is none."""
        try:
            return self.boxes[sandbox_id]
        except KeyError:
            raise SandboxNotFound(f"no sandbox {sandbox_id!r}", provider=NAME,
                                  sandbox_id=sandbox_id) from None

    def running(self, sandbox_id: str) -> Box:
        """A running sandbox's record; ``SandboxNotRunning`` for one in another state."""
        box = self.box(sandbox_id)
        if box.info.state != SandboxState.RUNNING:
            raise SandboxNotRunning(f"sandbox is {box.info.state}",
                                    state=str(box.info.state), provider=NAME,
                                    sandbox_id=sandbox_id)
        return box

    def proc(self, sandbox_id: str, pid: int) -> Proc:
        """A background process of a running sandbox; ``ProcessNotFound`` if unknown."""
        box = self.running(sandbox_id)
        if pid not in box.procs:
            raise ProcessNotFound(f"no process {pid}", provider=NAME, sandbox_id=sandbox_id)
        return box.procs[pid]


STORE = Store()
atexit.register(STORE.clear)
