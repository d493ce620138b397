"""``ProviderSandbox``: a deepagents ``BaseSandbox`` over a provider-sdk sandbox.

``execute`` runs the command with ``bash -c`` (stderr joined to stdout, so the output
is combined in the order it was written); ``upload_files``, ``download_files``,
``read``, ``write``, ``ls`` and ``delete`` use the provider's files API instead of
scripts run through ``execute``; ``edit``, ``grep`` and ``glob`` run scripts in the
sandbox, which do the work where the files are. Every async method runs on
the async API, in the event loop its provider lives in; every sync one blocks on it.

This module owns the translation between deepagents' results and provider-sdk's calls
and errors; it must not know any provider by name.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, cast, overload

import anyio
from deepagents.backends.protocol import (
    FILE_NOT_FOUND,
    INVALID_PATH,
    IS_DIRECTORY,
    PERMISSION_DENIED,
    DeleteResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.sandbox import MAX_BINARY_BYTES, BaseSandbox

from provider_sdk import config
from provider_sdk.errors import (
    CommandTimeout,
    FileNotFound,
    FileTooLarge,
    InvalidInput,
    IsADirectory,
    NotADirectory,
    NotARegularFile,
    PermissionDenied,
    SandboxError,
)
from provider_sdk.models import ExecResult, FileType, SandboxSpec
from provider_sdk.portal import Portal
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk.sync import SyncSandbox
from provider_sdk_deepagents import _read

__all__ = ["DEFAULT_TIMEOUT", "GLOB_TIMEOUT", "NATIVE_READ_LIMIT", "TIMEOUT_EXIT_CODE",
           "ProviderSandbox"]

DEFAULT_TIMEOUT = 30 * 60
"""Seconds a command may run when ``execute`` is given no ``timeout``."""

NATIVE_READ_LIMIT = 256 << 10
"""Largest text file ``read`` fetches whole through the files API; past it, ``read``
pages on the sandbox's side with deepagents' script, so only the page travels."""

GLOB_TIMEOUT = 20
"""Seconds a ``glob_paths="relative"`` search (the default) may take."""

# argv: the search root, the pattern. One JSON object per line: a match, or an error.
_GLOB_SCRIPT = """
import glob, json, os, sys
root, pattern = sys.argv[1], sys.argv[2]
if pattern.startswith('/') or '..' in pattern.replace(chr(92), '/').split('/'):
    print(json.dumps({'error': 'invalid_pattern'})); sys.exit()
try:
    os.chdir(root)
except FileNotFoundError:
    print(json.dumps({'error': 'path_not_found'})); sys.exit()
except NotADirectoryError:
    print(json.dumps({'error': 'not_a_directory'})); sys.exit()
except PermissionError:
    print(json.dumps({'error': 'permission_denied'})); sys.exit()
for found in sorted(glob.glob(pattern, recursive=True)):
    print(json.dumps({'path': found, 'is_dir': os.path.isdir(found)}))
