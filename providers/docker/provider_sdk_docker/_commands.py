"""The commands role of ``DockerProvider`` (:class:`DockerCommands`): commands, background
processes and shells in a container: exec, timeouts, kills, output.

Every command is an Engine exec, attached over a connection of its own. Where the
Engine runs on this host (see :mod:`provider_sdk_docker._host`) each exec starts
held, is moved into a cgroup of its own and only then runs its command; a timeout, a
cancellation or ``Process.kill()`` freezes and SIGKILLs that cgroup from the host, while
the exec's output keeps being drained, so neither the caller nor the Engine waits on the
container.
Elsewhere (a remote Engine) the kill runs inside the container, with a deadline, and the
provider does not declare ``exec.contained``.

Output is kept in the bounded buffers of the command (:meth:`Command.buffers`); the
callbacks still see every chunk.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import secrets
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import docker.errors
import requests.exceptions

from provider_sdk import errors, scripts
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import ExecResult
from provider_sdk.provider import (
    Command,
    OutputCallback,
    ProcessEvent,
    ProcessExit,
    ProcessOutput,
    exit_code_from_status,
)
from provider_sdk.retry import Attempts, Backoff
from provider_sdk.sandbox import EmulatedShell
from provider_sdk_docker import _scripts
from provider_sdk_docker._archive import path_stat
from provider_sdk_docker._engine import ExecStream
from provider_sdk_docker._host import GROUP_PREFIX, HostControl
from provider_sdk_docker._labels import container_name
from provider_sdk_docker._shared import Shared

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["DockerCommands"]

EXIT_POLL = 0.005
#: How long moving a new exec into its cgroup may take.
CONTAIN_DEADLINE = 5.0
#: How long the Engine has to tell a new exec's pid before the host looks for it.
PID_WAIT = 2.0
#: How long a kill may take before the call gives up on it (and reports the timeout).
KILL_DEADLINE = 10.0
#: How long output is still read after a kill, for what the command wrote last.
DRAIN_GRACE = 2.0
#: How long the host watches for an exec it gave up on to start, to kill it.
HELD_WATCH = 600.0
_HELD_POLL = 0.05
#: How long a background process may take to start and report its pid.
START_DEADLINE = 30.0
#: How long the exit status of an exec whose output has ended may take to show.
EXIT_DEADLINE = 30.0
_PID_POLL = Backoff(initial=EXIT_POLL, factor=1.5, cap=0.1)
"""Pauses between asking for a new exec's pid: often at first, less so on a runtime
that is slow to start it."""
_EXIT_POLL = Backoff(initial=EXIT_POLL, factor=2, cap=0.2)
"""Pauses between asking for the exit status of an exec whose output has ended."""
#: How long the Engine may take to catch up with a container's events (see ``settle``).
SETTLE_DEADLINE = 30.0


class DockerCommands:
    """Commands (the required part), background processes (``process.background``) and
    shells (``shell.persistent``, emulated) of one ``DockerProvider``'s sandboxes.

    Args:
        shared: the provider's Engine, settings and caches.
    """

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        self._engine = shared.engine
        self.name = shared.name

    # --------------------------------------------------------------- host control

    async def _host_control(self, sandbox_id: str) -> HostControl | None:
        """Control of the sandbox's processes from this host, when it is possible."""
        if not self._shared.host_control:
            return None
        control = self._shared.controls.get(sandbox_id)
        # procfs and cgroupfs answer from memory: no worker thread for these reads.
        if control is not None and control.alive():
            return control
        data = await self._shared.inspect(sandbox_id)
        pid = int((data.get("State") or {}).get("Pid") or 0)
        located = await anyio.to_thread.run_sync(HostControl.locate, str(data["Id"]), pid)
        self._shared.controls[sandbox_id] = located
        self._note_pwd(sandbox_id, data)
        return located

    async def _container_pwd(self, sandbox_id: str) -> str | None:
        """The ``PWD`` the container's environment sets (its image's or its creator's):
        a shell a command is started through sets its own, so it is put back for a
        command not given one."""
        if sandbox_id not in self._shared.pwds:
            self._note_pwd(sandbox_id, await self._shared.inspect(sandbox_id))
        return self._shared.pwds[sandbox_id]

    def _note_pwd(self, sandbox_id: str, data: dict[str, Any]) -> None:
        given = (data.get("Config") or {}).get("Env") or []
        self._shared.pwds[sandbox_id] = next((e[4:] for e in given if e.startswith("PWD=")), None)

    async def _contain(self, control: HostControl, exec_id: str, group: str,
                       sandbox_id: str) -> None:
        """Move a started exec (held by :func:`_held` under the name ``group``) into
        cgroup ``group``, then let it run.

        The exec's pid is looked for until it shows or the exec has ended, however long
        a loaded runtime takes to start it: an exec given up on would stay held, and its
        caller wait, for good. The move and the release are not cancelled; they keep to
        CONTAIN_DEADLINE. A search that is cancelled (the command's timeout, the
        caller's cancellation) hands the exec to a watch of the host's
        (:meth:`_kill_held`): whenever the runtime starts it, it is killed, with whatever
        it started. The wrapper's own check (:data:`~provider_sdk_docker._scripts.HOLD`)
        is a second line only: code inside can rewrite a process of its own user."""
        try:
            pid = await self._held_pid(control, exec_id, group, sandbox_id)
        except anyio.get_cancelled_exc_class():
            threading.Thread(target=self._kill_held, args=(control, exec_id, group),
                             name=f"psdk-{group}", daemon=True).start()
            raise
        if pid > 0:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(functools.partial(
                    control.launch, group, pid, deadline=time.monotonic() + CONTAIN_DEADLINE))

    async def _held_pid(self, control: HostControl, exec_id: str, group: str,
                        sandbox_id: str) -> int:
        """The host pid of a new exec: the Engine's word or, once PID_WAIT has passed,
        its wrapper found on this host by its name; 0 if it ended without one."""
        began = time.monotonic()
        async for _ in Attempts(_PID_POLL):
            state = await self._engine.api("exec_inspect", exec_id, kind="exec",
                                           sandbox_id=sandbox_id)
            pid = int(state.get("Pid") or 0)
            if pid > 0:
                return pid
            if not state.get("Running") and state.get("ExitCode") is not None:
                return 0
            if time.monotonic() - began >= PID_WAIT:
                # One pass over the container's processes (a deadline already past).
                found = await anyio.to_thread.run_sync(functools.partial(
                    control.find_held, group, deadline=0.0))
                if found:
                    return found
        raise AssertionError("Attempts without a timeout never end")  # pragma: no cover

    def _kill_held(self, control: HostControl, exec_id: str, group: str) -> None:
        """Kill an exec given up on before its pid was known, whenever the runtime starts
        it: found by the Engine's pid or by its wrapper's name, moved into its cgroup and
        killed there with whatever it started. Ends once the exec has ended, its
        container is gone, or after HELD_WATCH seconds (in a thread of its own)."""
        deadline = time.monotonic() + HELD_WATCH
        try:
            while time.monotonic() < deadline:
                try:
                    state = self._engine.client.exec_inspect(exec_id)
                except (docker.errors.DockerException, requests.exceptions.RequestException,
                        errors.SandboxError):
                    return  # the container, or the Engine, is gone
                if not state.get("Running") and state.get("ExitCode") is not None:
                    return  # ended (its pid may be another process's by now)
                pid = int(state.get("Pid") or 0) or control.find_held(group, deadline=0.0)
                if pid:
                    control.contain(group, pid, deadline=time.monotonic() + CONTAIN_DEADLINE)
                    control.kill(group, deadline=time.monotonic() + KILL_DEADLINE)
                time.sleep(_HELD_POLL)
        finally:
            control.release(group)

    async def _stop(self, sandbox_id: str, control: HostControl | None, group: str,
                    token: str) -> None:
        """Kill what an exec started (and anything escaped), within KILL_DEADLINE."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(KILL_DEADLINE + 1), \
                contextlib.suppress(errors.SandboxError):
            if control is not None:
                deadline = time.monotonic() + KILL_DEADLINE
                await anyio.to_thread.run_sync(
                    functools.partial(control.kill, group, deadline=deadline))
            else:
                await self.exec(sandbox_id, Command(
                    argv=scripts.kill_marked_argv(token), user="0", timeout=KILL_DEADLINE),
                    kill=False)

    # --------------------------------------------------------------------- exec

    async def exec(self, sandbox_id: str, command: Command, *,
                   kill: bool = True) -> ExecResult:
        """Run a command to completion; without ``kill``, neither contained nor killed on
        a timeout or a cancellation (the kill's own command)."""
        started = time.monotonic()
        control = await self._host_control(sandbox_id) if kill else None
        token = secrets.token_hex(8)
        group = f"{GROUP_PREFIX}{token}"
        env = dict(command.env)
        if control is None and kill:
            env.update(scripts.mark_env("x" + token))
        argv = _held(command.argv, group, _pwd_argument(
            env, await self._container_pwd(sandbox_id))) if control is not None \
            else list(command.argv)
        exec_id = await self._exec_create(sandbox_id, argv, env=env,
                                          cwd=command.cwd, user=command.user,
                                          stdin=command.stdin is not None)
        out, err = command.buffers()
        oom_before = control.oom_kills() if control else None
        done = anyio.Event()
        timed_out = False
        stream = await self._engine.attach(exec_id, sandbox_id=sandbox_id)

        async def pump() -> None:
            await _pump(stream, command.stdin, out, err, command.on_stdout, command.on_stderr)
            done.set()

        contained = anyio.Event()
        search = anyio.CancelScope()

        async def contain() -> None:
            try:
                if control is not None:
                    with search:
                        await self._contain(control, exec_id, group, sandbox_id)
            finally:
                contained.set()

        deadline = anyio.current_time() + command.timeout if command.timeout else float("inf")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump)
                tg.start_soon(contain)
                with anyio.CancelScope(deadline=deadline):
                    await done.wait()
                if not done.is_set():
                    timed_out = True
                    # A command not let go by now never is (a wrapper its search finds
                    # is killed); one let go is killed with the rest of its cgroup.
                    search.cancel()
                    with anyio.move_on_after(CONTAIN_DEADLINE + 1):
                        await contained.wait()
                    # The output is still drained meanwhile: the Engine never waits on us.
                    if kill:
                        await self._stop(sandbox_id, control, group, "x" + token)
                    with anyio.move_on_after(DRAIN_GRACE):
                        await done.wait()
                    tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            if kill:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
                    await self._stop(sandbox_id, control, group, "x" + token)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
                if control is not None:
                    await anyio.to_thread.run_sync(control.release, group)
        code = -9 if timed_out else await self._exit_code(exec_id, sandbox_id)
        oom = False
        if control is not None and oom_before is not None:
            after = control.oom_kills()
            oom = after is not None and after > oom_before
        result = ExecResult(exit_code=code, stdout_bytes=out.value(), stderr_bytes=err.value(),
                            duration=time.monotonic() - started,
                            stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                            oom_killed=oom)
        if timed_out:
            raise errors.CommandTimeout(
                f"command timed out after {command.timeout:g} s: {command.argv[0]!r}",
                result=result, provider=self.name, sandbox_id=sandbox_id)
        return result

    async def _exec_create(self, sandbox_id: str, argv: builtins.list[str], *,
                           env: Mapping[str, str] | None = None, cwd: str | None = None,
                           user: str | None = None, stdin: bool = False) -> str:
        if cwd is not None and not cwd.startswith("/"):
            cwd = await self._shared.resolve(sandbox_id, cwd)
        created = await self._engine.api(
            "exec_create", container_name(sandbox_id), argv, stdin=stdin,
            environment=dict(env or {}), workdir=cwd, user=user or "", what=sandbox_id,
            sandbox_id=sandbox_id)
        return str(created["Id"])

    async def settle(self, sandbox_id: str) -> None:
        """Return once the Engine has handled every event of the container so far.

        The Engine records a pause or an unpause twice: when its API call returns, and
        again when the runtime's event for it arrives, handled in order with the
        container's other events. An event that lags (the Engine waits for a command's
        unread output before it goes on) lands after the next call: a "paused" after an
        unpause says paused, and refuses commands, until the "resumed" behind it lands.
        The exit of a command started now is handled after all of them, so once it is
        reported, the state the Engine reports is the one it keeps. A command refused
        as paused meanwhile is a lagging "paused": the "resumed" behind it follows.
        """
        async for _ in Attempts(_EXIT_POLL, timeout=SETTLE_DEADLINE):
            try:
                exec_id = await self._exec_create(sandbox_id, ["/bin/sh", "-c", ":"])
            except errors.SandboxNotRunning as exc:
                if exc.state == "paused":
                    continue
                raise
            await self._engine.api("exec_start", exec_id, detach=True, kind="exec",
                                   sandbox_id=sandbox_id)
            await self._exit_code(exec_id, sandbox_id)
            return
        raise errors.Unavailable(
            f"the Docker Engine still reports sandbox {sandbox_id!r} paused after "
            f"{SETTLE_DEADLINE:g} s", provider=self.name, sandbox_id=sandbox_id)

    async def _exit_code(self, exec_id: str, sandbox_id: str) -> int:
        """The exit status of a finished exec; 128+N (signal N) as -N."""
        with anyio.move_on_after(EXIT_DEADLINE):
            async for _ in Attempts(_EXIT_POLL):
                state = await self._engine.api("exec_inspect", exec_id, kind="exec",
                                               sandbox_id=sandbox_id)
                if not state.get("Running") and state.get("ExitCode") is not None:
                    return exit_code_from_status(int(state["ExitCode"]))
        raise errors.OperationTimeout(
            f"the command's output ended but the Engine reported no exit status within "
            f"{EXIT_DEADLINE:g} s", provider=self.name, sandbox_id=sandbox_id)

    async def run(self, sandbox_id: str, script: str, *args: str, user: str | None = None,
                  stdin: bytes | None = None) -> ExecResult:
        """Run one of the provider's own shell snippets."""
        return await self.exec(sandbox_id, Command(
            argv=("/bin/sh", "-c", script, "psdk", *args), user=user, stdin=stdin))

    # -------------------------------------------------------- background processes

    async def start(self, sandbox_id: str, command: Command) -> int:
        """Start a background process under the supervisor; its pid."""
        ready = self._shared.proc_ready
        if command.user not in (None, "", "0", "root") and sandbox_id not in ready:
            # Any user may then make its own process directory; the first start may be
            # root's, which would otherwise own the parent.
            await self.run(sandbox_id, _scripts.PREPARE_PROC, user="0")
            ready.add(sandbox_id)
        control = await self._host_control(sandbox_id)
        group = f"{GROUP_PREFIX}{secrets.token_hex(8)}"
        pwd = _pwd_argument(command.env, await self._container_pwd(sandbox_id))
        argv = ["/bin/sh", "-c", _scripts.SUPERVISE, "psdk", pwd, *command.argv]
        exec_id = await self._exec_create(
            sandbox_id, _held(argv, group, pwd) if control is not None else argv,
            env=command.env, cwd=command.cwd, user=command.user)
        stream = await self._engine.attach(exec_id, sandbox_id=sandbox_id)
        line = b""
        try:
            with anyio.move_on_after(START_DEADLINE):
                if control is not None:
                    await self._contain(control, exec_id, group, sandbox_id)
                line = await stream.line()
        except anyio.get_cancelled_exc_class():
            # The caller gave up: a process it never got a handle on is no one's, so it
            # ends (its cgroup has the name of the start until the pid is known).
            if control is not None:
                await self._stop(sandbox_id, control, group, "")
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        if not line.strip().isdigit():
            if control is not None:
                await self._stop(sandbox_id, control, group, "")
            raise errors.SandboxError(
                f"could not start {command.argv[0]!r}: the supervisor needs /bin/sh, mkfifo "
                f"and a writable {_scripts.PROC_DIR}", provider=self.name,
                sandbox_id=sandbox_id)
        pid = int(line)
        if control is not None:
            # Not cut short: a cgroup left with the start's name is out of the kill's reach.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(control.rename, group, f"{GROUP_PREFIX}p{pid}")
        return pid

    async def process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        """A process's output (from its start), then its exit."""
        await self._check_process(sandbox_id, pid)
        exec_id = await self._exec_create(
            sandbox_id, ["/bin/sh", "-c", _scripts.FOLLOW, "psdk", str(pid)])
        stream = await self._engine.attach(exec_id, sandbox_id=sandbox_id)
        try:
            async for name, data in stream.frames():
                yield ProcessOutput(name, data)
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        yield ProcessExit(await self._exit_code(exec_id, sandbox_id))

    async def _check_process(self, sandbox_id: str, pid: int) -> None:
        if await path_stat(self._shared, sandbox_id, f"{_scripts.PROC_DIR}/{pid}/in") is None:
            raise errors.ProcessNotFound(f"no process {pid} started by this SDK",
                                         provider=self.name, sandbox_id=sandbox_id)

    async def send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        """Write to a process's stdin."""
        await self._check_process(sandbox_id, pid)
        result = await self.run(sandbox_id, _scripts.SEND_STDIN, str(pid), stdin=data)
        if not result.ok:
            raise errors.ProcessNotFound(f"cannot write to process {pid}: "
                                         f"{result.stderr.strip()}", provider=self.name,
                                         sandbox_id=sandbox_id)

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        """Close a process's stdin."""
        await self._check_process(sandbox_id, pid)
        await self.run(sandbox_id, 'kill -USR1 "$1" 2>/dev/null; exit 0', str(pid), user="0")

    async def kill_process(self, sandbox_id: str, pid: int) -> None:
        """Kill a process and its whole tree."""
        await self._check_process(sandbox_id, pid)
        control = await self._host_control(sandbox_id)
        group = f"{GROUP_PREFIX}p{pid}"
        if control is not None and not await anyio.to_thread.run_sync(control.exists, group):
            control = None  # started where the host could not place it: kill inside
        await self._stop(sandbox_id, control, group, f"p{pid}")

    async def open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                         env: Mapping[str, str]) -> Shell:
        """A shell emulated over commands: the Engine has no sessions of its own."""
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)


