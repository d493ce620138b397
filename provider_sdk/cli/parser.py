"""The argument grammar of ``psdk``: one argparse parser, its subcommands and their options.

A usage error prints one line (``psdk: error: ...``) and exits with status 2. The global
options (``--provider``, ``-v``, ``-q``) go anywhere: before the command or after it.
The command to run (``run``, ``exec``) starts at the first word that is not one of
psdk's options (after the id, for ``exec``), or after ``--``, and is passed untouched,
as ``docker exec`` does: ``psdk exec ID ls -la``. Everything after the first ``--`` is
pytest's arguments for ``contract``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = ["build_parser", "parse_args"]

#: Subcommands that take everything after ``--`` as their ``cmd``.
_TAKES_REST = frozenset({"run", "exec", "contract"})
#: Subcommands whose command to run starts at their first plain word (after the id).
_RUNS_A_COMMAND = {"run": 0, "exec": 1}
_SNAPSHOT_ACTIONS = frozenset({"create", "ls", "rm", "-h", "--help"})
#: Commands that name no provider (``emulate`` has ``--backend`` instead).
_NO_PROVIDER = frozenset({"emulate"})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Report a usage error in one line and exit with status 2."""
        sys.stderr.write(f"psdk: error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d``, or a sum of them (``1h30m``) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", text)
    if not text or "".join(n + u for n, u in parts) != text or (len(parts) > 1 and not all(
            u for _, u in parts)):
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90, 90s, 15m, 2h, 1d or 1h30m, got {text!r}")
    return sum(float(n) * _UNITS[u or "s"] for n, u in parts)


_SIZE_UNITS = {"": 1, "m": 1, "mb": 1, "mib": 1, "g": 1024, "gb": 1024, "gib": 1024}


