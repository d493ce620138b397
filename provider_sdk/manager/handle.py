"""``ManagedSandbox``: the handle :meth:`SandboxManager.acquire` returns.

It is a :class:`~provider_sdk.sandbox.Sandbox` with these additions, and nothing else:

- the owner's environment (:meth:`ManagedSandbox.set_env`), kept in the binding store,
  applies under every call's own ``env``, so what an install phase sets is there for the
  run phase, in another process too, on every provider;
- a command or file operation that the provider refused because the sandbox is paused
  (another replica paused it for being idle) resumes it and runs once more; a refused
  call did not run, so none runs twice;
- commands and file operations count as use for the idle policy, and hold the owner's
  use lease while they run, so no replica's idle sweep pauses the sandbox under them;
- a command with a ``timeout`` ends within it even if the sandbox is paused under it
  (by hand, or by a replica that lost touch with the store): a little past the timeout
  the handle resumes it, so the provider reports the timeout with the partial output,
  and at most :data:`EXEC_GRACE` seconds past it the handle gives up waiting;
- a data-plane failure marks the owner's cached entry, so the next ``acquire`` walks
  the lookup chain again instead of handing out the same broken sandbox.

``async with`` does not kill it: it is resident. End it with
:meth:`SandboxManager.release <provider_sdk.manager.SandboxManager.release>`.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CommandTimeout, SandboxNotFound, SandboxNotRunning, Unavailable
from provider_sdk.manager._env_handle import EnvSandbox
from provider_sdk.models import ExecResult, FileInfo, SandboxInfo, SandboxState, _env_map
from provider_sdk.provider import OutputCallback
from provider_sdk.sandbox import Data, Files, Process, Sandbox

if TYPE_CHECKING:
    from provider_sdk.provider import SandboxProvider

__all__ = ["EXEC_GRACE", "ManagedSandbox", "ManagerLink"]

T = TypeVar("T")

_RESUMABLE = frozenset({"paused", "pausing", "stopped"})
EXEC_GRACE = 3.0
"""Seconds past its ``timeout`` that a command through a managed handle is waited for
at most (more than a provider takes to kill a tree and send the partial output)."""
_WAKE_AFTER = 0.25
"""Seconds past its ``timeout`` after which a command's sandbox is resumed if paused."""


