"""Handles business code holds: :class:`Sandbox`, its files (``Files``, from
``provider_sdk.files``), :class:`Process` and :class:`Shell`.

Handles are thin: they validate arguments, check capabilities and call the provider's
hooks. They hold no state a second handle (``provider.connect(id)``) would not also get,
so a handle can be dropped and reopened in another process at any time.
"""

from __future__ import annotations

import abc
import math
import secrets
import shlex
from collections.abc import (
    AsyncIterator,
    Generator,
    Mapping,
    Sequence,
)
from typing import Any, Protocol, cast

import anyio
import attrs

from provider_sdk import scripts
from provider_sdk._hooks import ProviderHooks
from provider_sdk._transfer import Data as Data  # write()'s argument type, importable from here
from provider_sdk.capabilities import Capability
from provider_sdk.code import SandboxCode
from provider_sdk.commands import Command, OutputCallback, ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.errors import InvalidInput, attributed
from provider_sdk.events import span, trace_context
from provider_sdk.files import Files, check_path
from provider_sdk.labels import check_labels
from provider_sdk.limits import OutputBuffer, check_limit
from provider_sdk.models import (
    ExecResult,
    ExposedPort,
    Metrics,
    NetworkPolicy,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    _env_map,
)
from provider_sdk.terminal import Terminals

__all__ = ["EmulatedShell", "Files", "Process", "Sandbox", "SandboxCreation", "Shell"]


class _Creates(Protocol):
    """What :class:`SandboxCreation` calls: ``SandboxProvider._create_sandbox``."""

    async def _create_sandbox(self, spec: SandboxSpec) -> Sandbox: ...


class _OpensShells(Protocol):
    """What :meth:`Sandbox.shell` calls: ``SandboxProvider._open_shell``, the hook."""

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell: ...


class SandboxCreation:
    """What ``provider.create()`` returns: await it, or use it with ``async with``."""

    def __init__(self, provider: _Creates, spec: SandboxSpec) -> None:
        self._provider = provider
        self.spec = spec
        self._sandbox: Sandbox | None = None

    def __await__(self) -> Generator[Any, None, Sandbox]:
        return self._provider._create_sandbox(self.spec).__await__()

    async def __aenter__(self) -> Sandbox:
        self._sandbox = await self._provider._create_sandbox(self.spec)
        return self._sandbox

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._sandbox is not None
        await self._sandbox.__aexit__(*exc_info)


