"""``psdk``: the command line over the neutral interface.

::

    psdk providers [--json]
    psdk run [--provider P] [--template T] [--env K=V]... [--cwd DIR] [--timeout S] -- CMD...
    psdk create [--provider P] [--template T] [--label K=V]... [--from-snapshot ID]
    psdk exec ID [--env K=V]... [--cwd DIR] [--timeout S] -- CMD [ARG...]
    psdk ls [--provider P] [--label K=V]... [--json]
    psdk info ID [--json] | pause ID | resume ID | kill ID | snapshot ID
    psdk cp SRC DST                      either side may be ID:PATH
    psdk contract --provider P [--emulator [--backend B]] [-- PYTEST ARGS]
    psdk emulate NAME [--port P] [--backend B] [--api-key-file PATH] [--fault NAME=VALUE]...
    psdk reap [--provider P] [--store URL] [--older-than DURATION] [--dry-run] [--json]
    psdk template build PATH [--provider P] [--name N] [--registry HOST:PORT] [--force]
    psdk template ls [--provider P] [--json] | template rm ID...
    psdk demo

Exit status: 0 on success; a command's own code for ``run`` and ``exec`` (124 when it
timed out); 1 for an error, reported in one line on stderr; 2 for a usage error; 130 when
interrupted. Tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from provider_sdk.cli import commands
from provider_sdk.cli.console import CliError, Console, configure_logging
from provider_sdk.cli.contract import cmd_contract
from provider_sdk.cli.demo import cmd_demo
from provider_sdk.cli.emulate import cmd_emulate
from provider_sdk.cli.parser import build_parser, parse_args
from provider_sdk.cli.reap import cmd_reap
from provider_sdk.cli.template import cmd_template
from provider_sdk.errors import CommandTimeout, SandboxError

__all__ = ["main"]

AsyncHandler = Callable[[argparse.Namespace, Console], Awaitable[int]]

_ASYNC: dict[str, AsyncHandler] = {
    "providers": commands.cmd_providers,
    "run": commands.cmd_run,
    "create": commands.cmd_create,
    "exec": commands.cmd_exec,
    "ls": commands.cmd_ls,
    "info": commands.cmd_info,
    "pause": commands.cmd_pause,
    "resume": commands.cmd_resume,
    "kill": commands.cmd_kill,
    "snapshot": commands.cmd_snapshot,
    "cp": commands.cmd_cp,
    "demo": cmd_demo,
    "emulate": cmd_emulate,
    "reap": cmd_reap,
    "template": cmd_template,
}


def _in_loop(handler: AsyncHandler) -> Callable[[argparse.Namespace, Console], int]:
    def run(args: argparse.Namespace, console: Console) -> int:
        return anyio.run(handler, args, console)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``psdk`` with ``argv`` (default: the process's arguments); return the exit status."""
    handlers: dict[str, Callable[..., Any]] = {
        name: _in_loop(handler) for name, handler in _ASYNC.items()}
    handlers["contract"] = cmd_contract
    parser = build_parser(handlers)
    try:
        args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 2
    configure_logging(args.verbose)
    console = Console()
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
