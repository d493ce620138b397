"""A file's read asked for alongside the check that guards it, for providers whose
backend must be told a file from a device, FIFO or socket before it reads one (its read
of ``/dev/zero`` never ends, of a FIFO waits for a writer): one round trip, not two.

:func:`read_after_check` starts both at once and hands back the read only once the
check has passed; no byte is taken from the read before. A check that finds a special
file gives the read up (cancelled while it waits, closed if it had opened), and its
:class:`~provider_sdk.errors.NotARegularFile` is raised, whatever the read said.
Otherwise the read's own error (a missing file, a directory) comes before the check's,
as it says best what is wrong.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from provider_sdk.errors import NotARegularFile

__all__ = ["read_after_check"]

T = TypeVar("T")


async def read_after_check(check: Callable[[], Awaitable[None]],
                           open_read: Callable[[], Awaitable[T]],
                           close: Callable[[T], Awaitable[None]]) -> T:
    """``open_read()``'s result once ``check()`` has returned, the two run together.

    Raises:
        NotARegularFile: from ``check``: the read is closed (or cancelled) first.
        Exception: else the read's error, if it failed; else the check's.
    """
    opened: list[T] = []
    read_failed: list[Exception] = []

    async def read() -> None:
        try:
            opened.append(await open_read())
        except Exception as exc:  # raised below, once the check's outcome is known
            read_failed.append(exc)

    check_failed: Exception | None = None
    async with anyio.create_task_group() as reading:
        reading.start_soon(read)
        try:
            await check()
        except Exception as exc:
            check_failed = exc
            if isinstance(exc, NotARegularFile):
                reading.cancel_scope.cancel()
    if check_failed is None and not read_failed:
        return opened[0]
    with anyio.CancelScope(shield=True):
        for reader in opened:
            await close(reader)
    if check_failed is not None and (isinstance(check_failed, NotARegularFile)
                                     or not read_failed):
        raise check_failed
    raise read_failed[0]
