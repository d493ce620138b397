"""The error tree: every error this SDK raises derives from :class:`SandboxError`.

Providers translate vendor and engine errors exactly once, at their boundary, most
specific first, with ``raise ... from exc``. Each error also subclasses the builtin it
behaves like, so ``except LookupError`` or ``except TimeoutError`` keeps working::

    SandboxError
    ├── ConfigError (ValueError)               a missing or malformed setting or option
    │   └── ProviderNotFound (LookupError)     no provider by that name is installed
    ├── UnsupportedCapability (NotImplementedError)
    ├── InvalidInput (ValueError)              a malformed spec, path, env, timeout ...
    │   ├── IsADirectory (IsADirectoryError)
    │   ├── NotADirectory (NotADirectoryError)
    │   ├── NotARegularFile                    a device, FIFO or socket where a file is read
    │   └── UnsafeArchive                      a directory archive reaching out of its tree
    ├── AuthenticationError (PermissionError)
    ├── PermissionDenied (PermissionError)     inside the sandbox: read-only, no access
    ├── NotFound (LookupError)
    │   ├── SandboxNotFound
    │   ├── SnapshotNotFound
    │   ├── VolumeNotFound
    │   ├── TemplateNotFound
    │   ├── ProcessNotFound
    │   ├── ContextNotFound                    a code-interpreter context closed or unknown
    │   └── FileNotFound (FileNotFoundError)
    ├── SandboxNotRunning (RuntimeError)       paused, stopped or killed
    ├── Conflict                               the resource exists or is in use
    │   └── FileExists (FileExistsError)
    ├── Unavailable (ConnectionError)          transient: retry later
    │   └── RateLimited                        ``retry_after`` seconds, when known
    ├── OperationTimeout (TimeoutError)
    │   ├── CommandTimeout                     carries the partial ``result``
    │   └── CodeTimeout                        a code run interrupted; the partial ``result``
    ├── QuotaExceeded
    │   └── FileTooLarge                       a read into memory past its ``limit``
    └── TemplateBuildError                     carries the ``step`` and a ``log_tail``

Every error carries ``provider`` and ``sandbox_id`` (``None`` where not applicable).
Messages never contain credentials: settings holding secrets are :class:`Secret` values
whose ``repr`` and ``str`` are masked.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provider_sdk.interpreter import CodeResult
    from provider_sdk.results import ExecResult

__all__ = [
    "AuthenticationError",
    "CodeTimeout",
    "CommandTimeout",
    "ConfigError",
    "Conflict",
    "ContextNotFound",
    "FileExists",
    "FileNotFound",
    "FileTooLarge",
    "InvalidInput",
    "IsADirectory",
    "NotADirectory",
    "NotARegularFile",
    "NotFound",
    "OperationTimeout",
    "PermissionDenied",
    "ProcessNotFound",
    "ProviderNotFound",
    "QuotaExceeded",
    "RateLimited",
    "SandboxError",
    "SandboxNotFound",
    "SandboxNotRunning",
    "SnapshotNotFound",
    "TemplateBuildError",
    "TemplateNotFound",
    "Unavailable",
    "UnsafeArchive",
    "UnsupportedCapability",
    "VolumeNotFound",
]


class SandboxError(Exception):
    """Root of every error raised by provider-sdk and its providers.

    Attributes:
        message: the human-readable message, without the provider prefix.
        provider: name of the provider that raised it, if any; ``""`` for an error that
            is no provider's (a binding store's), which the core never attributes.
        sandbox_id: the sandbox concerned, if any.
    """

    def __init__(
        self, message: str, *, provider: str | None = None, sandbox_id: str | None = None
    ) -> None:
        self.message = message
        self.provider = provider
        self.sandbox_id = sandbox_id
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.provider:
            where.append(self.provider)
        if self.sandbox_id:
            where.append(self.sandbox_id)
        return f"[{' '.join(where)}] {self.message}" if where else self.message


class ConfigError(SandboxError, ValueError):
    """A setting or provider option is missing or malformed; the message names it."""


class ProviderNotFound(ConfigError, LookupError):
    """No provider of that name is installed (or it failed to import).

    Attributes:
        installed: names of the providers that are installed.
    """

    def __init__(self, message: str, *, installed: tuple[str, ...] = (), **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.installed = installed


class UnsupportedCapability(SandboxError, NotImplementedError):
    """The provider does not declare the capability the call needs.

    Attributes:
        capability: the capability name, e.g. ``"pause.memory"``.
    """

    def __init__(self, capability: str, *, provider: str | None = None,
                 sandbox_id: str | None = None, detail: str = "") -> None:
        self.capability = capability
        msg = f"provider {provider!r} does not support {capability!r}"
        super().__init__(f"{msg}: {detail}" if detail else msg, provider=provider,
                         sandbox_id=sandbox_id)


class InvalidInput(SandboxError, ValueError):
    """An argument is malformed: the message names the field or parameter."""


class IsADirectory(InvalidInput, IsADirectoryError):
    """A file operation was given a directory."""


class NotADirectory(InvalidInput, NotADirectoryError):
    """A directory operation was given something that is not a directory."""


class NotARegularFile(InvalidInput):
    """A file read was given a device, FIFO, socket (or a symlink to one): such a path
    can produce endless data or block forever, so it is refused before anything is read."""


class UnsafeArchive(InvalidInput):
    """A directory transfer's archive holds a member that would land outside its
    destination: an absolute path, a ``..`` component, a path through a symbolic link or
    a file, a hard link to outside, a device, or a header past its bound. It is refused
    before anything of that member is written, and nothing outside the destination is
    touched."""


class AuthenticationError(SandboxError, PermissionError):
    """The backend rejected the credentials (the message never contains them)."""


class PermissionDenied(SandboxError, PermissionError):
    """The sandbox refused a file operation: a read-only mount, or no access."""


class NotFound(SandboxError, LookupError):
    """Something the call names does not exist."""


class SandboxNotFound(NotFound):
    """The sandbox id is unknown to the provider, or the sandbox is gone."""


class SnapshotNotFound(NotFound):
    """The snapshot id is unknown to the provider."""


class VolumeNotFound(NotFound):
    """The volume is unknown to the provider."""


class TemplateNotFound(NotFound):
    """The template (image, snapshot name, template id) does not exist."""


class ProcessNotFound(NotFound):
    """No process with that pid exists in the sandbox."""


class ContextNotFound(NotFound):
    """A code-interpreter context is closed, ended, or unknown to this provider
    instance (contexts belong to the instance that made them)."""


class FileNotFound(NotFound, FileNotFoundError):
    """A path inside the sandbox does not exist."""


class SandboxNotRunning(SandboxError, RuntimeError):
    """The operation needs a running sandbox, and it is paused, stopped or killed.

    Attributes:
        state: the sandbox's state as a string, when known.
    """

    def __init__(self, message: str, *, state: str | None = None, **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.state = state


class Conflict(SandboxError):
    """The resource already exists, or is in a state that forbids the operation."""


class FileExists(Conflict, FileExistsError):
    """A path inside the sandbox already exists."""


class Unavailable(SandboxError, ConnectionError):
    """The backend or the sandbox's data plane did not answer; retrying may help."""


