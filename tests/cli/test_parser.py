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
