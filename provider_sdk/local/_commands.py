"""``LocalCommands``: the commands role of ``LocalProvider``: exec, background processes
and shells, each one call to the sandbox's agent (see ``_client``), made only while the
sandbox is running.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.commands import Command, ProcessEvent
from provider_sdk.local._sandboxes import Sandboxes
from provider_sdk.models import ExecResult
from provider_sdk.sandbox import EmulatedShell

__all__ = ["LocalCommands"]


class LocalCommands:
    """Commands in a running local sandbox, through its agent."""

    def __init__(self, sandboxes: Sandboxes) -> None:
        self._sandboxes = sandboxes
        self._shared = sandboxes.shared

    async def exec(self, sandbox_id: str, command: Command) -> ExecResult:
        """Run a command to completion; a result says ``oom_killed`` when the sandbox's
        memory cgroup killed a process meanwhile."""
        if command.user is not None:
            raise errors.UnsupportedCapability(str(Capability.EXEC_USER),
                                               provider=self._shared.name,
                                               sandbox_id=sandbox_id)
        # The memory cgroup counts its OOM kills: one during the call killed a process
        # of this command (or one it started), even when another process exits last.
        cgroup = self._shared.cgroup(sandbox_id) if self._shared.cgroups else None
        kills = cgroup.oom_kills() if cgroup else None
        try:
            result: ExecResult = await self._sandboxes.agent(sandbox_id,
                                                             lambda c: c.exec(command))
        except errors.CommandTimeout as exc:
            if cgroup and kills is not None and (cgroup.oom_kills() or 0) > kills:
                exc.result = attrs.evolve(exc.result, oom_killed=True)
            raise
        if cgroup and kills is not None and (cgroup.oom_kills() or 0) > kills:
            result = attrs.evolve(result, oom_killed=True)
        return result

    async def start(self, sandbox_id: str, command: Command) -> int:
        """Start a background process (its stdin closed unless ``keep_stdin``); its pid."""
        started = await self._sandboxes.agent(sandbox_id, lambda c: c.call(
            "start", argv=list(command.argv), env=dict(command.env), cwd=command.cwd,
            stdin=command.keep_stdin))
        pid = int(started["pid"])
        if not command.keep_stdin and started.get("stdin") is not False:
            # An agent from before ``stdin`` in ``start`` opened one all the same.
            await self.close_stdin(sandbox_id, pid)
        return pid

    async def process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        """A process's output, then its exit."""
        client = self._sandboxes.running(sandbox_id)
        async for event in client.events(pid):
            yield event

    async def send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        """Write to a process's stdin."""
        await self._sandboxes.agent(sandbox_id, lambda c: c.stdin(pid, data, close=False))

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        """Close a process's stdin."""
        await self._sandboxes.agent(sandbox_id, lambda c: c.stdin(pid, b"", close=True))

    async def kill_process(self, sandbox_id: str, pid: int) -> None:
        """Kill a process and its whole tree."""
        await self._sandboxes.agent(sandbox_id, lambda c: c.call("kill_process", pid=pid))

    async def open_shell(self, sandbox: Any, *, cwd: str | None,
                         env: Mapping[str, str]) -> Any:
        """A shell emulated over exec (``cd`` and ``export`` carry over)."""
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)