class RateLimited(Unavailable):
    """The backend is rate limiting; ``retry_after`` is in seconds, when known."""

    def __init__(self, message: str, *, retry_after: float | None = None,
                 **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class OperationTimeout(SandboxError, TimeoutError):
    """An operation did not finish within its time limit."""


class CommandTimeout(OperationTimeout):
    """A command hit its ``timeout``; its whole process tree was killed.

    Attributes:
        result: what the command printed before it was killed (``exit_code`` is ``-9``).
    """

    def __init__(self, message: str, *, result: ExecResult, **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.result = result


class CodeTimeout(OperationTimeout):
    """A code run hit its ``timeout`` and was interrupted.

    Attributes:
        result: what the run printed before it was interrupted; its ``error`` is the
            ``KeyboardInterrupt`` the code saw.
        context_kept: whether the context survived: the code stopped when interrupted,
            so names it defined before are still there. ``False`` when the code would
            not stop and its interpreter was ended (the context is gone).
    """

    def __init__(self, message: str, *, result: CodeResult, context_kept: bool,
                 **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.result = result
        self.context_kept = context_kept


class QuotaExceeded(SandboxError):
    """The backend refuses because an account or host limit is reached."""


class FileTooLarge(QuotaExceeded):
    """A file read into memory (``files.read``) is larger than its limit; nothing is
    returned. Stream it (``files.stream``, ``files.download``) instead.

    Attributes:
        limit: the limit in bytes that the read would have passed.
    """

    def __init__(self, message: str, *, limit: int, **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.limit = limit


class TemplateBuildError(SandboxError):
    """Building a template failed.

    The message, the step and the log tail are plain text: the terminal control
    sequences builders colour their logs with are taken out.

    Attributes:
        step: the build step that failed (e.g. ``"parse"``, ``"build"``, ``"push"``).
        log_tail: the last lines of the build log.
    """

    def __init__(self, message: str, *, step: str, log_tail: str = "",
                 **kw: str | None) -> None:
        step = _plain_text(step)
        super().__init__(f"{step}: {_plain_text(message)}", **kw)
        self.step = step
        self.log_tail = _plain_text(log_tail)


_TERMINAL_CODES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[0-~])")


def _plain_text(text: str) -> str:
    """``text`` without terminal control sequences (colours, cursor moves, titles): what
    a builder's log says, readable in a file, a log line or an error message."""
    return _TERMINAL_CODES.sub("", text)


def attribute(exc: BaseException, provider: str, sandbox_id: str | None = None) -> None:
    """Fill in the provider (and sandbox) of ``exc`` where it does not say them: the core
    calls it on what leaves every public operation, so each error carries its provider.
    An error that says it is no provider's (``provider == ""``) is left as it is."""
    if isinstance(exc, SandboxError) and exc.provider != "":
        if exc.provider is None:
            exc.provider = provider
        if exc.sandbox_id is None and sandbox_id is not None:
            exc.sandbox_id = sandbox_id


@contextlib.contextmanager
def attributed(provider: str, sandbox_id: str | None = None) -> Iterator[None]:
    """Run a block whose errors :func:`attribute` completes (validation before an
    operation's span, e.g. a spec built from keywords)."""
    try:
        yield
    except SandboxError as exc:
        attribute(exc, provider, sandbox_id)
        raise


@contextlib.contextmanager
def reported_as(path: str, *temporaries: str) -> Iterator[None]:
    """Run a block that works through temporary files (a write staged beside its target,
    then renamed over it) so that its errors name ``path``, the caller's, wherever they
    would name one of ``temporaries``; the error keeps its type."""
    try:
        yield
    except SandboxError as exc:
        message = exc.message
        for temporary in sorted(temporaries, key=len, reverse=True):  # paths before names
            message = message.replace(temporary, path)
        if message != exc.message:
            exc.message = message
            exc.args = (message, *exc.args[1:])
        raise


@contextlib.contextmanager
def on_behalf_of(provider: str) -> Iterator[None]:
    """Run a block in which one provider uses another (the local provider builds its
    templates through the Docker provider): the errors it raises are ``provider``'s, as
    the caller asked that one."""
    try:
        yield
    except SandboxError as exc:
        exc.provider = provider
        raise
