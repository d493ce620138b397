"""How the roles of ``E2BProvider`` and ``CubeProvider`` turn SDK and wire errors into
neutral ones (one :class:`Translator`, which each role calls around its SDK calls), wait
for a sandbox's data plane (:func:`wait_ready`), and retry what a gateway refused, so
nothing ran (:func:`retrying`).

This module holds no state of a provider: the translator knows only the provider's name
and the setting that names its key."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import anyio
import attrs
import httpx
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b import exceptions as e2bx

from provider_sdk import errors
from provider_sdk.retry import Attempts, Backoff, retry
from provider_sdk_e2b._remote import _Handle

__all__ = ["READY_BACKOFF", "Translator", "retrying", "wait_ready"]

T = TypeVar("T")

READY_BACKOFF = Backoff(initial=0.02, factor=2, cap=1.0)
"""Pauses between probes of a sandbox's data plane, and between retries of a request a
gateway refused, within ``ready_timeout``."""


@attrs.frozen
class Translator:
    """The one place SDK and wire errors become neutral ones: call it around an SDK call
    (``with translate(sandbox_id, what="file", path=path): ...``).

    Args:
        name: the provider's name, which every error carries.
        key_setting: the setting an ``AuthenticationError`` tells the user to check.
    """

    name: str
    key_setting: str

    @contextlib.contextmanager
    def __call__(self, sandbox_id: str | None = None, *, what: str = "sandbox",
                   path: str | None = None) -> Iterator[None]:
        """Translate what the block raises, most specific first.

        ``what`` says what a "not found" refers to: ``sandbox``, ``file``, ``process``,
        ``snapshot``, ``template`` or ``volume``.
        """
        try:
            yield
        except errors.SandboxError:
            raise
        except ConnectError as exc:
            if isinstance(exc.__cause__, anyio.get_cancelled_exc_class()):
                raise exc.__cause__ from None
            raise self.from_rpc(exc, sandbox_id, what, path) from exc
        except (e2bx.SandboxException, e2bx.AuthenticationException,
                e2bx.ServiceBusyException) as exc:
            raise self.from_sdk(exc, sandbox_id, what, path) from exc
        except httpx.TimeoutException as exc:
            raise errors.OperationTimeout(f"request timed out: {exc}", provider=self.name,
                                          sandbox_id=sandbox_id) from exc
        except (httpx.TransportError, ConnectionError) as exc:
            raise errors.Unavailable(f"cannot reach {self.name}: {exc}", provider=self.name,
                                     sandbox_id=sandbox_id) from exc

    def not_found(self, what: str, message: str, sandbox_id: str | None) -> errors.SandboxError:
        kinds: dict[str, type[errors.NotFound]] = {
            "sandbox": errors.SandboxNotFound, "file": errors.FileNotFound,
            "process": errors.ProcessNotFound, "snapshot": errors.SnapshotNotFound,
            "template": errors.TemplateNotFound, "volume": errors.VolumeNotFound,
        }
        return kinds.get(what, errors.NotFound)(message, provider=self.name,
                                                sandbox_id=sandbox_id)

    def from_message(self, message: str, sandbox_id: str | None,
                      path: str | None) -> errors.SandboxError | None:
        """Errors told apart only by their message (envd's, or the proxy's)."""
        text = message.lower()
        where = {"provider": self.name, "sandbox_id": sandbox_id}
        if e2bx.is_sandbox_not_found_message(message):  # the proxy: gone (502, Cube's 410)
            return errors.SandboxNotRunning(message, **where)
        about = f"{path}: {message}" if path else message
        if "read-only" in text or "permission denied" in text:
            return errors.PermissionDenied(about, **where)
        if "not a directory" in text:
            return errors.NotADirectory(about, **where)
        if "is a directory" in text:
            return errors.IsADirectory(about, **where)
        if "not empty" in text:
            return errors.Conflict(about, **where)
        return None

    def from_rpc(self, exc: ConnectError, sandbox_id: str | None, what: str,
                  path: str | None) -> errors.SandboxError:
        where = {"provider": self.name, "sandbox_id": sandbox_id}
        message = exc.message or str(exc)
        if exc.code == Code.NOT_FOUND:
            return self.not_found(what, f"{path}: {message}" if path else message,
                                   sandbox_id)
        if exc.code == Code.ALREADY_EXISTS:
            return errors.FileExists(f"{path}: {message}" if path else message, **where)
        if exc.code == Code.UNAUTHENTICATED:
            return errors.AuthenticationError(message, **where)
        if exc.code == Code.RESOURCE_EXHAUSTED:
            return errors.RateLimited(message, provider=self.name, sandbox_id=sandbox_id)
        if exc.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.CANCELED):
            if e2bx.is_sandbox_not_found_message(message):
                return errors.SandboxNotRunning(message, **where)
            if isinstance(exc.__cause__, TimeoutError):
                return errors.OperationTimeout(message, **where)
            return errors.Unavailable(message, **where)
        specific = self.from_message(message, sandbox_id, path)
        if specific is not None:
            return specific
        if exc.code == Code.PERMISSION_DENIED:
            return errors.PermissionDenied(message, **where)
        if exc.code == Code.INVALID_ARGUMENT:
            return errors.InvalidInput(message, **where)
        return errors.SandboxError(f"{exc.code}: {message}", **where)

    def from_sdk(self, exc: Exception, sandbox_id: str | None, what: str,
                  path: str | None) -> errors.SandboxError:
        where = {"provider": self.name, "sandbox_id": sandbox_id}
        message = str(exc)
        if isinstance(exc, e2bx.AuthenticationException):
            return errors.AuthenticationError(
                f"{self.name} refused the API key (check {self.key_setting})", **where)
        if isinstance(exc, e2bx.RateLimitException):
            return errors.RateLimited(message, provider=self.name, sandbox_id=sandbox_id)
        if isinstance(exc, e2bx.ServiceBusyException):
            return errors.Unavailable(message, **where)
        if isinstance(exc, e2bx.SandboxNotFoundException):
            return errors.SandboxNotFound(message, **where)
        if isinstance(exc, e2bx.NotFoundException):
            return self.not_found(what, f"{path}: {message}" if path else message,
                                   sandbox_id)
        if isinstance(exc, e2bx.SandboxNotRunningException):
            return errors.SandboxNotRunning(message, **where)
        if isinstance(exc, e2bx.SandboxUnreachableException):
            return errors.Unavailable(message, **where)
        if isinstance(exc, e2bx.NotEnoughSpaceException):
            return errors.QuotaExceeded(message, **where)
        specific = self.from_message(message, sandbox_id, path)
        if specific is not None:
            return specific
        if isinstance(exc, e2bx.InvalidArgumentException):
            return errors.InvalidInput(message, **where)
        if isinstance(exc, e2bx.TimeoutException):
            return errors.OperationTimeout(message, **where)
        status = getattr(exc, "status_code", None) or _status_prefix(message)
        if status == 404:
            return self.not_found(what, message, sandbox_id)
        if status == 409:
            return errors.Conflict(message, **where)
        if status in (502, 503, 504):
            return errors.Unavailable(message, **where)
        if status == 403:
            return errors.PermissionDenied(message, **where)
        if status == 400:
            return errors.InvalidInput(message, **where)
        return errors.SandboxError(message, **where)


# ------------------------------------------------------------ readiness


async def wait_ready(handle: _Handle, sandbox_id: str, *, timeout: float,
                     provider: str) -> None:
    """Return once envd answers ``/health``; retry 502/503/504 and connection failures
    for ``timeout`` seconds, then raise ``Unavailable``."""
    last = "no answer"
    probes = Attempts(READY_BACKOFF, timeout=timeout)
    async for _ in probes:
        remaining = probes.remaining()
        with anyio.move_on_after(max(remaining, 0.01)):
            try:
                response = await handle.health.get("/health",
                                                  timeout=max(0.01, min(5.0, remaining)))
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    return
                last = f"HTTP {response.status_code}"
                if response.status_code == 401:
                    raise errors.AuthenticationError(
                        "the sandbox's data plane refused the access token",
                        provider=provider, sandbox_id=sandbox_id)
                if response.status_code not in (502, 503, 504):
                    raise errors.SandboxError(f"the data plane answered {last}",
                                              provider=provider, sandbox_id=sandbox_id)
                probes.at_least(_retry_after(response))
    raise errors.Unavailable(
        f"the sandbox's data plane did not answer within {timeout:g} s "
        f"(last: {last})", provider=provider, sandbox_id=sandbox_id)


async def retrying(op: Callable[[], Awaitable[T]], *, timeout: float) -> T:
    """Run ``op``; while a gateway answers for envd (so nothing ran), retry it for
    ``timeout`` seconds. Anything that reached envd is never repeated."""
    return await retry(op, retry_on=_refused_by_gateway, backoff=READY_BACKOFF,
                       timeout=timeout)


def _status_prefix(message: str) -> int | None:
    head = message.split(":", 1)[0].strip()
    return int(head) if head.isdigit() else None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdecimal() else None


def _refused_by_gateway(exc: BaseException) -> bool:
    """Whether a proxy answered instead of envd (502 other than "not found", 503, 504)
    or the connection never opened: in both cases the request did not run."""
    if isinstance(exc, ConnectError):
        if isinstance(exc.__cause__, (anyio.get_cancelled_exc_class(), TimeoutError)):
            return False
        if isinstance(exc.__cause__, ConnectionError):
            return True
        return exc.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED) and \
            not e2bx.is_sandbox_not_found_message(exc.message or "") and exc.__cause__ is None
    if isinstance(exc, e2bx.SandboxUnreachableException):
        return True
    if isinstance(exc, e2bx.SandboxException) and \
            not isinstance(exc, e2bx.SandboxNotRunningException):
        # The SDK maps a gateway's 504 on an RPC to TimeoutException, raised while
        # handling the wire error: judge by that.
        if isinstance(exc.__context__, ConnectError):
            return _refused_by_gateway(exc.__context__)
        return _status_prefix(str(exc)) in (502, 503, 504)
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))

