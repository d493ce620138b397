"""Resilience of the E2B and Cube providers, with faults injected into the emulator:
the 502/503/504 window after resume and connect, a command a gateway refused, and 429s.

Windows are short here (a ``ready_timeout`` of a second or so) so the failures arrive
quickly; nothing asserts how quickly, only that they arrive and what they are."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from e2b import AsyncSandbox
from e2b.exceptions import RateLimitException
from provider_emulators import emulator, faults, provider_options

from provider_sdk import open_provider
from provider_sdk.emulators import RunningEmulator
from provider_sdk.errors import RateLimited, Unavailable
from provider_sdk.models import Lifecycle, SandboxState
from provider_sdk.provider import SandboxProvider

pytestmark = pytest.mark.anyio

_CLEAR = {"resume_504": 0, "create_429": 0, "retry_after": 1, "latency": 0}


@pytest.fixture(scope="module", params=["e2b", "cube"])
def running(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    home: Path = tmp_path_factory.mktemp(f"{request.param}-resilience")
    with emulator(request.param, home) as em:
        yield em


@pytest.fixture
async def provider(running: RunningEmulator) -> AsyncIterator[SandboxProvider]:
    faults(running, _CLEAR)
    async with open_provider(running.name, **provider_options(running)) as opened:
        yield opened
    faults(running, _CLEAR)


async def _resume_behind_its_back(running: RunningEmulator, sandbox_id: str) -> None:
    """Resume on the control plane alone, as another client would: no readiness probe."""
    options = provider_options(running)
    if running.name == "e2b":  # the raw SDK's connect (v2)
        await AsyncSandbox.connect(sandbox_id, api_key=options["api_key"],
                                   api_url=options["api_url"],
                                   sandbox_url=options["sandbox_url"])
        return
    async with httpx.AsyncClient() as client:  # Cube's v1 connect, on 127.0.0.1
        answer = await client.post(f"{options['api_url']}/sandboxes/{sandbox_id}/connect",
                                   json={}, headers={"X-API-Key": options["api_key"]})
        answer.raise_for_status()


async def _state(provider: SandboxProvider, sandbox_id: str) -> SandboxState | None:
    """The sandbox's state, by listing (asking Cube about it would count as use)."""
    return {i.id: i.state for i in await provider.list()}.get(sandbox_id)


def _served(running: RunningEmulator, name: str) -> float:
    served: float = faults(running)["served"][name]
    return served


async def test_resume_rides_out_504s_within_the_window(running: RunningEmulator,
                                                       provider: SandboxProvider) -> None:
    """After resume the data plane answers 504 five times; resume waits them out and the
    next command runs."""
    async with provider.create() as sandbox:
        await sandbox.pause()
        faults(running, {"resume_504": 5})
        before = _served(running, "resume_504")
        info = await sandbox.resume()
        assert info.state == SandboxState.RUNNING
        assert (await sandbox.exec(["echo", "back"])).stdout == "back\n"
        assert _served(running, "resume_504") - before == 5