def _mebibytes(text: str) -> int:
    """``512`` (MiB), ``512m``, ``2g``, ``2GiB`` in MiB."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", text.strip())
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS or float(match.group(1)) * \
            _SIZE_UNITS[unit] < 1:
        raise argparse.ArgumentTypeError(
            f"expected a size such as 512 (MiB), 512m or 2g, got {text!r}")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def _cpus(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of CPUs, got {text!r}")
    return value


def _mount(text: str) -> tuple[str, str, bool]:
    """``NAME:PATH`` or ``NAME:PATH:ro`` (``:rw``, the default, also works)."""
    parts = text.split(":")
    mode = parts.pop() if len(parts) == 3 and parts[2] in ("ro", "rw") else "rw"
    if len(parts) != 2 or not parts[0] or not parts[1].startswith("/"):
        raise argparse.ArgumentTypeError(
            f"expected VOLUME:/ABSOLUTE/PATH or VOLUME:/ABSOLUTE/PATH:ro, got {text!r}")
    return parts[0], parts[1], mode == "ro"


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}")
    return int(text)


def build_parser(handlers: dict[str, Callable[..., Any]]) -> argparse.ArgumentParser:
    """The ``psdk`` parser; ``handlers`` maps each subcommand to the function it runs."""
    from provider_sdk import __version__

    parser = _Parser(
        prog="psdk",
        description="Create and use code-execution sandboxes on any installed provider.",
        epilog="The provider defaults to $PSDK_PROVIDER, then psdk.toml, then 'local'.",
    )
    parser.add_argument("--version", action="version", version=f"psdk {__version__}")
    parser.add_argument("--provider", metavar="P", default=argparse.SUPPRESS,
                        help="provider to use (also accepted after the command)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="show the library's debug events on stderr (-vv: and more)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no line saying what a command did (results and errors stay)")

    # The global options again, for after the command. Their defaults are SUPPRESS so
    # that a subcommand never overwrites what was given before it; parse_args merges.
    common = _Parser(add_help=False)
    common.add_argument("--provider", metavar="P", default=argparse.SUPPRESS,
                        help="provider to use")
    common.add_argument("-v", "--verbose", action="count", dest="sub_verbose",
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("-q", "--quiet", action="store_true", dest="sub_quiet",
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    quiet = _Parser(add_help=False)  # the shared options of commands with no provider
    quiet.add_argument("-v", "--verbose", action="count", dest="sub_verbose",
                       default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    quiet.add_argument("-q", "--quiet", action="store_true", dest="sub_quiet",
                       default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    env = _Parser(add_help=False)
    env.add_argument("--env", metavar="K=V", type=_key_value, action="append", default=[],
                     help="set an environment variable for the command (repeatable)")
    env.add_argument("--cwd", metavar="DIR", help="working directory in the sandbox")
    env.add_argument("--timeout", metavar="S", type=_seconds,
                     help="kill the command after S seconds (exit status 124)")
    env.add_argument("-i", "--stdin", action="store_true",
                     help="feed this command's standard input to the command")

    labels = _Parser(add_help=False)
    labels.add_argument("--label", metavar="K=V", type=_key_value, action="append", default=[],
                        help="metadata label (repeatable)")

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=_Parser)

    def add(name: str, help_: str, *parents: _Parser, provider: bool = True) -> _Parser:
        p = sub.add_parser(name, help=help_, description=help_,
                           parents=[common if provider else quiet, *parents])
        p.set_defaults(handler=handlers[name])
        return p

    def actions_of(p: _Parser) -> Any:
        return p.add_subparsers(dest="action", metavar="ACTION", required=True,
                                parser_class=_Parser)

    def json_flag(p: _Parser) -> None:
        p.add_argument("--json", action="store_true", help="print JSON")

    p = add("providers", "list installed providers and their capabilities "
                         "(with --provider: that one alone)")
    p.add_argument("--matrix", action="store_true",
                   help="a table: one row per capability, one column per provider")
    json_flag(p)

    p = add("run", "run one command in a new sandbox, then kill it", env)
    p.add_argument("--template", metavar="T", help="template to create the sandbox from")
    p.add_argument("cmd", nargs="*", default=[], metavar="CMD [ARG...]",
                   help="the command to run: from the first word that is not one of "
                        "psdk's options (or after --), taken as it is")

    p = add("create", "create a sandbox and print its id", labels)
    p.add_argument("--template", metavar="T", help="template to create the sandbox from")
    p.add_argument("--from-snapshot", metavar="ID", help="start from this snapshot")
    p.add_argument("--env", metavar="K=V", type=_key_value, action="append", default=[],
                   help="environment variable of every command in it (repeatable)")
    p.add_argument("--timeout", metavar="DURATION", type=_duration,
                   help="kill it once unused for this long (90, 90s, 15m, 2h); "
                        "default: never")
    p.add_argument("--on-idle", choices=("kill", "pause"), default="kill",
                   help="with --timeout: kill (the default) or pause it")
    p.add_argument("--cpu", metavar="N", type=_cpus, help="CPUs (fractions allowed)")
    p.add_argument("--memory", metavar="SIZE", type=_mebibytes,
                   help="memory limit: 512 (MiB), 512m, 2g")
    p.add_argument("--disk", metavar="SIZE", type=_mebibytes,
                   help="disk size: 4096 (MiB), 4g")
    p.add_argument("--network", choices=("none", "internet"), default="none",
                   help="outbound network: none (the default: loopback only) or internet")
    p.add_argument("--allow-out", metavar="TARGET", action="append", default=[],
                   help="a CIDR or host name reachable even with --network none "
                        "(repeatable)")
    p.add_argument("--deny-out", metavar="TARGET", action="append", default=[],
                   help="a CIDR or host name blocked even with --network internet "
                        "(repeatable)")
    p.add_argument("--volume", metavar="NAME:PATH[:ro]", type=_mount, action="append",
                   default=[], help="mount a volume (psdk volume create) at PATH "
                                    "(repeatable)")
    p.add_argument("--json", action="store_true", help="print the sandbox's details as JSON")

    p = add("exec", "run a command in a sandbox; exit with its code", env)
    p.add_argument("id", metavar="ID", help="the sandbox")
    p.add_argument("cmd", nargs="*", default=[], metavar="CMD [ARG...]",
                   help="the command to run: every word after the id from the first that "
                        "is not one of psdk's options (or after --), taken as it is")

    p = add("shell", "open a terminal on the sandbox user's shell; Ctrl-D there leaves, "
                     "with its exit code")
    p.add_argument("id", metavar="ID", help="the sandbox")
    p.add_argument("--env", metavar="K=V", type=_key_value, action="append", default=[],
                   help="set an environment variable for the shell (repeatable)")
    p.add_argument("--cwd", metavar="DIR", help="the directory the shell starts in")

    p = add("ls", "list sandboxes", labels)
    p.add_argument("--all", action="store_true",
                   help="also show broken records (state the provider could not read)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = add("info", "show a sandbox's state and details")
    p.add_argument("id", metavar="ID")
    p.add_argument("--json", action="store_true", help="print JSON")

    for name, help_ in (("pause", "pause a sandbox"), ("resume", "resume a paused sandbox"),
                        ("kill", "kill a sandbox")):
        add(name, help_).add_argument("id", metavar="ID")

    p = add("snapshot", "snapshot a sandbox, list and remove snapshots")
    actions = actions_of(p)
    b = actions.add_parser("create", parents=[common], help="snapshot a sandbox and print "
                           "the snapshot's id (psdk snapshot ID is the same)")
    b.add_argument("id", metavar="ID", help="the sandbox")
    b.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    b = actions.add_parser("ls", parents=[common], help="list snapshots")
    b.add_argument("--sandbox", metavar="ID", help="only those taken from this sandbox")
    json_flag(b)
    b = actions.add_parser("rm", parents=[common], help="remove snapshots")
    b.add_argument("ids", nargs="+", metavar="ID", help="the snapshots")
    b.add_argument("--json", action="store_true", help="print the removed ids as JSON")

    p = add("volume", "create, list and remove volumes")
    actions = actions_of(p)
    b = actions.add_parser("create", parents=[common], help="create a volume; print its id")
    b.add_argument("name", metavar="NAME", help="the volume's name")
    b.add_argument("--json", action="store_true", help="print the volume as JSON")
    b = actions.add_parser("ls", parents=[common], help="list volumes")
    json_flag(b)
    b = actions.add_parser("rm", parents=[common], help="remove volumes and their data")
    b.add_argument("names", nargs="+", metavar="NAME", help="the volumes")
    b.add_argument("--json", action="store_true", help="print the removed names as JSON")

    p = add("cp", "copy a file, or a directory with -r; either side may be ID:PATH")
    p.add_argument("-r", "--recursive", action="store_true",
                   help="copy a directory and everything in it (links stay links)")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")

    p = add("expose", "serve a port of a sandbox on 127.0.0.1 until interrupted; print "
                      "its URL (the access token is part of it)")
    p.add_argument("id", metavar="ID", help="the sandbox")
    p.add_argument("port", metavar="PORT", type=_port, help="the port inside the sandbox")
    p.add_argument("--json", action="store_true", help="print the port, URL and token as JSON")

    p = add("contract", "run the contract suite against a provider")
    p.add_argument("--emulator", action="store_true",
                   help="run it against the provider's emulator, started in this process")
    p.add_argument("--backend", metavar="B", default="local",
                   help="with --emulator: the provider behind the emulator (default: local)")
    p.add_argument("cmd", nargs="*", default=[], metavar="-- PYTEST ARGS",
                   help="passed to pytest")

    p = add("emulate", "serve a vendor's API on 127.0.0.1, backed by a neutral provider",
            provider=False)
    p.add_argument("name", metavar="NAME", help="the emulator: the provider it serves")
    p.add_argument("--port", metavar="P", type=_port, default=0,
                   help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--backend", metavar="B", default="local",
                   help="the provider that runs the sandboxes (default: local)")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--api-key-file", metavar="PATH",
                     help="read the key clients must present from this file (default: "
                          "$PSDK_EMULATOR_API_KEY, then the vendor's usual setting)")
    key.add_argument("--api-key", metavar="KEY",
                     help="the key, given on the command line: every local user can read "
                          "it in ps; prefer --api-key-file or $PSDK_EMULATOR_API_KEY")
    p.add_argument("--fault", metavar="NAME=VALUE", type=_key_value, action="append",
                   default=[], help="inject a fault (repeatable; see the emulator's docs)")

    p = add("mcp", "serve an MCP server over the provider's sandboxes: on stdio, or on "
                   "127.0.0.1 with --http")
    p.add_argument("--http", metavar="PORT", type=_port,
                   help="serve streamable HTTP on 127.0.0.1:PORT (0: a free one) instead of "
                        "stdio; every request needs the bearer token")
    token = p.add_mutually_exclusive_group()
    token.add_argument("--token-file", metavar="PATH",
                       help="with --http: read the bearer token from this file (default: "
                            "$PSDK_MCP_TOKEN, else one is generated and shown once)")
    token.add_argument("--token", metavar="TOKEN",
                       help="with --http: the bearer token, given on the command line: "
                            "every local user can read it in ps; prefer --token-file or "
                            "$PSDK_MCP_TOKEN")
    token.add_argument("--owners-file", metavar="PATH",
                       help="with --http: one 'OWNER TOKEN' per line; each request's token "
                            "binds it to that owner's resident sandbox (through the sandbox "
                            "manager), so each client reaches its own alone")
    p.add_argument("--owner", metavar="NAME",
                   help="bind every session to this owner's resident sandbox (through the "
                        "sandbox manager); no other sandbox is reachable")
    p.add_argument("--store", metavar="URL",
                   help="with --owner or --owners-file: the manager's binding store "
                        "(default: "
                        "$PSDK_MANAGER_STORE, then the default SQLite file)")
    p.add_argument("--scope", metavar="NAME",
                   help="without --owner: the scope whose sandboxes clients reach, those "
                        "labelled psdk.mcp.scope=NAME (the server labels what it creates; "
                        "default: default)")
    p.add_argument("--template", metavar="T",
                   help="template of the sandboxes it creates (a client may name another "
                        "without --owner)")
    p.add_argument("--output-limit", metavar="BYTES", type=int,
                   help="most bytes of a command's stdout, of its stderr, and of a file read "
                        "that one result holds (default: the provider's, 16 MiB)")
    p.add_argument("--exec-timeout", metavar="S", type=_seconds, default=300.0,
                   help="a command's timeout when the client gives none, and the longest it "
                        "may ask for (default: 300)")

    p = add("reap", "kill owner-tagged sandboxes that no manager binding holds, free "
                    "members of warm pools nobody runs once past their age, and remove "
                    "broken records")
    p.add_argument("--store", metavar="URL",
                   help="the managers' binding store, exactly: sqlite:///PATH (an existing "
                        "file), redis://...?prefix=P, postgresql://...?table=T (default: "
                        "$PSDK_MANAGER_STORE; never guessed)")
    p.add_argument("--owner-key", metavar="K", default="psdk.manager.owner",
                   help="the label managers tag sandboxes with (default: psdk.manager.owner)")
    p.add_argument("--older-than", metavar="DURATION", type=_duration,
                   help="spare sandboxes younger than this (90s, 15m, 2h, 1d)")
    p.add_argument("--dry-run", action="store_true", help="list what would be killed")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = add("template", "build templates from Dockerfiles, list and remove them")
    actions = actions_of(p)
    b = actions.add_parser("build", parents=[common],
                           help="build a template from a Dockerfile (cached by content)",
                           description="Build a template from a Dockerfile; an unchanged "
                                       "one is not rebuilt unless --force.")
    b.add_argument("path", metavar="PATH", help="the Dockerfile, or a directory holding one")
    b.add_argument("--name", metavar="N", help="template name (default: the directory's)")
    b.add_argument("--context", metavar="DIR",
                   help="build context (default: the Dockerfile's directory)")
    b.add_argument("--registry", metavar="HOST:PORT",
                   help="registry the image is pushed to, for providers that pull (cube)")
    b.add_argument("--force", action="store_true", help="rebuild even if unchanged")
    b.add_argument("--cpu", metavar="N", type=float, help="CPUs of sandboxes made from it")
    b.add_argument("--memory-mb", metavar="MB", type=int, help="memory of those sandboxes")
    b.add_argument("--start-cmd", metavar="CMD", help="command started with each sandbox")
    b.add_argument("--ready-cmd", metavar="CMD",
                   help="command that exits 0 once the started command is ready")
    b.add_argument("--json", action="store_true", help="print the template as JSON")
    b = actions.add_parser("ls", parents=[common], help="list templates")
    json_flag(b)
    b = actions.add_parser("rm", parents=[common], help="remove templates")
    b.add_argument("ids", nargs="+", metavar="ID", help="the templates")
    b.add_argument("--json", action="store_true", help="print the removed ids as JSON")

    add("demo", "a guided tour of the SDK (default: on the embedded local provider)")
    return parser


def _takes_value(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Each option string of ``parser``, and whether it takes a value."""
    return {flag: action.nargs != 0 for action in parser._actions
            for flag in action.option_strings}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _skip_option(word: str, options: dict[str, bool]) -> int:
    """How many words an option ``word`` spans: 2 if it takes its value from the next."""
    return 2 if "=" not in word and options.get(word, False) else 1


