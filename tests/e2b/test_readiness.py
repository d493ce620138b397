"""How the E2B and Cube providers wait for a sandbox's data plane (``wait_ready``) and
retry what a gateway refused (``retrying``), against a server on 127.0.0.1 standing in
for envd's ``/health`` and with the errors the SDK and connect-rpc raise."""

from __future__ import annotations

import http.server
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import anyio
import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b import exceptions as e2bx
from provider_sdk_e2b._errors import retrying, wait_ready
from provider_sdk_e2b._remote import _Handle
from trio.testing import MockClock

from provider_sdk import errors

pytestmark = pytest.mark.anyio

SANDBOX = "sbx123"


class _Health(http.server.ThreadingHTTPServer):
    """Answers ``/health`` with the next of ``answers`` (the last one over and over),
    each a status and its headers; records when each probe came."""

    daemon_threads = True

    def __init__(self, answers: list[tuple[int, dict[str, str]]]) -> None:
        super().__init__(("127.0.0.1", 0), _HealthHandler)
        self.answers = answers
        self.probes: list[float] = []


class _HealthHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server = cast(_Health, self.server)
        server.probes.append(time.monotonic())
        status, headers = server.answers[min(len(server.probes), len(server.answers)) - 1]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def health() -> Iterator[_Health]:
    server = _Health([(200, {})])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def _wait(url: str, timeout: float) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        handle = cast(_Handle, SimpleNamespace(health=client))
        await wait_ready(handle, SANDBOX, timeout=timeout, provider="e2b")


def _url(server: _Health) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"


async def test_a_data_plane_that_answers_is_ready(health: _Health) -> None:
    await _wait(_url(health), timeout=10)
    assert len(health.probes) == 1


async def test_gateway_answers_are_probed_again_until_envd_answers(health: _Health) -> None:
    health.answers = [(502, {}), (503, {}), (504, {}), (200, {})]
    await _wait(_url(health), timeout=30)
    assert len(health.probes) == 4


async def test_a_refused_access_token_is_an_authentication_error(health: _Health) -> None:
    health.answers = [(401, {})]
    with pytest.raises(errors.AuthenticationError) as caught:
        await _wait(_url(health), timeout=10)
    assert (caught.value.provider, caught.value.sandbox_id) == ("e2b", SANDBOX)
    assert len(health.probes) == 1


@pytest.mark.parametrize("status", [400, 404, 500, 501])
async def test_another_answer_is_an_error_at_once(health: _Health, status: int) -> None:
    health.answers = [(status, {})]
    with pytest.raises(errors.SandboxError) as caught:
        await _wait(_url(health), timeout=10)
    assert type(caught.value) is errors.SandboxError
    assert f"HTTP {status}" in str(caught.value)
    assert (caught.value.provider, caught.value.sandbox_id) == ("e2b", SANDBOX)
    assert len(health.probes) == 1


async def test_a_gateway_answering_past_the_timeout_is_unavailable(health: _Health) -> None:
    health.answers = [(503, {})]
    with pytest.raises(errors.Unavailable) as caught:
        await _wait(_url(health), timeout=0.5)
    assert "within 0.5 s" in str(caught.value)
    assert "(last: HTTP 503)" in str(caught.value)
    assert (caught.value.provider, caught.value.sandbox_id) == ("e2b", SANDBOX)
    assert len(health.probes) > 1


async def test_nothing_listening_past_the_timeout_is_unavailable() -> None:
    with socket.socket() as sock:  # a port of 127.0.0.1 nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(errors.Unavailable) as caught:
        await _wait(f"http://127.0.0.1:{port}", timeout=0.5)
    assert "(last: ConnectError: " in str(caught.value)


async def test_a_gateways_retry_after_is_honoured(health: _Health) -> None:
    """A 503 with ``Retry-After: 1`` is probed again a second later at the soonest; one
    whose ``Retry-After`` is no number of seconds is probed again as any other."""
    health.answers = [(503, {"Retry-After": "1"}), (503, {"Retry-After": "soon"}),
                      (503, {"Retry-After": "0.5"}), (200, {})]
    await _wait(_url(health), timeout=30)
    first, second, third, fourth = health.probes
    assert second - first >= 0.95
    assert third - second < 0.9
    assert fourth - third < 0.9


# ------------------------------------------------------------------ retrying