class Sandbox:
    """A handle on one sandbox.

    ``async with sandbox:`` kills it when the block ends (even on error or
    cancellation) unless :meth:`keep` was called.
    """

    def __init__(self, provider: ProviderHooks, info: SandboxInfo) -> None:
        self.provider = provider
        self._info = info
        self._files = Files(self)
        self._code = SandboxCode(self)
        self._keep = False

    # Properties rather than instance attributes, so help(Sandbox) and the API reference
    # list them with the rest of the handle.
    @property
    def info(self) -> SandboxInfo:
        """The last known :class:`~provider_sdk.models.SandboxInfo`; :meth:`refresh`
        updates it."""
        return self._info

    @info.setter
    def info(self, value: SandboxInfo) -> None:
        self._info = value

    @property
    def files(self) -> Files:
        """File operations inside the sandbox (:class:`Files`)."""
        return self._files

    @property
    def code(self) -> SandboxCode:
        """The sandbox's code interpreter (:class:`~provider_sdk.code.SandboxCode`,
        ``code.interpreter``)."""
        return self._code

    @property
    def terminal(self) -> Terminals:
        """Terminals in the sandbox (:class:`~provider_sdk.terminal.Terminals`,
        ``terminal.pty``)."""
        return Terminals(self)

    @property
    def id(self) -> str:
        """The sandbox's id, stable across processes."""
        return self.info.id

    @property
    def metadata(self) -> Mapping[str, str]:
        """The sandbox's metadata (labels)."""
        return self.info.metadata

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} provider={self.provider.name!r} state={self.info.state}>"

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if not self._keep:
            with anyio.CancelScope(shield=True):
                await self.kill()

    def keep(self) -> Sandbox:
        """Leave the sandbox running when its ``async with`` block ends."""
        self._keep = True
        return self

    async def refresh(self) -> SandboxInfo:
        """Fetch the current info from the provider."""
        self.info = await self.provider.get_info(self.id)
        return self.info

    async def kill(self) -> None:
        """Kill the sandbox. Killing twice is not an error."""
        await self.provider.kill(self.id)
        self.info = attrs.evolve(self.info, state=SandboxState.KILLED)

    # ----------------------------------------------------------------- exec

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """Run a command to completion and return its result.

        ``cmd`` is an argv list, or a string run by ``/bin/bash -c``. ``env`` reaches
        the process exactly as given (``PATH`` included), over the sandbox's defaults.
        ``timeout`` (seconds, finite) kills the whole process tree and raises
        :class:`~provider_sdk.errors.CommandTimeout` carrying the partial output.
        ``on_stdout``/``on_stderr`` receive bytes as they arrive (``exec.stream``), all
        of them. The result keeps at most ``output_limit`` bytes of each stream
        (default: the provider's :attr:`~provider_sdk.provider.SandboxProvider.output_limit`,
        16 MiB); ``stdout_truncated``/``stderr_truncated`` count the bytes dropped.
        """
        command = self._command(cmd, env=env, cwd=cwd, user=user, timeout=timeout,
                                stdin=stdin, output_limit=output_limit)
        if on_stdout is not None or on_stderr is not None:
            self.provider.require(Capability.EXEC_STREAM, sandbox_id=self.id)
            command = attrs.evolve(command, on_stdout=on_stdout, on_stderr=on_stderr)
        async with span("exec", self.provider.name, self.id):
            return await self.provider._exec(self.id, _traced(command))

    async def start(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        stdin: bool = True,
    ) -> Process:
        """Start a background process and return it at once (``process.background``).

        Its stdin stays open until :meth:`Process.close_stdin`; with ``stdin=False`` it
        is closed from the start (the process reads end of file, as an exec's without
        input does), and nothing written to it later reaches the process.
        """
        self.provider.require(Capability.PROCESS_BACKGROUND, sandbox_id=self.id)
        command = self._command(cmd, env=env, cwd=cwd, user=user, timeout=None, stdin=None,
                                output_limit=None)
        if not stdin:
            command = attrs.evolve(command, keep_stdin=False)
        async with span("process.start", self.provider.name, self.id):
            pid = await self.provider._start(self.id, _traced(command))
            if not stdin and not self.provider.start_closes_stdin:
                await self.provider._close_stdin(self.id, pid)
        return Process(self, pid)

    def process(self, pid: int) -> Process:
        """Reattach to a background process by pid (``process.background``)."""
        self.provider.require(Capability.PROCESS_BACKGROUND, sandbox_id=self.id)
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise InvalidInput(f"pid: {pid!r} is not a process id",
                               provider=self.provider.name, sandbox_id=self.id)
        return Process(self, pid)

    async def shell(self, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None) -> Shell:
        """Open a persistent shell: ``cd`` and ``export`` carry over between runs."""
        self.provider.require(Capability.SHELL_PERSISTENT, sandbox_id=self.id)
        if cwd is not None:
            check_path(cwd, self.provider.name, self.id)
        with attributed(self.provider.name, self.id):
            checked = _env_map(env)
        # Every provider is a SandboxProvider, which declares the hook.
        hooks = cast("_OpensShells", self.provider)
        return await hooks._open_shell(self, cwd=cwd, env=checked)

    # ------------------------------------------------------------ lifecycle

    async def pause(self) -> SandboxInfo:
        """Pause the sandbox; the filesystem is kept, memory too with ``pause.memory``."""
        self.provider.require(Capability.PAUSE, sandbox_id=self.id)
        async with span("pause", self.provider.name, self.id):
            self.info = self.provider._visible(await self.provider._pause(self.id))
        return self.info

    async def resume(self) -> SandboxInfo:
        """Resume a paused sandbox; returns once its data plane answers."""
        self.provider.require(Capability.PAUSE, sandbox_id=self.id)
        async with span("resume", self.provider.name, self.id):
            self.info = self.provider._visible(await self.provider._resume(self.id))
        return self.info

    async def snapshot(self) -> Snapshot:
        """Snapshot the sandbox (``snapshot.filesystem``); ``captures`` says what it holds."""
        self.provider.require(Capability.SNAPSHOT_FILESYSTEM, sandbox_id=self.id)
        async with span("snapshot", self.provider.name, self.id):
            return await self.provider._snapshot(self.id)

    async def rollback(self, snapshot: Snapshot | str) -> SandboxInfo:
        """Restore this sandbox in place from a snapshot (``snapshot.rollback``)."""
        self.provider.require(Capability.SNAPSHOT_ROLLBACK, sandbox_id=self.id)
        snapshot_id = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        async with span("rollback", self.provider.name, self.id):
            self.info = self.provider._visible(
                await self.provider._rollback(self.id, snapshot_id))
        return self.info

    async def metrics(self) -> Metrics:
        """Current resource use (``metrics``)."""
        self.provider.require(Capability.METRICS, sandbox_id=self.id)
        async with span("metrics", self.provider.name, self.id):
            return await self.provider._metrics(self.id)

    async def update_network(self, policy: NetworkPolicy) -> None:
        """Change the network policy of the running sandbox (``network.update``)."""
        self.provider.require(Capability.NETWORK_UPDATE, sandbox_id=self.id)
        self.provider._check_network(policy, self.id, "update_network()")
        async with span("network.update", self.provider.name, self.id):
            await self.provider._update_network(self.id, policy)

    async def set_metadata(self, metadata: Mapping[str, str], *,
                           reread: bool = True) -> SandboxInfo:
        """Set labels on the sandbox (``metadata.update``), keeping the others; returns
        (and keeps in :attr:`info`) its info with them. The labels follow the rules of
        :mod:`provider_sdk.labels`, as at create: the provider's internal labels are
        refused. ``get_info`` and ``list(metadata=...)`` see them at once, from any
        process.

        ``reread=False`` saves a round trip where the backend takes the labels only
        whole (Daytona): they are merged into the labels this provider last saw instead
        of those read just before, so what another client changed since is lost. A
        :class:`~provider_sdk.manager.WarmPool` claims its members this way: until one
        is handed out, its labels are the pool's."""
        self.provider.require(Capability.METADATA_UPDATE, sandbox_id=self.id)
        if not isinstance(metadata, Mapping):
            raise InvalidInput(f"metadata must be a mapping, got {type(metadata).__name__}",
                               provider=self.provider.name, sandbox_id=self.id)
        labels = dict(metadata)
        check_labels(labels, internal=self.provider.internal_labels,
                     provider=self.provider.name)
        hook = self.provider._set_metadata if reread else self.provider._set_metadata_as_seen
        async with span("metadata.update", self.provider.name, self.id):
            self.info = self.provider._visible(await hook(self.id, labels))
        return self.info

    # ---------------------------------------------------------------- ports

    async def expose(self, port: int) -> ExposedPort:
        """Reach the server listening on ``port`` inside the sandbox (``ports.expose``).

        Returns an :class:`~provider_sdk.models.ExposedPort` whose ``url`` opens it as
        it is (the access token is part of it); ``base_url`` takes the token in a
        header instead. Anything without the token is refused. The address answers
        until :meth:`unexpose`, until the sandbox is killed, or until the provider is
        closed. Exposing a port already exposed returns the same address and token.
        """
        _check_port(port, self.provider.name, self.id)
        self.provider.require(Capability.PORTS_EXPOSE, sandbox_id=self.id)
        async with span("ports.expose", self.provider.name, self.id, port=port):
            return await self.provider._expose(self.id, port)

    async def unexpose(self, port: int) -> None:
        """Stop serving ``port`` (``ports.expose``): its URL no longer answers.
        Unexposing a port that is not exposed is not an error."""
        _check_port(port, self.provider.name, self.id)
        self.provider.require(Capability.PORTS_EXPOSE, sandbox_id=self.id)
        async with span("ports.unexpose", self.provider.name, self.id, port=port):
            await self.provider._unexpose(self.id, port)

    # -------------------------------------------------------------- helpers

    def _command(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None,
                 cwd: str | None, user: str | None, timeout: float | None,
                 stdin: bytes | str | None, output_limit: int | None) -> Command:
        with attributed(self.provider.name, self.id):
            return self._checked_command(cmd, env=env, cwd=cwd, user=user, timeout=timeout,
                                         stdin=stdin, output_limit=output_limit)

    def _checked_command(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None,
                         cwd: str | None, user: str | None, timeout: float | None,
                         stdin: bytes | str | None, output_limit: int | None) -> Command:
        if isinstance(cmd, str):
            argv: tuple[str, ...] = ("/bin/bash", "-c", cmd)
        else:
            argv = tuple(cmd)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise InvalidInput(f"cmd: expected a string or a non-empty list of strings, "
                               f"got {cmd!r}")
        if any("\0" in a for a in argv):
            raise InvalidInput("cmd: arguments must not contain NUL bytes")
        if not argv[0]:
            raise InvalidInput("cmd: the program to run is an empty string")
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float))
                                    or not 0 < timeout < math.inf):
            raise InvalidInput(f"timeout must be a finite positive number of seconds, "
                               f"got {timeout!r}")
        limit = check_limit("output_limit", self.provider.output_limit
                            if output_limit is None else output_limit)
        if cwd is not None:
            check_path(cwd, self.provider.name, self.id)
        if user is not None:
            self.provider.require(Capability.EXEC_USER, sandbox_id=self.id)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return Command(argv=argv, env=_env_map(env), cwd=cwd, user=user, timeout=timeout,
                       stdin=data, output_limit=limit)


