"""A sandbox's own ports through the emulator's host routing (``<port>-<id>.<domain>``,
the SDK's ``get_host``), and the traffic access token of a sandbox made with
``allow_public_traffic: false``, through the unmodified ``e2b`` and ``cubesandbox`` SDKs.
Every request goes to 127.0.0.1, naming the sandbox's host in the ``Host`` header."""

from __future__ import annotations

import time
import urllib.parse

import httpx
from cubesandbox import Sandbox as CubeSandbox  # type: ignore[import-untyped]
from e2b import Sandbox

from provider_sdk.emulators import RunningEmulator

_PORT = 8322
_SERVER = (f"mkdir -p /tmp/site && echo inside > /tmp/site/index.html && cd /tmp/site && "
           f"python3 -m http.server {_PORT} --bind 127.0.0.1")


def _get(running: RunningEmulator, host: str, path: str = "/index.html",
         headers: dict[str, str] | None = None) -> httpx.Response:
    """GET ``path`` on ``host`` (a sandbox's host, maybe with a port), sent to the
    emulator on 127.0.0.1."""
    return httpx.get(f"{running.url}{path}", headers={"Host": host, **(headers or {})},
                     timeout=30)


def _serving(running: RunningEmulator, host: str,
             headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + 30
    while _get(running, host, headers=headers).status_code != 200:
        assert time.monotonic() < deadline, "the server in the sandbox never answered"
        time.sleep(0.2)


def test_get_host_reaches_the_server_in_the_sandbox(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        assert sandbox.traffic_access_token is None  # public traffic: no token
        host = sandbox.get_host(_PORT)
        assert urllib.parse.urlsplit(f"//{host}").port == \
            urllib.parse.urlsplit(e2b_emulator.url).port
        sandbox.commands.run(_SERVER, background=True)
        _serving(e2b_emulator, host)
        answer = _get(e2b_emulator, host)
        assert (answer.status_code, answer.text) == (200, "inside\n")
        sandbox.kill()
        gone = _get(e2b_emulator, host)
        assert gone.status_code == 502
        assert gone.json()["message"] == "The sandbox was not found"


def test_private_traffic_needs_the_token_on_user_ports_only(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create(network={"allow_public_traffic": False}) as sandbox:
        token = sandbox.traffic_access_token
        assert token
        sandbox.commands.run(_SERVER, background=True)  # envd needs no traffic token
        host = sandbox.get_host(_PORT)
        _serving(e2b_emulator, host, {"e2b-traffic-access-token": token})
        assert _get(e2b_emulator, host).status_code == 403
        wrong = _get(e2b_emulator, host, headers={"e2b-traffic-access-token": token[:-1]})
        assert (wrong.status_code, wrong.content) == (403, b"")
        assert Sandbox.connect(sandbox.sandbox_id).traffic_access_token == token


def test_a_port_nothing_listens_on_is_a_bad_gateway(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        assert _get(e2b_emulator, sandbox.get_host(9)).status_code == 502


def test_cube_tells_the_token_at_create_only_and_checks_it_on_envd_too(
        cube_emulator: RunningEmulator) -> None:
    sandbox = CubeSandbox.create(network={"allow_public_traffic": False})
    try:
        token = sandbox.traffic_access_token
        assert token
        assert sandbox.commands.run("echo hi").stdout == "hi\n"  # the SDK sends the token
        domain = cube_emulator.settings["CUBE_SANDBOX_DOMAIN"]
        envd = f"49983-{sandbox.sandbox_id}.{domain}"
        key = {"X-API-Key": cube_emulator.api_key.reveal()}
        assert _get(cube_emulator, envd, "/health", key).status_code == 403
        assert _get(cube_emulator, envd, "/health",
                    {**key, "cube-traffic-access-token": token}).status_code == 204
        again = CubeSandbox.connect(sandbox.sandbox_id)
        assert again.traffic_access_token is None
    finally:
        sandbox.kill()


def test_cube_routes_a_port_by_host_and_by_path(cube_emulator: RunningEmulator) -> None:
    """CubeProxy's two forms reach the server; the path form's prefix is taken off."""
    sandbox = CubeSandbox.create()
    try:
        sandbox.commands.run(f"({_SERVER}) > /dev/null 2>&1 &")
        key = {"X-API-Key": cube_emulator.api_key.reveal()}
        host = sandbox.get_host(_PORT)
        _serving(cube_emulator, host, key)
        assert _get(cube_emulator, host, headers=key).text == "inside\n"
        by_path = httpx.get(f"{cube_emulator.url}/sandbox/{sandbox.sandbox_id}/{_PORT}"
                            "/index.html", headers=key, timeout=30)
        assert (by_path.status_code, by_path.text) == (200, "inside\n")
    finally:
        sandbox.kill()
