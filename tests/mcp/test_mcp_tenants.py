"""``psdk mcp --http 0 --owners-file F``: each request bound, by the token it bears, to
that token's owner's resident sandbox through the sandbox manager, on the local provider
and a SQLite binding store.

One server with Alice's and Bob's tokens serves the module.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_clients import HttpServer, environment, http_server, http_session

from provider_sdk.cli.secret_file import read_owner_tokens
from provider_sdk.errors import ConfigError

pytestmark = pytest.mark.slow

TOKENS = {"alice": secrets.token_urlsafe(24), "bob": secrets.token_urlsafe(24)}


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[HttpServer]:
    owners = home / "owners"
    owners.write_text("# owner token\n" + "".join(f"{o} {t}\n" for o, t in TOKENS.items()))
    args = ["-vv", "--owners-file", str(owners),
            "--store", f"sqlite:///{home / 'bindings.sqlite3'}"]
    with http_server(args, environment(home)) as running:
        yield running


def test_each_token_reaches_its_owners_sandbox_alone(server: HttpServer) -> None:
    with http_session(server.url, TOKENS["alice"]) as alice, \
            http_session(server.url, TOKENS["bob"]) as bob:
        alices = alice.ok("sandbox_create")["id"]
        bobs = bob.ok("sandbox_create")["id"]
        assert alices != bobs
        assert alice.ok("sandbox_create")["id"] == alices  # the resident one, again
        assert [s["id"] for s in alice.ok("sandbox_list")["sandboxes"]] == [alices]
        alice.ok("sandbox_write_file", {"path": "/tmp/who", "content": "alice"})
        assert alice.ok("sandbox_exec", {"command": "cat /tmp/who"})["stdout"] == "alice"
        text = alice.error("sandbox_exec", {"sandbox_id": bobs, "command": "true"})
        assert "SandboxNotFound" in text
        assert "bound to owner 'alice'" in text
        assert "FileNotFound" in bob.error("sandbox_read_file", {"path": "/tmp/who"})


def _post(url: str, token: str, body: dict[str, Any],
          session: str | None = None) -> tuple[dict[str, str], str]:
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream",
               "Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2025-06-18"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:  # 127.0.0.1 only
        return dict(answer.headers), answer.read().decode()


def test_the_token_of_each_request_decides_not_the_session(server: HttpServer) -> None:
    """A request bearing Bob's token in a session Alice's token opened reaches Bob's
    sandbox: knowing another client's session id gives nothing of theirs."""
    with http_session(server.url, TOKENS["alice"]) as alice:
        alices = alice.ok("sandbox_create")["id"]
    with http_session(server.url, TOKENS["bob"]) as bob:
        bobs = bob.ok("sandbox_create")["id"]
    headers, _ = _post(server.url, TOKENS["alice"], {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "alice", "version": "0"}}})
    session = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    _post(server.url, TOKENS["alice"],
          {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    _, body = _post(server.url, TOKENS["bob"], {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sandbox_list", "arguments": {}}}, session)
    assert bobs in body
    assert alices not in body


def test_an_unknown_token_is_refused(server: HttpServer) -> None:
    request = urllib.request.Request(server.url, data=b"{}", method="POST",
                                     headers={"Authorization": "Bearer not-one-of-them"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)  # 127.0.0.1 only
    assert refused.value.code == 401


def test_no_token_appears_in_the_logs(server: HttpServer) -> None:
    with http_session(server.url, TOKENS["bob"]) as bob:
        bob.ok("sandbox_list")
    logged = "".join(server.stderr)
    assert "serving" in logged
    for token in TOKENS.values():
        assert token not in logged


@pytest.mark.parametrize(("content", "says"), [
    ("alice\n", "line 1: expected 'OWNER TOKEN'"),
    ("alice t1\nbob t1\n", "line 2: the token of line 1 again"),
    ("alice t1\nalice t2\n", "line 2: owner 'alice' again (first on line 1)"),
    ("# nobody\n\n", "names no owner"),
    ("al\x07ice t1\n", "line 1: owner must hold no control character"),
], ids=["no-token", "token-twice", "owner-twice", "empty", "bad-owner"])
def test_a_bad_owners_file_is_refused_without_showing_a_token(
        tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "owners"
    path.write_text(content)
    with pytest.raises(ConfigError) as refused:
        read_owner_tokens(str(path), "--owners-file")
    assert says in str(refused.value)
    assert "t1" not in str(refused.value).replace(str(tmp_path), "")