async def test_connect_rides_out_504s_within_the_window(running: RunningEmulator,
                                                        provider: SandboxProvider) -> None:
    """``connect`` from another provider instance resumes a paused sandbox through the
    same 504s, and files written before the pause are there."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/tmp/psdk-kept.txt", b"kept")
        await sandbox.pause()
        faults(running, {"resume_504": 5})
        before = _served(running, "resume_504")
        async with open_provider(running.name, **provider_options(running)) as second:
            again = await second.connect(sandbox.id)
            assert await again.files.read("/tmp/psdk-kept.txt") == b"kept"
        assert _served(running, "resume_504") - before == 5


async def test_resume_past_the_window_raises_unavailable(running: RunningEmulator,
                                                         provider: SandboxProvider) -> None:
    """When the data plane keeps answering 504 past ``ready_timeout``, resume raises
    Unavailable instead of hanging."""
    async with provider.create() as sandbox, open_provider(
            running.name, **provider_options(running, ready_timeout=1.0)) as impatient:
        await sandbox.pause()
        faults(running, {"resume_504": 1_000_000})
        with anyio.fail_after(60), pytest.raises(Unavailable, match="did not answer"):
            await (await impatient.connect(sandbox.id, resume=False)).resume()
        faults(running, {"resume_504": 0})


async def test_a_data_plane_that_never_answers_does_not_hang_exec(
        running: RunningEmulator) -> None:
    """A data plane that takes the request and stays silent past ``request_timeout``:
    exec raises Unavailable rather than waiting forever."""
    async with open_provider(running.name, **provider_options(
            running, request_timeout=1.0)) as provider, provider.create() as sandbox:
        faults(running, {"latency": 3})
        try:
            with anyio.fail_after(60), pytest.raises(Unavailable, match="did not start"):
                await sandbox.exec(["true"])
        finally:
            faults(running, {"latency": 0})


async def test_a_command_the_gateway_refused_runs_exactly_once(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    """Resumed behind the provider's back (no probe), the data plane answers 504; the
    provider's command is retried until it runs, and it runs once."""
    async with provider.create() as sandbox:
        await sandbox.pause()
        faults(running, {"resume_504": 3})
        before = _served(running, "resume_504")
        await _resume_behind_its_back(running, sandbox.id)
        result = await sandbox.exec(["sh", "-c", "echo ran >> /tmp/psdk-once; cat /tmp/psdk-once"])
        assert (result.exit_code, result.stdout) == (0, "ran\n")
        assert _served(running, "resume_504") - before == 3


async def test_file_calls_the_gateway_refused_are_retried(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    """Resumed behind the provider's back, the data plane answers 504 to the file
    service too; stat, list and read are retried until they go through."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/tmp/psdk-file.txt", b"there")
        await sandbox.pause()
        faults(running, {"resume_504": 3})
        before = _served(running, "resume_504")
        await _resume_behind_its_back(running, sandbox.id)
        assert (await sandbox.files.stat("/tmp/psdk-file.txt")).size == 5
        assert "psdk-file.txt" in {e.name for e in await sandbox.files.list("/tmp")}
        assert await sandbox.files.read("/tmp/psdk-file.txt") == b"there"
        assert _served(running, "resume_504") - before == 3


async def test_auto_resume_rides_out_504s(running: RunningEmulator,
                                          provider: SandboxProvider) -> None:
    """A sandbox paused on idle resumes on the next command, whose first tries meet
    504s; the command still runs, once."""
    lifecycle = Lifecycle(idle_timeout=1, on_idle="pause", auto_resume=True)
    async with provider.create(lifecycle=lifecycle) as sandbox:
        faults(running, {"resume_504": 3})
        with anyio.fail_after(30):
            while await _state(provider, sandbox.id) != SandboxState.PAUSED:  # noqa: ASYNC110
                await anyio.sleep(0.1)  # the backend's idle timer: nothing to wait on
        before = _served(running, "resume_504")
        result = await sandbox.exec(["sh", "-c", "echo ran >> /tmp/psdk-once; cat /tmp/psdk-once"])
        assert (result.exit_code, result.stdout) == (0, "ran\n")
        assert _served(running, "resume_504") - before == 3


async def test_429_on_create_is_retried_honouring_retry_after(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    """Two 429s (Retry-After: 0) on create are retried; the third attempt creates."""
    faults(running, {"create_429": 2, "retry_after": 0})
    before = _served(running, "create_429")
    async with provider.create() as sandbox:
        assert (await sandbox.exec(["true"])).exit_code == 0
    assert _served(running, "create_429") - before == 2


async def test_429_past_the_retries_raises_rate_limited(running: RunningEmulator) -> None:
    """When 429s outlast the retries, create raises RateLimited, from the SDK's error."""
    faults(running, {"create_429": 100, "retry_after": 0})
    try:
        async with open_provider(running.name,
                                 **provider_options(running, retries=1)) as provider:
            with anyio.fail_after(60), pytest.raises(RateLimited) as caught:
                await provider.create()
        assert isinstance(caught.value.__cause__, RateLimitException)
        assert caught.value.provider == running.name
    finally:
        faults(running, _CLEAR)
