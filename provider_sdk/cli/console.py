"""Terminal output for ``psdk``: results on stdout, everything else on stderr.

Progress (spinners, byte counters) is drawn only when stderr is a terminal, so piped
and scripted use sees results and errors and nothing else. This module also configures
structlog for the command line, which the library itself never does.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import logging
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any

__all__ = ["CliError", "Console", "Progress", "Status", "cell", "configure_logging",
           "labels_cell", "table", "to_json", "visible_labels"]

#: The longest cell a table shows; longer values end in an ellipsis.
MAX_CELL = 80
#: The longest label value shown in a table cell of labels.
MAX_LABEL_VALUE = 40


def cell(value: object, limit: int = MAX_CELL) -> str:
    """``value`` as one safe table cell: control and format characters escaped
    (``\\n``, ``\\x1b``), at most ``limit`` characters (an ellipsis marks the cut)."""
    text = str(value)[:limit * 4 + 1]  # a 100 KB value is cut before it is escaped
    escaped = "".join(_escape(ch) for ch in text)
    if len(escaped) > limit:
        return escaped[:max(limit - 1, 0)] + "\u2026"
    return escaped


def _escape(ch: str) -> str:
    if ch.isprintable() and ch not in "\u2028\u2029":
        return ch
    return repr(ch)[1:-1] if ch in "\n\r\t" else f"\\x{ord(ch):02x}" if ord(ch) < 0x100 \
        else f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}"


def visible_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` without the ones psdk and its providers keep for themselves: the key
    ``psdk`` and keys starting ``psdk.`` (E2B's ``psdk`` label holds the idle window)."""
    return {k: v for k, v in labels.items() if k != "psdk" and not k.startswith("psdk.")}


def labels_cell(labels: Mapping[str, str]) -> str:
    """Labels as one table cell, ``k=v`` pairs sorted by key, each value shortened."""
    pairs = ",".join(f"{cell(k, MAX_LABEL_VALUE)}={cell(v, MAX_LABEL_VALUE)}"
                     for k, v in sorted(visible_labels(labels).items()))
    return cell(pairs) if pairs else "-"


def table(header: list[str], rows: list[list[str]], *, limit: int = MAX_CELL) -> list[str]:
    """Lines of a table with ``header``; cells are escaped and shortened to ``limit``
    characters by :func:`cell`, columns padded to their widest cell (not the last)."""
    lines = [header, *([cell(c, limit) for c in row] for row in rows)]
    widths = [max(len(r[c]) for r in lines) for c in range(len(header))]
    return ["  ".join(f"{c:<{widths[i]}}" for i, c in enumerate(r[:-1])) + "  " + r[-1]
            if len(r) > 1 else r[0] for r in lines]


class CliError(Exception):
    """An expected failure of the command line itself, with its exit status."""

    def __init__(self, message: str, *, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def configure_logging(verbose: int) -> None:
    """Send structlog events to stderr: warnings only, or debug events with ``-v``.

    ``-vv`` also shows the standard library's debug logging (vendor clients use it).
    """
    import structlog

    level = logging.DEBUG if verbose else logging.WARNING
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=logging.DEBUG if verbose > 1 else logging.WARNING,
                        stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    if not verbose:
        # A library warning is news for the user, not a source location: one line each.
        warnings.formatwarning = _format_warning


def _format_warning(message: Warning | str, category: type[Warning], filename: str,
                    lineno: int, line: str | None = None) -> str:
    return f"psdk: warning: {' '.join(str(message).split())}\n"


class Console:
    """Where ``psdk`` writes. Streams are looked up on each call, so redirection works."""

    @property
    def interactive(self) -> bool:
        """Whether stderr is a terminal (progress is shown only then)."""
        return _isatty(sys.stderr)

    def out(self, text: str = "") -> None:
        """Print a line of results on stdout."""
        print(text, file=sys.stdout, flush=True)

    def write_stdout(self, data: bytes) -> None:
        """Copy bytes to stdout as they come (a command's output)."""
        _write_bytes(sys.stdout, data)

    def write_stderr(self, data: bytes) -> None:
        """Copy bytes to stderr as they come (a command's error output)."""
        _write_bytes(sys.stderr, data)

    def note(self, text: str) -> None:
        """A message for the person at the terminal, on stderr."""
        print(text, file=sys.stderr, flush=True)

    def error(self, message: str) -> None:
        """One line on stderr: ``psdk: error: ...``."""
        print(f"psdk: error: {' '.join(message.split())}", file=sys.stderr, flush=True)

    def status(self, message: str) -> Status:
        """A spinner with elapsed time while a long operation runs (terminal only)."""
        return Status(sys.stderr, message, enabled=self.interactive)

    def progress(self, label: str, total: int | None) -> Progress:
        """A byte counter for a transfer (terminal only)."""
        return Progress(sys.stderr, label, total, enabled=self.interactive)


class Status:
    """A spinner line on a terminal, drawn from a thread so it never waits on the loop."""

    _FRAMES = "|/-\\"

    def __init__(self, stream: IO[str], message: str, *, enabled: bool) -> None:
        self._stream = stream
        self._message = message
        self._enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Status:
        if self._enabled:
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._stream.write("\r\x1b[2K")
            self._stream.flush()

    def update(self, message: str) -> None:
        """Show ``message`` instead, from the next frame on."""
        self._message = message

    def _spin(self) -> None:
        start = time.monotonic()
        frame = 0
        while True:
            elapsed = time.monotonic() - start
            width = shutil.get_terminal_size().columns - 12
            message = self._message if len(self._message) <= width else \
                self._message[:max(width - 3, 0)] + "..."
            self._stream.write(f"\r\x1b[2K{self._FRAMES[frame % 4]} {message} "
                               f"({elapsed:.1f}s)")
            self._stream.flush()
            frame += 1
            if self._stop.wait(0.1):
                return


class Progress:
    """Bytes transferred so far, redrawn at most ten times a second."""

    def __init__(self, stream: IO[str], label: str, total: int | None, *,
                 enabled: bool) -> None:
        self._stream = stream
        self._label = label
        self._total = total
        self._enabled = enabled
        self.done = 0
        self._last = 0.0

    def advance(self, n: int) -> None:
        """Count ``n`` more bytes."""
        self.done += n
        if self._enabled and time.monotonic() - self._last >= 0.1:
            self._last = time.monotonic()
            self._draw()

    def _draw(self) -> None:
        text = f"{self._label}  {_human(self.done)}"
        if self._total:
            text += f" / {_human(self._total)} ({100 * self.done // self._total}%)"
        self._stream.write(f"\r\x1b[2K{text}")
        self._stream.flush()

    def close(self) -> None:
        """Erase the progress line."""
        if self._enabled and self._last:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()


def to_json(value: Any) -> Any:
    """Turn model values (attrs classes, enums, datetimes, mappings) into JSON data."""
    import attrs

    if attrs.has(type(value)):
        return {f.name: to_json(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted(to_json(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def dump_json(value: Any) -> str:
    """``value`` as indented JSON text."""
    return json.dumps(to_json(value), indent=2, sort_keys=True)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _write_bytes(stream: IO[str], data: bytes) -> None:
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        stream.flush()
        buffer.write(data)
        buffer.flush()
    else:  # a text-only stream (tests capturing output)
        stream.write(data.decode("utf-8", "replace"))
        stream.flush()
