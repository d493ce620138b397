"""How ``DaytonaProvider`` calls Daytona: SDK errors made neutral in one place,
502/503/504 and dropped connections retried for ``unavailable_window`` seconds, the SDK's
handle of each sandbox cached (it carries the toolbox URL), and toolbox calls bounded in
time so a toolbox that never answers raises instead of hanging the caller.

Nothing here knows what a sandbox's state means or where its paths resolve: why a
toolbox call failed is the provider's ``_toolbox_error``, which asks the control plane.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, ClassVar, TypeVar

import anyio
from daytona import AsyncDaytona, AsyncSandbox, DaytonaError

from provider_sdk import errors
from provider_sdk.retry import Backoff, retry
from provider_sdk_daytona._errors import is_transient, neutral

__all__ = ["CallsMixin"]

T = TypeVar("T")

_UNAVAILABLE_BACKOFF = Backoff(initial=0.1, factor=2, cap=2.0)
"""Pauses between retries of a call Daytona answered 502/503/504 or dropped."""


def _transient(exc: Exception) -> bool:
    return isinstance(exc, DaytonaError) and is_transient(exc)


class CallsMixin:
    """Translated, retried and bounded calls to Daytona for ``DaytonaProvider``."""

    name: ClassVar[str]
    _window: float
    _request_timeout: float
    _sandboxes: dict[str, AsyncSandbox]

    if TYPE_CHECKING:
        @property
        def client(self) -> AsyncDaytona: ...
        async def _toolbox_error(self, sandbox_id: str,
                                 exc: DaytonaError) -> errors.SandboxError: ...

    @contextlib.contextmanager
    def _translate(self, sandbox_id: str | None = None,
                   not_found: type[errors.NotFound] = errors.SandboxNotFound) -> Iterator[None]:
        """The one place SDK errors become neutral ones."""
        try:
            yield
        except DaytonaError as exc:
            raise neutral(exc, sandbox_id=sandbox_id, not_found=not_found) from exc

    async def _retrying(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op``, retrying 502/503/504 and dropped connections for the window."""
        return await retry(op, retry_on=_transient, backoff=_UNAVAILABLE_BACKOFF,
                           timeout=self._window)

    async def _sandbox(self, sandbox_id: str) -> AsyncSandbox:
        """The SDK's handle (cached: it carries the toolbox URL)."""
        found = self._sandboxes.get(sandbox_id)
        if found is None:
            found = await self._fetch(sandbox_id)
        return found

    async def _fetch(self, sandbox_id: str) -> AsyncSandbox:
        with self._translate(sandbox_id):
            found = await self._retrying(lambda: self.client.get(sandbox_id))
        self._sandboxes[sandbox_id] = found
        return found

    async def _refreshed(self, sandbox_id: str) -> AsyncSandbox:
        """The SDK's handle as the control plane sees the sandbox now: the cached one
        refreshed in place (one GET, and no new handle to build), else fetched."""
        found = self._sandboxes.get(sandbox_id)
        if found is None:
            return await self._fetch(sandbox_id)
        with self._translate(sandbox_id):
            await self._retrying(found.refresh_data)
        return found

    async def _toolbox(self, sandbox_id: str, call: Callable[[AsyncSandbox], Awaitable[T]], *,
                       wait: float | None = 0.0) -> T:
        """Run a toolbox call; translate its failure once. It may take ``wait`` seconds
        (0: ``request_timeout``; ``None``: as long as it runs), then ``OperationTimeout``."""
        sandbox = await self._sandbox(sandbox_id)
        try:
            with self._deadline(sandbox_id, self._request_timeout if wait == 0 else wait):
                return await call(sandbox)
        except DaytonaError as exc:
            raise await self._toolbox_error(sandbox_id, exc) from exc

    @contextlib.contextmanager
    def _deadline(self, sandbox_id: str, seconds: float | None) -> Iterator[None]:
        """Bound a call in time: a toolbox that accepts a request and never answers
        raises ``OperationTimeout`` instead of hanging the caller."""
        if seconds is None:
            yield
            return
        try:
            with anyio.fail_after(seconds):
                yield
        except TimeoutError:
            raise errors.OperationTimeout(f"the sandbox did not answer within {seconds:g} s",
                                          provider=self.name, sandbox_id=sandbox_id) from None