class Process:
    """A background process. Reattach from anywhere with ``sandbox.process(pid)``."""

    def __init__(self, sandbox: Sandbox, pid: int) -> None:
        self.sandbox = sandbox
        self.pid = pid

    def __repr__(self) -> str:
        return f"<Process {self.pid} in {self.sandbox.id}>"

    def events(self) -> AsyncIterator[ProcessEvent]:
        """Output chunks as they arrive, then a :class:`ProcessExit`.

        Output produced before the call may be replayed.
        """
        return self.sandbox.provider._process_events(self.sandbox.id, self.pid)

    async def wait(self, *, output_limit: int | None = None) -> ExecResult:
        """Wait for the process to exit; return its output and exit code.

        The result keeps at most ``output_limit`` bytes of each stream (default: the
        provider's ``output_limit``), as :meth:`Sandbox.exec` does.
        """
        with attributed(self.sandbox.provider.name, self.sandbox.id):
            limit = check_limit("output_limit", self.sandbox.provider.output_limit
                                if output_limit is None else output_limit)
        out, err = OutputBuffer(limit), OutputBuffer(limit)
        code = -1
        start = anyio.current_time()
        async for event in self.events():
            if isinstance(event, ProcessOutput):
                (out if event.stream == "stdout" else err).append(event.data)
            elif isinstance(event, ProcessExit):
                code = event.exit_code
        return ExecResult(exit_code=code, stdout_bytes=out.value(), stderr_bytes=err.value(),
                          stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                          duration=anyio.current_time() - start)

    async def write_stdin(self, data: bytes | str) -> None:
        """Write to the process's standard input."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        async with span("process.stdin", self.sandbox.provider.name, self.sandbox.id,
                        pid=self.pid):
            await self.sandbox.provider._send_stdin(self.sandbox.id, self.pid, payload)

    async def close_stdin(self) -> None:
        """Close the process's standard input (it sees end of file)."""
        async with span("process.close_stdin", self.sandbox.provider.name, self.sandbox.id,
                        pid=self.pid):
            await self.sandbox.provider._close_stdin(self.sandbox.id, self.pid)

    async def kill(self) -> None:
        """Kill the process and everything it started."""
        async with span("process.kill", self.sandbox.provider.name, self.sandbox.id,
                        pid=self.pid):
            await self.sandbox.provider._kill_process(self.sandbox.id, self.pid)