class ManagerLink(Protocol):
    """What a handle asks of the :class:`~provider_sdk.manager.SandboxManager` that made
    it, and all it may ask. Typed here, not imported: the manager's modules import the
    handle."""

    async def change_env(self, sandbox: ManagedSandbox, *, set_: Mapping[str, str],
                         unset: tuple[str, ...]) -> dict[str, str]:
        """Set and unset variables in the owner's binding; the binding's new env.

        Raises:
            Conflict: the owner is no longer bound to this sandbox.
        """

    async def resume(self, sandbox: ManagedSandbox) -> SandboxInfo:
        """Resume the paused sandbox and record that in the binding."""

    async def using(self, sandbox: ManagedSandbox, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call`` as a use of the sandbox (it is not idle meanwhile, and no sweep
        pauses it)."""

    def suspect(self, owner: str, sandbox_id: str) -> None:
        """Check the sandbox again before the next acquire trusts it."""

    def forget(self, owner: str, sandbox_id: str) -> None:
        """The sandbox is gone: drop what this process remembers of it."""


class ManagedSandbox(EnvSandbox):
    """A sandbox bound to an owner by a :class:`~provider_sdk.manager.SandboxManager`.

    Attributes:
        owner: the owner it is bound to.
    """

    def __init__(self, provider: SandboxProvider, info: SandboxInfo, *,
                 manager: ManagerLink, owner: str, env: Mapping[str, str]) -> None:
        super().__init__(provider, info, env=env)
        self.owner = owner
        self._manager = manager
        self._keep = True  # resident: ``async with`` must not kill it
        # File operations count as use, like commands.
        self._files = _ManagedFiles(self)

    def __repr__(self) -> str:
        return (f"<ManagedSandbox {self.id} owner={self.owner!r} "
                f"provider={self.provider.name!r} state={self.info.state}>")

    @property
    def env(self) -> Mapping[str, str]:
        """The owner's environment: defaults for every command (a copy)."""
        return dict(self._env)

    async def set_env(self, env: Mapping[str, str] | None = None, /, **more: str) -> None:
        """Add variables to the owner's environment and keep them in the binding store.

        Every later command, in this process or any other using the store, gets them
        under its own ``env``. ``PATH`` too: it reaches the process as given.

        Raises:
            InvalidInput: a name is not a valid variable name, or a value holds a NUL.
            Conflict: the owner was rebound to another sandbox meanwhile.
        """
        changes = dict(_env_map({**(env or {}), **more}))
        self._env = await self._manager.change_env(self, set_=changes, unset=())

    async def unset_env(self, *names: str) -> None:
        """Remove variables from the owner's environment (unknown names are ignored)."""
        self._env = await self._manager.change_env(self, set_={}, unset=names)

    async def kill(self) -> None:
        """Kill the sandbox. Its binding stays: the next ``acquire`` of the owner
        replaces it (from the latest snapshot, if there is one)."""
        self._manager.forget(self.owner, self.id)
        await super().kill()

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
        """Run a command with the owner's environment under ``env``; see
        :meth:`Sandbox.exec <provider_sdk.sandbox.Sandbox.exec>`. With a ``timeout`` it
        ends within it, paused sandbox or not (see the module's docstring)."""
        def run() -> Awaitable[ExecResult]:
            return Sandbox.exec(self, cmd, env=env, cwd=cwd, user=user, timeout=timeout,
                                stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr,
                                output_limit=output_limit)

        if timeout is None or isinstance(timeout, bool) \
                or not isinstance(timeout, (int, float)) or not timeout > 0:
            return await self._guarded(run)  # Sandbox.exec says what is wrong with it
        return await self._guarded(lambda: self._bounded(run, float(timeout)))

    async def _bounded(self, run: Callable[[], Awaitable[ExecResult]],
                       timeout: float) -> ExecResult:
        """``run()`` a command with a ``timeout``: resume its sandbox if it is paused a
        little past the timeout, give up :data:`EXEC_GRACE` seconds past it."""
        outcome: list[ExecResult] = []
        failed: list[Exception] = []
        start = anyio.current_time()
        with anyio.move_on_after(timeout + EXEC_GRACE):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._wake_if_paused, timeout + _WAKE_AFTER)
                try:
                    outcome.append(await run())
                except Exception as exc:  # raised below, not as the task group's
                    failed.append(exc)
                tg.cancel_scope.cancel()
        if failed:
            raise failed[0]
        if outcome:
            return outcome[0]
        raise CommandTimeout(
            f"command timed out after {timeout:g}s, and the sandbox did not answer "
            f"{EXEC_GRACE:g}s later; its output is lost",
            result=ExecResult(exit_code=-9, duration=anyio.current_time() - start),
            provider=self.provider.name, sandbox_id=self.id)

    async def _wake_if_paused(self, delay: float) -> None:
        await anyio.sleep(delay)
        with contextlib.suppress(Exception):
            info = await self.provider.get_info(self.id)
            if info.state in (SandboxState.PAUSED, SandboxState.PAUSING):
                self.info = await self._manager.resume(self)

    async def start(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
                    cwd: str | None = None, user: str | None = None,
                    stdin: bool = True) -> Process:
        """Start a background process with the owner's environment under ``env``."""
        return await self._guarded(lambda: Sandbox.start(self, cmd, env=env, cwd=cwd,
                                                         user=user, stdin=stdin))

    async def _guarded(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run one call as a use; if the provider refused it because the sandbox is
        paused (so it did not run), resume and run it once more; on a data-plane
        failure, make the next ``acquire`` look again."""
        return await self._manager.using(self, lambda: self._once_more_if_paused(call))

    async def _once_more_if_paused(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except SandboxNotRunning as exc:
            if exc.state not in _RESUMABLE or not self.provider.supports(Capability.PAUSE):
                self._manager.suspect(self.owner, self.id)
                raise
        except (Unavailable, SandboxNotFound):
            self._manager.suspect(self.owner, self.id)
            raise
        self.info = await self._manager.resume(self)
        try:
            return await call()
        except (SandboxNotRunning, Unavailable, SandboxNotFound):
            self._manager.suspect(self.owner, self.id)
            raise


class _ManagedFiles(Files):
    """File operations that count as use and resume a sandbox paused elsewhere, like
    the commands of :class:`ManagedSandbox`. Streaming (``stream``) is left as is: a
    half-read stream cannot be replayed."""

    def __init__(self, sandbox: ManagedSandbox) -> None:
        super().__init__(sandbox)
        self._managed = sandbox

    async def read(self, path: str, *, limit: int | None = None) -> bytes:
        return await self._managed._guarded(lambda: Files.read(self, path, limit=limit))

    async def write(self, path: str, data: Data) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview, str)):
            # A stream cannot be sent twice: no resume-and-retry for it.
            await Files.write(self, path, data)
            return
        await self._managed._guarded(lambda: Files.write(self, path, data))

    async def list(self, path: str = ".") -> builtins.list[FileInfo]:
        return await self._managed._guarded(lambda: Files.list(self, path))

    async def stat(self, path: str) -> FileInfo:
        return await self._managed._guarded(lambda: Files.stat(self, path))

    async def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        await self._managed._guarded(lambda: Files.mkdir(self, path, parents=parents,
                                                         exist_ok=exist_ok))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._managed._guarded(lambda: Files.remove(self, path, recursive=recursive))

    async def rename(self, src: str, dst: str) -> None:
        await self._managed._guarded(lambda: Files.rename(self, src, dst))

    async def upload(self, local_path: str | os.PathLike[str], path: str) -> None:
        await self._managed._guarded(lambda: Files.upload(self, local_path, path))

    async def download(self, path: str, local_path: str | os.PathLike[str], *,
                       progress: Callable[[int], object] | None = None) -> None:
        await self._managed._guarded(lambda: Files.download(self, path, local_path,
                                                            progress=progress))
