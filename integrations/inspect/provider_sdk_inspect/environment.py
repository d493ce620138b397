"""``PsdkSandboxEnvironment``: Inspect's ``SandboxEnvironment`` on a provider-sdk
sandbox, registered as ``psdk``.

It owns the translation between Inspect's sandbox contract and the neutral interface:
the lifecycle (one provider per sample, one sandbox per name in the config, each tagged
so ``inspect sandbox cleanup psdk`` finds what a run left), exec's and files' semantics
(exit codes, Inspect's limits and errors), ``exec_remote`` on background processes and
``connection()``. It must not know any backend: what a provider cannot do is read from
its capabilities.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import secrets
import shlex
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, cast, overload

import anyio
from inspect_ai.util import (
    ExecRemoteAwaitableOptions,
    ExecRemoteStreamingOptions,
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from inspect_ai.util._sandbox.exec_remote import ExecRemoteCommonOptions
from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_state
from pydantic import BaseModel
from typing_extensions import override

from provider_sdk.capabilities import Capability
from provider_sdk.config import open_provider
from provider_sdk.errors import (
    FileNotFound,
    FileTooLarge,
    NotFound,
    SandboxNotFound,
    SandboxNotRunning,
    Unavailable,
)
from provider_sdk.models import FileInfo, FileType, SandboxState
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk_inspect._config import PsdkConfig, load_config
from provider_sdk_inspect._remote import PsdkRemoteProcess, returncode

__all__ = ["RUN_ID", "TAG", "PsdkSandboxEnvironment", "run_id"]

logger = logging.getLogger(__name__)

TAG = "inspect-sandbox"
"""Metadata key on every sandbox this environment creates (value ``psdk``): what
``inspect sandbox cleanup psdk`` looks for."""
RUN_ID = secrets.token_hex(6)
"""The ``inspect-run`` tag of sandboxes made outside an eval batch (direct calls)."""

_CONNECTABLE = ("local", "docker")  # providers whose settings a shell command can carry
_ARGV_INLINE = 64 << 10  # bytes of argv sent inline; more goes through a file
_ARGV_FROM_FILE = 'mapfile -d "" -t argv < "$1" && exec "${argv[@]}"'


@sandboxenv(name="psdk")
class PsdkSandboxEnvironment(SandboxEnvironment):
    """An Inspect sandbox environment running on a provider-sdk provider.

    Use ``sandbox="psdk"`` (the provider in effect: ``PSDK_PROVIDER``, ``psdk.toml``,
    else ``local``), ``sandbox=("psdk", PsdkConfig(provider="docker", ...))``, or
    ``sandbox=("psdk", "path/to/psdk.toml")``. Each sample gets its own sandboxes,
    killed when it ends.

    Attributes:
        sandbox: the provider-sdk sandbox behind this environment, for what Inspect's
            interface does not cover (snapshots, pause, metrics, ...).
        name: the environment's name in the sample (``default`` first).
    """

    def __init__(self, sandbox: Sandbox, *, name: str,
                 options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.sandbox = sandbox
        self.name = name
        self._options = dict(options or {})

    def __repr__(self) -> str:
        return f"<PsdkSandboxEnvironment {self.name!r} {self.sandbox!r}>"

    # ------------------------------------------------------------- lifecycle

    @classmethod
    def config_files(cls) -> list[str]:
        """The file Inspect picks up beside a task when its sandbox is ``psdk``."""
        return ["psdk.toml"]

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        """A :class:`PsdkConfig` from its serialized form (as eval logs hold it)."""
        return PsdkConfig.model_validate(config)

    @override
    @classmethod
    async def task_init(cls, task_name: str,
                        config: SandboxEnvironmentConfigType | None) -> None:
        """Check the config and that its provider opens, before any sample starts."""
        async with _open(load_config(_config(config))):
            pass

    @override
    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        """Create the sample's sandboxes: ``default`` first, then each one the config's
        ``sandboxes`` names. If one fails, those made already are killed."""
        resolved = load_config(_config(config))
        provider = _open(resolved)
        environments: dict[str, SandboxEnvironment] = {}
        try:
            for name, spec in resolved.specs().items():
                tags = {**spec.metadata, TAG: "psdk", "inspect-run": run_id(),
                        "inspect-name": name}
                sandbox = await provider.create(spec, metadata=tags)
                environments[name] = cls(sandbox, name=name, options=resolved.options)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _kill_all(provider, environments.values())
                await provider.aclose()
            raise
        return environments

    @override
    @classmethod
    async def sample_cleanup(cls, task_name: str,
                             config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment],
                             interrupted: bool) -> None:
        """Kill the sample's sandboxes and close their provider."""
        envs = [e.as_type(PsdkSandboxEnvironment) for e in environments.values()]
        if not envs:
            return
        # A handle holds the provider that made it, typed as the part it calls.
        provider = cast("SandboxProvider", envs[0].sandbox.provider)
        with anyio.CancelScope(shield=True):
            try:
                await _kill_all(provider, envs)
            finally:
                await provider.aclose()

    @override
    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                           cleanup: bool) -> None:
        """Kill what this eval batch's samples left (an interrupted sample's sandboxes); with
        ``--no-sandbox-cleanup``, say how to remove them later instead."""
        async with _open(load_config(_config(config))) as provider:
            left = await provider.list(metadata={TAG: "psdk", "inspect-run": run_id()})
            live = [i for i in left if i.state != SandboxState.KILLED]
            if not cleanup:
                for info in live:
                    print(f"psdk sandbox {info.id} left running: "
                          f"inspect sandbox cleanup psdk {info.id}")
                return
            for info in live:
                with contextlib.suppress(NotFound):
                    await provider.kill(info.id)

    @override
    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """``inspect sandbox cleanup psdk [ID]``: kill that sandbox, or every sandbox an
        Inspect run made on the provider in effect (found by the ``inspect-sandbox``
        tag)."""
        async with open_provider() as provider:
            if id is not None:
                await provider.kill(id)
                print(f"killed {id}")
                return
            for info in await provider.list(metadata={TAG: "psdk"}):
                if info.state == SandboxState.KILLED:
                    continue
                with contextlib.suppress(NotFound):
                    await provider.kill(info.id)
                print(f"killed {info.id}")

    # ------------------------------------------------------------------ exec

    def check_user(self, user: str | None) -> None:
        """Raise ``SandboxUserUnsupportedError`` for a user the provider cannot run as
        (it does not declare ``exec.user``)."""
        if user is not None and not self.sandbox.provider.supports(Capability.EXEC_USER):
            raise SandboxUserUnsupportedError(
                f"provider {self.sandbox.provider.name!r} does not declare "
                f"{Capability.EXEC_USER.value!r}: commands run as the sandbox's user, "
                f"not {user!r}")

    @override
    async def exec(self, cmd: list[str], input: str | bytes | None = None,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        """Run ``cmd`` in the sandbox, as Inspect's ``exec`` specifies.

        A timeout kills the whole process tree and raises ``TimeoutError`` (a
        :class:`~provider_sdk.errors.CommandTimeout`); it is the command's own limit, so
        ``timeout_retry`` does not rerun it. Output past Inspect's limit
        (``INSPECT_SANDBOX_MAX_EXEC_OUTPUT_SIZE``) raises ``OutputLimitExceededError``.
        Death by signal ``N`` is exit status ``128 + N``.
        """
        self.check_user(user)
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        argv, argv_file = await self._argv(cmd)
        try:
            with _unavailable():
                result = await self.sandbox.exec(argv, stdin=input, cwd=cwd, env=env,
                                                 user=user, timeout=timeout,
                                                 output_limit=limit)
        finally:
            if argv_file is not None:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self.sandbox.files.remove(argv_file)
        if result.truncated:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                truncated_output=result.stdout)
        code = returncode(result.exit_code)
        if code in (126, 127) and "permission denied" in (
                result.stdout + result.stderr).lower():
            raise PermissionError(errno.EACCES, (result.stderr or result.stdout).strip(),
                                  cmd[0])
        return ExecResult(success=code == 0, returncode=code, stdout=result.stdout,
                          stderr=result.stderr)

    async def _argv(self, cmd: list[str]) -> tuple[list[str], str | None]:
        """The argv to send, and the file holding the real one if it is too large to
        send inline (some providers carry a command in one bounded message; Inspect
        sends commands up to the kernel's ``ARG_MAX``)."""
        argv = list(cmd)
        if not all(isinstance(a, str) and "\0" not in a for a in argv) \
                or sum(len(a.encode()) + 1 for a in argv) <= _ARGV_INLINE:
            return argv, None  # small, or refused by the SDK as it is
        path = f"/tmp/.psdk-argv-{secrets.token_hex(8)}"
        with _unavailable():
            await self.sandbox.files.write(path, b"\0".join(a.encode() for a in argv))
        return ["/bin/bash", "-c", _ARGV_FROM_FILE, "psdk-argv", path], path

    @overload
    async def exec_remote(self, cmd: list[str],
                          options: ExecRemoteStreamingOptions | None = None, *,
                          stream: Literal[True] = True) -> PsdkRemoteProcess: ...

    @overload
    async def exec_remote(self, cmd: list[str],
                          options: ExecRemoteAwaitableOptions | None = None, *,
                          stream: Literal[False]) -> ExecResult[str]: ...

    @override
    async def exec_remote(
        self, cmd: list[str],
        options: ExecRemoteStreamingOptions | ExecRemoteAwaitableOptions | None = None, *,
        stream: bool = True,
    ) -> PsdkRemoteProcess | ExecResult[str]:
        """Start ``cmd`` as a background process of the sandbox
        (``process.background``): a handle to stream its output and kill it, or, with
        ``stream=False``, its result (``timeout`` kills it and raises ``TimeoutError``).
        Nothing is injected into the sandbox."""
        if not self.sandbox.provider.supports(Capability.PROCESS_BACKGROUND):
            raise NotImplementedError(
                f"exec_remote: provider {self.sandbox.provider.name!r} does not declare "
                f"{Capability.PROCESS_BACKGROUND.value!r}")
        opts: ExecRemoteCommonOptions = options or (
            ExecRemoteStreamingOptions() if stream else ExecRemoteAwaitableOptions())
        process = PsdkRemoteProcess(self, self.sandbox, self.check_user, list(cmd), opts)
        with _unavailable():
            await process._start()
        if stream:
            return process
        timeout = opts.timeout if isinstance(opts, ExecRemoteAwaitableOptions) else None
        return await _await_remote(process, timeout)

    # ----------------------------------------------------------------- files

    @override
    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write a file, creating its parents; relative paths are in the working
        directory. A directory there is ``IsADirectoryError``; a file with no write
        permission bit is ``PermissionError``: the provider refuses it where it declares
        ``files.permissions``, and elsewhere (a root user, or a backend that replaces a
        file whole) the bits are checked first."""
        with _unavailable():
            if self.sandbox.provider.supports(Capability.FILES_PERMISSIONS):
                await self.sandbox.files.write(file, contents)
                return
            try:
                info = await self.sandbox.files.stat(file)
            except FileNotFound:
                info = None
            if info is not None:
                if info.type == FileType.DIRECTORY:
                    raise IsADirectoryError(errno.EISDIR, "Is a directory", file)
                if info.type == FileType.FILE and not info.mode & 0o222:
                    raise PermissionError(errno.EACCES, "Permission denied", file)
            await self.sandbox.files.write(file, contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    @override
    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Read a file whole; past Inspect's limit
        (``INSPECT_SANDBOX_MAX_READ_FILE_SIZE``) it is ``OutputLimitExceededError`` and
        nothing is loaded. Text is strict UTF-8, newlines kept as they are. A file with
        no read permission bit is ``PermissionError`` whoever the sandbox's user is (a
        root user included), as a file with no write bit is for :meth:`write_file`."""
        files = self.sandbox.files
        if self.sandbox.provider.supports(Capability.FILES_PERMISSIONS):
            with _unavailable(), _read_limit():
                data = await files.read(file, limit=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE)
            return data.decode("utf-8") if text else data
        info: list[FileInfo] = []
        failure: list[Exception] = []

        async def stat(scope: anyio.CancelScope) -> None:  # alongside the read
            with contextlib.suppress(Exception):
                info.append(await files.stat(file))
                if _unreadable(info[0]):
                    scope.cancel()  # some backends retry a refused read for long

        with _unavailable():
            async with anyio.create_task_group() as tg:
                tg.start_soon(stat, tg.cancel_scope)
                try:
                    data = await files.read(file,
                                            limit=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE)
                except Exception as exc:
                    failure.append(exc)
            if info and _unreadable(info[0]):
                raise PermissionError(errno.EACCES, "Permission denied", file)
            if failure:
                with _read_limit():
                    raise failure[0]
        return data.decode("utf-8") if text else data

    # ------------------------------------------------------------ connection

    @override
    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        """A ``psdk exec -i`` shell into the sandbox (local and docker providers): the
        commands typed until end of input run in it, and their output comes back."""
        provider = self.sandbox.provider
        if provider.name not in _CONNECTABLE:
            raise NotImplementedError(
                f"connection: provider {provider.name!r} takes its settings from this "
                f"process's environment; use psdk exec --provider {provider.name} "
                f"{self.sandbox.id} -- CMD where they are set")
        if user is not None:
            raise NotImplementedError("connection: psdk exec runs as the sandbox's user")
        info = await self.sandbox.refresh()
        if info.state != SandboxState.RUNNING:
            raise ConnectionError(f"sandbox {self.sandbox.id} is {info.state}")
        words = ["psdk", "exec", "--provider", provider.name, "-i", self.sandbox.id,
                 "--", "/bin/bash"]
        prefix = ""
        if provider.name == "local" and "home" in self._options:
            prefix = f"PSDK_HOME={shlex.quote(str(self._options['home']))} "
        return SandboxConnection(type="psdk", command=prefix + shlex.join(words))


