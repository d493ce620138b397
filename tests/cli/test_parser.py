"""``psdk``'s parser on values at and past their bounds: a port is 0 to 65535 (0: any
free one, where the command picks one), and anything else is a usage error (status 2,
one line naming the value) before any command runs."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from psdk_fixtures import Psdk

from provider_sdk.cli.parser import build_parser, parse_args

BAD_PORTS = ["65536", "99999", "100000", "-1", "http", "", " 80", "80 ", "+80", "8.0",
             "1e3", "0x50"]


def _parsed(*argv: str) -> Any:
    def not_run(*_: Any) -> int:
        raise AssertionError("parsing runs no command")

    return parse_args(build_parser(collections.defaultdict(lambda: not_run)), argv)


@pytest.mark.parametrize("port", ["0", "1", "8080", "65535"])
def test_a_port_up_to_65535_is_taken(port: str) -> None:
    assert _parsed("emulate", "e2b", "--port", port).port == int(port)
    assert _parsed("expose", "sbx", port).port == int(port)


@pytest.mark.parametrize("port", BAD_PORTS)
def test_emulate_refuses_a_port_out_of_range_as_a_usage_error(psdk: Psdk, port: str) -> None:
    outcome = psdk("emulate", "e2b", "--port", port)
    assert outcome.code == 2
    assert f"expected a port number, got {port!r}" in outcome.err
    assert len(outcome.err.strip().splitlines()) == 1


@pytest.mark.parametrize("port", BAD_PORTS)
def test_expose_refuses_a_port_out_of_range_as_a_usage_error(psdk: Psdk, port: str) -> None:
    outcome = psdk("expose", "sbx", port)
    assert outcome.code == 2
    assert f"expected a port number, got {port!r}" in outcome.err


# Each command line as psdk reads it: the attributes its handler gets.
PARSES: list[tuple[list[str], dict[str, Any]]] = [
    (["-vv", "ls"], {"command": "ls", "verbose": 2, "provider": None, "all": False,
                     "json": False, "label": []}),
    (["ls", "--provider", "docker", "--all", "--json", "--label", "a=b", "--label", "c=d=e"],
     {"provider": "docker", "all": True, "json": True, "label": [("a", "b"), ("c", "d=e")]}),
    (["run", "--env", "A=1", "--env", "B=", "--cwd", "/w", "--timeout", "2.5", "-i",
      "--template", "t", "--", "echo", "--json"],
     {"command": "run", "env": [("A", "1"), ("B", "")], "cwd": "/w", "timeout": 2.5,
      "stdin": True, "template": "t", "cmd": ["echo", "--json"]}),
    (["run", "--", "true"], {"env": [], "cwd": None, "timeout": None, "stdin": False,
                             "template": None, "cmd": ["true"]}),
    (["exec", "sbx", "-v", "--", "ls", "-l"], {"command": "exec", "id": "sbx", "verbose": 1,
                                                "cmd": ["ls", "-l"]}),
    (["create", "--label", "owner=al", "--template", "t", "--from-snapshot", "s", "--json"],
     {"command": "create", "label": [("owner", "al")], "template": "t",
      "from_snapshot": "s", "json": True}),
    (["create"], {"label": [], "template": None, "from_snapshot": None, "json": False}),
    (["info", "sbx", "--json"], {"command": "info", "id": "sbx", "json": True}),
    (["pause", "sbx"], {"command": "pause", "id": "sbx"}),
    (["resume", "sbx"], {"command": "resume", "id": "sbx"}),
    (["kill", "sbx"], {"command": "kill", "id": "sbx"}),
    (["snapshot", "sbx"], {"command": "snapshot", "action": "create", "id": "sbx",
                           "json": False}),
    (["snapshot", "--provider", "p", "sbx", "--json"],
     {"action": "create", "id": "sbx", "json": True, "provider": "p"}),
    (["snapshot", "-v", "ls"], {"action": "ls", "verbose": 1}),
    # --provider is psdk's own: before a command's action as well as after it.
    (["snapshot", "--provider", "p", "ls"], {"action": "ls", "provider": "p"}),
    (["volume", "--provider", "p", "ls"], {"action": "ls", "provider": "p"}),
    (["template", "--provider=p", "ls"], {"action": "ls", "provider": "p"}),
    (["snapshot", "--json", "sbx"], {"action": "create", "id": "sbx", "json": True}),
    (["volume", "ls", "--json", "--provider", "x"], {"action": "ls", "json": True,
                                                      "provider": "x"}),
    (["template", "build", "dir", "--name", "n", "--context", "c", "--registry", "r:5",
      "--force", "--cpu", "2", "--memory-mb", "512", "--start-cmd", "s", "--ready-cmd", "r",
      "--json", "--provider", "p"],
     {"command": "template", "action": "build", "path": "dir", "name": "n", "context": "c",
      "registry": "r:5", "force": True, "cpu": 2.0, "memory_mb": 512, "start_cmd": "s",
      "ready_cmd": "r", "json": True, "provider": "p"}),
    (["template", "build", "dir"], {"name": None, "context": None, "registry": None,
                                    "force": False, "cpu": None, "memory_mb": None,
                                    "start_cmd": None, "ready_cmd": None, "json": False}),
    (["template", "ls", "--json"], {"action": "ls", "json": True}),
    (["template", "rm", "a", "b", "--json"], {"action": "rm", "ids": ["a", "b"],
                                             "json": True}),
    (["providers", "--json", "--provider", "p"], {"json": True, "provider": "p"}),
    (["snapshot", "ls", "--sandbox", "sbx", "--json"],
     {"action": "ls", "sandbox": "sbx", "json": True}),
    (["snapshot", "rm", "a", "b", "--provider", "p"],
     {"action": "rm", "ids": ["a", "b"], "provider": "p", "json": False}),
    (["volume", "create", "v", "--json"], {"command": "volume", "action": "create",
                                           "name": "v", "json": True}),
    (["volume", "rm", "v", "w"], {"action": "rm", "names": ["v", "w"], "json": False}),
    (["cp", "a", "sbx:/b"], {"command": "cp", "src": "a", "dst": "sbx:/b"}),
    (["expose", "sbx", "8080", "--json"], {"command": "expose", "id": "sbx", "port": 8080,
                                           "json": True}),
    (["contract", "--emulator", "--backend", "docker", "--", "-x"],
     {"command": "contract", "emulator": True, "backend": "docker", "cmd": ["-x"]}),
    (["contract"], {"emulator": False, "backend": "local", "cmd": []}),
    (["emulate", "e2b", "--port", "9000", "--backend", "docker", "--api-key-file", "k",
      "--fault", "after_resume_504=2"],
     {"command": "emulate", "name": "e2b", "port": 9000, "backend": "docker",
      "api_key_file": "k", "api_key": None, "fault": [("after_resume_504", "2")]}),
    (["emulate", "e2b"], {"port": 0, "backend": "local", "fault": [], "api_key": None,
                          "api_key_file": None, "provider": None}),
    (["-v", "snapshot", "sbx"], {"action": "create", "id": "sbx", "verbose": 1}),
    (["reap", "--store", "sqlite:///x", "--owner-key", "k", "--older-than", "1h30m",
      "--dry-run", "--json"],
     {"command": "reap", "store": "sqlite:///x", "owner_key": "k", "older_than": 5400.0,
      "dry_run": True, "json": True}),
    (["reap"], {"owner_key": "psdk.manager.owner", "dry_run": False, "json": False}),
    (["providers"], {"command": "providers"}),
    (["demo"], {"command": "demo"}),
]


@pytest.mark.parametrize(("argv", "expected"), PARSES, ids=[" ".join(a) for a, _ in PARSES])
def test_a_command_line_gives_its_handler_these_values(argv: list[str],
                                                       expected: dict[str, Any]) -> None:
    args = vars(_parsed(*argv))
    assert {k: args.get(k, "<missing>") for k in expected} == expected


@pytest.mark.parametrize("argv", [
    ["ls", "--label", "novalue"], ["ls", "--label", "=v"], ["run", "--env", "A"],
    ["run", "--timeout", "0", "--", "true"], ["run", "--timeout", "-1", "--", "true"],
    ["run", "--timeout", "soon", "--", "true"], ["run", "--timeout", "nan", "--", "true"],
    ["reap", "--older-than", ""], ["reap", "--older-than", "1x"], ["reap", "--older-than", "1h30"],
    ["reap", "--older-than", "h"], ["reap", "--older-than", "1.5.2h"],
    ["reap", "--older-than", " 1"], ["reap", "--older-than", "-1h"],
    ["template", "rm"], ["template", "build"], ["emulate", "--provider", "p", "e2b"], [],
    ["emulate", "e2b", "--api-key", "a", "--api-key-file", "b"],
    ["info", "sbx", "--", "extra"], ["snapshot"], ["volume"],
], ids=" ".join)
def test_a_bad_command_line_is_a_usage_error(psdk: Psdk, argv: list[str]) -> None:
    outcome = psdk(*argv)
    assert outcome.code == 2, outcome
    assert outcome.err.startswith("psdk"), outcome.err


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("1d", 86400.0),
    ("1h30m", 5400.0), ("1d1h1m1s", 90061.0), ("0.5h", 1800.0), ("2.5", 2.5)])
def test_a_duration_is_read_in_seconds(text: str, seconds: float) -> None:
    assert _parsed("reap", "--older-than", text).older_than == seconds


@pytest.mark.parametrize(("text", "seconds"), [("0.001", 0.001), ("3", 3.0), ("1e2", 100.0)])
def test_a_timeout_is_any_positive_number_of_seconds(text: str, seconds: float) -> None:
    assert _parsed("run", "--timeout", text, "--", "true").timeout == seconds


def test_snapshot_is_an_argument_where_it_follows_a_word() -> None:
    """``snapshot`` after a word is that word's argument, not the command."""
    assert _parsed("exec", "snapshot", "--", "true").id == "snapshot"
    assert _parsed("cp", "snapshot", "b").src == "snapshot"


def test_version_prints_the_version(psdk: Psdk) -> None:
    from provider_sdk import __version__

    outcome = psdk("--version")
    assert outcome.code == 0
    assert outcome.out.strip() == f"psdk {__version__}"


def test_each_command_runs_its_own_handler() -> None:
    handlers = collections.defaultdict(object)
    parser = build_parser(handlers)
    for argv, _ in PARSES:
        args = parse_args(parser, argv)
        assert args.handler is handlers[args.command], argv
