"""``provider_sdk.tasks.TaskOwner``: background tasks with an owner, started and stopped
from whichever tasks the owner's user happens to run in."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
import structlog

from provider_sdk.tasks import TaskOwner

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The host task is started the way each backend allows (a loop task, a system
    task): both are covered."""
    return str(request.param)


async def _forever(log: list[str], name: str, started: anyio.Event) -> None:
    try:
        started.set()
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.lowlevel.checkpoint()  # cleanup that awaits still runs to its end
            log.append(f"{name} cleaned up")


async def test_close_from_another_task_cancels_every_task_and_waits_for_cleanup() -> None:
    owner = TaskOwner("test")
    log: list[str] = []
    one, two = anyio.Event(), anyio.Event()

    async def start() -> None:  # a task that ends long before the owner is closed
        await owner.start_soon(_forever, log, "one", one)
        await owner.start_soon(_forever, log, "two", two)

    async with anyio.create_task_group() as tg:
        tg.start_soon(start)
    await one.wait()
    await two.wait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(owner.aclose)
    assert sorted(log) == ["one cleaned up", "two cleaned up"]
    await owner.aclose()  # twice is fine


async def test_the_returned_scope_cancels_one_task_alone() -> None:
    owner = TaskOwner("test")
    log: list[str] = []
    one, two = anyio.Event(), anyio.Event()
    scope = await owner.start_soon(_forever, log, "one", one)
    await owner.start_soon(_forever, log, "two", two)
    await one.wait()
    await two.wait()
    scope.cancel()
    await anyio.wait_all_tasks_blocked()
    assert log == ["one cleaned up"]
    await owner.aclose()
    assert log == ["one cleaned up", "two cleaned up"]


async def test_a_failing_task_is_logged_and_takes_nothing_down() -> None:
    owner = TaskOwner("test-provider")
    log: list[str] = []
    survivor = anyio.Event()

    async def fail() -> None:
        raise ValueError("boom")

    await owner.start_soon(_forever, log, "survivor", survivor)
    await survivor.wait()
    with structlog.testing.capture_logs() as logs:
        await owner.start_soon(fail)
        await anyio.wait_all_tasks_blocked()
    assert [(e["event"], e["provider"], e["log_level"]) for e in logs] == [
        ("provider.background_task.failed", "test-provider", "error")]
    assert log == []  # the survivor still runs
    late = anyio.Event()
    await owner.start_soon(_forever, log, "late", late)  # and the group still takes tasks
    await late.wait()
    await owner.aclose()
    assert sorted(log) == ["late cleaned up", "survivor cleaned up"]


async def test_an_owner_opens_again_after_close() -> None:
    owner = TaskOwner("test")
    log: list[str] = []
    await owner.open()
    await owner.open()
    await owner.aclose()
    again = anyio.Event()
    await owner.start_soon(_forever, log, "again", again)
    await again.wait()
    await owner.aclose()
    assert log == ["again cleaned up"]


async def test_closing_an_owner_never_opened_does_nothing() -> None:
    await TaskOwner("test").aclose()


async def test_a_started_task_tells_its_end_and_stops_after_its_grace() -> None:
    owner = TaskOwner("test")
    log: list[str] = []
    quick = await owner.start(anyio.sleep, 0)
    await quick.ended.wait()  # ended by itself
    started = anyio.Event()
    slow = await owner.start(_forever, log, "slow", started)
    await started.wait()
    with anyio.fail_after(5):
        await slow.stop(grace=0.05)
    assert slow.ended.is_set()
    assert log == ["slow cleaned up"]  # its cleanup ran before stop() returned
    await owner.aclose()
