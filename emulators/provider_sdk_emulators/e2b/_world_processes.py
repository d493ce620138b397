"""The world's processes: starting them, relaying their output, timeouts, signals and
terminals, through the backend's neutral API.

A process's output reaches its :class:`ProcessEntry` as the events envd streams (in
envd's chunks, ending with envd's end event). Reading and checking a request is
``_envd_process``'s, so this module takes plain arguments; it keeps no state of its own:
a sandbox's processes are in its record.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import shlex
import signal
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from provider_sdk.capabilities import Capability
from provider_sdk.provider import ProcessExit, ProcessOutput, SandboxProvider
from provider_sdk_emulators.e2b._connect import RpcError
from provider_sdk_emulators.e2b._process_entry import ProcessEntry
from provider_sdk_emulators.e2b._records import SandboxRecord

__all__ = ["SCRIPT", "Processes", "end_event"]

log = logging.getLogger(__name__)

_OUTPUT_CHUNK = 32 * 1024  # envd sends stdout/stderr in chunks of at most this
_PTY_CHUNK = 16 * 1024  # and terminal output in chunks of at most this
SCRIPT = "/usr/bin/script"
"""util-linux's ``script``, which gives a command a terminal inside the sandbox."""
_SIGNALS = {signal.SIGKILL: "killed", signal.SIGTERM: "terminated", signal.SIGINT: "interrupt",
            signal.SIGHUP: "hangup"}