class Shell(abc.ABC):
    """A persistent shell session: working directory and exported variables carry over
    from one :meth:`run` to the next. ``async with`` closes it.

    A provider's shell implements the hooks ``_run`` and :meth:`aclose`; :meth:`run`
    checks each call against the provider's capabilities first.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    async def run(self, cmd: str, *, timeout: float | None = None,
                  stdin: bytes | str | None = None,
                  on_stdout: OutputCallback | None = None,
                  on_stderr: OutputCallback | None = None) -> ExecResult:
        """Run one shell command in the session; its result once it ends.

        ``stdin`` needs ``shell.stdin``; ``on_stdout``/``on_stderr`` need ``exec.stream``.
        """
        provider, sandbox_id = self._sandbox.provider, self._sandbox.id
        if not isinstance(cmd, str):
            raise InvalidInput("shell commands are strings", provider=provider.name,
                               sandbox_id=sandbox_id)
        if stdin is not None:
            provider.require(Capability.SHELL_STDIN, sandbox_id=sandbox_id)
        if on_stdout is not None or on_stderr is not None:
            provider.require(Capability.EXEC_STREAM, sandbox_id=sandbox_id)
        return await self._run(cmd, timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                               on_stderr=on_stderr)

    @abc.abstractmethod
    async def _run(self, cmd: str, *, timeout: float | None, stdin: bytes | str | None,
                   on_stdout: OutputCallback | None,
                   on_stderr: OutputCallback | None) -> ExecResult:
        """Run one checked shell command in the session (the provider's hook)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """End the session. Safe to call twice."""

    async def __aenter__(self) -> Shell:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()


class EmulatedShell(Shell):
    """A persistent shell over plain exec, for backends with no native sessions.

    Each run is a fresh ``bash`` that first restores the session's state file (working
    directory, exported variables) and saves it again on exit, even when the command
    fails or calls ``exit``. Unexported variables and shell functions do not carry over.
    """

    _RUN = (
        '__psdk_s=$1 __psdk_c=$2; shift 2; [ -r "$__psdk_s" ] && . "$__psdk_s"; '
        '__psdk_save() { __psdk_rc=$?; { export -p; printf "cd -- %q\\n" "$PWD"; } '
        '> "$__psdk_s.new" && mv -f -- "$__psdk_s.new" "$__psdk_s"; return $__psdk_rc; }; '
        'trap __psdk_save EXIT; eval "$__psdk_c"'
    )

    def __init__(self, sandbox: Sandbox, state_path: str) -> None:
        super().__init__(sandbox)
        self._state = state_path

    @classmethod
    async def open(cls, sandbox: Sandbox, *, cwd: str | None,
                   env: Mapping[str, str]) -> EmulatedShell:
        """Start a session in ``cwd`` with ``env`` exported."""
        shell = cls(sandbox, f"/tmp/.psdk-shell-{secrets.token_hex(8)}")
        setup = scripts.export_script(env)
        if cwd is not None:
            setup += f"cd -- {shlex.quote(cwd)}"
        result = await shell.run(setup or ":")
        if not result.ok:
            raise InvalidInput(f"shell: cannot start in {cwd!r}: {result.stderr.strip()}",
                               provider=sandbox.provider.name, sandbox_id=sandbox.id)
        return shell

    async def _run(self, cmd: str, *, timeout: float | None, stdin: bytes | str | None,
                   on_stdout: OutputCallback | None,
                   on_stderr: OutputCallback | None) -> ExecResult:
        """Run ``cmd`` in the session's state; return its result."""
        return await self._sandbox.exec(
            ["/bin/bash", "-c", self._RUN, "psdk-shell", self._state, cmd],
            timeout=timeout, stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr,
        )

    async def aclose(self) -> None:
        """Delete the session's state file."""
        if self._sandbox.info.state == SandboxState.KILLED:
            return
        await self._sandbox.exec(["rm", "-f", "--", self._state, self._state + ".new"])


def _traced(command: Command) -> Command:
    """``command`` with the current operation's trace context in its environment, where
    telemetry propagates it (see :mod:`provider_sdk.telemetry`); variables the caller
    set are kept."""
    context = trace_context()
    if not context:
        return command
    return attrs.evolve(command, env={**context, **command.env})


def _check_port(port: int, provider: str, sandbox_id: str) -> None:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise InvalidInput(f"port: {port!r} is not a TCP port (1-65535)", provider=provider,
                           sandbox_id=sandbox_id)
