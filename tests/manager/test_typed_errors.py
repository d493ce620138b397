"""Every error that leaves the manager or a pool is a ``SandboxError``, and a failure in
their background work is counted and logged, never raised into the application's task
group: here the host's own error (``OSError`` EBUSY, a cgroup that will not go away)
comes out of a kill, a create or a command."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from provider_sdk.errors import SandboxError, Unavailable
from provider_sdk.local import LocalProvider
from provider_sdk.manager import OWNER_LABEL, SandboxManager, SQLiteStore, WarmPool
from provider_sdk.models import ExecResult, SandboxInfo, SandboxSpec
from provider_sdk.provider import Command

pytestmark = pytest.mark.anyio


class _Busy(LocalProvider):
    """A local provider whose kills of ``stuck`` sandboxes fail with EBUSY, whose
    commands in ``mute`` ones fail, and whose creates fail with a mount error while
    ``unmountable``."""

    def __init__(self, home: Path) -> None:
        super().__init__(home=home)
        self.stuck: set[str] = set()
        self.mute: set[str] = set()
        self.unmountable = False

    async def _kill(self, sandbox_id: str) -> None:
        if sandbox_id in self.stuck:
            raise OSError(errno.EBUSY, "Device or resource busy", "/sys/fs/cgroup/pids/x")
        await super()._kill(sandbox_id)

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        if sandbox_id in self.mute:
            raise Unavailable("no answer", provider=self.name, sandbox_id=sandbox_id)
        return await super()._exec(sandbox_id, command)

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        if self.unmountable:
            raise OSError(errno.EIO, "mounting the sandbox's disk image failed")
        return await super()._create(spec)


@pytest.fixture
async def busy(home: Path) -> AsyncIterator[_Busy]:
    """A :class:`_Busy` provider; its faults end and its sandboxes are killed after."""
    provider = _Busy(home)
    try:
        yield provider
    finally:
        provider.stuck.clear()
        provider.mute.clear()
        provider.unmountable = False
        for info in await provider.list():
            await provider.kill(info.id)


async def _until(done: Callable[[], bool]) -> None:
    with anyio.fail_after(20):
        while not done():  # noqa: ASYNC110 (a poll of a counter)
            await anyio.sleep(0.02)


async def test_a_failed_background_kill_is_counted_and_the_application_goes_on(
        busy: _Busy, store: SQLiteStore) -> None:
    async with SandboxManager(busy, store) as manager:
        sandbox = await manager.acquire("alice")
        duplicate = await busy.create(metadata={OWNER_LABEL: "alice"})
        busy.stuck.add(duplicate.id)
        manager.forget("alice")
        with capture_logs() as logs:
            again = await manager.acquire("alice")  # a store hit: duplicates go, later
            await _until(lambda: manager.failures.counts["kill"] >= 1)
        assert again.id == sandbox.id
        # The application's own work goes on in the same task group's time.
        await anyio.sleep(0.2)
        assert (await again.exec("echo still here")).stdout == "still here\n"
    assert {"event": "sandbox.manager.background.failed", "provider": "local",
            "chore": "kill", "error": "OSError", "log_level": "warning"} in logs


@pytest.mark.slow
async def test_a_pools_failed_discard_is_counted_and_the_application_goes_on(
        busy: _Busy) -> None:
    async with WarmPool(busy, size=1, interval=60, check_timeout=5) as pool:
        await pool.wait_filled(60)
        (member,) = pool._free
        busy.mute.add(member)   # it fails its check on claim: discarded, killed...
        busy.stuck.add(member)  # ...and the kill fails
        claimed = await pool.claim()  # a miss: made there and then
        assert claimed.id != member
        await _until(lambda: pool.failures.counts["kill"] >= 1)
        await anyio.sleep(0.2)
        assert (await claimed.exec("echo fine")).stdout == "fine\n"
        await claimed.kill()


async def test_a_release_whose_kill_fails_raises_a_typed_error_and_drops_the_binding(
        busy: _Busy, store: SQLiteStore) -> None:
    manager = SandboxManager(busy, store)
    sandbox = await manager.acquire("alice")
    busy.stuck.add(sandbox.id)
    with pytest.raises(Unavailable, match="could not be killed") as caught:
        await manager.release("alice")
    assert caught.value.sandbox_id == sandbox.id
    assert await store.get("alice") is None
    busy.stuck.clear()
    await manager.release("alice")  # the sandbox the first one left goes now
    assert await busy.list() == []


async def test_an_os_error_from_the_provider_leaves_acquire_as_a_typed_error(
        busy: _Busy, store: SQLiteStore) -> None:
    busy.unmountable = True
    with pytest.raises(Unavailable, match="mounting the sandbox's disk image") as caught:
        await SandboxManager(busy, store).acquire("alice")
    assert isinstance(caught.value, SandboxError)
    assert isinstance(caught.value.__cause__, OSError)
