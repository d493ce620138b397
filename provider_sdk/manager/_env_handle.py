"""``EnvSandbox``: a sandbox handle that gives every command and shell an environment of
its own under the call's ``env``; the base of the manager's and the pool's handles.

This module must not talk to a store or a manager.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provider_sdk.models import SandboxInfo
from provider_sdk.provider import Command, SandboxProvider
from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["EnvSandbox"]


class EnvSandbox(Sandbox):
    """A handle whose environment (``env``) lies under every command's own ``env``:
    a call's variables win over it, and a shell starts with both."""

    def __init__(self, provider: SandboxProvider, info: SandboxInfo, *,
                 env: Mapping[str, str]) -> None:
        super().__init__(provider, info)
        self._env: dict[str, str] = dict(env)

    @property
    def env(self) -> Mapping[str, str]:
        """The handle's environment: defaults for every command (a copy)."""
        return dict(self._env)

    def _command(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None,
                 cwd: str | None, user: str | None, timeout: float | None,
                 stdin: bytes | str | None, output_limit: int | None) -> Command:
        merged = {**self._env, **(env or {})} if self._env else env
        return super()._command(cmd, env=merged, cwd=cwd, user=user, timeout=timeout,
                                stdin=stdin, output_limit=output_limit)

    async def shell(self, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None) -> Shell:
        """Open a persistent shell that starts with the handle's environment under
        ``env``."""
        return await super().shell(cwd=cwd, env={**self._env, **(env or {})})
