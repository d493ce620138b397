"""``provider_sdk.retry``: pauses, deadlines, attempt limits, retryable exceptions and
cancellation, on an event loop whose clock is virtual: it jumps to the next timer
whenever nothing is ready, so every pause is exact and no test waits on the wall."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import selectors
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from provider_sdk.retry import Attempts, Backoff, retry

pytestmark = pytest.mark.anyio


class _JumpingSelector(selectors.BaseSelector):
    """Never blocks: where the loop would wait for its next timer, the clock jumps."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None
               ) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if not ready and timeout is not None and timeout > 0:
            self._loop.now += timeout
        return ready

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock (``anyio.current_time()`` reads it)."""

    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        return self.now


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return "asyncio", {"loop_factory": VirtualClockLoop}


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


class Flaky:
    """An operation that raises ``errors`` in turn, then returns ``"done"``; it notes
    the clock at each call."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls: list[float] = []

    async def __call__(self) -> str:
        self.calls.append(anyio.current_time())
        if self.errors:
            raise self.errors.pop(0)
        return "done"

    def pauses(self) -> list[float]:
        return _gaps(self.calls)


# ------------------------------------------------------------------- Backoff

def test_pauses_grow_by_the_factor_up_to_the_cap() -> None:
    backoff = Backoff(initial=0.1, factor=3, cap=1.0)
    assert [round(backoff.pause(n), 6) for n in range(1, 6)] == [0.1, 0.3, 0.9, 1.0, 1.0]
    assert backoff.pause(10_000) == 1.0  # no overflow


