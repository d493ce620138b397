"""The manager on CubeSandbox's documented pitfall: after a resume the control plane says
running while the data plane answers 504. Run through the real ``e2b`` SDK against the
Cube emulator (on the local provider), with its ``resume_504`` fault: a short 504 window
is ridden out; one that outlasts the retry window gets the sandbox replaced, from its
latest snapshot; with replacement off the caller gets ``Unavailable``, never a hang."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from provider_sdk import open_provider
from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.errors import Unavailable
from provider_sdk.manager import SandboxManager, SnapshotPolicy, SQLiteStore
from provider_sdk.models import SandboxState
from provider_sdk.provider import SandboxProvider

emulator = pytest.importorskip("provider_sdk_emulators.e2b",
                               reason="the Cube emulator (sandbox-provider-sdk-e2b) is not "
                               "installed")

pytestmark = pytest.mark.anyio

Start = Callable[[dict[str, str]], RunningEmulator]


@pytest.fixture
def start_cube(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    """Start a Cube emulator with faults; the environment points the provider at it."""
    monkeypatch.setenv("PSDK_HOME", str(home))  # the emulator's local backend
    monkeypatch.delenv("PSDK_CONFIG", raising=False)
    with ExitStack() as stack:
        def start(faults: dict[str, str]) -> RunningEmulator:
            options = EmulatorOptions(api_key="manager-test-key", faults=faults)
            running = stack.enter_context(emulator.run_in_thread("cube", options))
            for key, value in running.environment().items():
                monkeypatch.setenv(key, value)
            return running

        yield start


@pytest.fixture
async def cube_provider() -> AsyncIterator[Callable[..., SandboxProvider]]:
    opened: list[SandboxProvider] = []

    def make(**options: Any) -> SandboxProvider:
        opened.append(open_provider("cube", **options))
        return opened[-1]

    yield make
    for provider in opened:
        for info in await provider.list():
            await provider.kill(info.id)
        await provider.aclose()


def _level(logs: list[dict[str, Any]]) -> str:
    done = [e for e in logs if e["event"] == "sandbox.manager.acquire.complete"]
    assert len(done) == 1, logs
    return str(done[0]["level"])


def _served(running: RunningEmulator) -> int:
    import httpx

    answer = httpx.get(f"{running.url}/_emulator/faults",
                       headers={"X-API-Key": running.api_key.reveal()})
    return int(answer.json()["served"]["resume_504"])


@pytest.mark.slow
async def test_a_short_504_window_after_resume_is_ridden_out(
        start_cube: Start, cube_provider: Callable[..., SandboxProvider],
        db_path: Path) -> None:
    running = start_cube({"resume_504": "3"})
    provider = cube_provider()
    async with SQLiteStore(db_path) as store:
        first = await SandboxManager(provider, store).acquire("alice")
        await first.files.write("/tmp/mark", "still me")
        await first.pause()
        with capture_logs() as logs:
            again = await SandboxManager(provider, store).acquire("alice")
        assert _level(logs) == "store"
        assert again.id == first.id
        assert await again.files.read_text("/tmp/mark") == "still me"
    assert _served(running) == 3  # the 504s really were served, and absorbed


@pytest.mark.slow
async def test_504s_past_the_retry_window_get_the_sandbox_replaced_from_its_snapshot(
        start_cube: Start, cube_provider: Callable[..., SandboxProvider],
        db_path: Path) -> None:
    running = start_cube({"resume_504": "100000"})
    provider = cube_provider(ready_timeout=1)
    async with SQLiteStore(db_path) as store:
        manager = SandboxManager(provider, store, health_timeout=3,
                                 snapshots=SnapshotPolicy(every=3600))
        first = await manager.acquire("alice")
        await first.files.write("/home/user/work.txt", "saved")
        await manager.snapshot("alice")
        await first.pause()
        with anyio.fail_after(60), capture_logs() as logs:
            again = await SandboxManager(provider, store, health_timeout=3).acquire("alice")
        assert _level(logs) == "snapshot"
        outcomes = [e.get("outcome") for e in logs
                    if e["event"] == "sandbox.manager.store.failed"]
        assert outcomes == ["unhealthy"]
        assert again.id != first.id
        assert await again.files.read_text("/home/user/work.txt") == "saved"
        binding = await store.get("alice")
        assert binding is not None
        assert binding.sandbox_id == again.id
        with anyio.fail_after(30):
            while True:  # the broken one is killed
                if first.id not in {i.id for i in await provider.list()}:
                    break
                await anyio.sleep(0.1)
    assert _served(running) > 0


async def test_without_replacement_a_504_window_is_unavailable_within_the_bound(
        start_cube: Start, cube_provider: Callable[..., SandboxProvider],
        db_path: Path) -> None:
    start_cube({"resume_504": "100000"})
    provider = cube_provider(ready_timeout=1)
    async with SQLiteStore(db_path) as store:
        first = await SandboxManager(provider, store).acquire("alice")
        await first.pause()
        manager = SandboxManager(provider, store, health_timeout=2, replace_unhealthy=False)
        with anyio.fail_after(30), pytest.raises(Unavailable) as info:
            await manager.acquire("alice")
        assert info.value.sandbox_id == first.id
        assert [i.id for i in await provider.list()] == [first.id]


@pytest.mark.slow
async def test_idle_pause_is_left_to_cubes_own_auto_pause(
        start_cube: Start, cube_provider: Callable[..., SandboxProvider],
        db_path: Path) -> None:
    start_cube({})
    provider = cube_provider()
    async with SQLiteStore(db_path) as store, \
            SandboxManager(provider, store, idle_pause=1) as manager:
        assert manager.spec.lifecycle.on_idle == "pause"  # asked of the backend
        assert await manager.pause_idle() == []           # so no sweep of its own
        sandbox = await manager.acquire("alice")
        with anyio.fail_after(20):
            while True:  # the backend pauses it once idle (listing is not activity)
                if [i.id for i in await provider.list(state=SandboxState.PAUSED)] == [sandbox.id]:
                    break
                await anyio.sleep(0.2)
        manager.forget("alice")
        again = await manager.acquire("alice")
        assert again.id == sandbox.id
        assert (await again.exec("echo awake")).stdout == "awake\n"
