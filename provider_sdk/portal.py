"""The one bridge between threads and event loops: a :class:`Portal` into a loop.

A portal reaches one asyncio event loop: one it runs in a daemon thread of its own
(:meth:`Portal.start`), or the caller's running loop (:meth:`Portal.current`). Work is
handed to that loop three ways:

- :meth:`Portal.call` blocks a thread that is not the loop's until the work is done;
- :meth:`Portal.acall` awaits it from any event loop (asyncio or trio): in the portal's
  own loop it runs directly, from another it is scheduled there;
- :meth:`Portal.spawn` starts it there and returns at once.

Whichever way, interrupting or cancelling the caller cancels the work, and the caller
gets control back only once the work's cleanup has run: an interrupted ``exec`` leaves
no process behind. The sync facade (:mod:`provider_sdk.sync`), the adapters' backends
and the port proxy all reach their loops through this module and no other way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Generic, ParamSpec, TypeVar, cast

import anyio
import anyio.to_thread

__all__ = ["Portal"]


def _library_mark() -> contextvars.ContextVar[str | None] | None:
    """The mark by which async libraries tell which loop runs (trio sets it)."""
    try:
        import sniffio
    except ImportError:  # pragma: no cover - then only asyncio can run here
        return None
    return sniffio.current_async_library_cvar


_LIBRARY = _library_mark()

T = TypeVar("T")
P = ParamSpec("P")

#: How long a new loop thread may take to start.
START_TIMEOUT = 30.0


class Portal:
    """One asyncio event loop, and the ways other threads and loops reach it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *,
                 stop: Callable[[], None] | None = None) -> None:
        """A portal into ``loop``, already running. ``stop`` ends the loop (and joins
        its thread) on :meth:`close`; without it the portal borrows a loop someone
        else runs, and :meth:`close` leaves it running."""
        self._loop = loop
        self._stop = stop
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()  # held: the loop keeps weak ones

    @classmethod
    def start(cls, *, name: str = "provider-sdk") -> Portal:
        """A loop of its own, in a daemon thread named ``name``, until :meth:`close`.

        A daemon thread, so that a portal nobody closed does not hold the interpreter at
        exit (its sandboxes outlive the process, as every sandbox does).

        Raises:
            RuntimeError: the loop did not start.
        """
        ready = threading.Event()
        found: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        failed: list[BaseException] = []

        async def serve() -> None:
            stopped = asyncio.Event()
            found.append((asyncio.get_running_loop(), stopped))
            ready.set()
            await stopped.wait()

        def run() -> None:
            try:
                anyio.run(serve, backend="asyncio")
            except BaseException as exc:  # reported to the starter below
                failed.append(exc)
            finally:
                ready.set()

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        if not ready.wait(START_TIMEOUT) or not found:
            raise RuntimeError("the event loop thread did not start") from (
                failed[0] if failed else None)
        loop, stopped = found[0]

        def stop() -> None:
            if thread.is_alive():
                loop.call_soon_threadsafe(stopped.set)
                thread.join()

        return cls(loop, stop=stop)

    @classmethod
    def current(cls) -> Portal:
        """A portal into the caller's running asyncio loop, which it does not own.

        Raises:
            RuntimeError: not called from a running asyncio loop.
        """
        return cls(asyncio.get_running_loop())

    def borrowed(self) -> Portal:
        """A portal into the same loop whose :meth:`close` leaves the loop running."""
        return Portal(self._loop)

    @property
    def owned(self) -> bool:
        """Whether :meth:`close` stops the loop (this portal started it)."""
        return self._stop is not None

    @property
    def running(self) -> bool:
        """Whether the loop still runs (and takes work)."""
        return self._loop.is_running() and not self._loop.is_closed()

    def in_loop(self) -> bool:
        """Whether the caller runs in the portal's own loop."""
        return _running_loop() is self._loop

    # ------------------------------------------------------------------ handing work

    def spawn(self, func: Callable[P, Awaitable[T]], /, *args: P.args,
              **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        """Start ``func(*args)`` in the loop; its future. Cancelling the future cancels
        the work.

        Raises:
            RuntimeError: the loop no longer runs.
        """
        return self._submit(functools.partial(func, *args, **kwargs)).future

    def call(self, func: Callable[P, Awaitable[T]], /, *args: P.args,
             **kwargs: P.kwargs) -> T:
        """Run ``func(*args, **kwargs)`` in the loop and wait for it, blocking this thread.

        If the wait is interrupted (``KeyboardInterrupt``), the work is cancelled and its
        cleanup finishes before the interruption propagates.

        Raises:
            RuntimeError: called from the loop itself (it would wait on itself), or the
                loop no longer runs.
        """
        if self.in_loop():
            raise RuntimeError("a blocking call from the event loop it would wait on: "
                               "use the async methods there instead")
        work: _Work[T] = _Work()
        try:
            # Inside the try: an interruption may come while the work is handed over.
            self._schedule(work, functools.partial(func, *args, **kwargs))
            return work.future.result()
        except BaseException:
            self._abandon(work)
            raise

    def _abandon(self, work: _Work[Any]) -> None:
        """Cancel work its caller gave up on, and wait for its cleanup. The caller may
        have been interrupted before the work reached the loop, or at any moment after."""
        if work.future.done():
            return
        work.future.cancel()
        flushed = threading.Event()
        try:
            # Once this runs, whatever was handed to the loop before it has run too: the
            # work has begun (and will be settled), or never will begin.
            self._loop.call_soon_threadsafe(flushed.set)
        except RuntimeError:  # the loop is closed: nothing of the work runs any more
            return
        while not flushed.wait(0.1):
            if not self.running:  # the loop stopped meanwhile: nothing runs any more
                return
        if work.begun:
            work.settled.wait()

    async def acall(self, func: Callable[P, Awaitable[T]], /, *args: P.args,
                    **kwargs: P.kwargs) -> T:
        """Await ``func(*args, **kwargs)`` in the loop: directly from the loop itself, else
        scheduled onto it, from an asyncio or a trio loop. Cancelling the caller cancels
        the work and waits for its cleanup."""
        if self.in_loop():
            return await func(*args, **kwargs)
        work = self._submit(functools.partial(func, *args, **kwargs))
        try:
            if _running_loop() is not None:
                return await asyncio.wrap_future(work.future)
            return await anyio.to_thread.run_sync(work.future.result, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            work.future.cancel()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(work.settled.wait)
            raise

    def _submit(self, func: Callable[[], Awaitable[T]]) -> _Work[T]:
        work: _Work[T] = _Work()
        self._schedule(work, func)
        return work

    def _schedule(self, work: _Work[T], func: Callable[[], Awaitable[T]]) -> None:
        if not self.running:
            raise RuntimeError("the event loop this was made in was closed or no longer runs")
        loop = self._loop

        def begin() -> None:
            if work.future.cancelled():  # cancelled before it began: nothing ran
                work.settled.set()
                return
            work.begun = True
            task = loop.create_task(_await(func, work.future))
            self._tasks.add(task)
            work.future.add_done_callback(
                lambda future: loop.call_soon_threadsafe(task.cancel)
                if future.cancelled() else None)
            task.add_done_callback(lambda done: self._end(work, done))

        loop.call_soon_threadsafe(begin)

    def _end(self, work: _Work[T], task: asyncio.Task[T]) -> None:
        self._tasks.discard(task)
        # The caller may cancel the future meanwhile, from its own thread.
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            if task.cancelled():
                work.future.cancel()
            elif (exc := task.exception()) is not None:
                work.future.set_exception(exc)
            else:
                work.future.set_result(task.result())
        work.settled.set()

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator that lives in the loop from this thread; closed when
        abandoned."""
        done = object()

        async def step() -> T | object:
            try:
                return await iterator.__anext__()
            except StopAsyncIteration:
                return done

        try:
            while (item := self.call(step)) is not done:
                yield cast(T, item)
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None and self.running:
                self.call(aclose)

    @contextlib.contextmanager
    def hold(self, manager: contextlib.AbstractAsyncContextManager[T]) -> Iterator[T]:
        """Enter an async context manager in the loop and leave it there when the
        ``with`` block ends: both in one task, as task groups inside it need.

        Raises:
            Exception: what entering or leaving ``manager`` raised.
        """
        entered: concurrent.futures.Future[tuple[T, asyncio.Event]] = \
            concurrent.futures.Future()

        async def keep() -> None:
            leave = asyncio.Event()
            async with manager as value:
                entered.set_result((value, leave))
                await leave.wait()

        work = self._submit(keep)
        either: list[concurrent.futures.Future[Any]] = [entered, work.future]
        concurrent.futures.wait(either, return_when=concurrent.futures.FIRST_COMPLETED)
        if not entered.done():
            work.future.result()  # raises what entering raised
            raise RuntimeError("the context manager ended without being entered")
        value, leave = entered.result()
        try:
            yield value
        finally:
            self._loop.call_soon_threadsafe(leave.set)
            work.future.result()

    def close(self) -> None:
        """Stop a loop this portal started and join its thread. Safe to call twice;
        a borrowed loop keeps running."""
        with self._lock:
            stop, self._stop = self._stop, None
        if stop is not None:
            stop()


class _Work(Generic[T]):
    """Work handed to the loop: its result, and an event set once it is over (done, or
    cancelled before it began), cleanup included."""

    def __init__(self) -> None:
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.settled = threading.Event()
        self.begun = False
        """Set in the loop when the work's task is made."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The caller's running asyncio loop; ``None`` outside one (or under trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _await(func: Callable[[], Awaitable[T]],
                 future: concurrent.futures.Future[T]) -> T:
    # A cancel that lands between the hand-over and this first step of the task reaches
    # the task only after this step (through the loop's queue): the work must not begin.
    if future.cancelled():
        raise asyncio.CancelledError
    # The work runs in a copy of its caller's context (its log fields and trace span go
    # with it), but in this loop: a trio caller's mark must not make it look like trio.
    if _LIBRARY is not None:
        _LIBRARY.set(None)
    return await func()