"""

TIMEOUT_EXIT_CODE = 124
"""The exit code of a command killed at its timeout (as GNU ``timeout`` reports it)."""

Cleanup = Callable[[], Awaitable[None]]
GlobPaths = Literal["absolute", "relative"]


class ProviderSandbox(BaseSandbox):
    """A deepagents sandbox backend on any provider-sdk provider.

    Make one with :meth:`create` (blocking), :meth:`acreate` (in the caller's event
    loop) or :meth:`from_sandbox` (around a sandbox the caller already has); end it
    with :meth:`delete`, which kills the sandbox, or :meth:`close`, which leaves it
    running. Switching providers is the ``provider`` argument alone::

        backend = ProviderSandbox.create(provider="docker")  # or "local", "e2b", ...
        agent = create_deep_agent(model=..., backend=backend)

    Args:
        sandbox: the sandbox, as an async handle living in ``loop``.
        loop: where the sandbox's provider runs.
        timeout: seconds a command may run when ``execute`` gets no ``timeout``.
        output_limit: bytes of output ``execute`` keeps (the rest is dropped and the
            response says ``truncated``); default: the provider's ``output_limit``.
        glob_paths: ``"relative"`` (the default): Python's ``glob`` module run in the
            sandbox, which reports files and directories by their path relative to
            the search root, ``**`` for any depth (what langchain-tests' sandbox suite
            checks); ``"absolute"``: deepagents' own ``glob``, which reports regular
            files by absolute path (what its filesystem permission rules match
            against), a bare ``*.py`` matching at any depth.
        cleanups: coroutines run in ``loop``, last first, when the backend closes (the
            provider and anything else this backend opened).
    """

    def __init__(self, sandbox: Sandbox, *, loop: Portal,
                 timeout: int = DEFAULT_TIMEOUT, output_limit: int | None = None,
                 glob_paths: GlobPaths = "relative",
                 cleanups: tuple[Cleanup, ...] = ()) -> None:
        if glob_paths not in ("absolute", "relative"):
            raise ValueError(f"glob_paths must be 'absolute' or 'relative', got {glob_paths!r}")
        self.sandbox = sandbox
        """The provider-sdk sandbox underneath (use it only from async code in its loop)."""
        self.default_timeout = timeout
        self.output_limit = output_limit
        self.glob_paths: GlobPaths = glob_paths
        self._loop = loop
        self._cleanups = list(cleanups)
        self._closed = False
        self._deleted = False

    # ----------------------------------------------------------- construction

    @classmethod
    def create(cls, provider: str | None = None, *,
               provider_options: Mapping[str, Any] | None = None,
               timeout: int = DEFAULT_TIMEOUT, output_limit: int | None = None,
               glob_paths: GlobPaths = "relative", **spec_fields: Any) -> ProviderSandbox:
        """Create a sandbox and return its backend, blocking.

        The provider runs in an event loop of its own, in a thread, until the backend
        is deleted or closed.

        Args:
            provider: an installed provider's name; ``None``: the configured default
                (``PSDK_PROVIDER``, ``psdk.toml``, else ``"local"``).
            provider_options: options for the provider's constructor, over its
                ``psdk.toml`` table.
            timeout: as for the class.
            output_limit: as for the class.
            glob_paths: as for the class.
            **spec_fields: :class:`~provider_sdk.SandboxSpec` fields (``template``,
                ``env``, ``metadata``, ``cwd``, ``resources``, ...).

        Raises:
            ProviderNotFound: no provider by that name is installed.
            ConfigError: an option or setting is missing or malformed.
        """
        spec = SandboxSpec(**spec_fields)
        loop = Portal.start(name="provider-sdk-deepagents")
        try:
            provider_obj = loop.call(_open_provider, provider, dict(provider_options or {}))
            try:
                sandbox = loop.call(_create_sandbox, provider_obj, spec)
            except BaseException:
                loop.call(provider_obj.aclose)
                raise
        except BaseException:
            loop.close()
            raise
        return cls(sandbox, loop=loop, timeout=timeout, output_limit=output_limit,
                   glob_paths=glob_paths, cleanups=(provider_obj.aclose,))

    @classmethod
    async def acreate(cls, provider: str | None = None, *,
                      provider_options: Mapping[str, Any] | None = None,
                      timeout: int = DEFAULT_TIMEOUT, output_limit: int | None = None,
                      glob_paths: GlobPaths = "relative",
                      **spec_fields: Any) -> ProviderSandbox:
        """Create a sandbox in the caller's event loop and return its backend.

        Arguments as for :meth:`create`. The provider lives in this loop: async
        methods awaited here run directly; sync methods work from other threads while
        this loop runs.
        """
        spec = SandboxSpec(**spec_fields)
        provider_obj = await _open_provider(provider, dict(provider_options or {}))
        try:
            sandbox = await _create_sandbox(provider_obj, spec)
        except BaseException:
            await provider_obj.aclose()
            raise
        return cls(sandbox, loop=Portal.current(), timeout=timeout,
                   output_limit=output_limit, glob_paths=glob_paths,
                   cleanups=(provider_obj.aclose,))

    @classmethod
    def from_sandbox(cls, sandbox: Sandbox | SyncSandbox, *, timeout: int = DEFAULT_TIMEOUT,
                     output_limit: int | None = None,
                     glob_paths: GlobPaths = "relative") -> ProviderSandbox:
        """The backend of a sandbox the caller already has.

        A :class:`~provider_sdk.sync.SyncSandbox` brings the loop its provider runs in;
        an async :class:`~provider_sdk.Sandbox` must be passed from the event loop its
        provider lives in. The backend does not own the provider: :meth:`close` leaves
        it open, and :meth:`delete` kills only the sandbox.

        Raises:
            RuntimeError: an async sandbox passed outside a running event loop.
        """
        if isinstance(sandbox, SyncSandbox):
            # The loop belongs to the SyncProvider: this backend never stops it.
            loop = sandbox.provider._portal.borrowed()
            return cls(sandbox.async_sandbox, loop=loop, timeout=timeout,
                       output_limit=output_limit, glob_paths=glob_paths)
        try:
            loop = Portal.current()
        except RuntimeError:
            raise RuntimeError("from_sandbox(): pass an async Sandbox from the event loop "
                               "its provider lives in, or pass a SyncSandbox") from None
        return cls(sandbox, loop=loop, timeout=timeout, output_limit=output_limit,
                   glob_paths=glob_paths)

    # --------------------------------------------------------------- identity

    @property
    def id(self) -> str:
        """The sandbox's id: ``provider.connect(id)`` reopens it from anywhere."""
        return self.sandbox.id

    @property
    def provider(self) -> SandboxProvider:
        """The provider the sandbox runs on."""
        # A handle holds the provider that made it, typed as the part it calls.
        return cast("SandboxProvider", self.sandbox.provider)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` or :meth:`delete` has released the backend."""
        return self._closed

    def __repr__(self) -> str:
        return f"<ProviderSandbox {self.id} provider={self.provider.name!r}>"

    # -------------------------------------------------------------- lifetime

    @overload
    def delete(self) -> None: ...
    @overload
    def delete(self, file_path: str) -> DeleteResult: ...

    def delete(self, file_path: str | None = None) -> DeleteResult | None:
        """Without an argument: kill the sandbox and close the backend. Deleting twice
        is not an error.

        With ``file_path``: delete that path inside the sandbox (recursively), as
        deepagents' backends do.

        Raises:
            RuntimeError: the backend was closed without deleting the sandbox.
        """
        if file_path is not None:
            return self._loop.call(self._delete_path, file_path)
        if not self._deleted:
            self._check_open()
            self._deleted = True
            try:
                self._loop.call(self.sandbox.kill)
            finally:
                self.close()
        return None

    @overload
    async def adelete(self) -> None: ...
    @overload
    async def adelete(self, file_path: str) -> DeleteResult: ...

    async def adelete(self, file_path: str | None = None) -> DeleteResult | None:
        """Async :meth:`delete`."""
        if file_path is not None:
            return await self._loop.acall(self._delete_path, file_path)
        if not self._deleted:
            self._check_open()
            self._deleted = True
            try:
                await self._loop.acall(self.sandbox.kill)
            finally:
                await self.aclose()
        return None

    def close(self) -> None:
        """Release what the backend opened (its provider, its loop); the sandbox keeps
        running. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.call(self._run_cleanups)
        finally:
            self._loop.close()

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._loop.acall(self._run_cleanups)
        finally:
            if self._loop.owned:
                # Stopping a portal joins its thread: not from a coroutine's thread.
                await asyncio.to_thread(self._loop.close)

    def __enter__(self) -> ProviderSandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.delete()

    async def __aenter__(self) -> ProviderSandbox:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):  # a cancelled block still kills its sandbox
            await self.adelete()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the backend of sandbox {self.id} is closed; reopen it with "
                               "provider.connect(id) to delete it")

    async def _run_cleanups(self) -> None:
        while self._cleanups:
            await self._cleanups.pop()()

    # ------------------------------------------------------------------ exec

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run a shell command; combined output, exit code, and whether output was
        dropped past the output limit.

        ``timeout``: seconds (``None``: the backend's default; ``0``: none). A command
        killed at its timeout returns what it printed, a note, and exit code 124.
        """
        return self._loop.call(self._execute, command, timeout)

    async def aexecute(self, command: str, *,
                       timeout: int | None = None) -> ExecuteResponse:
        """Async :meth:`execute`."""
        return await self._loop.acall(self._execute, command, timeout)

    async def _execute(self, command: str, timeout: int | None) -> ExecuteResponse:
        seconds = self.default_timeout if timeout is None else timeout
        argv = ["/bin/bash", "-c", "exec 2>&1\n" + command]
        try:
            result = await self.sandbox.exec(argv, timeout=seconds or None,
                                             output_limit=self.output_limit)
        except CommandTimeout as exc:
            partial = _response(exc.result)
            note = f"Command timed out after {seconds} seconds"
            output = f"{partial.output}\n{note}" if partial.output else note
            return ExecuteResponse(output=output, exit_code=TIMEOUT_EXIT_CODE,
                                   truncated=partial.truncated)
        return _response(result)

    # ----------------------------------------------------------------- files

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each file (parents created, an existing file replaced); one response
        per file, in order, with ``invalid_path``, ``permission_denied``,
        ``is_directory`` or ``file_not_found`` where one failed."""
        return self._loop.call(self._upload, files)

    async def aupload_files(self,
                            files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Async :meth:`upload_files`."""
        return await self._loop.acall(self._upload, files)

    async def _upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        answers = []
        for path, content in files:
            if not _absolute(path):
                answers.append(FileUploadResponse(path=path, error=INVALID_PATH))
                continue
            try:
                await self.sandbox.files.write(path, content)
            except Exception as exc:
                answers.append(FileUploadResponse(path=path, error=_file_error(exc)))
            else:
                answers.append(FileUploadResponse(path=path))
        return answers

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Read each file whole; one response per path, in order, with
        ``file_not_found``, ``is_directory``, ``permission_denied`` or ``invalid_path``
        where one failed."""
        return self._loop.call(self._download, paths)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Async :meth:`download_files`."""
        return await self._loop.acall(self._download, paths)

    async def _download(self, paths: list[str]) -> list[FileDownloadResponse]:
        answers = []
        for path in paths:
            if not _absolute(path):
                answers.append(FileDownloadResponse(path=path, error=INVALID_PATH))
                continue
            try:
                content = await self.sandbox.files.read(path)
            except Exception as exc:
                answers.append(FileDownloadResponse(path=path, error=_file_error(exc)))
            else:
                answers.append(FileDownloadResponse(path=path, content=content))
        return answers

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """A page of a file: ``limit`` lines from line ``offset`` (0-based) of a text
        file, or a binary file whole, base64-encoded, up to deepagents' preview size."""
        return self._loop.call(self._read, file_path, offset, limit)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Async :meth:`read`."""
        return await self._loop.acall(self._read, file_path, offset, limit)

    async def _read(self, file_path: str, offset: int, limit: int) -> ReadResult:
        text = _read.is_text_path(file_path)
        try:
            raw = await self.sandbox.files.read(
                file_path, limit=NATIVE_READ_LIMIT if text else MAX_BINARY_BYTES)
        except FileTooLarge:
            if not text:
                return _read.binary_is_too_large(file_path)
            # A large text file: page it where it is, so only the page travels.
            return await BaseSandbox.aread(self, file_path, offset, limit)
        except (IsADirectory, NotARegularFile):
            return ReadResult(error=f"File '{file_path}': not_a_file")
        except Exception as exc:
            return ReadResult(error=f"File '{file_path}': {_file_error(exc)}")
        return _read.read_page(file_path, raw, offset, limit)

    def write(self, file_path: str, content: str) -> WriteResult:
        """Create a file with ``content`` (parents created); an existing file is left
        as it is and reported."""
        return self._loop.call(self._write, file_path, content)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        """Async :meth:`write`."""
        return await self._loop.acall(self._write, file_path, content)

    async def _write(self, file_path: str, content: str) -> WriteResult:
        try:
            if await self.sandbox.files.exists(file_path):
                return WriteResult(error=f"Cannot write to {file_path} because it already "
                                         "exists. Read and then make an edit, or write to "
                                         "a new path.")
            await self.sandbox.files.write(file_path, content.encode("utf-8"))
        except Exception as exc:
            return WriteResult(error=f"Failed to write file '{file_path}': "
                                     f"{_file_error(exc)}")
        return WriteResult(path=file_path)

    def ls(self, path: str) -> LsResult:
        """The entries of a directory, each with its path and whether it is one."""
        return self._loop.call(self._ls, path)

    async def als(self, path: str) -> LsResult:
        """Async :meth:`ls`."""
        return await self._loop.acall(self._ls, path)

    async def _ls(self, path: str) -> LsResult:
        try:
            entries = await self.sandbox.files.list(path)
        except Exception as exc:
            code = _file_error(exc)
            if isinstance(exc, FileNotFound):
                code = "path_not_found"
            elif isinstance(exc, NotADirectory):
                code = "not_a_directory"
            return LsResult(error=f"Path '{path}': {code}")
        infos: list[FileInfo] = []
        for entry in entries:
            info: FileInfo = {"path": posixpath.join(path, entry.name),
                              "is_dir": entry.type == FileType.DIRECTORY}
            if entry.type == FileType.FILE:
                info["size"] = entry.size
            if entry.modified_at is not None:
                info["modified_at"] = entry.modified_at.isoformat()
            infos.append(info)
        return LsResult(entries=infos)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Paths matching ``pattern`` under ``path`` (default ``/``), found where the
        files are, as :attr:`glob_paths` says."""
        if self.glob_paths == "absolute":
            return super().glob(pattern, path)
        return self._loop.call(self._glob_relative, pattern, path)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Async :meth:`glob`."""
        if self.glob_paths == "absolute":
            return await super().aglob(pattern, path)
        return await self._loop.acall(self._glob_relative, pattern, path)

    async def _glob_relative(self, pattern: str, path: str | None) -> GlobResult:
        root = path or "/"
        try:
            result = await self.sandbox.exec(["python3", "-c", _GLOB_SCRIPT, root, pattern],
                                             timeout=GLOB_TIMEOUT,
                                             output_limit=self.output_limit)
        except CommandTimeout:
            return GlobResult(error=f"Error: glob timed out after {GLOB_TIMEOUT}s. Try a "
                                    "more specific pattern or a narrower path.")
        return _parse_glob(result, root)

    async def _delete_path(self, file_path: str) -> DeleteResult:
        try:
            await self.sandbox.files.remove(file_path, recursive=True)
        except FileNotFound:
            return DeleteResult(error=f"Error: '{file_path}' not found")
        except Exception as exc:
            return DeleteResult(error=f"Error deleting file '{file_path}': "
                                      f"{_file_error(exc)}")
        return DeleteResult(path=file_path)


async def _open_provider(name: str | None, options: dict[str, Any]) -> SandboxProvider:
    # Built inside the loop it will live in, so clients bound to a loop bind to it.
    return await config.open_provider(name, **options).__aenter__()


async def _create_sandbox(provider: SandboxProvider, spec: SandboxSpec) -> Sandbox:
    return await provider.create(spec)


def _response(result: ExecResult) -> ExecuteResponse:
    code = result.exit_code
    if code < 0:
        code = 128 - code  # killed by signal N: a shell reports 128 + N
    output = (result.stdout_bytes + result.stderr_bytes).decode("utf-8", errors="replace")
    return ExecuteResponse(output=output, exit_code=code,
                           truncated=bool(result.stdout_truncated or result.stderr_truncated))


def _parse_glob(result: ExecResult, root: str) -> GlobResult:
    matches: list[FileInfo] = []
    for line in result.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            return GlobResult(error=f"Path '{root}': glob failed: "
                                    f"{(result.stdout + result.stderr).strip()[:200]}")
        if "error" in record:
            return GlobResult(error=f"Path '{root}': {record['error']}")
        matches.append({"path": str(record["path"]), "is_dir": bool(record["is_dir"])})
    if result.exit_code != 0:
        return GlobResult(error=f"Path '{root}': glob failed: {result.stderr.strip()[:200]}")
    return GlobResult(matches=matches, truncated=bool(result.stdout_truncated))


def _absolute(path: str) -> bool:
    return isinstance(path, str) and path.startswith("/") and "\0" not in path


def _file_error(exc: Exception) -> str:
    """deepagents' error code for a failed file operation; the message of another
    provider-sdk error. Anything else is a bug, and propagates."""
    if isinstance(exc, FileNotFound | NotADirectory):
        return FILE_NOT_FOUND
    if isinstance(exc, IsADirectory):
        return IS_DIRECTORY
    if isinstance(exc, PermissionDenied):
        return PERMISSION_DENIED
    if isinstance(exc, InvalidInput):
        return INVALID_PATH
    if isinstance(exc, SandboxError):
        return f"{type(exc).__name__}: {exc.message}"
    raise exc

