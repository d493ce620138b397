"""Terminal output for ``psdk``: results on stdout, everything else on stderr.

On a terminal, progress (spinners with elapsed time, build steps, bytes) is drawn with
rich on stderr, imported only then. Off one, progress is plain lines on stderr, and only
where it helps a log: each build step, and a line when an operation takes long; stdout
holds results alone. This module also configures
structlog for the command line, which the library itself never does.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import logging
import re
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any

__all__ = ["MAX_CELL", "MAX_LABEL_VALUE", "BuildStatus", "CliError", "Console", "Progress",
           "Status", "cell", "configure_logging", "human_size", "labels_cell", "table",
           "to_json"]

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


def labels_cell(labels: Mapping[str, str]) -> str:
    """Labels as one table cell, ``k=v`` pairs sorted by key, each value shortened."""
    pairs = ",".join(f"{cell(k, MAX_LABEL_VALUE)}={cell(v, MAX_LABEL_VALUE)}"
                     for k, v in sorted(labels.items()))
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
    """Where ``psdk`` writes. Streams are looked up on each call, so redirection works.

    Args:
        quiet: leave out the lines that say what a command did (:meth:`done`).
    """

    def __init__(self, *, quiet: bool = False) -> None:
        self.quiet = quiet

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

    def done(self, text: str) -> None:
        """One line on stderr saying what a command did (``killed sandbox X on local``),
        unless quiet; stdout keeps the results alone."""
        if not self.quiet:
            print(_plain(text), file=sys.stderr, flush=True)

    def error(self, message: str) -> None:
        """One line on stderr: ``psdk: error: ...``."""
        print(f"psdk: error: {' '.join(message.split())}", file=sys.stderr, flush=True)

    def status(self, message: str) -> Status:
        """A spinner with elapsed time while a long operation runs; off a terminal, a
        plain line if it takes more than a few seconds."""
        return Status(sys.stderr, message, enabled=self.interactive)

    def build_status(self, name: str, message: str) -> BuildStatus:
        """A template build's steps and pushed bytes (rich on a terminal, else plain
        lines prefixed with ``name``)."""
        return BuildStatus(sys.stderr, name, message, enabled=self.interactive)

    def progress(self, label: str, total: int | None) -> Progress:
        """A byte counter for a transfer (terminal only)."""
        return Progress(sys.stderr, label, total, enabled=self.interactive)


class Status:
    """While a long operation runs. On a terminal: a spinner, the message and the elapsed
    time, drawn by rich and erased at the end. Off one: nothing if it ends within
    ``after`` seconds, else a plain line then, and every ``every`` seconds after."""

    def __init__(self, stream: IO[str], message: str, *, enabled: bool,
                 after: float = 5.0, every: float = 30.0) -> None:
        self._stream = stream
        self._message = message
        self._enabled = enabled
        self._after = after
        self._every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Any = None
        self._task: Any = None

    def __enter__(self) -> Status:
        if self._enabled:
            from rich.console import Console as RichConsole
            from rich.progress import Progress as RichProgress
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = RichProgress(
                SpinnerColumn(), TextColumn("{task.description}", markup=False), *self._columns(),
                TimeElapsedColumn(), transient=True,
                console=RichConsole(file=self._stream, force_terminal=True, highlight=False))
            self._live.start()
            self._task = self._live.add_task(_plain(self._message), total=None)
        else:
            self._thread = threading.Thread(target=self._remind, daemon=True)
            self._thread.start()
        return self

    def _columns(self) -> tuple[Any, ...]:
        """Columns between the message and the elapsed time (subclasses add bars)."""
        return ()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    def update(self, message: str) -> None:
        """Show ``message`` instead."""
        self._message = message
        if self._live is not None:
            self._live.update(self._task, description=_plain(message))

    def _remind(self) -> None:
        start = time.monotonic()
        wait = self._after
        while not self._stop.wait(wait):
            self._stream.write(f"psdk: {_plain(self._message)} "
                               f"({time.monotonic() - start:.0f} s so far)\n")
            self._stream.flush()
            wait = self._every


_STEP = re.compile(r"^Step (\d+)/(\d+) : ")
_BYTES = re.compile(r"^(.*?) (\d+)/(\d+) bytes$")


class BuildStatus(Status):
    """A template build's progress from its log lines: the step (``Step 2/7 : RUN ...``)
    as a bar of steps, bytes pushed (``<layer>: Pushing 1024/4096 bytes``) as a byte
    count. Off a terminal: each line plain (byte counts at most every ``every_bytes``
    seconds per layer, and when a layer is done), prefixed with ``name``."""

    def __init__(self, stream: IO[str], name: str, message: str, *, enabled: bool,
                 every_bytes: float = 2.0) -> None:
        super().__init__(stream, message, enabled=enabled)
        self._name = name
        self._every_bytes = every_bytes
        self._shown: dict[str, float] = {}
        self._bytes_task: Any = None

    def __enter__(self) -> BuildStatus:
        super().__enter__()
        return self

    def _columns(self) -> tuple[Any, ...]:
        from rich.progress import BarColumn, MofNCompleteColumn

        return BarColumn(), MofNCompleteColumn()

    def _remind(self) -> None:
        """Off a terminal the lines themselves say that it is working."""

    def line(self, text: str) -> None:
        """One line of the build's log."""
        text = " ".join(text.split())
        step, moved = _STEP.match(text), _BYTES.match(text)
        if self._live is None:
            if moved is not None:
                what, done, total = moved.group(1), int(moved.group(2)), int(moved.group(3))
                now = time.monotonic()
                if done < total and now - self._shown.get(what, 0.0) < self._every_bytes:
                    return
                self._shown[what] = now
                text = f"{what} {human_size(done)} / {human_size(total)}"
            self._stream.write(f"{_plain(self._name)}: {_plain(text)}\n")
            self._stream.flush()
        elif step is not None:
            self._live.update(self._task, description=_plain(text), total=int(step.group(2)),
                              completed=int(step.group(1)) - 1)
        elif moved is not None:
            what, done, total = moved.group(1), int(moved.group(2)), int(moved.group(3))
            if self._bytes_task is None:
                self._bytes_task = self._live.add_task("", total=total)
            self._live.update(self._bytes_task, description=_plain(what), total=total,
                              completed=done)
        else:
            self.update(text)


def _plain(text: str) -> str:
    """``text`` on one line, safe to draw: escaped by :func:`cell`, not shortened."""
    return cell(text, 1 << 16)


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
        text = f"{self._label}  {human_size(self.done)}"
        if self._total:
            text += f" / {human_size(self._total)} ({100 * self.done // self._total}%)"
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


def human_size(n: int) -> str:
    """``n`` bytes for a person: ``512 B``, ``1.5 KiB``, ``2.0 GiB``."""
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
