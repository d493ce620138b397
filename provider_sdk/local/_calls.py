"""The exec, process, shell and file hooks of ``LocalProvider``: each one call to the
sandbox's agent (see ``_client``), made only while the sandbox is running.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.local._cgroups import Cgroup
from provider_sdk.models import ExecResult, FileInfo, FileType
from provider_sdk.provider import Command, ProcessEvent
from provider_sdk.sandbox import EmulatedShell

if TYPE_CHECKING:
    from provider_sdk.local._client import AgentClient
    from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["CallsMixin"]


class CallsMixin:
    """What a running sandbox's agent does for ``LocalProvider``."""

    name: ClassVar[str]
    _cgroups: bool

    if TYPE_CHECKING:
        def _cgroup(self, sandbox_id: str) -> Cgroup: ...
        def _running(self, sandbox_id: str) -> AgentClient: ...
        async def _agent(self, sandbox_id: str,
                         call: Callable[[AgentClient], Any]) -> Any: ...
        def _unsupported(self, capability: Capability,
                         sandbox_id: str | None) -> errors.SandboxError: ...

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        if command.user is not None:
            raise self._unsupported(Capability.EXEC_USER, sandbox_id)
        # The memory cgroup counts its OOM kills: one during the call killed a process
        # of this command (or one it started), even when another process exits last.
        cgroup = self._cgroup(sandbox_id) if self._cgroups else None
        kills = cgroup.oom_kills() if cgroup else None
        try:
            result: ExecResult = await self._agent(sandbox_id, lambda c: c.exec(command))
        except errors.CommandTimeout as exc:
            if cgroup and kills is not None and (cgroup.oom_kills() or 0) > kills:
                exc.result = attrs.evolve(exc.result, oom_killed=True)
            raise
        if cgroup and kills is not None and (cgroup.oom_kills() or 0) > kills:
            result = attrs.evolve(result, oom_killed=True)
        return result

    async def _start(self, sandbox_id: str, command: Command) -> int:
        started = await self._agent(sandbox_id, lambda c: c.call(
            "start", argv=list(command.argv), env=dict(command.env), cwd=command.cwd,
            stdin=command.keep_stdin))
        pid = int(started["pid"])
        if not command.keep_stdin and started.get("stdin") is not False:
            # An agent from before ``stdin`` in ``start`` opened one all the same.
            await self._close_stdin(sandbox_id, pid)
        return pid

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        client = self._running(sandbox_id)
        async for event in client.events(pid):
            yield event

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        await self._agent(sandbox_id, lambda c: c.stdin(pid, data, close=False))

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._agent(sandbox_id, lambda c: c.stdin(pid, b"", close=True))

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        await self._agent(sandbox_id, lambda c: c.call("kill_process", pid=pid))

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        client = self._running(sandbox_id)
        async for chunk in client.read(path):
            yield chunk

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        await self._agent(sandbox_id, lambda c: c.write(path, chunks))

    async def _list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        entries = await self._agent(sandbox_id, lambda c: c.call("list", path=path))
        return [_to_file_info(e) for e in entries]

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        return _to_file_info(await self._agent(sandbox_id, lambda c: c.call("stat", path=path)))

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        await self._agent(sandbox_id, lambda c: c.call("mkdir", path=path, parents=parents,
                                                       exist_ok=exist_ok))

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        await self._agent(sandbox_id, lambda c: c.call("remove", path=path,
                                                       recursive=recursive))

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        await self._agent(sandbox_id, lambda c: c.call("rename", src=src, dst=dst))


def _to_file_info(entry: dict[str, Any]) -> FileInfo:
    return FileInfo(path=entry["path"], type=FileType(entry["type"]), size=entry["size"],
                    mode=entry["mode"],
                    modified_at=dt.datetime.fromtimestamp(entry["mtime"], dt.timezone.utc),
                    symlink_target=entry["target"])