def _config(config: SandboxEnvironmentConfigType | None) -> PsdkConfig | str | None:
    if config is None or isinstance(config, (PsdkConfig, str)):
        return config
    raise TypeError(f"the psdk sandbox takes a PsdkConfig or the path of a psdk.toml, "
                    f"got {type(config).__name__}")


class _Batch:
    """An eval batch's run id, kept on Inspect's sandbox lifecycle state (one per
    batch, shared by every task of it)."""

    def __init__(self) -> None:
        self.id = secrets.token_hex(6)


def run_id() -> str:
    """The ``inspect-run`` tag of this eval batch: what its ``task_cleanup`` sweeps
    (outside a batch: :data:`RUN_ID`, this process's)."""
    state = sandbox_lifecycle_state()
    return state.get(_Batch).id if state is not None else RUN_ID


def _unreadable(info: FileInfo) -> bool:
    return info.type == FileType.FILE and not info.mode & 0o444


def _open(config: PsdkConfig) -> SandboxProvider:
    return open_provider(config.provider, **config.options)


async def _kill_all(provider: SandboxProvider,
                    environments: Iterable[SandboxEnvironment]) -> None:
    for env in environments:
        sandbox = env.as_type(PsdkSandboxEnvironment).sandbox
        try:
            await sandbox.kill()
        except Exception as exc:  # one failed kill must not leave the others running
            logger.warning("psdk: killing sandbox %s failed: %s", sandbox.id, exc)


