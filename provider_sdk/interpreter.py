"""The code interpreter's value types (``code.interpreter``): a context, a run as the
core hands it to a provider's role, and its result.

A leaf module (it imports nothing of provider_sdk), so the error tree can carry a
partial :class:`CodeResult` (:class:`~provider_sdk.errors.CodeTimeout`) and the roles,
the handles and the sync facade can all name these types.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import attrs

__all__ = ["LANGUAGES", "CodeContext", "CodeError", "CodeResult", "CodeRun", "TextCallback"]

LANGUAGES = frozenset({"python"})
"""The languages a context can run: Python, in the sandbox's ``python3``."""

#: A callback receiving output text as it arrives; plain or async.
TextCallback = Callable[[str], "Awaitable[None] | None"]


@attrs.frozen(kw_only=True)
class CodeContext:
    """A stateful interpreter in one sandbox: names, imports and functions defined by
    one run are there in the next run in the same context, and in no other context.

    Made by :meth:`~provider_sdk.code.SandboxCode.create_context`; it belongs to the
    provider instance that made it (a context is a process that instance talks to)."""

    id: str
    sandbox_id: str
    language: str = "python"
    cwd: str | None = None
    """The working directory the context started in; ``None``: the sandbox's."""


@attrs.frozen(kw_only=True)
class CodeError:
    """An exception the code raised and did not catch: a result, not an error of this
    SDK. A run the timeout interrupted reports ``KeyboardInterrupt``."""

    name: str
    """The exception's class name (``"ZeroDivisionError"``)."""
    value: str
    """Its message (``str()`` of the exception)."""
    traceback: str
    """The formatted traceback, the code's own frames only, with their source lines."""


@attrs.frozen(kw_only=True)
class CodeResult:
    """The outcome of one run. Output past the run's ``output_limit`` is counted in the
    ``*_truncated`` fields, not kept (callbacks saw it all)."""

    text: str | None = None
    """The plain-text value of the code's last expression, as a notebook shows it
    (its ``repr``); ``None`` when the code does not end in an expression, the
    expression's value is ``None``, or the code raised."""
    stdout: str = ""
    stderr: str = ""
    error: CodeError | None = None
    execution_count: int = 0
    """How many runs the context has started, this one included."""
    duration: float = 0.0
    """Wall-clock seconds the run took, as the caller saw it."""
    stdout_truncated: int = 0
    """Bytes of standard output past the run's ``output_limit``, not kept."""
    stderr_truncated: int = 0
    """Bytes of standard error past the run's ``output_limit``, not kept."""
    text_truncated: int = 0
    """Bytes of :attr:`text` (UTF-8) past the run's ``output_limit``, not kept."""

    @property
    def ok(self) -> bool:
        """Whether the code ran to its end without raising."""
        return self.error is None

    @property
    def truncated(self) -> bool:
        """Whether anything past the run's ``output_limit`` was dropped."""
        return bool(self.stdout_truncated or self.stderr_truncated or self.text_truncated)


@attrs.frozen(kw_only=True)
class CodeRun:
    """A validated run, as the core hands it to a provider's code-interpreter role."""

    code: str
    context_id: str | None = None
    """The context to run in; ``None``: the sandbox's default context (Python, made on
    first use)."""
    env: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    """Variables set in ``os.environ`` for this run only. Values are never shown."""
    timeout: float | None = None
    """Seconds before the run is interrupted; the context and its state are kept."""
    output_limit: int
    """Bytes of each of stdout, stderr and the text the result keeps."""
    on_stdout: TextCallback | None = attrs.field(default=None, eq=False, repr=False)
    on_stderr: TextCallback | None = attrs.field(default=None, eq=False, repr=False)