def test_the_default_pauses_double_from_a_twentieth_of_a_second_to_one() -> None:
    assert [Backoff().pause(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_pauses_that_shrink_follow_the_formula_under_the_cap() -> None:
    """A factor below 1: the first pauses are at the cap, then they shrink."""
    backoff = Backoff(initial=4.0, factor=0.5, cap=1.0)
    assert [backoff.pause(n) for n in range(1, 6)] == [1.0, 1.0, 1.0, 0.5, 0.25]


def test_a_pause_after_very_many_attempts_is_computed_at_once() -> None:
    assert Backoff(initial=0.1, factor=1).pause(2**62) == 0.1  # a steady poll, for ever
    assert Backoff(initial=0.1, factor=3).pause(2**62) == 1.0
    assert Backoff(initial=0.0, factor=3).pause(10_000) == 0.0  # 0 stays 0


def test_jitter_is_drawn_from_the_given_source() -> None:
    backoff = Backoff(initial=1.0, jitter=1)  # a jitter of 1 is allowed: 0 to the whole
    first = [backoff.pause(1, random.Random(7)) for _ in range(3)]
    again = [backoff.pause(1, random.Random(7)) for _ in range(3)]
    assert first == again == [1.0 - random.Random(7).random()] * 3


def test_jitter_shortens_each_pause_by_at_most_its_fraction() -> None:
    backoff = Backoff(initial=1.0, factor=1, cap=1.0, jitter=0.5)
    rng = random.Random(7)
    pauses = [backoff.pause(1, rng) for _ in range(200)]
    assert all(0.5 <= p <= 1.0 for p in pauses)
    assert len(set(pauses)) > 100  # they differ
    assert Backoff(initial=1.0, jitter=0).pause(1, rng) == 1.0


@pytest.mark.parametrize("fields", [{"initial": -1}, {"factor": float("nan")},
                                    {"cap": float("inf")}, {"jitter": 1.5}])
def test_a_backoff_refuses_nonsense(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(fields))):
        Backoff(**fields)


# ------------------------------------------------------------------ Attempts

async def test_attempts_come_at_once_then_after_each_pause() -> None:
    seen = []
    async for attempt in Attempts(Backoff(initial=0.5, factor=2, cap=3.0), attempts=6):
        seen.append((attempt, anyio.current_time()))
    numbers = [n for n, _ in seen]
    gaps = _gaps([t for _, t in seen])
    assert numbers == [1, 2, 3, 4, 5, 6]
    assert gaps == [0.5, 1.0, 2.0, 3.0, 3.0]


async def test_attempts_end_before_a_pause_that_would_pass_the_deadline() -> None:
    start = anyio.current_time()
    tries = Attempts(Backoff(initial=1.0, factor=2, cap=100), timeout=10)
    async for _ in tries:
        pass
    # 1 + 2 + 4 = 7 s of pauses; the next (8 s) would end at 15 > 10.
    assert (tries.made, anyio.current_time() - start) == (4, 7.0)
    assert tries.deadline == start + 10
    assert tries.remaining() == 3.0


async def test_a_pause_may_end_on_the_deadline_itself() -> None:
    start = anyio.current_time()
    tries = Attempts(Backoff(initial=5.0, factor=1, cap=5.0), timeout=10)
    times = [anyio.current_time() - start async for _ in tries]
    assert times == [0.0, 5.0, 10.0]


async def test_the_timeout_runs_from_the_start_of_the_first_attempt() -> None:
    """A first attempt that takes most of the time leaves no room for a pause."""
    tries = Attempts(Backoff(initial=1.0), timeout=10)
    async for attempt in tries:
        if attempt == 1:
            await anyio.sleep(9.5)
    assert tries.made == 1


async def test_remaining_counts_down_to_zero_and_never_below() -> None:
    tries = Attempts(timeout=2, attempts=1)
    async for _ in tries:
        pass
    await anyio.sleep(1.5)
    assert tries.remaining() == 0.5
    await anyio.sleep(1.0)
    assert tries.remaining() == 0.0
    assert Attempts().remaining() == math.inf


async def test_no_attempt_after_the_deadline_even_after_a_reset() -> None:
    tries = Attempts(timeout=5)
    async for _ in tries:
        await anyio.sleep(5.5)  # past the deadline, yet it made progress
        tries.reset()
    assert tries.made == 1


async def test_an_absolute_deadline_and_a_pause_before_the_first() -> None:
    start = anyio.current_time()
    tries = Attempts(Backoff(initial=2.0, factor=1, cap=2.0), deadline=start + 5,
                     pause_first=True)
    times = [anyio.current_time() async for _ in tries]
    assert [t - start for t in times] == [2.0, 4.0]


async def test_at_least_lengthens_the_next_pause_only() -> None:
    tries = Attempts(Backoff(initial=0.1, factor=1), attempts=4)
    times = []
    async for attempt in tries:
        times.append(anyio.current_time())
        if attempt == 1:
            tries.at_least(5.0)  # a server's Retry-After
            tries.at_least(None)
        if attempt == 2:
            tries.at_least(0.01)  # shorter than the backoff: the backoff wins
    assert _gaps(times) == [5.0, 0.1, 0.1]


async def test_reset_makes_the_next_attempt_immediate_and_restarts_the_pauses() -> None:
    tries = Attempts(Backoff(initial=1.0, factor=2, cap=100), attempts=6)
    times = []
    async for attempt in tries:
        times.append(anyio.current_time())
        if attempt == 3:
            tries.reset()
    assert _gaps(times) == [1.0, 2.0, 0.0, 1.0, 2.0]


def test_attempts_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Attempts(attempts=0)
    with pytest.raises(ValueError, match="not both"):
        Attempts(timeout=1, deadline=2)


def test_limits_are_keywords_only() -> None:
    """A bare number could be a timeout, a deadline or a count: it is refused."""
    with pytest.raises(TypeError):
        Attempts(Backoff(), 10)  # type: ignore[misc]
    with pytest.raises(TypeError):
        retry(Flaky(), ConnectionError)  # type: ignore[misc]


# --------------------------------------------------------------------- retry

async def test_retry_returns_once_the_operation_succeeds() -> None:
    op = Flaky(ConnectionError("a"), ConnectionError("b"))
    result = await retry(op, retry_on=ConnectionError,
                         backoff=Backoff(initial=0.2, factor=2), timeout=60)
    assert (result, op.pauses()) == ("done", [0.2, 0.4])


async def test_retry_raises_what_is_not_retryable_at_once() -> None:
    op = Flaky(ConnectionError("a"), KeyError("not this"))
    with pytest.raises(KeyError, match="not this"):
        await retry(op, retry_on=(ConnectionError, TimeoutError), timeout=60)
    assert len(op.calls) == 2


async def test_retry_takes_a_predicate() -> None:
    op = Flaky(OSError(1, "busy"), OSError(2, "gone"))
    with pytest.raises(OSError, match="gone"):
        await retry(op, retry_on=lambda exc: isinstance(exc, OSError) and exc.errno == 1)
    assert len(op.calls) == 2


async def test_retry_gives_up_with_the_last_error_at_the_attempt_limit() -> None:
    op = Flaky(*(ConnectionError(str(n)) for n in range(10)))
    with pytest.raises(ConnectionError, match=r"^2$"):
        await retry(op, retry_on=ConnectionError, attempts=3)
    assert len(op.calls) == 3


async def test_retry_makes_one_attempt_when_told_so() -> None:
    op = Flaky(ConnectionError("only"))
    with pytest.raises(ConnectionError, match="only"):
        await retry(op, retry_on=ConnectionError, attempts=1)
    assert len(op.calls) == 1


async def test_retry_keeps_a_limit_of_many_attempts() -> None:
    op = Flaky(*(ConnectionError(str(n)) for n in range(400)))
    with pytest.raises(ConnectionError, match=r"^299$"):
        await retry(op, retry_on=ConnectionError, backoff=Backoff(initial=0.0), attempts=300)
    assert len(op.calls) == 300


async def test_retry_gives_up_before_a_pause_past_the_deadline() -> None:
    op = Flaky(*(ConnectionError(str(n)) for n in range(10)))
    with pytest.raises(ConnectionError, match=r"^3$"):
        await retry(op, retry_on=ConnectionError,
                    backoff=Backoff(initial=1.0, factor=2, cap=100), timeout=10)
    assert op.pauses() == [1.0, 2.0, 4.0]


async def test_retry_honours_a_retry_after_hint() -> None:
    class Busy(Exception):
        def __init__(self, after: float | None) -> None:
            super().__init__("busy")
            self.after = after

    op = Flaky(Busy(3.0), Busy(None))
    result = await retry(op, retry_on=Busy, backoff=Backoff(initial=0.5, factor=1),
                         retry_after=lambda exc: getattr(exc, "after", None))
    assert (result, op.pauses()) == ("done", [3.0, 0.5])


async def test_a_cancellation_is_never_retried() -> None:
    """Cancelled while an attempt runs or during a pause, the retry stops at once, even
    told to retry every Exception with no limit."""
    op = Flaky(*(ConnectionError() for _ in range(1000)))
    start = anyio.current_time()
    with anyio.move_on_after(2.5) as scope:
        await retry(op, retry_on=Exception, backoff=Backoff(initial=1.0, factor=1))
    assert scope.cancelled_caught
    assert (len(op.calls), anyio.current_time() - start) == (3, 2.5)

    async def hangs() -> None:
        await anyio.sleep_forever()

    with anyio.move_on_after(1) as scope:
        await retry(hangs, retry_on=Exception)
    assert scope.cancelled_caught
