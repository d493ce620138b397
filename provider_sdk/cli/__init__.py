"""``psdk``: the command line over the neutral interface.

::

    psdk providers [--matrix] [--json]
    psdk [--provider P] [-v] [-q] COMMAND ...   (the global options also go after COMMAND)
    psdk run [--provider P] [--template T] [--env K=V]... [--cwd DIR] [--timeout S] CMD...
    psdk create [--provider P] [--template T] [--label K=V]... [--from-snapshot ID]
                [--env K=V]... [--timeout DURATION [--on-idle pause]] [--cpu N]
                [--memory SIZE] [--disk SIZE] [--network none|internet]
                [--allow-out T]... [--deny-out T]... [--volume NAME:PATH[:ro]]...
    psdk exec ID [--env K=V]... [--cwd DIR] [--timeout S] CMD [ARG...]
    psdk shell ID [--env K=V]... [--cwd DIR]
    psdk ls [--provider P] [--label K=V]... [--all] [--json]
    psdk info ID [--json] | pause ID | resume ID | kill ID | snapshot ID
    psdk cp [-r] SRC DST                 either side may be ID:PATH
    psdk expose ID PORT [--provider P] [--json]
    psdk contract --provider P [--emulator [--backend B]] [-- PYTEST ARGS]
    psdk emulate NAME [--port P] [--backend B] [--api-key-file PATH] [--fault NAME=VALUE]...
    psdk mcp [--provider P] [--http PORT [--token-file PATH | --owners-file PATH]]
             [--owner NAME] [--store URL] [--scope NAME] [--template T]
             [--output-limit BYTES] [--exec-timeout S]
    psdk reap [--provider P] [--store URL] [--older-than DURATION] [--dry-run] [--json]
    psdk template build PATH [--provider P] [--name N] [--registry HOST:PORT] [--force]
    psdk template ls [--provider P] [--json] | template rm ID...
    psdk demo

Exit status: 0 on success; a command's own code for ``run``, ``exec`` and ``shell`` (124
when it timed out); 1 for an error, reported in one line on stderr; 2 for a usage error; 130 when
interrupted; 128+N when stopped by signal N (SIGTERM: 143, SIGHUP: 129). Tracebacks are
for bugs only.

SIGTERM and SIGHUP stop a command as Ctrl-C does: its task is cancelled, so ``run``'s
sandbox is killed, ``cp`` leaves no partial file, ``exec``'s command is stopped,
``expose`` unexposes its port and ``emulate`` removes its sandboxes before the process exits.
For the servers (``expose``, ``emulate``, ``mcp``), which run until stopped, a stop is their
normal end: they say what they stopped in one line and exit with 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from provider_sdk.cli.console import CliError, Console, configure_logging
from provider_sdk.cli.parser import build_parser, parse_args

__all__ = ["STOP_SIGNALS", "Stopped", "main"]

AsyncHandler = Callable[[argparse.Namespace, Console], Awaitable[int]]

# Each command's handler, as "module:function": a module is imported only when its
# command runs, so `psdk --help` and `psdk providers` never import what others need.
_ASYNC: dict[str, str] = {
    "providers": "provider_sdk.cli.providers:cmd_providers",
    **{name: f"provider_sdk.cli.commands:cmd_{name}" for name in (
        "run", "create", "exec", "ls", "info", "pause", "resume", "kill", "snapshot",
        "volume", "cp")},
    "demo": "provider_sdk.cli.demo:cmd_demo",
    "emulate": "provider_sdk.cli.emulate:cmd_emulate",
    "expose": "provider_sdk.cli.expose:cmd_expose",
    "mcp": "provider_sdk.cli.mcp:cmd_mcp",
    "reap": "provider_sdk.cli.reap:cmd_reap",
    "shell": "provider_sdk.cli.shell:cmd_shell",
    "template": "provider_sdk.cli.template:cmd_template",
}
_BLOCKING: dict[str, str] = {"contract": "provider_sdk.cli.contract:cmd_contract"}

#: Commands that never reach the library's events, so need no logging set up.
_NO_LOGGING = frozenset({"providers"})
#: Commands that serve until stopped: Ctrl-C, SIGTERM or SIGHUP is their normal end.
_SERVERS = frozenset({"expose", "emulate", "mcp"})


def _handler(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


#: The signals that stop a command the way Ctrl-C does.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
#: A server's stop signals: Ctrl-C's too.
_SERVER_STOPS: tuple[signal.Signals, ...] = (signal.SIGINT, *STOP_SIGNALS)


class Stopped(Exception):
    """The command was stopped by a signal (SIGTERM, SIGHUP) after cleaning up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _in_loop(path: str, *, server: bool = False
             ) -> Callable[[argparse.Namespace, Console], int]:
    def run(args: argparse.Namespace, console: Console) -> int:
        import anyio

        return anyio.run(_until_stopped, _handler(path), args, console, server)

    return run


