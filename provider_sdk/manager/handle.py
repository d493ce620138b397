"""``ManagedSandbox``: the handle :meth:`SandboxManager.acquire` returns.

It is a :class:`~provider_sdk.sandbox.Sandbox` with these additions, and nothing else:

- the owner's environment (:meth:`ManagedSandbox.set_env`), kept in the binding store,
  applies under every call's own ``env``, so what an install phase sets is there for the
  run phase, in another process too, on every provider;
- a command or file operation that the provider refused because the sandbox is paused
  (another replica paused it for being idle) resumes it and runs once more; a refused
  call did not run, so none runs twice;
- commands and file operations count as use for the idle policy;
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

from provider_sdk.capabilities import Capability
from provider_sdk.errors import SandboxNotFound, SandboxNotRunning, Unavailable
from provider_sdk.manager._env_handle import EnvSandbox
from provider_sdk.models import ExecResult, FileInfo, SandboxInfo, _env_map
from provider_sdk.provider import OutputCallback
from provider_sdk.sandbox import Data, Files, Process, Sandbox

if TYPE_CHECKING:
    from provider_sdk.provider import SandboxProvider

__all__ = ["ManagedSandbox", "ManagerLink"]

T = TypeVar("T")

_RESUMABLE = frozenset({"paused", "pausing", "stopped"})


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

    def in_use(self, sandbox: ManagedSandbox) -> contextlib.AbstractContextManager[None]:
        """A block during which the sandbox counts as in use (not idle)."""

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
        :meth:`Sandbox.exec <provider_sdk.sandbox.Sandbox.exec>`."""
        return await self._guarded(lambda: Sandbox.exec(
            self, cmd, env=env, cwd=cwd, user=user, timeout=timeout, stdin=stdin,
            on_stdout=on_stdout, on_stderr=on_stderr, output_limit=output_limit))

    async def start(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
                    cwd: str | None = None, user: str | None = None,
                    stdin: bool = True) -> Process:
        """Start a background process with the owner's environment under ``env``."""
        return await self._guarded(lambda: Sandbox.start(self, cmd, env=env, cwd=cwd,
                                                         user=user, stdin=stdin))

    async def _guarded(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run one call: count it as use; if the provider refused it because the sandbox
        is paused (so it did not run), resume and run it once more; on a data-plane
        failure, make the next ``acquire`` look again."""
        with self._manager.in_use(self):
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