@contextlib.contextmanager
def _read_limit() -> Iterator[None]:
    """A file past Inspect's read limit is its ``OutputLimitExceededError``."""
    try:
        yield
    except FileTooLarge:
        raise OutputLimitExceededError(
            limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR,
            truncated_output=None) from None


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """A sandbox that is gone or not running is Inspect's ``SandboxUnavailableError``."""
    try:
        yield
    except (SandboxNotFound, SandboxNotRunning, Unavailable) as exc:
        raise SandboxUnavailableError(str(exc)) from exc


async def _await_remote(process: PsdkRemoteProcess, timeout: float | None) -> ExecResult[str]:
    """Collect a remote process's output (the last ``MAX_EXEC_OUTPUT_SIZE`` bytes of
    each stream, as Inspect's awaitable mode keeps) and its exit status."""
    from inspect_ai.util import ExecCompleted, ExecStderr, ExecStdout

    limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
    out, err = bytearray(), bytearray()
    try:
        with anyio.fail_after(timeout):
            async for event in process:
                if isinstance(event, (ExecStdout, ExecStderr)):
                    kept = out if isinstance(event, ExecStdout) else err
                    kept += event.data.encode()
                    del kept[:-limit]
                elif isinstance(event, ExecCompleted):
                    return ExecResult(success=event.success, returncode=event.exit_code,
                                      stdout=out.decode(errors="replace"),
                                      stderr=err.decode(errors="replace"))
    except TimeoutError:
        with anyio.CancelScope(shield=True):
            await process.kill()
        raise
    return ExecResult(success=False, returncode=-1, stdout=out.decode(errors="replace"),
                      stderr=err.decode(errors="replace"))
