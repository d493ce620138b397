"""No credential of Daytona's reaches a server in a sandbox through the emulator's
preview proxy, by sandbox id (the preview token in its header or query parameter, the
API key as a bearer) or by a signed URL: not in the headers, parameter and cookie that
carry them, nor wherever else a client echoes them (a ``Referer`` naming a preview URL,
a cookie, another header). A server in the sandbox records every request head it gets;
everything goes to 127.0.0.1 through the unmodified ``daytona`` SDK's URLs."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from daytona import Sandbox, SessionExecuteRequest
from daytona_emulator_fixtures import sdk_config

_PORT = 8324
_LOG = "/tmp/psdk-heads.log"
_RECORDER = rb"""
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        data = c.recv(65536)
        if not data:
            break
        head += data
    with open(sys.argv[2], "ab") as f:
        f.write(head)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    c.close()
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""


def _get(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(scope="module")
def recorder(sandbox: Sandbox) -> Sandbox:
    """A server on 127.0.0.1:8324 inside the sandbox that records each request head."""
    sandbox.fs.upload_file(_RECORDER, "recorder.py")
    sandbox.process.create_session("recorder")
    sandbox.process.execute_session_command("recorder", SessionExecuteRequest(
        command=f"python3 recorder.py {_PORT} {_LOG}", run_async=True))
    signed = sandbox.create_signed_preview_url(_PORT, expires_in_seconds=600)
    deadline = time.monotonic() + 30
    while _get(f"{signed.url}/ready", {}) != 200:
        assert time.monotonic() < deadline, "the server in the sandbox never answered"
        time.sleep(0.1)
    return sandbox


def test_no_credential_of_daytonas_reaches_the_sandbox(recorder: Sandbox) -> None:
    link = recorder.get_preview_link(_PORT)
    signed = recorder.create_signed_preview_url(_PORT, expires_in_seconds=600)
    another = recorder.create_signed_preview_url(_PORT + 1, expires_in_seconds=600)
    api_key = sdk_config().api_key
    assert api_key
    secrets = [link.token, signed.token, another.token, api_key]
    echoes = {
        "X-Daytona-Preview-Token": link.token,
        "Cookie": f"daytona-sandbox-auth-{recorder.id}=sealed; app=1; s={link.token}",
        "X-Original-Url": f"/?DAYTONA_SANDBOX_AUTH_KEY={link.token}",
        "X-App": "kept",
    }
    referers = [f"{signed.url}/page?keep=2", f"{another.url}/page?keep=2",
                f"{link.url}/page?keep=2&DAYTONA_SANDBOX_AUTH_KEY={link.token}",
                f"{link.url}/page?keep=2&DAYTONA%5FSANDBOX%5FAUTH%5FKEY={link.token}"]
    routes = [(f"{link.url}/id-header?keep=1", {"X-Daytona-Preview-Token": link.token}),
              (f"{link.url}/id-query?keep=1&DAYTONA_SANDBOX_AUTH_KEY={link.token}", {}),
              (f"{link.url}/id-encoded?keep=1&DAYTONA%5FSANDBOX_AUTH_KEY={link.token}", {}),
              (f"{link.url}/id-bearer?keep=1", {"Authorization": f"Bearer {api_key}"}),
              (f"{signed.url}/signed?keep=1", {})]
    for url, needed in routes:
        for referer in referers:
            assert _get(url, {**echoes, **needed, "Referer": referer}) == 200, url
    received = bytes(recorder.fs.download_file(_LOG))
    for secret in secrets:
        assert secret.encode() not in received, "a credential of Daytona's reached the sandbox"
    assert b"sealed" not in received, "Daytona's auth cookie reached the sandbox"
    for marker in ("id-header", "id-query", "id-encoded", "id-bearer", "signed"):
        assert received.count(f"GET /{marker}?keep=1 HTTP/1.1".encode()) == len(referers)
    assert received.count(b"Cookie: app=1\r\n") == len(routes) * len(referers)
    assert received.count(b"X-App: kept\r\n") == len(routes) * len(referers)
    assert received.count(b"/page?keep=2\r\n") == len(routes) * 2  # the id link's pages
