"""No credential of the vendor's reaches a server in a sandbox through the emulator: not
the API key (which Cube's data plane asks for), envd's access token or the traffic
token, in their headers or wherever else a client sends or echoes them (a bearer, a
cookie, a ``Referer``, a query parameter), on every route to a sandbox's port: host
routing, the SDK's ``E2b-Sandbox-Id`` headers and (on Cube) CubeProxy's path form. A
server in the sandbox records every request head it gets; everything goes to
127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from cubesandbox import Sandbox as CubeSandbox  # type: ignore[import-untyped]
from e2b import Sandbox

from provider_sdk.emulators import RunningEmulator

_PORT = 8323
_LOG = "/tmp/psdk-heads.log"
_RECORDER = r"""
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

Send = Callable[[str, dict[str, str]], httpx.Response]


def _record(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/psdk-recorder.py", _RECORDER)
    sandbox.commands.run(f"(python3 /tmp/psdk-recorder.py {_PORT} {_LOG}) > /dev/null 2>&1 &")


def _serve(send: Send, headers: dict[str, str]) -> None:
    deadline = time.monotonic() + 30
    while send("/ready", headers).status_code != 200:
        assert time.monotonic() < deadline, "the server in the sandbox never answered"
        time.sleep(0.2)


def _echoing(secrets: list[str], credentials: dict[str, str]) -> dict[str, str]:
    """The credentials a route needs, every credential header (with the API key, the
    last secret, where the route needs none), and every secret again where a client may
    echo it."""
    first, *others = secrets
    return {"X-API-Key": secrets[-1], "X-Access-Token": first,
            "e2b-traffic-access-token": first, **credentials,
            "Authorization": f"Bearer {secrets[-1]}",
            "Cookie": "app=1; " + "; ".join(f"c{n}={s}" for n, s in enumerate(secrets)),
            "Referer": "http://example.localhost/page?keep=2&"
                       + "&".join(f"r{n}={s}" for n, s in enumerate(others)),
            "X-App": "kept"}


def _assert_nothing_leaked(sandbox: Sandbox, secrets: list[str], markers: list[str]) -> None:
    received = sandbox.files.read(_LOG).encode()
    for secret in secrets:
        assert secret.encode() not in received, "a credential reached the sandbox"
    for marker in markers:
        assert f"GET /{marker}?keep=1 HTTP/1.1".encode() in received, marker
    assert received.count(b"X-App: kept") >= len(markers)
    assert received.count(b"Cookie: app=1\r\n") >= len(markers)
    assert received.count(b"Referer: http://example.localhost/page?keep=2\r\n") >= len(markers)


def test_e2b_relays_no_credential_to_a_port_by_host_or_by_headers(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create(network={"allow_public_traffic": False}) as sandbox:
        traffic = sandbox.traffic_access_token
        secrets = [traffic, str(sandbox._envd_access_token), e2b_emulator.api_key.reveal()]
        _record(sandbox)
        host = sandbox.get_host(_PORT)

        def by_host(path: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.get(f"{e2b_emulator.url}{path}", headers={"Host": host, **headers},
                             timeout=30)

        def by_headers(path: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.get(f"{e2b_emulator.url}{path}", timeout=30, headers={
                "E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(_PORT),
                **headers})

        needed = {"e2b-traffic-access-token": traffic}
        _serve(by_host, needed)
        for name, send in (("host", by_host), ("headers", by_headers)):
            answer = send(f"/{name}?keep=1&k={secrets[2]}", _echoing(secrets, needed))
            assert answer.status_code == 200, answer.text
        _assert_nothing_leaked(sandbox, secrets, ["host", "headers"])


def test_cube_relays_no_credential_to_a_port_by_host_path_or_headers(
        cube_emulator: RunningEmulator) -> None:
    sandbox = CubeSandbox.create(network={"allow_public_traffic": False})
    try:
        key = cube_emulator.api_key.reveal()
        traffic = sandbox.traffic_access_token
        secrets = [traffic, key]
        _record(sandbox)
        host = sandbox.get_host(_PORT)

        def by_host(path: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.get(f"{cube_emulator.url}{path}", headers={"Host": host, **headers},
                             timeout=30)

        def by_path(path: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.get(f"{cube_emulator.url}/sandbox/{sandbox.sandbox_id}/{_PORT}{path}",
                             headers=headers, timeout=30)

        def by_headers(path: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.get(f"{cube_emulator.url}{path}", timeout=30, headers={
                "E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(_PORT),
                **headers})

        needed = {"X-API-Key": key, "cube-traffic-access-token": traffic}
        _serve(by_host, needed)
        routes = (("host", by_host), ("path", by_path), ("headers", by_headers))
        for name, send in routes:
            answer = send(f"/{name}?keep=1&t={traffic}", _echoing(secrets, needed))
            assert answer.status_code == 200, answer.text
        _assert_nothing_leaked(sandbox, secrets, [name for name, _ in routes])
    finally:
        sandbox.kill()


def test_a_target_that_carries_a_credential_in_its_path_is_refused(
        cube_emulator: RunningEmulator) -> None:
    sandbox = CubeSandbox.create()
    try:
        key = cube_emulator.api_key.reveal()
        _record(sandbox)
        host = sandbox.get_host(_PORT)

        def send(path: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.get(f"{cube_emulator.url}{path}", headers={"Host": host, **headers},
                             timeout=30)

        _serve(send, {"X-API-Key": key})
        assert send(f"/files/{key}/x", {"X-API-Key": key}).status_code == 400
        received = sandbox.files.read(_LOG).encode()
        assert key.encode() not in received
        assert b"/files/" not in received
    finally:
        sandbox.kill()
