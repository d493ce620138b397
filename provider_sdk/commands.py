"""A command as the framework hands it to a provider's hooks, and the events of a
background process: the plain data that both :mod:`provider_sdk.provider` (the hooks)
and :mod:`provider_sdk.sandbox` (the handles) speak, in a module that imports neither.

:mod:`provider_sdk.provider` and :mod:`provider_sdk.sandbox` export these names too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

import attrs

from provider_sdk.limits import DEFAULT_OUTPUT_LIMIT, OutputBuffer

__all__ = ["Command", "OutputCallback", "ProcessEvent", "ProcessExit", "ProcessOutput"]

#: A callback receiving output chunks as they arrive; plain or async.
OutputCallback = Callable[[bytes], "Awaitable[None] | None"]


@attrs.frozen(kw_only=True)
class Command:
    """A validated command, as the framework hands it to a provider's hooks."""

    argv: tuple[str, ...]
    """Program and arguments; a shell string arrives as ``("/bin/bash", "-c", text)``."""
    env: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    """Variables set for this call, over the sandbox's defaults. Values are never shown."""
    cwd: str | None = None
    """Working directory; relative paths resolve against the sandbox's."""
    user: str | None = None
    timeout: float | None = None
    """Seconds before the whole process tree is killed."""
    stdin: bytes | None = None
    """Bytes fed to standard input, then closed. ``None``: empty stdin."""
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    """Bytes of each of stdout and stderr the result keeps; the rest is counted in
    ``ExecResult.stdout_truncated``/``stderr_truncated`` (use :meth:`buffers`)."""
    keep_stdin: bool = True
    """Background processes only (``_start``): whether stdin stays open for writing.
    ``False``: the process reads end of file at once; a provider whose ``_start`` does
    not see to that (``start_closes_stdin`` false) has it closed right after."""
    on_stdout: OutputCallback | None = attrs.field(default=None, eq=False, repr=False)
    on_stderr: OutputCallback | None = attrs.field(default=None, eq=False, repr=False)

    def buffers(self) -> tuple[OutputBuffer, OutputBuffer]:
        """Bounded buffers for stdout and stderr, as every provider's ``_exec`` keeps them."""
        return OutputBuffer(self.output_limit), OutputBuffer(self.output_limit)


@attrs.frozen
class ProcessOutput:
    """A chunk of a background process's output."""

    stream: Literal["stdout", "stderr"]
    data: bytes


@attrs.frozen
class ProcessExit:
    """The last event of a background process: its exit status."""

    exit_code: int


ProcessEvent = ProcessOutput | ProcessExit
