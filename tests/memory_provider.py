"""An in-process provider for the core's, the CLI's and the manager's tests: ``MemoryProvider``.

Each sandbox is small but real. A host directory is its ``/``; a bubblewrap process holds
its namespaces (user, mount, PID, IPC, UTS, cgroup, and a network with loopback only) for
as long as it lives, with ``/usr`` read-only from the host, its own ``/proc`` and
``/dev``, and each mounted volume (a host directory) bound in. Commands enter those
namespaces with ``nsenter``, so they see nothing of the host. The files API works on the
same tree as the commands, as they see it (``/proc/<pid>/root``), resolving every path
inside it (``openat2`` with ``RESOLVE_IN_ROOT``): neither ``..`` nor a symlink leads out.
Pause stops every process of the sandbox (``SIGSTOP``) and resume lets them go on.
Every command is a child subreaper, so what it leaves running (``setsid``, a double
fork) stays in its tree, and a timeout, a cancelled exec or a kill ends that whole tree
with the core's tree kill (:mod:`provider_sdk.scripts`); the sandbox's pid 1 reaps what
is left to it and, as its namespace's init, survives ``kill -KILL -1`` from inside.
The records (sandboxes, snapshots as copies of a root, volumes) live in this process
(``STORE``), shared by every instance, so consecutive ``psdk`` invocations in one test
see the same sandboxes, as they would with a real backend. Linux with ``bwrap`` and
``nsenter`` only; for tests.

The provider is made as every provider is, of role objects (:mod:`provider_sdk.roles`)
over that one shared state: a control plane, commands and files, in the :mod:`memory`
package. A test that gives it another capability subclasses :class:`MemoryControl` with
that capability's part and names it as the subclass's :attr:`MemoryProvider.control_role`;
a test that counts calls or injects faults overrides the base's hooks (``_exec``,
``_read_file``...), which pass each call to the roles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from memory import NAME, STORE, MemoryCommands, MemoryControl, MemoryFiles, Store

from provider_sdk.capabilities import Capability
from provider_sdk.provider import SandboxProvider

__all__ = ["NAME", "STORE", "MemoryControl", "MemoryProvider", "Store"]


class MemoryProvider(SandboxProvider):
    """A provider whose sandboxes are host directories held in bubblewrap namespaces."""

    name = NAME
    capabilities = frozenset({
        Capability.EXEC_STREAM, Capability.EXEC_CONTAINED, Capability.PROCESS_BACKGROUND,
        Capability.SHELL_PERSISTENT, Capability.PAUSE, Capability.PAUSE_MEMORY,
        Capability.CODE_INTERPRETER,  # the core's kernel, on the host's python3
        Capability.PYTHON,  # the host's python3, and python beside it (_bwrap)
        Capability.SNAPSHOT_FILESYSTEM, Capability.VOLUMES, Capability.VOLUMES_SHARED,
        Capability.VOLUMES_READ_ONLY, Capability.METRICS,
        Capability.TEMPLATES,  # any name: it is recorded, and every sandbox is alike
    })
    control_role: ClassVar[Callable[[Store], MemoryControl]] = MemoryControl
    """What makes the control plane: a subclass of :class:`MemoryControl` where a test
    provider declares a capability whose part the plain one lacks."""

    def __init__(self, *, label: str = "default", token: str | None = None) -> None:
        self.label = label
        self.token = token
        STORE.opened.append({"label": label, "token": token})
        self.control = type(self).control_role(STORE)
        """The control plane, for tests that look at what it recorded."""
        super().__init__(control=self.control, commands=MemoryCommands(STORE),
                         files=MemoryFiles(STORE))

    async def aclose(self) -> None:
        STORE.closed += 1
