"""Retries and polls with backoff, on anyio's clock: one copy for every provider.

- :class:`Backoff` says how long to pause between attempts: ``initial`` seconds, times
  ``factor`` after each attempt, never more than ``cap``; with ``jitter``, each pause is
  shortened by up to that fraction, at random, so that clients that failed together do
  not all come back together.
- :class:`Attempts` is an async iterator of attempts, for a loop that decides for itself
  when it is done (a poll until a state changes): the first attempt comes at once, each
  next one after a pause; it ends when the attempts are used up or the next pause would
  end past the deadline.
- :func:`retry` runs an operation until it returns, retrying the exceptions it is told
  are retryable, and raises the last one when it gives up.

Time is ``anyio.current_time()`` and pauses are ``anyio.sleep``, so a test's clock (or a
cancel scope's deadline, which uses the same clock) governs them. Only
:class:`Exception` is ever retried: a cancellation goes through at once, as does
anything at a pause (which is a checkpoint); nothing is left behind to clean up.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import attrs

__all__ = ["Attempts", "Backoff", "RetryOn", "retry"]

T = TypeVar("T")

RetryOn = type[Exception] | tuple[type[Exception], ...] | Callable[[Exception], bool]
"""Which exceptions are retried: classes, or a predicate over the exception."""


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{attribute.name} must be a finite number of at least 0, "
                         f"got {value!r}")


@attrs.frozen
class Backoff:
    """How long to pause before each next attempt.

    The pause after attempt ``n`` (from 1) is ``min(cap, initial * factor ** (n - 1))``,
    shortened by a random fraction of at most ``jitter`` of it. The default: 0.05 s,
    doubled after each attempt, at most 1 s, no jitter.
    """

    initial: float = attrs.field(default=0.05, validator=_positive)
    """The first pause, in seconds."""
    factor: float = attrs.field(default=2.0, validator=_positive)
    """What each pause is multiplied by for the next (1: a steady poll)."""
    cap: float = attrs.field(default=1.0, validator=_positive)
    """The longest pause, in seconds."""
    jitter: float = attrs.field(default=0.0, validator=_positive)
    """The largest fraction of a pause taken off at random (0 to 1)."""

    def __attrs_post_init__(self) -> None:
        if self.jitter > 1:
            raise ValueError(f"jitter is a fraction from 0 to 1, got {self.jitter!r}")

    def pause(self, attempt: int, rng: random.Random | None = None) -> float:
        """The pause after attempt number ``attempt`` (from 1)."""
        try:  # in floats: a float's power takes one step however many attempts
            base = min(self.initial * float(self.factor) ** (attempt - 1), self.cap)
        except OverflowError:  # a factor above 1, after very many attempts: past the cap
            base = self.cap if self.initial else 0.0
        if self.jitter:
            base -= base * self.jitter * (rng or random).random()
        return base


class Attempts:
    """An async iterator of attempts (yielding their numbers, from 1), paused as
    ``backoff`` says; ``async for attempt in Attempts(...)``.

    Args:
        backoff: the pauses between attempts.
        timeout: seconds from the first attempt after which no pause may end; or
        deadline: the same as a time on anyio's clock (``anyio.current_time()``).
        attempts: the most attempts (at least 1); default: no limit.
        pause_first: pause before the first attempt too (it follows one made before).
        rng: the source of the jitter (default: the ``random`` module's).

    With neither limit, the iteration goes on until the loop leaves it (or a cancel
    scope around it ends it).
    """

    def __init__(self, backoff: Backoff | None = None, *, timeout: float | None = None,
                 deadline: float | None = None, attempts: int | None = None,
                 pause_first: bool = False, rng: random.Random | None = None) -> None:
        if timeout is not None and deadline is not None:
            raise ValueError("give a timeout or a deadline, not both")
        if attempts is not None and attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts!r}")
        self.backoff = backoff or Backoff()
        self._timeout = timeout
        self._deadline = deadline
        self._limit = attempts
        self._pause_first = pause_first
        self._rng = rng
        self._made = 0
        self._step = 0
        self._at_least = 0.0
        self._now = False

    @property
    def made(self) -> int:
        """How many attempts have begun."""
        return self._made

    @property
    def deadline(self) -> float:
        """The deadline on anyio's clock (``inf``: none), fixed by the first attempt."""
        return math.inf if self._deadline is None else self._deadline

    def remaining(self) -> float:
        """Seconds left before the deadline (``inf``: none; never below 0)."""
        return max(0.0, self.deadline - anyio.current_time())

    def at_least(self, seconds: float | None) -> None:
        """Make the next pause at least ``seconds`` (a server's ``Retry-After``)."""
        if seconds is not None and math.isfinite(seconds):
            self._at_least = max(self._at_least, seconds)

    def reset(self) -> None:
        """Progress was made: the next attempt comes at once, and the pauses after it
        start again from ``initial``."""
        self._step = 0
        self._now = True

    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> int:
        if self._made == 0 and self._deadline is None and self._timeout is not None:
            self._deadline = anyio.current_time() + self._timeout
        if self._limit is not None and self._made >= self._limit:
            raise StopAsyncIteration
        if self._made or self._pause_first:
            if self._now:
                pause = self._at_least
            else:
                self._step += 1
                pause = max(self.backoff.pause(self._step, self._rng), self._at_least)
            self._now, self._at_least = False, 0.0
            if anyio.current_time() + pause > self.deadline:
                raise StopAsyncIteration
            await anyio.sleep(pause)
        self._made += 1
        return self._made


def _retryable(exc: Exception, retry_on: RetryOn) -> bool:
    if isinstance(retry_on, (type, tuple)):
        return isinstance(exc, retry_on)
    return retry_on(exc)


async def retry(op: Callable[[], Awaitable[T]], *, retry_on: RetryOn,
                backoff: Backoff | None = None, timeout: float | None = None,
                deadline: float | None = None, attempts: int | None = None,
                retry_after: Callable[[Exception], float | None] | None = None,
                rng: random.Random | None = None) -> T:
    """Await ``op()`` until it returns; retry what ``retry_on`` accepts.

    Pauses, limits and ``rng`` are as :class:`Attempts` takes them; ``retry_after``
    reads from a retried exception the least pause before the next attempt (``None``:
    no such hint).

    Raises:
        Exception: what ``op`` raised that is not retryable, at once; or the last
            retryable one, when the attempts are used up or the next pause would end
            past the deadline.
    """
    tries = Attempts(backoff, timeout=timeout, deadline=deadline, attempts=attempts, rng=rng)
    last: Exception | None = None
    async for _ in tries:
        try:
            return await op()
        except Exception as exc:
            if not _retryable(exc, retry_on):
                raise
            last = exc
            if retry_after is not None:
                tries.at_least(retry_after(exc))
    assert last is not None  # the first attempt is always made
    raise last
