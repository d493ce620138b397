"""``ManagedSandbox``: the handle :meth:`SandboxManager.acquire` returns.

It is a :class:`~provider_sdk.sandbox.Sandbox` with three additions, and nothing else:

- the owner's environment (:meth:`ManagedSandbox.set_env`), kept in the binding store,
  applies under every call's own ``env``, so what an install phase sets is there for the
  run phase, in another process too, on every provider;
- a command that finds the sandbox paused (another replica paused it for being idle)
  resumes it and runs once more; a command never started in a paused sandbox, so this
  cannot run it twice;
- a data-plane failure marks the owner's cached entry, so the next ``acquire`` walks
  the lookup chain again instead of handing out the same broken sandbox.

``async with`` does not kill it: it is resident. End it with
:meth:`SandboxManager.release <provider_sdk.manager.SandboxManager.release>`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from provider_sdk.capabilities import Capability
from provider_sdk.errors import SandboxNotFound, SandboxNotRunning, Unavailable
from provider_sdk.models import ExecResult, SandboxInfo, _env_map
from provider_sdk.provider import Command, OutputCallback
from provider_sdk.sandbox import Process, Sandbox, Shell

if TYPE_CHECKING:
    from provider_sdk.manager.manager import SandboxManager
    from provider_sdk.provider import SandboxProvider

__all__ = ["ManagedSandbox"]

_RESUMABLE = frozenset({"paused", "pausing", "stopped"})


class ManagedSandbox(Sandbox):
    """A sandbox bound to an owner by a :class:`~provider_sdk.manager.SandboxManager`.

    Attributes:
        owner: the owner it is bound to.
    """

    def __init__(self, provider: SandboxProvider, info: SandboxInfo, *,
                 manager: SandboxManager, owner: str, env: Mapping[str, str]) -> None:
        super().__init__(provider, info)
        self.owner = owner
        self._manager = manager
        self._env: dict[str, str] = dict(env)
        self._keep = True  # resident: ``async with`` must not kill it

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
        self._env = await self._manager._change_env(self, set_=changes, unset=())

    async def unset_env(self, *names: str) -> None:
        """Remove variables from the owner's environment (unknown names are ignored)."""
        self._env = await self._manager._change_env(self, set_={}, unset=names)

    async def kill(self) -> None:
        """Kill the sandbox. Its binding stays: the next ``acquire`` of the owner
        replaces it (from the latest snapshot, if there is one)."""
        self._manager._forget(self.owner, self.id)
        await super().kill()

    # ----------------------------------------------------------------- exec

    def _command(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None,
                 cwd: str | None, user: str | None, timeout: float | None,
                 stdin: bytes | str | None) -> Command:
        merged = {**self._env, **(env or {})} if self._env else env
        return super()._command(cmd, env=merged, cwd=cwd, user=user, timeout=timeout,
                                stdin=stdin)

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
    ) -> ExecResult:
        """Run a command with the owner's environment under ``env``; see
        :meth:`Sandbox.exec <provider_sdk.sandbox.Sandbox.exec>`."""
        with self._manager._in_use(self):
            for attempt in (1, 2):
                try:
                    return await super().exec(cmd, env=env, cwd=cwd, user=user,
                                              timeout=timeout, stdin=stdin,
                                              on_stdout=on_stdout, on_stderr=on_stderr)
                except SandboxNotRunning as exc:
                    await self._after_not_running(exc, attempt)
                except (Unavailable, SandboxNotFound):
                    self._manager._suspect(self.owner, self.id)
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def start(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
                    cwd: str | None = None, user: str | None = None) -> Process:
        """Start a background process with the owner's environment under ``env``."""
        with self._manager._in_use(self):
            for attempt in (1, 2):
                try:
                    return await super().start(cmd, env=env, cwd=cwd, user=user)
                except SandboxNotRunning as exc:
                    await self._after_not_running(exc, attempt)
                except (Unavailable, SandboxNotFound):
                    self._manager._suspect(self.owner, self.id)
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def shell(self, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None) -> Shell:
        """Open a persistent shell that starts with the owner's environment."""
        return await super().shell(cwd=cwd, env={**self._env, **(env or {})})

    async def _after_not_running(self, exc: SandboxNotRunning, attempt: int) -> None:
        """Resume a sandbox someone paused, so the command can run once more."""
        if (attempt > 1 or exc.state not in _RESUMABLE
                or not self.provider.supports(Capability.PAUSE)):
            self._manager._suspect(self.owner, self.id)
            raise exc
        self.info = await self._manager._resume(self)

