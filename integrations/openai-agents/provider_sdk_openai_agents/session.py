"""``ProviderSandboxSession``: the Agents SDK's ``BaseSandboxSession`` on a provider-sdk
sandbox.

Commands go to ``sandbox.exec``, files to ``sandbox.files``, interactive processes to
``sandbox.terminal`` (``_pty``), exposed ports to ``sandbox.expose``, and the workspace
to a provider snapshot or an archive (``_workspace``). Everything else the Agents SDK
offers (manifests, ``ls``/``rm``/``mv``/``mkdir``, archives, ``apply_patch``, resume)
is its base session's, over these. Paths are checked by the Agents SDK's own rules,
in the sandbox, so a link cannot lead a read or a write out of the workspace.

This module owns the translation of provider-sdk's results and errors into the Agents
SDK's; it must not know any provider by name: what a provider lacks is read from its
capabilities.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from agents.sandbox.errors import (
    ExecNonZeroError,
    ExecTimeoutError,
    ExecTransportError,
    ExposedPortUnavailableError,
    PtySessionNotFoundError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
from agents.sandbox.session import BaseSandboxSession
from agents.sandbox.session.pty_types import PtyExecUpdate
from agents.sandbox.session.runtime_helpers import (
    RESOLVE_WORKSPACE_PATH_HELPER,
    RuntimeHelperScript,
)
from agents.sandbox.types import ExecResult, ExposedPortEndpoint, User
from agents.sandbox.util.tar_utils import UnsafeTarMemberError
from agents.sandbox.workspace_paths import posix_path_for_error, sandbox_path_str

from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    CommandTimeout,
    FileNotFound,
    NotFound,
    RateLimited,
    SandboxError,
    SandboxNotRunning,
    Unavailable,
)
from provider_sdk.models import SandboxSpec, SandboxState
from provider_sdk.sandbox import Sandbox
from provider_sdk_openai_agents import _workspace
from provider_sdk_openai_agents._pty import PtyProcesses
from provider_sdk_openai_agents.options import ProviderSandboxSessionState

if TYPE_CHECKING:
    from provider_sdk_openai_agents._source import ProviderSource

__all__ = ["ProviderSandboxSession"]

_RETRYABLE = (Unavailable, RateLimited)
_CHECKER_MISSING = (126, 127)  # the shell's "cannot execute" and "not found"


class ProviderSandboxSession(BaseSandboxSession):
    """A session of the Agents SDK in a provider-sdk sandbox.

    Made by :class:`~provider_sdk_openai_agents.ProviderSandboxClient`; the runner
    wraps it. :attr:`sandbox` is the provider-sdk handle underneath, for what the Agents
    SDK's interface does not cover (snapshots, metrics, ...).
    """

    state: ProviderSandboxSessionState

    def __init__(self, *, state: ProviderSandboxSessionState, sandbox: Sandbox,
                 source: ProviderSource) -> None:
        self.state = state
        self.sandbox = sandbox
        self._source = source
        self._pty = PtyProcesses()

    def __repr__(self) -> str:
        return f"<ProviderSandboxSession {self.state.sandbox_id} provider={self.state.provider!r}>"

    # ------------------------------------------------------------------ lifecycle

    def _runtime_helpers(self) -> tuple[RuntimeHelperScript, ...]:
        return (RESOLVE_WORKSPACE_PATH_HELPER,)

    def _current_runtime_helper_cache_key(self) -> object | None:
        return self.sandbox.id  # a new sandbox has none of the old one's scripts

    async def _prepare_backend_workspace(self) -> None:
        root = self._root()
        result = await self._run(["mkdir", "-p", "--", root], cwd=None, timeout=60)
        if result.exit_code != 0:
            raise WorkspaceArchiveWriteError(
                path=Path(root), context={"reason": "workspace_root_not_created",
                                          "stderr": result.stderr.decode(errors="replace")})

    async def running(self) -> bool:
        try:
            info = await self.sandbox.refresh()
        except (NotFound, SandboxNotRunning):
            return False
        return info.state == SandboxState.RUNNING

    async def _shutdown_backend(self) -> None:
        await self._source.let_go(self.sandbox, self.state.on_exit)

    # ----------------------------------------------------------------------- exec

    async def _exec_internal(self, *command: str | Path,
                             timeout: float | None = None) -> ExecResult:
        argv = [str(part) for part in command]
        cwd = self._root() if self.state.workspace_root_ready else None
        return await self._run(argv, cwd=cwd, timeout=timeout)

    async def _run(self, argv: list[str], *, cwd: str | None,
                   timeout: float | None) -> ExecResult:
        limit = self.state.command_timeout if timeout is None else timeout
        env = {**self.state.env, **await self.state.manifest.environment.resolve()}
        try:
            done = await self.sandbox.exec(argv, env=env, cwd=cwd, timeout=limit)
        except CommandTimeout as exc:
            raise ExecTimeoutError(command=argv, timeout_s=limit, cause=exc) from exc
        except SandboxError as exc:
            raise ExecTransportError(command=argv, cause=exc,
                                     retryable=isinstance(exc, _RETRYABLE)) from exc
        return ExecResult(stdout=done.stdout_bytes, stderr=done.stderr_bytes,
                          exit_code=done.exit_code)

    # ---------------------------------------------------------------------- files

    async def _validate_path_access(self, path: Path | str, *, for_write: bool = False) -> Path:
        try:
            return await self._validate_remote_path_access(path, for_write=for_write)
        except ExecNonZeroError as exc:
            if exc.exit_code not in _CHECKER_MISSING:
                raise
        # The path checker this session installed is gone (something in the sandbox removed
        # it): install it again, once.
        self._runtime_helpers_installed = None
        return await self._validate_remote_path_access(path, for_write=for_write)

    async def _ensure_runtime_helper_installed(self, helper: RuntimeHelperScript) -> PurePath:
        # The path checker runs before every file call: once this session installed it
        # in this sandbox it is used without a probe first, and reinstalled if missing.
        self._sync_runtime_helper_install_cache()
        installed = self._runtime_helpers_installed or set()
        if helper is RESOLVE_WORKSPACE_PATH_HELPER and helper.install_path in installed:
            return helper.install_path
        return await super()._ensure_runtime_helper_installed(helper)

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        if user is not None:
            await self._check_read_with_exec(path, user=user)
        target = await self._validate_path_access(path)
        try:
            data = await self.sandbox.files.read(sandbox_path_str(target))
        except FileNotFound as exc:
            raise WorkspaceReadNotFoundError(path=Path(path), cause=exc) from exc
        except SandboxError as exc:
            raise WorkspaceArchiveReadError(path=Path(path), cause=exc,
                                            retryable=isinstance(exc, _RETRYABLE)) from exc
        return io.BytesIO(data)

    async def write(self, path: Path, data: io.IOBase, *,
                    user: str | User | None = None) -> None:
        if user is not None:
            await self._check_write_with_exec(path, user=user)
        payload = data.read()
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        if not isinstance(payload, bytes | bytearray):
            raise WorkspaceWriteTypeError(path=Path(path), actual_type=type(payload).__name__)
        target = await self._validate_path_access(path, for_write=True)
        try:
            await self.sandbox.files.write(sandbox_path_str(target), bytes(payload))
        except SandboxError as exc:
            raise WorkspaceArchiveWriteError(path=Path(path), cause=exc,
                                             retryable=isinstance(exc, _RETRYABLE)) from exc

    # ------------------------------------------------------------------------ pty

    def supports_pty(self) -> bool:
        return self.sandbox.provider.supports(Capability.TERMINAL_PTY)

    async def pty_exec_start(self, *command: str | Path, timeout: float | None = None,
                             shell: bool | list[str] = True, user: str | User | None = None,
                             tty: bool = False, yield_time_s: float | None = None,
                             max_output_tokens: int | None = None) -> PtyExecUpdate:
        if not self.supports_pty():
            return await super().pty_exec_start(*command, timeout=timeout, shell=shell,
                                                user=user, tty=tty)
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        env = {**self.state.env, **await self.state.manifest.environment.resolve()}
        try:
            return await self._pty.start(self.sandbox, argv, tty=tty, env=env,
                                         cwd=self._root(), yield_time_s=yield_time_s,
                                         max_output_tokens=max_output_tokens)
        except SandboxError as exc:
            raise ExecTransportError(command=argv, cause=exc,
                                     retryable=isinstance(exc, _RETRYABLE)) from exc

    async def pty_write_stdin(self, *, session_id: int, chars: str,
                              yield_time_s: float | None = None,
                              max_output_tokens: int | None = None) -> PtyExecUpdate:
        self._resolve_pty_session_entry(pty_processes=self._pty.live(), session_id=session_id)
        try:
            return await self._pty.write(session_id, chars, yield_time_s=yield_time_s,
                                         max_output_tokens=max_output_tokens)
        except KeyError:  # it ended meanwhile
            raise PtySessionNotFoundError(session_id=session_id) from None

    async def pty_terminate_all(self) -> None:
        await self._pty.end_all()

    # ---------------------------------------------------------------------- ports

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        if not self.sandbox.provider.supports(Capability.PORTS_EXPOSE):
            return await super()._resolve_exposed_port(port)
        try:
            exposed = await self.sandbox.expose(port)
        except SandboxError as exc:
            raise ExposedPortUnavailableError(
                port=port, exposed_ports=self.state.exposed_ports, reason="backend_unavailable",
                context={"backend": "psdk", "error": type(exc).__name__}, cause=exc) from exc
        # An endpoint is a host, a port and a query: it opens the port only where the
        # provider puts the access token in the URL (``ports.url_token``), not where the
        # token goes in a header alone.
        if not self.sandbox.provider.supports(Capability.PORTS_URL_TOKEN):
            raise ExposedPortUnavailableError(
                port=port, exposed_ports=self.state.exposed_ports, reason="backend_unavailable",
                context={"backend": "psdk", "detail": "token_only_in_header",
                         "token_header": exposed.token_header})
        url = urlsplit(exposed.url)
        tls = url.scheme == "https"
        host = url.hostname or ""
        if url.path not in ("", "/") or not host:
            raise ExposedPortUnavailableError(
                port=port, exposed_ports=self.state.exposed_ports, reason="backend_unavailable",
                context={"backend": "psdk", "detail": "address_not_host_and_port"})
        return ExposedPortEndpoint(host=host, port=url.port or (443 if tls else 80), tls=tls,
                                   query=url.query)

    # ------------------------------------------------------------------ workspace

    async def persist_workspace(self) -> io.IOBase:
        if self._use_snapshots():
            try:
                snapshot = await self.sandbox.snapshot()
            except SandboxError as exc:
                raise WorkspaceArchiveReadError(
                    path=self._error_root(), context={"reason": "snapshot_failed"},
                    cause=exc, retryable=isinstance(exc, _RETRYABLE)) from exc
            ref = _workspace.SnapshotRef(self.state.provider, snapshot.id)
            return io.BytesIO(_workspace.encode_ref(ref))
        try:
            raw = await _workspace.archive_workspace(self.sandbox, self._root(),
                                                     self._persist_workspace_skip_relpaths())
        except SandboxError as exc:
            raise WorkspaceArchiveReadError(path=self._error_root(), cause=exc,
                                            retryable=isinstance(exc, _RETRYABLE)) from exc
        return io.BytesIO(raw)

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        raw = data.read()
        if isinstance(raw, str):
            raw = raw.encode("utf-8")
        if not isinstance(raw, bytes | bytearray):
            raise WorkspaceWriteTypeError(path=self._error_root(),
                                          actual_type=type(raw).__name__)
        ref = _workspace.decode_ref(bytes(raw))
        if ref is not None:
            await self._restore_snapshot(ref)
            return
        try:
            await self._prepare_backend_workspace()
            await _workspace.unpack_archive(self.sandbox, self._root(), bytes(raw))
        except UnsafeTarMemberError as exc:
            raise WorkspaceArchiveWriteError(
                path=self._error_root(),
                context={"reason": "unsafe_or_invalid_tar", "member": exc.member}, cause=exc,
            ) from exc
        except SandboxError as exc:
            raise WorkspaceArchiveWriteError(path=self._error_root(), cause=exc,
                                             retryable=isinstance(exc, _RETRYABLE)) from exc

    async def _restore_snapshot(self, ref: _workspace.SnapshotRef) -> None:
        """Replace the sandbox with a new one started from the snapshot ``ref``."""
        if self._source.managed:  # the owner's sandbox is the manager's to replace
            raise WorkspaceArchiveWriteError(
                path=self._error_root(),
                context={"reason": "snapshot_into_an_owners_sandbox"})
        if ref.provider != self.state.provider:
            raise WorkspaceArchiveWriteError(
                path=self._error_root(),
                context={"reason": "snapshot_of_another_provider", "provider": ref.provider})
        spec = SandboxSpec(snapshot=ref.snapshot_id, env=self.state.env,
                           metadata=self.state.metadata, network=self.state.network.policy())
        try:
            provider = await self._source.provider()
            replacement = await provider.create(spec)
        except SandboxError as exc:
            raise WorkspaceArchiveWriteError(
                path=self._error_root(), context={"reason": "snapshot_restore_failed"},
                cause=exc, retryable=isinstance(exc, _RETRYABLE)) from exc
        old, self.sandbox = self.sandbox, replacement
        self.state.sandbox_id = replacement.id
        # Gone already, or unreachable: the new one holds the workspace either way.
        with contextlib.suppress(SandboxError):
            await old.kill()

    def _use_snapshots(self) -> bool:
        mode: Literal["auto", "snapshot", "archive"] = self.state.workspace_persistence
        if mode == "archive" or self._source.managed:
            return False  # an owner's sandbox is the manager's to replace, not the session's
        if mode == "snapshot":
            return True
        # A snapshot holds the whole sandbox: paths the workspace must not keep need
        # an archive.
        return (self.sandbox.provider.supports(Capability.SNAPSHOT_FILESYSTEM)
                and not self._persist_workspace_skip_relpaths())

    # -------------------------------------------------------------------- helpers

    def _root(self) -> str:
        return self._workspace_root_path().as_posix()

    def _error_root(self) -> Path:
        return posix_path_for_error(self._workspace_root_path())