class Processes:
    """The process operations of an emulator's world: start, signal, resize and find
    the processes started through envd's API.

    Args:
        provider: the backend the sandboxes run on.
        sandboxes: the world's live sandboxes, by id.
        background: runs a task the server outlives (the world's).
    """

    def __init__(self, provider: SandboxProvider, sandboxes: Mapping[str, SandboxRecord],
                 background: Callable[..., None]) -> None:
        self.provider = provider
        self.sandboxes = sandboxes
        self.background = background

    async def start_process(self, record: SandboxRecord, *, argv: list[str],
                            env: dict[str, str], cwd: str | None, user: str | None,
                            tag: str | None, stdin: bool, timeout: float | None,
                            pty: tuple[int, int] | None = None) -> tuple[
                                ProcessEntry, MemoryObjectReceiveStream[dict[str, Any]]]:
        """Start a process and subscribe to it before any of its output is sent.

        With ``pty`` (columns, rows) it runs on a terminal: util-linux's ``script``
        inside the sandbox gives it one, and relays the terminal through its own stdin
        and stdout.
        """
        if user is not None and not self.provider.supports(Capability.EXEC_USER):
            user = None  # the backend runs every command as its one user
        command = argv
        if pty is not None:
            cols, rows = pty
            command = [SCRIPT, "-q", "-e", "-f", "-c",
                       f"stty cols {cols} rows {rows}; exec {shlex.join(argv)}", "/dev/null"]
        process = await record.sandbox.start(command, env=env, cwd=cwd, user=user,
                                             stdin=stdin or pty is not None)
        config: dict[str, Any] = {"cmd": argv[0], "args": argv[1:], "envs": env}
        if cwd:
            config["cwd"] = cwd
        entry = ProcessEntry(pid=process.pid, config=config, tag=tag, process=process,
                             pty=pty is not None)
        record.processes[entry.pid] = entry
        events = entry.subscribe()
        self.background(self._pump, record, entry, timeout)
        return entry, events

    async def _pump(self, record: SandboxRecord, entry: ProcessEntry,
                    timeout: float | None) -> None:
        end: dict[str, Any] | None = None
        try:
            with anyio.CancelScope() as scope:
                entry.scope = scope
                async with anyio.create_task_group() as tg:
                    if timeout:
                        tg.start_soon(self._kill_at, record, entry, timeout)
                    try:
                        async for event in entry.process.events():
                            if isinstance(event, ProcessOutput):
                                key = "pty" if entry.pty else event.stream
                                size = _PTY_CHUNK if entry.pty else _OUTPUT_CHUNK
                                for i in range(0, len(event.data), size):
                                    piece = event.data[i:i + size]
                                    await entry.publish({"event": {"data": {
                                        key: base64.b64encode(piece).decode()}}})
                            elif isinstance(event, ProcessExit):
                                end = {"event": {"end": end_event(event.exit_code)}}
                                break
                    except Exception as exc:  # the backend lost it (or the sandbox)
                        end = {"error": RpcError("unavailable", f"the process was lost: "
                                                 f"{exc}")}
                    tg.cancel_scope.cancel()
        finally:
            if end is None:
                end = {"error": RpcError("unavailable", "the sandbox was killed")}
            entry.finish(end)
            if record.processes.get(entry.pid) is entry:
                del record.processes[entry.pid]

    async def _kill_at(self, record: SandboxRecord, entry: ProcessEntry, timeout: float) -> None:
        # envd runs each process under a context with the request's deadline: when it
        # passes, the process is killed, even a background one.
        await anyio.sleep(timeout)
        try:
            await self.send_signal(record, entry.pid, signal.SIGKILL)
        except Exception:  # the sandbox is paused or gone: nothing left to kill
            log.debug("emulator: timeout kill of %s failed", entry.pid, exc_info=True)

    async def send_signal(self, record: SandboxRecord, pid: int,
                          sig: signal.Signals) -> None:
        """Send ``sig`` to the process itself (not its children), as envd does."""
        result = await record.sandbox.exec(
            ["/bin/sh", "-c", f"kill -s {sig.name[3:]} {int(pid)} 2>/dev/null"])
        if result.exit_code != 0 and pid in record.processes:
            raise RpcError("internal", f"failed to signal process {pid}")
        entry = record.processes.get(pid)
        if entry is not None and sig in (signal.SIGKILL, signal.SIGTERM):
            self.background(self._end_when_dead, record, entry, sig)

    async def _end_when_dead(self, record: SandboxRecord, entry: ProcessEntry,
                             sig: signal.Signals) -> None:
        """End the process's streams once it is dead, even while children it left
        behind still hold its output open: envd reports the end when the process
        itself exits, and the backend would wait for the output to close."""
        probe = ["/bin/sh", "-c", f"cat /proc/{entry.pid}/stat 2>/dev/null"]
        with contextlib.suppress(Exception):  # the sandbox went away: nothing to end
            while entry.ended is None and record.id in self.sandboxes:
                stat = (await record.sandbox.exec(probe)).stdout
                state = stat[stat.rfind(")") + 2:stat.rfind(")") + 3] if ")" in stat else ""
                if state in ("", "Z", "X"):
                    entry.finish({"event": {"end": end_event(-sig.value)}})
                    if record.processes.get(entry.pid) is entry:
                        del record.processes[entry.pid]
                    return
                await anyio.sleep(0.05)

    async def resize(self, record: SandboxRecord, entry: ProcessEntry, cols: int,
                     rows: int) -> None:
        """Resize a process's terminal (the one ``script`` made for its child)."""
        if not entry.pty:
            raise RpcError("failed_precondition", f"process {entry.pid} has no PTY")
        pid = int(entry.pid)
        result = await record.sandbox.exec(["/bin/sh", "-c", (
            f"child=$(cut -d' ' -f1 /proc/{pid}/task/{pid}/children) && "
            f"stty -F \"$(readlink /proc/$child/fd/0)\" cols {int(cols)} rows {int(rows)}")])
        if result.exit_code != 0:
            raise RpcError("internal", f"resizing the terminal failed: {result.stderr.strip()}")

    def find_process(self, record: SandboxRecord, selector: Mapping[str, Any]) -> ProcessEntry:
        if "pid" in selector:
            entry = record.processes.get(int(selector["pid"]))
            if entry is not None:
                return entry
            raise RpcError("not_found", f"process with pid {selector['pid']} not found")
        if "tag" in selector:
            for entry in record.processes.values():
                if entry.tag == selector["tag"]:
                    return entry
            raise RpcError("not_found", f"process with tag {selector['tag']} not found")
        raise RpcError("invalid_argument", "a process selector needs a pid or a tag")


def end_event(exit_code: int) -> dict[str, Any]:
    """envd's end event for a neutral exit code (``-N``: killed by signal ``N``)."""
    if exit_code < 0:
        try:
            name = _SIGNALS.get(signal.Signals(-exit_code), signal.Signals(-exit_code).name)
        except ValueError:
            name = f"signal {-exit_code}"
        status = f"signal: {name}"
        return {"exitCode": -1, "status": status, "error": status}
    end: dict[str, Any] = {"exited": True, "status": f"exit status {exit_code}"}
    if exit_code:
        end["exitCode"] = exit_code
        end["error"] = end["status"]
    return end
