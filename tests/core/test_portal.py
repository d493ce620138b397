"""The portal between threads and event loops: work handed over runs in the portal's
loop, cancelling or interrupting the caller cancels it, and the caller gets control back
only once the work's cleanup has run."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import pytest

from provider_sdk.portal import Portal

#: Generous: these checks are about order, not speed (these machines are noisy).
GRACE = 10.0


@pytest.fixture
def portal() -> Iterator[Portal]:
    portal = Portal.start(name="psdk-test-portal")
    yield portal
    portal.close()


async def _thread_name() -> str:
    return threading.current_thread().name


class _Work:
    """Work that waits until cancelled, then takes a while to clean up."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.cleaned = threading.Event()

    async def __call__(self) -> None:
        self.began.set()
        try:
            await anyio.sleep(GRACE * 6)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)
            self.cleaned.set()


def test_work_runs_in_the_portals_thread_until_it_is_closed(portal: Portal) -> None:
    assert portal.owned
    assert portal.call(_thread_name) == "psdk-test-portal"
    portal.close()
    portal.close()  # twice is fine
    assert not portal.running
    with pytest.raises(RuntimeError, match="no longer runs"):
        portal.call(_thread_name)


def test_keywords_reach_the_work(portal: Portal) -> None:
    async def join(*parts: str, sep: str) -> str:
        return sep.join(parts)

    assert portal.call(join, "a", "b", sep="-") == "a-b"
    assert portal.spawn(join, "c", "d", sep="+").result(GRACE) == "c+d"


def test_an_error_in_the_work_reaches_the_caller(portal: Portal) -> None:
    async def fail() -> None:
        raise LookupError("psdk-test")

    with pytest.raises(LookupError, match="psdk-test"):
        portal.call(fail)


def test_a_blocking_call_from_the_loop_itself_is_refused(portal: Portal) -> None:
    async def nested() -> str:
        return portal.call(_thread_name)

    with pytest.raises(RuntimeError, match="use the async methods"):
        portal.call(nested)


def test_an_interrupted_call_returns_only_after_the_works_cleanup(portal: Portal) -> None:
    work = _Work()
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "the interrupt goes to the main thread"

    def interrupt() -> None:
        assert work.began.wait(GRACE)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        portal.call(work)
    assert work.cleaned.is_set(), "the call returned before the work's cleanup ran"
    assert portal.call(_thread_name) == "psdk-test-portal"  # the loop still works


def test_an_interrupt_while_the_work_is_handed_over_still_waits_for_its_cleanup(
        portal: Portal, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C lands after the work reached the loop, before the caller holds its future.
    work = _Work()
    schedule = portal._loop.call_soon_threadsafe

    def interrupted(callback: Callable[..., object], *args: object) -> object:
        handle = schedule(callback, *args)
        monkeypatch.undo()  # the first hand-over only
        assert work.began.wait(GRACE)
        raise KeyboardInterrupt
        return handle  # pragma: no cover

    monkeypatch.setattr(portal._loop, "call_soon_threadsafe", interrupted)
    with pytest.raises(KeyboardInterrupt):
        portal.call(work)
    assert work.cleaned.is_set(), "the call returned before the work's cleanup ran"


def test_work_cancelled_before_it_began_never_runs_and_is_settled(portal: Portal) -> None:
    began = threading.Event()
    cancelled = threading.Event()

    async def block() -> None:
        # Holds the loop until the work is cancelled, so that it cannot begin before.
        cancelled.wait(GRACE)

    async def mark() -> None:
        began.set()

    portal.spawn(block)
    work = portal._submit(mark)
    assert work.future.cancel()
    cancelled.set()
    assert work.settled.wait(GRACE)
    portal.call(_thread_name)  # the loop has run everything handed to it by now
    assert not began.is_set()


def test_work_cancelled_as_it_begins_never_runs(portal: Portal) -> None:
    """The cancel lands after the loop made the work's task and before the task's
    first step (a callback queued behind the hand-over cancels it): the work's body
    still never runs."""
    began = threading.Event()
    release = threading.Event()

    def hold() -> None:
        release.wait(GRACE)  # holds the loop while the hand-over and the cancel queue

    async def mark() -> None:
        began.set()

    portal._loop.call_soon_threadsafe(hold)
    work = portal._submit(mark)  # queues the hand-over, which makes the task
    portal._loop.call_soon_threadsafe(work.future.cancel)  # runs before the task starts
    release.set()
    assert work.settled.wait(GRACE)
    portal.call(_thread_name)  # the loop has run everything handed to it by now
    assert work.future.cancelled()
    assert not began.is_set()


def test_close_cancels_work_still_running(portal: Portal) -> None:
    work = _Work()
    future = portal.spawn(work)
    assert work.began.wait(GRACE)
    portal.close()
    assert work.cleaned.is_set()
    assert future.done()


def test_a_held_context_manager_is_entered_and_left_in_one_task(portal: Portal) -> None:
    seen: list[object] = []

    @contextlib.asynccontextmanager
    async def managed() -> AsyncIterator[str]:
        import asyncio
        seen.append(asyncio.current_task())
        async with anyio.create_task_group() as tg:  # needs one task for enter and exit
            tg.start_soon(anyio.sleep, 0)
            yield "held"
        seen.append(asyncio.current_task())

    with portal.hold(managed()) as value:
        assert value == "held"
        assert len(seen) == 1
    assert len(seen) == 2
    assert seen[0] is seen[1]


def test_a_held_context_manager_that_fails_to_enter_raises_its_error(portal: Portal) -> None:
    @contextlib.asynccontextmanager
    async def broken() -> AsyncIterator[None]:
        raise LookupError("psdk-enter")
        yield  # pragma: no cover

    with pytest.raises(LookupError, match="psdk-enter"), portal.hold(broken()):
        pytest.fail("the block ran without the context manager entered")


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_acall_from_another_loop_runs_in_the_portal(portal: Portal) -> None:
    assert await portal.acall(_thread_name) == "psdk-test-portal"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_a_cancelled_acall_returns_only_after_the_works_cleanup(portal: Portal) -> None:
    work = _Work()
    with anyio.move_on_after(GRACE) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(portal.acall, work)
            await anyio.to_thread.run_sync(work.began.wait, GRACE)
            tg.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert work.cleaned.is_set(), "the call returned before the work's cleanup ran"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_portal_into_the_callers_loop_borrows_it() -> None:
    portal = Portal.current()
    assert not portal.owned
    assert portal.in_loop()
    assert await portal.acall(_thread_name) == threading.current_thread().name
    name = await anyio.to_thread.run_sync(portal.call, _thread_name)
    assert name == threading.current_thread().name  # ran here, in the caller's loop
    portal.close()  # leaves the caller's loop running
    assert portal.running