def _pwd_argument(env: Mapping[str, str], container: str | None) -> str:
    """What a wrapper script takes for the ``PWD`` it gives its command: ``=VALUE``
    (the command's own, else the container's), or empty for none."""
    value = env.get("PWD", container)
    return "" if value is None else f"={value}"


def _held(argv: Sequence[str], name: str, pwd: str) -> builtins.list[str]:
    """``argv`` behind the wrapper that holds it until the host lets it go; ``name`` is
    the wrapper's ``$0``, by which the host can find it, and ``pwd`` what it gives as
    ``PWD`` (see :func:`_pwd_argument`)."""
    return ["/bin/sh", "-c", _scripts.HOLD, name, pwd, *argv]


async def _pump(stream: ExecStream, stdin: bytes | None, out: OutputBuffer, err: OutputBuffer,
                on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> None:
    """Feed ``stdin`` (then end of file) while collecting output until the exec ends.

    The output ends when the exec does: what of ``stdin`` it left unread is dropped (the
    Engine reads no more of it, so a send would wait for good)."""
    async def feed(data: bytes) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                 OSError):
            await stream.send(data)
            await stream.close_stdin()

    async with anyio.create_task_group() as tg:
        if stdin is not None:
            tg.start_soon(feed, stdin)
        async for name, data in stream.frames():
            (out if name == "stdout" else err).append(data)
            callback = on_stdout if name == "stdout" else on_stderr
            if callback is not None:
                done = callback(data)
                if inspect.isawaitable(done):
                    await done
        tg.cancel_scope.cancel()
