"""The event loop a backend's provider lives in, and the two ways calls reach it.

A provider's clients belong to the loop that opened them. A backend made by
``ProviderSandbox.create`` opens its provider in a loop of its own, in a thread (a
blocking portal); one made by ``acreate`` lives in the caller's loop. Either way:

- an async method awaited in that loop runs there directly, on the async API;
- an async method awaited in another loop is scheduled onto the provider's loop and
  awaited as a future: no thread is taken, and cancelling the caller cancels the work;
- a sync method blocks on the provider's loop from any other thread.

This module must not know deepagents or any provider.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

__all__ = ["ProviderLoop"]

T = TypeVar("T")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ProviderLoop:
    """The loop that runs a provider's coroutines."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *,
                 portal: BlockingPortal | None = None,
                 stack: contextlib.ExitStack | None = None) -> None:
        self._loop = loop
        self._portal = portal
        self._stack = stack

    @classmethod
    def start(cls) -> ProviderLoop:
        """A loop of its own, in a daemon thread, until :meth:`close`.

        A daemon thread, so that a backend nobody closed does not hold the interpreter
        at exit (its sandbox outlives the process, as every sandbox does).
        """
        ready = threading.Event()
        found: list[tuple[BlockingPortal, asyncio.AbstractEventLoop]] = []
        failed: list[BaseException] = []

        async def serve() -> None:
            async with BlockingPortal() as portal:
                found.append((portal, asyncio.get_running_loop()))
                ready.set()
                await portal.sleep_until_stopped()

        def run() -> None:
            try:
                anyio.run(serve, backend="asyncio")
            except BaseException as exc:
                failed.append(exc)
            finally:
                ready.set()

        thread = threading.Thread(target=run, name="provider-sdk-deepagents", daemon=True)
        thread.start()
        ready.wait()
        if not found:
            raise RuntimeError("the backend's event loop did not start") from (
                failed[0] if failed else None)
        portal, loop = found[0]
        def stop() -> None:
            portal.call(portal.stop)
            thread.join()

        stack = contextlib.ExitStack()
        stack.callback(stop)
        return cls(loop, portal=portal, stack=stack)

    @classmethod
    def current(cls) -> ProviderLoop:
        """The caller's running loop; ``RuntimeError`` outside one."""
        return cls(asyncio.get_running_loop())

    @property
    def owned(self) -> bool:
        """Whether this object started the loop (and :meth:`close` stops it)."""
        return self._stack is not None

    def call(self, func: Callable[..., Awaitable[T]], /, *args: Any) -> T:
        """Run ``func(*args)`` in the provider's loop and wait for it, blocking.

        If the wait is interrupted (``KeyboardInterrupt``), the work is cancelled and
        its cleanup finishes before the interruption propagates.

        Raises:
            RuntimeError: called from the provider's own loop (it would wait on
                itself), or that loop no longer runs.
        """
        finished = threading.Event()

        async def run() -> T:
            try:
                return await func(*args)
            finally:
                finished.set()

        if _running_loop() is self._loop:
            raise RuntimeError("this backend's provider runs in the calling event loop: "
                               "use the async methods (aexecute, aread, ...) there")
        future: concurrent.futures.Future[T]
        if self._portal is not None:
            future = self._portal.start_task_soon(run)
        else:
            if self._loop.is_closed() or not self._loop.is_running():
                raise RuntimeError("the event loop this backend was made in no longer runs")
            future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            return future.result()
        except BaseException:
            if not future.done():
                future.cancel()
                finished.wait()
            raise

    async def acall(self, func: Callable[..., Awaitable[T]], /, *args: Any) -> T:
        """Await ``func(*args)``: directly in the provider's loop, else scheduled onto it."""
        if _running_loop() is self._loop:
            return await func(*args)
        if self._portal is not None:
            future = self._portal.start_task_soon(func, *args)
        else:
            if self._loop.is_closed() or not self._loop.is_running():
                raise RuntimeError("the event loop this backend was made in no longer runs")
            future = asyncio.run_coroutine_threadsafe(_await(func, *args), self._loop)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop a loop this object started. Safe to call twice."""
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()


async def _await(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await func(*args)