def _command_at(parser: argparse.ArgumentParser, argv: list[str]) -> int | None:
    """Where the subcommand's name is in ``argv`` (global options may come first)."""
    options = _takes_value(parser)
    at = 0
    while at < len(argv):
        word = argv[at]
        if word == "--":
            return None
        if not word.startswith("-") or word == "-":
            return at
        at += _skip_option(word, options)
    return None


def _split_command(parser: argparse.ArgumentParser,
                   argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``argv`` as psdk's own words and the command to run (``None``: no command split).

    For ``run`` and ``exec``, the command starts at the first word that is not an option
    of psdk's (after the sandbox's id, for ``exec``), or after ``--``; it is taken as it
    stands, its own options and any later ``--`` included. For other commands, the words
    after the first ``--`` are split off (``contract`` hands them to pytest).
    """
    at = _command_at(parser, argv)
    if at is None or argv[at] not in _RUNS_A_COMMAND:
        if "--" not in argv:
            return argv, None
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    name = argv[at]
    options = {**_takes_value(parser), **_takes_value(_subparsers(parser)[name])}
    plain_before = _RUNS_A_COMMAND[name]
    word_at = at + 1
    while word_at < len(argv):
        word = argv[word_at]
        if word == "--":
            return argv[:word_at], argv[word_at + 1:]
        if word.startswith("-") and word != "-":
            word_at += _skip_option(word, options)
            continue
        if plain_before == 0:
            return argv[:word_at], argv[word_at:]
        plain_before -= 1
        word_at += 1
    return argv, None


def _snapshot_shorthand(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``psdk snapshot ID`` is ``psdk snapshot create ID``."""
    at = _command_at(parser, argv)
    if at is None or argv[at] != "snapshot":
        return argv
    options = _takes_value(_subparsers(parser)["snapshot"])
    word_at = at + 1
    while word_at < len(argv):
        word = argv[word_at]
        if word in _SNAPSHOT_ACTIONS:
            return argv
        if not word.startswith("-"):
            return [*argv[:at + 1], "create", *argv[at + 1:]]
        word_at += _skip_option(word, options)
    return argv