def _refused() -> list[BaseException]:
    """What a gateway or a connection that never opened raises: nothing ran."""
    reset = ConnectError(Code.UNAVAILABLE, "reset")
    reset.__cause__ = ConnectionRefusedError()
    on_rpc = e2bx.TimeoutException("gateway timeout")
    on_rpc.__context__ = ConnectError(Code.DEADLINE_EXCEEDED, "504")
    return [ConnectError(Code.UNAVAILABLE, "bad gateway"),
            ConnectError(Code.DEADLINE_EXCEEDED, "gateway timeout"), reset,
            e2bx.SandboxUnreachableException("no route"),
            e2bx.SandboxException("502: bad gateway"), e2bx.SandboxException("503: busy"),
            e2bx.TimeoutException("504: gateway timeout"), on_rpc,
            httpx.ConnectError("refused"), httpx.ConnectTimeout("no answer")]


def _ran() -> list[BaseException]:
    """What an answer of envd's, or a request cut after it was sent, raises."""
    timed_out = ConnectError(Code.DEADLINE_EXCEEDED, "deadline")
    timed_out.__cause__ = TimeoutError()
    other_cause = ConnectError(Code.UNAVAILABLE, "stream broke")
    other_cause.__cause__ = ValueError("bad frame")
    on_rpc = e2bx.TimeoutException("timed out")
    on_rpc.__context__ = ConnectError(Code.INTERNAL, "boom")
    return [ConnectError(Code.UNAVAILABLE, "the sandbox sbx123 was not found"),
            ConnectError(Code.INTERNAL, "boom"), ConnectError(Code.CANCELED, "cancelled"),
            timed_out, other_cause, on_rpc,
            e2bx.SandboxNotRunningException("502: the sandbox is paused"),
            e2bx.SandboxException("500: envd failed"), e2bx.SandboxException("odd"),
            httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("peer closed"),
            ValueError("not an error of the wire")]


def _failing_once(raised: BaseException, calls: list[int]):  # type: ignore[no-untyped-def]
    async def op() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise raised
        return "done"

    return op


@pytest.mark.parametrize("raised", _refused(), ids=lambda e: f"{type(e).__name__}-{e}")
async def test_what_a_gateway_refused_is_retried(raised: BaseException) -> None:
    calls: list[int] = []
    assert await retrying(_failing_once(raised, calls), timeout=30) == "done"
    assert len(calls) == 2


@pytest.mark.parametrize("raised", _ran(), ids=lambda e: f"{type(e).__name__}-{e}")
async def test_what_may_have_run_is_never_repeated(raised: BaseException) -> None:
    calls: list[int] = []
    with pytest.raises(type(raised)) as caught:
        await retrying(_failing_once(raised, calls), timeout=30)
    assert caught.value is raised
    assert len(calls) == 1


async def test_a_cancellation_of_the_call_is_never_retried() -> None:
    calls: list[int] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)
        except anyio.get_cancelled_exc_class() as cancelled:
            cut = ConnectError(Code.CANCELED, "cancelled")
            cut.__cause__ = cancelled
            with pytest.raises(ConnectError):
                await retrying(_failing_once(cut, calls), timeout=30)
            raise
    assert len(calls) == 1


async def test_a_gateway_refusing_past_the_timeout_raises_its_last_refusal() -> None:
    calls: list[int] = []

    async def op() -> str:
        calls.append(1)
        raise e2bx.SandboxException(f"503: busy ({len(calls)})")

    with pytest.raises(e2bx.SandboxException) as caught:
        await retrying(op, timeout=0.3)
    assert len(calls) > 1
    assert str(caught.value) == f"503: busy ({len(calls)})"


@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_a_refusal_is_retried_on_the_ready_schedule() -> None:
    """On a clock that jumps to each pause's end: the pauses are 20 ms, doubled after
    each try, at most 1 s. Within 2.3 s that is seven of them (1.26 s, then 1 s; one more
    would end past the timeout): eight tries in all."""
    tries: list[float] = []

    async def refused() -> None:
        tries.append(anyio.current_time())
        if len(tries) > 100:  # no schedule of this backoff tries as often
            raise RuntimeError("retried past the schedule")
        raise e2bx.SandboxException("503: busy")

    with pytest.raises(e2bx.SandboxException, match="503: busy"):
        await retrying(refused, timeout=2.3)
    assert len(tries) == 8
    pauses = [round(b - a, 6) for a, b in itertools.pairwise(tries)]
    assert pauses == [0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0]