def _blocking(path: str) -> Callable[[argparse.Namespace, Console], int]:
    def run(args: argparse.Namespace, console: Console) -> int:
        status: int = _handler(path)(args, console)
        return status

    return run


async def _until_stopped(handler: AsyncHandler, args: argparse.Namespace,
                         console: Console, server: bool = False) -> int:
    """Run ``handler``; a stop signal cancels it as Ctrl-C does, then raises Stopped.

    Like asyncio's own SIGINT handling, the signal cancels the main task once (not a
    cancel scope, which would cancel every later await too): cleanup code in ``finally``
    blocks, which Ctrl-C already runs, runs the same. Further signals while it does are
    ignored; Ctrl-C still interrupts at once.

    A ``server`` (a command that runs until stopped) takes Ctrl-C too, and a stop is its
    normal end: status 0, the handler having said what it stopped.
    """
    import asyncio

    task = asyncio.current_task()
    received: list[int] = []

    def stop(signum: int) -> None:
        if received and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C interrupts the cleanup at once
        if not received and task is not None:
            received.append(signum)
            task.cancel()

    with _handling(_SERVER_STOPS if server else STOP_SIGNALS, stop):
        try:
            status = await handler(args, console)
        except asyncio.CancelledError:
            if received and server:
                return 0
            if received:
                raise Stopped(received[0]) from None
            raise
    if received and not server:  # the handler absorbed the cancellation
        raise Stopped(received[0])
    return 0 if received else status


@contextlib.contextmanager
def _handling(signals: Sequence[signal.Signals],
              stop: Callable[[int], None]) -> Iterator[None]:
    """Route ``signals`` to ``stop`` on the running loop; restore the old handlers after.

    Only the main thread of a process may handle signals: elsewhere (psdk run from a
    worker thread) the default action stays.
    """
    import asyncio

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in signals}
    installed: list[signal.Signals] = []
    try:
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop, int(sig))
                installed.append(sig)
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
            handler = previous[sig]
            if handler is not None:
                signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``psdk`` with ``argv`` (default: the process's arguments); return the exit status."""
    handlers: dict[str, Callable[..., Any]] = {
        **{name: _in_loop(path, server=name in _SERVERS) for name, path in _ASYNC.items()},
        **{name: _blocking(path) for name, path in _BLOCKING.items()}}
    parser = build_parser(handlers)
    try:
        args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 2
    if args.command not in _NO_LOGGING or args.verbose:
        configure_logging(args.verbose)
    console = Console(quiet=args.quiet)
    try:
        status: int = args.handler(args, console)
        return status
    except BaseException as exc:
        return _report(_single(exc), console)


def _single(exc: BaseException) -> BaseException:
    """The one error inside (nested) exception groups of one error, else ``exc``."""
    while True:
        inner = getattr(exc, "exceptions", None)
        if not (isinstance(inner, tuple) and len(inner) == 1
                and isinstance(inner[0], BaseException)):
            return exc
        exc = inner[0]


def _report(exc: BaseException, console: Console) -> int:
    """Report an expected error in one line and return its exit status; re-raise bugs."""
    from provider_sdk.errors import CommandTimeout, SandboxError

    if isinstance(exc, CommandTimeout):
        console.error(str(exc))
        return 124
    if isinstance(exc, SandboxError):
        console.error(str(exc))
        return 1
    if isinstance(exc, CliError):
        console.error(str(exc))
        return exc.code
    if isinstance(exc, KeyboardInterrupt):
        console.error("interrupted")
        return 130
    if isinstance(exc, Stopped):
        console.error(str(exc))
        return 128 + exc.signum
    if isinstance(exc, BrokenPipeError):
        # The reader went away (psdk ls | head): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    if isinstance(exc, OSError):  # a local file: cp's source, destination
        where = f"{exc.filename}: " if exc.filename else ""
        console.error(f"{where}{exc.strerror or exc}")
        return 1
    raise exc