def _check_command_name(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A provider's name where the command should be is a usage error that says so."""
    at = _command_at(parser, argv)
    if at is None or argv[at] in _subparsers(parser):
        return
    from provider_sdk import registry

    if argv[at] in registry.available():
        rest = " ".join(argv[at + 1:at + 2]) or "ls"
        parser.error(f"{argv[at]!r} is a provider, not a command: name it with --provider "
                     f"(psdk --provider {argv[at]} {rest})")


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``: global options anywhere; the command to run (``run``, ``exec``) and
    pytest's arguments (``contract``) as given, in ``cmd``."""
    words, rest = _split_command(parser, list(argv))
    _check_command_name(parser, words)
    args, extra = parser.parse_known_args(_snapshot_shorthand(parser, words))
    if extra:
        hint = ""
        if args.command in _RUNS_A_COMMAND and extra[0].startswith("-"):
            example = "psdk exec ID ls -la" if args.command == "exec" else "psdk run ls -la"
            hint = ("; a command's own options go after its name "
                    f"({example}), or put the command after '--'")
        parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    args.verbose = args.verbose + getattr(args, "sub_verbose", 0)
    args.quiet = args.quiet or getattr(args, "sub_quiet", False)
    args.provider = getattr(args, "provider", None)
    if args.command in _NO_PROVIDER and args.provider is not None:
        parser.error(f"psdk {args.command} takes no --provider: --backend names the "
                     "provider behind it")
    if rest is not None:
        if args.command not in _TAKES_REST:
            parser.parse_args([*words, "--", *rest])  # argparse reports what is extra
        args.cmd = [*args.cmd, *rest]
    return args
