"""``psdk mcp --http``: streamable HTTP on 127.0.0.1 behind a bearer token, on the local
provider, through the ``mcp`` package's client.

One server, whose token comes from ``--token-file``, serves the module (with ``-vv``, so
that everything it could log is logged); the generated token gets a server of its own.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_clients import HttpServer, environment, http_server, http_session

pytestmark = pytest.mark.slow

INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"}}}).encode()


@pytest.fixture(scope="module")
def token() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def server(home: Path, token: str) -> Iterator[HttpServer]:
    token_file = home / "token"
    token_file.write_text(token + "\n")
    with http_server(["-vv", "--token-file", str(token_file)], environment(home)) as running:
        yield running


def post(url: str, authorization: str | None, **extra: str) -> tuple[int, bytes]:
    """An MCP initialize request, raw, with ``extra`` headers; its status and body."""
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", **extra}
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(url, data=INITIALIZE, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # 127.0.0.1 only
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_it_serves_on_loopback(server: HttpServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    assert server.url.endswith("/mcp")
    assert server.generated_token is None


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", "Basic abc", "Bearer "],
                         ids=["none", "wrong", "other-scheme", "empty"])
def test_a_request_without_the_token_gets_401(server: HttpServer, token: str,
                                               authorization: str | None) -> None:
    status, body = post(server.url, authorization)
    assert status == 401
    assert token.encode() not in body


def test_the_token_lets_a_request_through(server: HttpServer, token: str) -> None:
    status, _ = post(server.url, f"Bearer {token}")
    assert status == 200


def test_a_request_for_another_host_or_from_a_web_page_is_refused(server: HttpServer,
                                                                   token: str) -> None:
    # What a page of another site sends through DNS rebinding, even with the token.
    assert post(server.url, f"Bearer {token}", Host="attacker.example")[0] == 421
    assert post(server.url, f"Bearer {token}", Origin="http://attacker.example")[0] == 403


def test_a_client_with_a_wrong_token_cannot_connect(server: HttpServer) -> None:
    statuses: list[int] = []
    with pytest.raises(Exception, match=r"unhandled errors|error response"), \
            http_session(server.url, "wrong", statuses):
        pass
    assert statuses
    assert set(statuses) == {401}


def test_a_client_with_the_token_uses_every_tool(server: HttpServer, token: str) -> None:
    with http_session(server.url, token) as session:
        assert "port_expose" in session.tools()
        made = session.ok("sandbox_create")["id"]
        assert session.ok("sandbox_write_file", {"sandbox_id": made, "path": "a.txt",
                                                 "content": "over http"})["size"] == 9
        assert session.ok("sandbox_read_file", {"sandbox_id": made, "path": "a.txt"}
                          )["content"] == "over http"
        assert [e["name"] for e in session.ok("sandbox_list_files",
                                              {"sandbox_id": made})["entries"]] == ["a.txt"]
        assert session.ok("sandbox_exec", {"sandbox_id": made, "command": "cat a.txt"}
                          )["stdout"] == "over http"
        assert "FileNotFound" in session.error("sandbox_read_file",
                                               {"sandbox_id": made, "path": "nope"})
        assert made in [s["id"] for s in session.ok("sandbox_list")["sandboxes"]]
        session.ok("sandbox_kill", {"sandbox_id": made})


def test_the_token_never_appears_in_the_logs(server: HttpServer, token: str) -> None:
    post(server.url, "Bearer wrong")
    post(server.url, f"Bearer {token}")
    with http_session(server.url, token) as session:
        session.ok("sandbox_list")
    logged = "".join(server.stderr)
    assert "serving" in logged  # the logs were read
    assert token not in logged


def test_a_generated_token_is_printed_once_and_works(home: Path) -> None:
    with http_server([], environment(home)) as running:
        generated = running.generated_token
        assert generated is not None
        assert len(generated) >= 32
        assert post(running.url, None)[0] == 401
        with http_session(running.url, generated) as session:
            assert session.ok("sandbox_list")["omitted"] == 0
        assert running.stop() == 0
    assert "".join(running.stderr).count(generated) == 1


def test_the_token_can_come_from_the_environment(home: Path) -> None:
    token = secrets.token_urlsafe(24)
    with http_server([], environment(home, PSDK_MCP_TOKEN=token)) as running:
        assert running.generated_token is None
        assert post(running.url, "Bearer other")[0] == 401
        assert post(running.url, f"Bearer {token}")[0] == 200
        assert running.stop() == 0
    assert token not in "".join(running.stderr)
