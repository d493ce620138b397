"""How the roles of ``DaytonaProvider`` call Daytona, and what they share:
:class:`DaytonaCalls`, one object every role holds.

It keeps the provider's settings, the SDK's client (made on first use), the SDK's handle
of each sandbox (it carries the toolbox URL) and what the roles remember of a sandbox
(its working directory, the files finished commands left, its background processes and
exposed ports). Its calls make SDK errors neutral in one place (:func:`translate`, and
:meth:`DaytonaCalls.toolbox_error` for a toolbox call, which asks the control plane why
it failed), retry 502/503/504 and dropped connections for ``unavailable_window``
seconds, and bound toolbox calls in time, so a toolbox that never answers raises instead
of hanging the caller. Where a relative path resolves is here too, since commands, files
and shells all resolve paths.

It holds no role's behaviour: creating, running and reading are the roles'.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import anyio
from daytona import AsyncDaytona, AsyncSandbox, DaytonaConfig, DaytonaError

from provider_sdk import errors
from provider_sdk.models import ExposedPort, SandboxState
from provider_sdk.retry import Backoff, retry
from provider_sdk.secret import Secret
from provider_sdk_daytona import _convert as convert
from provider_sdk_daytona import _exec as wrapper
from provider_sdk_daytona._errors import PROVIDER, code_of, is_transient, neutral, status_of

__all__ = ["DaytonaCalls", "translate"]

T = TypeVar("T")

_UNAVAILABLE_BACKOFF = Backoff(initial=0.1, factor=2, cap=2.0)
"""Pauses between retries of a call Daytona answered 502/503/504 or dropped."""


def _transient(exc: Exception) -> bool:
    return isinstance(exc, DaytonaError) and is_transient(exc)


@contextlib.contextmanager
def translate(sandbox_id: str | None = None,
              not_found: type[errors.NotFound] = errors.SandboxNotFound) -> Iterator[None]:
    """The one place SDK errors of control-plane calls become neutral ones."""
    try:
        yield
    except DaytonaError as exc:
        raise neutral(exc, sandbox_id=sandbox_id, not_found=not_found) from exc


class DaytonaCalls:
    """What the roles of one ``DaytonaProvider`` share: settings, client, caches, and
    the translated, retried and bounded calls through them.

    Args:
        api_key: the API key.
        api_url: the API's URL, or ``None`` for the SDK's default.
        target: the region, or ``None`` for the organisation's default.
        request_timeout: seconds one toolbox call may go unanswered.
        create_timeout: seconds a create, start or stop may take.
        window: seconds during which 502/503/504 answers are retried.
    """

    name = PROVIDER

    def __init__(self, *, api_key: Secret, api_url: str | None, target: str | None,
                 request_timeout: float, create_timeout: float, window: float) -> None:
        self._api_key = api_key
        self.api_url = api_url
        self.target = target
        self.request_timeout = request_timeout
        self.create_timeout = create_timeout
        self.window = window
        self._client: AsyncDaytona | None = None
        self.sandboxes: dict[str, AsyncSandbox] = {}
        """The SDK's handle of each sandbox (it carries the toolbox URL)."""
        self.workdirs: dict[str, str] = {}
        """Daytona's working directory of each sandbox, learnt when it first answers."""
        self.litter: dict[str, wrapper.Litter] = {}
        """Files that finished commands left in each sandbox, removed in batches."""
        self.processes: dict[tuple[str, int], tuple[str, str]] = {}
        """(sandbox, pid) -> (token, session command id) of background processes."""
        self.exposed: dict[tuple[str, int], tuple[ExposedPort, float]] = {}
        """(sandbox, port) -> the signed preview URL exposed, and when it expires."""

    def __repr__(self) -> str:
        return f"<DaytonaCalls api_url={self.api_url!r} target={self.target!r}>"

    @property
    def client(self) -> AsyncDaytona:
        """The SDK's async client (made on first use)."""
        if self._client is None:
            try:
                self._client = AsyncDaytona(DaytonaConfig(
                    api_key=self._api_key.reveal(), api_url=self.api_url, target=self.target))
            except DaytonaError as exc:
                raise errors.ConfigError(f"cannot configure the Daytona client: {exc}",
                                         provider=self.name) from exc
        return self._client

    async def close(self) -> None:
        """Close the client and drop the handles (a later call makes a new client)."""
        client, self._client = self._client, None
        self.sandboxes.clear()
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]

    def forget(self, sandbox_id: str) -> None:
        """Drop what the roles remember of a sandbox being killed: its working directory,
        its litter and its exposed ports (the control plane drops its handle once the
        sandbox is deleted)."""
        self.workdirs.pop(sandbox_id, None)
        self.litter.pop(sandbox_id, None)
        for key in [k for k in self.exposed if k[0] == sandbox_id]:
            del self.exposed[key]

    # ------------------------------------------------------------------- calls

    async def retrying(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op``, retrying 502/503/504 and dropped connections for the window."""
        return await retry(op, retry_on=_transient, backoff=_UNAVAILABLE_BACKOFF,
                           timeout=self.window)

    async def sandbox(self, sandbox_id: str) -> AsyncSandbox:
        """The SDK's handle (cached: it carries the toolbox URL)."""
        found = self.sandboxes.get(sandbox_id)
        if found is None:
            found = await self.fetch(sandbox_id)
        return found

    async def fetch(self, sandbox_id: str) -> AsyncSandbox:
        """The SDK's handle, fetched anew (and kept)."""
        with translate(sandbox_id):
            found = await self.retrying(lambda: self.client.get(sandbox_id))
        self.sandboxes[sandbox_id] = found
        return found

    async def refreshed(self, sandbox_id: str) -> AsyncSandbox:
        """The SDK's handle as the control plane sees the sandbox now: the cached one
        refreshed in place (one GET, and no new handle to build), else fetched."""
        found = self.sandboxes.get(sandbox_id)
        if found is None:
            return await self.fetch(sandbox_id)
        with translate(sandbox_id):
            await self.retrying(found.refresh_data)
        return found

    async def toolbox(self, sandbox_id: str, call: Callable[[AsyncSandbox], Awaitable[T]], *,
                      wait: float | None = 0.0) -> T:
        """Run a toolbox call; translate its failure once. It may take ``wait`` seconds
        (0: ``request_timeout``; ``None``: as long as it runs), then ``OperationTimeout``."""
        sandbox = await self.sandbox(sandbox_id)
        try:
            with self.deadline(sandbox_id, self.request_timeout if wait == 0 else wait):
                return await call(sandbox)
        except DaytonaError as exc:
            raise await self.toolbox_error(sandbox_id, exc) from exc

    @contextlib.contextmanager
    def deadline(self, sandbox_id: str, seconds: float | None) -> Iterator[None]:
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

    async def toolbox_error(self, sandbox_id: str, exc: DaytonaError) -> errors.SandboxError:
        """Why a toolbox call failed: the sandbox gone or not started, else ``exc``."""
        code = code_of(exc)
        if code in ("FILE_NOT_FOUND", "FILE_ACCESS_DENIED") or status_of(exc) == 403:
            return neutral(exc, sandbox_id=sandbox_id, not_found=errors.FileNotFound)
        self.sandboxes.pop(sandbox_id, None)
        try:
            fresh = await self.fetch(sandbox_id)
        except errors.SandboxNotFound as gone:
            return gone
        state = convert.sandbox_state(fresh)
        if state != SandboxState.RUNNING:
            hint = " (resume it first)" if state == SandboxState.PAUSED else ""
            return errors.SandboxNotRunning(f"the sandbox is {state}{hint}", state=str(state),
                                            provider=self.name, sandbox_id=sandbox_id)
        return neutral(exc, sandbox_id=sandbox_id, not_found=errors.FileNotFound)

    # ------------------------------------------------------------------- paths

    async def probe(self, sandbox: AsyncSandbox) -> None:
        """Wait until the toolbox answers (502/503/504 retried), learning the workdir."""
        with translate(sandbox.id):
            workdir = await self.retrying(sandbox.get_work_dir)
        self.workdirs[sandbox.id] = workdir or "/"

    async def cwd(self, sandbox_id: str) -> str:
        """Where commands run and relative paths resolve: the spec's cwd, else Daytona's
        working directory."""
        sandbox = await self.sandbox(sandbox_id)
        spec_cwd = (sandbox.labels or {}).get(convert.CWD_LABEL)
        if spec_cwd:
            return spec_cwd
        if sandbox_id not in self.workdirs:
            await self.toolbox(sandbox_id, self.probe)
        return self.workdirs[sandbox_id]

    async def path(self, sandbox_id: str, path: str) -> str:
        """An absolute, normalized path inside the sandbox."""
        if not path.startswith("/"):
            path = posixpath.join(await self.cwd(sandbox_id), path)
        normal = posixpath.normpath(path)
        return "/" + normal.lstrip("/")  # normpath keeps a leading "//"
