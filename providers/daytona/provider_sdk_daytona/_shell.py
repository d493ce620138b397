"""``DaytonaShell``: the neutral persistent shell on a Daytona session."""

from __future__ import annotations

import contextlib
import secrets
import shlex
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import anyio
from daytona import AsyncSandbox, SessionExecuteRequest

from provider_sdk import errors, scripts
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import ExecResult
from provider_sdk.provider import OutputCallback
from provider_sdk.sandbox import Sandbox, Shell
from provider_sdk_daytona._exec import daemon_seconds

__all__ = ["DaytonaShell", "ShellHost"]

T = TypeVar("T")


class ShellHost(Protocol):
    """What a :class:`DaytonaShell` needs to call Daytona, and all it uses (the
    provider's shared ``DaytonaCalls`` meets it): the provider's name, toolbox calls
    and their timeout, and where a path resolves. Its output limit is the provider's,
    read from the sandbox handle."""

    @property
    def name(self) -> str: ...

    @property
    def request_timeout(self) -> float: ...

    async def toolbox(self, sandbox_id: str, call: Callable[[AsyncSandbox], Awaitable[T]], *,
                      wait: float | None = 0.0) -> T: ...

    async def path(self, sandbox_id: str, path: str) -> str: ...


class DaytonaShell(Shell):
    """A persistent shell on a Daytona session: each command is sourced into one
    long-lived shell, so ``cd``, ``export``, variables and functions carry over.

    ``exit N`` in a command ends that command with status ``N`` and keeps the session
    (the session shell has an ``exit`` function that returns instead). Output arrives
    when the command ends (``exec.stream`` is not declared), and commands take no stdin
    (``shell.stdin`` is not declared): the core refuses both before a call gets here.
    """

    EXIT = 'exit() { return "${1:-$?}"; }; '
    """Prefixed to every command: ``exit`` returns from the command, the session lives."""

    def __init__(self, host: ShellHost, sandbox: Sandbox, session_id: str) -> None:
        super().__init__(sandbox)
        self._host = host
        self._sandbox_id = sandbox.id
        self._session = session_id
        self._closed = False

    @classmethod
    async def open(cls, host: ShellHost, sandbox: Sandbox, *, cwd: str | None,
                   env: Mapping[str, str]) -> DaytonaShell:
        """Create the session and set its starting directory and variables."""
        sandbox_id = sandbox.id
        shell = cls(host, sandbox, f"psdk-shell-{secrets.token_hex(8)}")
        await host.toolbox(sandbox_id, lambda s: s.process.create_session(shell._session))
        setup = scripts.export_script(env)
        start = await host.path(sandbox_id, cwd or ".")
        setup += f"cd -- {shlex.quote(start)}"
        result = await shell.run(setup)
        if not result.ok:
            await shell.aclose()
            raise errors.InvalidInput(f"shell: cannot start in {start!r}: "
                                      f"{result.stderr.strip()}", provider=host.name,
                                      sandbox_id=sandbox_id)
        return shell

    async def _run(self, cmd: str, *, timeout: float | None, stdin: bytes | str | None,
                   on_stdout: OutputCallback | None,
                   on_stderr: OutputCallback | None) -> ExecResult:
        """Run ``cmd`` in the session; its result once it ends."""
        where: dict[str, Any] = {"provider": self._host.name, "sandbox_id": self._sandbox_id}
        if self._closed:
            raise errors.InvalidInput("the shell is closed", **where)
        request = SessionExecuteRequest(command=self.EXIT + cmd, run_async=False)
        limit = daemon_seconds(timeout)
        start = anyio.current_time()
        try:
            done = await self._host.toolbox(
                self._sandbox_id, lambda s: s.process.execute_session_command(
                    self._session, request, timeout=limit),
                wait=None if limit is None else limit + self._host.request_timeout)
        except errors.Unavailable as exc:
            if timeout is None:
                raise
            empty = ExecResult(exit_code=-9, duration=anyio.current_time() - start)
            raise errors.CommandTimeout(f"the shell command ran longer than {timeout:g} s",
                                        result=empty, **where) from exc
        # The daemon answers with the whole output; keep the provider's output_limit.
        kept = self._sandbox.provider.output_limit
        out = OutputBuffer(kept)
        err = OutputBuffer(kept)
        out.append((done.stdout or "").encode())
        err.append((done.stderr or "").encode())
        return ExecResult(exit_code=done.exit_code if done.exit_code is not None else -1,
                          stdout_bytes=out.value(), stderr_bytes=err.value(),
                          stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                          duration=anyio.current_time() - start)

    async def aclose(self) -> None:
        """Delete the session (what it still runs ends). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(errors.SandboxError):
            await self._host.toolbox(self._sandbox_id,
                                     lambda s: s.process.delete_session(self._session))
