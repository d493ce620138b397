"""``ExecResult``: the outcome of a command.

A leaf module (it imports nothing of provider_sdk), so the error tree can carry a
partial result (:class:`~provider_sdk.errors.CommandTimeout`) without importing the
models, which import the errors; :mod:`provider_sdk.models` and the package export it.
"""

from __future__ import annotations

import attrs

__all__ = ["ExecResult"]


@attrs.frozen(kw_only=True)
class ExecResult:
    """The outcome of a command. A non-zero exit is a result, not an error."""

    exit_code: int
    """The exit status; ``-N`` when killed by signal ``N``."""
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    duration: float = 0.0
    """Wall-clock seconds from start to exit."""
    stdout_truncated: int = 0
    """Bytes of standard output past the call's ``output_limit``, not kept (callbacks
    saw them)."""
    stderr_truncated: int = 0
    """Bytes of standard error past the call's ``output_limit``, not kept."""
    oom_killed: bool = False
    """The command (or a process it started) was killed for exceeding the sandbox's
    memory limit."""

    @property
    def truncated(self) -> bool:
        """Whether output past the call's ``output_limit`` was dropped."""
        return bool(self.stdout_truncated or self.stderr_truncated)

    @property
    def stdout(self) -> str:
        """Standard output as text (UTF-8; invalid bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """Standard error as text (UTF-8; invalid bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """Whether the command exited with status 0."""
        return self.exit_code == 0
