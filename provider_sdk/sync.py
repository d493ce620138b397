"""The blocking facade, for scripts and notebooks: every call runs the async API.

An event loop runs in a background thread (a :class:`~provider_sdk.portal.Portal`) for
as long as the :class:`SyncProvider` is open; each method hands its coroutine to that
loop and waits. Nothing here reimplements behaviour: validation, capability checks,
events and errors are the async API's own::

    from provider_sdk.sync import open_provider

    with open_provider() as provider:
        with provider.create(metadata={"owner": "alice"}) as sandbox:
            print(sandbox.exec("echo hello").stdout)

Interrupting a call (Ctrl-C) cancels the coroutine it runs and waits for its cleanup,
so an interrupted ``exec`` leaves no process behind. Output callbacks (``on_stdout``,
``on_stderr``) run in the loop's thread: they must not call back into the facade.

This module must not hold logic of its own beyond moving calls between threads.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import Any, cast

import anyio
import anyio.to_thread

from provider_sdk import config
from provider_sdk.capabilities import Capability
from provider_sdk.code import SandboxCode
from provider_sdk.dockerfile import Problem
from provider_sdk.interpreter import CodeContext, CodeResult, TextCallback
from provider_sdk.models import (
    ExecResult,
    ExposedPort,
    FileInfo,
    Metrics,
    NetworkPolicy,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    TemplateSpec,
    Volume,
)
from provider_sdk.portal import Portal
from provider_sdk.provider import OutputCallback, ProcessEvent, SandboxProvider
from provider_sdk.sandbox import Process, Sandbox, Shell
from provider_sdk.terminal import Terminal

__all__ = [
    "SyncCode",
    "SyncData",
    "SyncFiles",
    "SyncProcess",
    "SyncProvider",
    "SyncSandbox",
    "SyncShell",
    "SyncTerminal",
    "SyncTerminals",
    "open_provider",
]

#: What :meth:`SyncFiles.write` accepts: bytes, text (UTF-8), or an iterable of chunks.
SyncData = bytes | bytearray | memoryview | str | Iterable[bytes]


def open_provider(name: str | None = None, /, **options: Any) -> SyncProvider:
    """Open the configured provider, blocking: the sync twin of
    :func:`provider_sdk.open_provider` (same name resolution, same options).

    Use the result with ``with``, or call :meth:`SyncProvider.close`.

    Raises:
        ProviderNotFound: the named provider is not installed.
        ConfigError: an option is unknown or malformed, or a setting is missing.
    """
    portal = Portal.start(name="provider-sdk-sync")
    try:
        async def open_async() -> SandboxProvider:
            # Built inside the loop, so clients bound to a loop bind to this one.
            provider = config.open_provider(name, **options)
            return await provider.__aenter__()

        provider = portal.call(open_async)
    except BaseException:
        portal.close()
        raise
    return SyncProvider(provider, portal)


class SyncProvider:
    """A blocking handle on a :class:`~provider_sdk.provider.SandboxProvider`.

    Made by :func:`open_provider`. Closing it releases the provider's client resources
    and stops the loop thread; sandboxes are not killed by closing.
    """

    def __init__(self, provider: SandboxProvider, portal: Portal) -> None:
        self._provider = provider
        self._portal = portal
        self._closed = False

    @property
    def async_provider(self) -> SandboxProvider:
        """The async provider underneath (use it only from async code in the loop)."""
        return self._provider

    @property
    def name(self) -> str:
        """The provider's registry name."""
        return self._provider.name

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The capabilities the provider declares."""
        return self._provider.capabilities

    def supports(self, capability: Capability | str) -> bool:
        """Whether the provider declares ``capability``."""
        return self._provider.supports(capability)

    def __repr__(self) -> str:
        return f"<SyncProvider {self.name!r}>"

    def __enter__(self) -> SyncProvider:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Release the provider's resources and stop the loop. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._portal.call(self._provider.aclose)
        finally:
            self._portal.close()

    # ------------------------------------------------------------- sandboxes

    def create(self, spec: SandboxSpec | None = None, /, **fields: Any) -> SyncSandbox:
        """Create a sandbox and return once its data plane answers.

        Pass a :class:`~provider_sdk.models.SandboxSpec`, or its fields as keywords. Use
        the result with ``with`` to kill the sandbox when the block ends.
        """
        creation = self._provider.create(spec, **fields)

        async def create_async() -> Sandbox:
            return await creation

        return SyncSandbox(self, self._portal.call(create_async))

    def connect(self, sandbox_id: str, *, resume: bool = True) -> SyncSandbox:
        """Open a handle on an existing sandbox, resuming it if paused and ``resume``."""
        return SyncSandbox(self, self._portal.call(self._provider.connect, sandbox_id,
                                                   resume=resume))

    def get_info(self, sandbox_id: str) -> SandboxInfo:
        """The sandbox's current state and details; ``SandboxNotFound`` if unknown."""
        return self._portal.call(self._provider.get_info, sandbox_id)

    def list(self, *, metadata: Mapping[str, str] | None = None,
             state: SandboxState | str | None = None) -> builtins.list[SandboxInfo]:
        """Sandboxes whose metadata contains every given pair, optionally in one state."""
        return self._portal.call(self._provider.list, metadata=metadata, state=state)

    def kill(self, sandbox_id: str) -> None:
        """Kill a sandbox. Killing twice is not an error."""
        self._portal.call(self._provider.kill, sandbox_id)

    # --------------------------------------------------------------- volumes

    def create_volume(self, name: str) -> Volume:
        """Create a named volume; ``Conflict`` if it exists."""
        return self._portal.call(self._provider.create_volume, name)

    def get_volume(self, name: str) -> Volume:
        """A volume by name; ``VolumeNotFound`` if unknown."""
        return self._portal.call(self._provider.get_volume, name)

    def list_volumes(self) -> builtins.list[Volume]:
        """Every volume of this provider."""
        return self._portal.call(self._provider.list_volumes)

    def delete_volume(self, name: str) -> None:
        """Delete a volume and its data."""
        self._portal.call(self._provider.delete_volume, name)

    # ------------------------------------------------------------- snapshots

    def list_snapshots(self, *, sandbox_id: str | None = None) -> builtins.list[Snapshot]:
        """Snapshots, optionally only those taken from one sandbox."""
        return self._portal.call(self._provider.list_snapshots, sandbox_id=sandbox_id)

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; ``SnapshotNotFound`` if unknown."""
        self._portal.call(self._provider.delete_snapshot, snapshot_id)

    # ------------------------------------------------------------- templates

    def build_template(self, spec: TemplateSpec, *, force: bool = False,
                       on_progress: Callable[[str], None] | None = None) -> Template:
        """Build a template; an unchanged spec is not rebuilt unless ``force``.

        ``on_progress`` runs in the loop's thread.
        """
        return self._portal.call(self._provider.build_template, spec, force=force,
                                 on_progress=on_progress)

    def check_template(self, spec: TemplateSpec) -> builtins.list[Problem]:
        """What this provider's template builder cannot do with ``spec``; empty when it
        can build it (see :meth:`SandboxProvider.check_template
        <provider_sdk.provider.SandboxProvider.check_template>`). Nothing is built."""
        return self._provider.check_template(spec)

    def list_templates(self) -> builtins.list[Template]:
        """Templates this provider built or knows."""
        return self._portal.call(self._provider.list_templates)

    def delete_template(self, template_id: str) -> None:
        """Delete a template; ``TemplateNotFound`` if unknown."""
        self._portal.call(self._provider.delete_template, template_id)


class SyncSandbox:
    """A blocking handle on one sandbox; mirrors :class:`~provider_sdk.sandbox.Sandbox`.

    ``with sandbox:`` kills it when the block ends unless :meth:`keep` was called.
    """

    def __init__(self, provider: SyncProvider, sandbox: Sandbox) -> None:
        self.provider = provider
        """The provider this sandbox belongs to."""
        self._sandbox = sandbox
        self._run = provider._portal
        self._files = SyncFiles(self)
        self._code = SyncCode(self, sandbox.code)

    @property
    def files(self) -> SyncFiles:
        """File operations inside the sandbox (:class:`SyncFiles`)."""
        return self._files

    @property
    def code(self) -> SyncCode:
        """The sandbox's code interpreter (:class:`SyncCode`, ``code.interpreter``)."""
        return self._code

    @property
    def async_sandbox(self) -> Sandbox:
        """The async handle underneath (use it only from async code in the loop)."""
        return self._sandbox

    @property
    def id(self) -> str:
        """The sandbox's id, stable across processes."""
        return self._sandbox.id

    @property
    def info(self) -> SandboxInfo:
        """The last known info; :meth:`refresh` updates it."""
        return self._sandbox.info

    @property
    def metadata(self) -> Mapping[str, str]:
        """The sandbox's metadata (labels)."""
        return self._sandbox.metadata

    def __repr__(self) -> str:
        return f"<SyncSandbox {self.id} provider={self.provider.name!r} state={self.info.state}>"

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._run.call(self._sandbox.__aexit__, exc_type, exc, tb)

    def keep(self) -> SyncSandbox:
        """Leave the sandbox running when its ``with`` block ends."""
        self._sandbox.keep()
        return self

    def refresh(self) -> SandboxInfo:
        """Fetch the current info from the provider."""
        return self._run.call(self._sandbox.refresh)

    def kill(self) -> None:
        """Kill the sandbox. Killing twice is not an error."""
        self._run.call(self._sandbox.kill)

    def exec(
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
        """Run a command to completion; see :meth:`provider_sdk.sandbox.Sandbox.exec`.

        ``on_stdout``/``on_stderr`` run in the loop's thread as output arrives.
        """
        return self._run.call(self._sandbox.exec, cmd, env=env, cwd=cwd, user=user,
                              timeout=timeout, stdin=stdin, on_stdout=on_stdout,
                              on_stderr=on_stderr, output_limit=output_limit)

    def start(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None, user: str | None = None,
              stdin: bool = True) -> SyncProcess:
        """Start a background process and return it at once (``process.background``);
        ``stdin=False`` closes its stdin from the start."""
        process = self._run.call(self._sandbox.start, cmd, env=env, cwd=cwd, user=user,
                                 stdin=stdin)
        return SyncProcess(self, process)

    def process(self, pid: int) -> SyncProcess:
        """Reattach to a background process by pid (``process.background``)."""
        return SyncProcess(self, self._sandbox.process(pid))

    @property
    def terminal(self) -> SyncTerminals:
        """Terminals in the sandbox (``terminal.pty``)."""
        return SyncTerminals(self)

    def shell(self, *, cwd: str | None = None,
              env: Mapping[str, str] | None = None) -> SyncShell:
        """Open a persistent shell: ``cd`` and ``export`` carry over between runs."""
        return SyncShell(self, self._run.call(self._sandbox.shell, cwd=cwd, env=env))

    def pause(self) -> SandboxInfo:
        """Pause the sandbox (``pause``); the filesystem is kept."""
        return self._run.call(self._sandbox.pause)

    def resume(self) -> SandboxInfo:
        """Resume a paused sandbox; returns once its data plane answers."""
        return self._run.call(self._sandbox.resume)

    def snapshot(self) -> Snapshot:
        """Snapshot the sandbox (``snapshot.filesystem``)."""
        return self._run.call(self._sandbox.snapshot)

    def rollback(self, snapshot: Snapshot | str) -> SandboxInfo:
        """Restore this sandbox in place from a snapshot (``snapshot.rollback``)."""
        return self._run.call(self._sandbox.rollback, snapshot)

    def metrics(self) -> Metrics:
        """Current resource use (``metrics``)."""
        return self._run.call(self._sandbox.metrics)

    def set_metadata(self, metadata: Mapping[str, str], *,
                     reread: bool = True) -> SandboxInfo:
        """Set labels on the sandbox, keeping the others (``metadata.update``);
        ``reread`` as in :meth:`Sandbox.set_metadata`."""
        return self._run.call(self._sandbox.set_metadata, metadata, reread=reread)

    def update_network(self, policy: NetworkPolicy) -> None:
        """Change the network policy of the running sandbox (``network.update``)."""
        self._run.call(self._sandbox.update_network, policy)

    def expose(self, port: int) -> ExposedPort:
        """Reach the server on ``port`` inside the sandbox at a URL carrying its access
        token (``ports.expose``); it answers until :meth:`unexpose`, a kill, or the
        provider's close."""
        return self._run.call(self._sandbox.expose, port)

    def unexpose(self, port: int) -> None:
        """Stop serving ``port`` (``ports.expose``)."""
        self._run.call(self._sandbox.unexpose, port)


class SyncFiles:
    """Blocking file operations inside a sandbox; mirrors
    :class:`~provider_sdk.sandbox.Files`."""

    def __init__(self, sandbox: SyncSandbox) -> None:
        self._files = sandbox.async_sandbox.files
        self._run = sandbox._run

    def read(self, path: str, *, limit: int | None = None) -> bytes:
        """A file's whole content, at most ``limit`` bytes; see
        :meth:`provider_sdk.sandbox.Files.read`."""
        return self._run.call(self._files.read, path, limit=limit)

    def read_text(self, path: str, encoding: str = "utf-8", *,
                  limit: int | None = None) -> str:
        """A file's content decoded (strictly) as ``encoding``."""
        return self._run.call(self._files.read_text, path, encoding, limit=limit)

    def stream(self, path: str) -> Iterator[bytes]:
        """Yield a file's content in chunks, never holding it whole."""
        return self._run.iterate(self._files.stream(path))

    def write(self, path: str, data: SyncData) -> None:
        """Write a file (replacing it), creating parent directories.

        ``data`` is bytes, text (UTF-8), or an iterable of byte chunks; an iterable is
        consumed in a worker thread, so it may block (e.g. read a local file).
        """
        payload: bytes | bytearray | memoryview | str | AsyncIterable[bytes]
        if isinstance(data, (bytes, bytearray, memoryview, str)):
            payload = data
        else:
            payload = _pull(iter(data))
        self._run.call(self._files.write, path, payload)

    def list(self, path: str = ".") -> builtins.list[FileInfo]:
        """A directory's entries, sorted by name."""
        return self._run.call(self._files.list, path)

    def stat(self, path: str) -> FileInfo:
        """Details of one path; ``FileNotFound`` if absent."""
        return self._run.call(self._files.stat, path)

    def exists(self, path: str) -> bool:
        """Whether the path exists."""
        return self._run.call(self._files.exists, path)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        """Create a directory (and its parents)."""
        self._run.call(self._files.mkdir, path, parents=parents, exist_ok=exist_ok)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, or a directory (with its contents if ``recursive``)."""
        self._run.call(self._files.remove, path, recursive=recursive)

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``."""
        self._run.call(self._files.rename, src, dst)

    def upload(self, local_path: str | os.PathLike[str], path: str) -> None:
        """Copy a local file into the sandbox in chunks."""
        self._run.call(self._files.upload, local_path, path)

    def download(self, path: str, local_path: str | os.PathLike[str], *,
                 progress: Callable[[int], object] | None = None) -> None:
        """Copy a file out of the sandbox in chunks; the local file is replaced, and
        only once the whole file has arrived. ``progress``, if given, is called (in the
        loop's thread) with the size of each chunk written."""
        self._run.call(self._files.download, path, local_path, progress=progress)

    def upload_dir(self, local_path: str | os.PathLike[str], path: str) -> None:
        """Copy a local directory tree into the sandbox, streamed as a tar archive;
        see :meth:`provider_sdk.sandbox.Files.upload_dir`."""
        self._run.call(self._files.upload_dir, local_path, path)

    def download_dir(self, path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a directory tree out of the sandbox, streamed as a tar archive; see
        :meth:`provider_sdk.sandbox.Files.download_dir`."""
        self._run.call(self._files.download_dir, path, local_path)


class SyncCode:
    """A sandbox's blocking code interpreter; mirrors
    :class:`~provider_sdk.code.SandboxCode`."""

    def __init__(self, sandbox: SyncSandbox, code: SandboxCode) -> None:
        self._code = code
        self._run = sandbox._run

    def create_context(self, *, language: str = "python", cwd: str | None = None,
                       env: Mapping[str, str] | None = None) -> CodeContext:
        """Start a context (``code.interpreter``)."""
        return self._run.call(self._code.create_context, language=language, cwd=cwd,
                              env=env)

    def run(self, code: str, *, context: CodeContext | None = None,
            env: Mapping[str, str] | None = None, timeout: float | None = None,
            on_stdout: TextCallback | None = None, on_stderr: TextCallback | None = None,
            output_limit: int | None = None) -> CodeResult:
        """Run code in a context; see :meth:`provider_sdk.code.SandboxCode.run`.

        ``on_stdout``/``on_stderr`` run in the loop's thread as output arrives.
        """
        return self._run.call(self._code.run, code, context=context, env=env,
                              timeout=timeout, on_stdout=on_stdout, on_stderr=on_stderr,
                              output_limit=output_limit)

    def close_context(self, context: CodeContext) -> None:
        """End a context. Closing twice is not an error."""
        self._run.call(self._code.close_context, context)


class SyncProcess:
    """A blocking handle on a background process; mirrors
    :class:`~provider_sdk.sandbox.Process`."""

    def __init__(self, sandbox: SyncSandbox, process: Process) -> None:
        self.sandbox = sandbox
        """The sandbox it runs in."""
        self._process = process
        self._run = sandbox._run

    @property
    def pid(self) -> int:
        """The process id, for reattaching with :meth:`SyncSandbox.process`."""
        return self._process.pid

    def __repr__(self) -> str:
        return f"<SyncProcess {self.pid} in {self.sandbox.id}>"

    def events(self) -> Iterator[ProcessEvent]:
        """Output chunks as they arrive, then a :class:`~provider_sdk.ProcessExit`."""
        return self._run.iterate(self._process.events())

    def wait(self, *, output_limit: int | None = None) -> ExecResult:
        """Wait for the process to exit; return its output (at most ``output_limit``
        bytes of each stream, as :meth:`SyncSandbox.exec` keeps) and exit code."""
        return self._run.call(self._process.wait, output_limit=output_limit)

    def write_stdin(self, data: bytes | str) -> None:
        """Write to the process's standard input."""
        self._run.call(self._process.write_stdin, data)

    def close_stdin(self) -> None:
        """Close the process's standard input (it sees end of file)."""
        self._run.call(self._process.close_stdin)

    def kill(self) -> None:
        """Kill the process and everything it started."""
        self._run.call(self._process.kill)


class SyncTerminals:
    """A sandbox's terminals, blocking; mirrors :class:`~provider_sdk.terminal.Terminals`."""

    def __init__(self, sandbox: SyncSandbox) -> None:
        self._sandbox = sandbox
        self._terminals = sandbox.async_sandbox.terminal

    def open(self, *, cols: int = 80, rows: int = 24,
             cmd: str | Sequence[str] | None = None,
             env: Mapping[str, str] | None = None,
             cwd: str | None = None) -> SyncTerminal:
        """Start ``cmd`` (the user's login shell if ``None``) on a new terminal; see
        :meth:`provider_sdk.terminal.Terminals.open`."""
        return SyncTerminal(self._sandbox, self._sandbox._run.call(
            self._terminals.open, cols=cols, rows=rows, cmd=cmd, env=env, cwd=cwd))


class SyncTerminal:
    """A blocking handle on an open terminal; mirrors
    :class:`~provider_sdk.terminal.Terminal`. Iterate it for what it prints; ``with``
    closes it."""

    def __init__(self, sandbox: SyncSandbox, terminal: Terminal) -> None:
        self._terminal = terminal
        self._run = sandbox._run
        self._chunks = terminal.__aiter__()

    @property
    def pid(self) -> int:
        """The terminal's process in the sandbox."""
        return self._terminal.pid

    def __repr__(self) -> str:
        return f"<SyncTerminal {self.pid}>"

    def __iter__(self) -> Iterator[bytes]:
        return self._run.iterate(self._chunks)

    def write(self, data: bytes | str) -> None:
        """Type ``data`` into the terminal."""
        self._run.call(self._terminal.write, data)

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size; the program gets ``SIGWINCH``."""
        self._run.call(self._terminal.resize, cols, rows)

    def wait(self) -> int:
        """Wait for the program to exit; its exit code."""
        return self._run.call(self._terminal.wait)

    def close(self) -> None:
        """End the terminal and everything it started."""
        self._run.call(self._terminal.close)

    def __enter__(self) -> SyncTerminal:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class SyncShell:
    """A blocking persistent shell session; mirrors :class:`~provider_sdk.sandbox.Shell`.

    ``with`` closes it.
    """

    def __init__(self, sandbox: SyncSandbox, shell: Shell) -> None:
        self._shell = shell
        self._run = sandbox._run

    def run(self, cmd: str, *, timeout: float | None = None,
            stdin: bytes | str | None = None,
            on_stdout: OutputCallback | None = None,
            on_stderr: OutputCallback | None = None) -> ExecResult:
        """Run one shell command in the session."""
        return self._run.call(self._shell.run, cmd, timeout=timeout, stdin=stdin,
                              on_stdout=on_stdout, on_stderr=on_stderr)

    def close(self) -> None:
        """End the session. Safe to call twice."""
        self._run.call(self._shell.aclose)

    def __enter__(self) -> SyncShell:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


async def _pull(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    # Each next() runs in a worker thread: a blocking iterable must not stall the loop.
    end = object()
    while (chunk := await anyio.to_thread.run_sync(next, chunks, end)) is not end:
        yield cast(bytes, chunk)

