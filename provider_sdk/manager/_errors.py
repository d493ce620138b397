"""What leaves the manager, its pools and the reaper: typed errors, and background
failures that are logged and counted instead.

Providers and stores raise :class:`~provider_sdk.errors.SandboxError` subclasses, but an
operating system's error can still slip through one (a cgroup that will not go away:
``OSError`` EBUSY), as can a bug. :func:`typed` turns whatever else escapes a public
method into a typed error, so an application's ``except SandboxError`` always holds.
Work in the background never raises into the application's task group:
:class:`Failures` counts each failure by what failed, and logs it (when structlog is
configured) as ``sandbox.<component>.background.failed``.

This module must not talk to a store or a provider.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from collections.abc import Awaitable, Iterator
from typing import Any

import structlog

from provider_sdk.errors import OperationTimeout, SandboxError, Unavailable
from provider_sdk.events import logger

if sys.version_info < (3, 11):  # anyio installs the backport there
    from exceptiongroup import BaseExceptionGroup

__all__ = ["Failures", "typed"]


@contextlib.contextmanager
def typed(what: str, provider: str | None = None, sandbox_id: str | None = None
          ) -> Iterator[None]:
    """Let :class:`~provider_sdk.errors.SandboxError` through; raise anything else that
    escapes (an :class:`Exception`, never a cancellation) as one: ``TimeoutError`` as
    :class:`~provider_sdk.errors.OperationTimeout`, ``OSError`` as
    :class:`~provider_sdk.errors.Unavailable` (the host's trouble, worth a retry), the
    rest as a plain :class:`~provider_sdk.errors.SandboxError`."""
    try:
        yield
    except SandboxError:
        raise
    except Exception as exc:
        raise translated(exc, what, provider, sandbox_id) from exc


def translated(exc: Exception, what: str, provider: str | None = None,
               sandbox_id: str | None = None) -> SandboxError:
    """``exc`` as a :class:`~provider_sdk.errors.SandboxError` (see :func:`typed`)."""
    if isinstance(exc, SandboxError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        leaves = _leaves(exc)
        if len(leaves) == 1 and isinstance(leaves[0], Exception):
            return translated(leaves[0], what, provider, sandbox_id)
    message = f"{what}: {type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError):
        return OperationTimeout(message, provider=provider, sandbox_id=sandbox_id)
    if isinstance(exc, OSError):
        return Unavailable(message, provider=provider, sandbox_id=sandbox_id)
    return SandboxError(message, provider=provider, sandbox_id=sandbox_id)


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


class Failures:
    """Failures of background work, counted by what failed (``chore``).

    Attributes:
        counts: how many times each chore failed since the component was made.
    """

    def __init__(self, component: str, provider: str) -> None:
        self.component = component
        self.provider = provider
        self.counts: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        """Every failure counted so far."""
        return sum(self.counts.values())

    def report(self, chore: str, exc: BaseException) -> None:
        """Count a failure of ``chore``, and log it where structlog is configured."""
        self.counts[chore] += 1
        if structlog.is_configured():
            logger.warning(f"sandbox.{self.component}.background.failed",
                           provider=self.provider, chore=chore, error=type(exc).__name__)

    async def quietly(self, chore: str, work: Awaitable[Any]) -> None:
        """Await ``work``; a failure (any :class:`Exception`) is reported, not raised."""
        try:
            await work
        except Exception as exc:
            self.report(chore, exc)
