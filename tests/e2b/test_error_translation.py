"""How the E2B and Cube providers translate what the ``e2b`` SDK and the wire raise, one
row per vendor error and per operation: the most specific neutral error, carrying the
provider and the sandbox, the path where one is named, and never the API key.

The errors are the SDK's own classes and connect-rpc's, raised inside the providers'
one translation point (their session's ``translate``), as a call into the SDK raises
them there.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b import exceptions as e2bx
from provider_sdk_e2b import CubeProvider, E2BProvider
from provider_sdk_e2b._errors import retrying, wait_ready

from provider_sdk import errors

KEY = "psdk-translation-test-secret-key"
SANDBOX = "sbx123"
PATH = "/tmp/psdk-file.txt"
WHATS = ("sandbox", "file", "process", "snapshot", "template", "volume")
NOT_FOUND: dict[str, type[errors.NotFound]] = {
    "sandbox": errors.SandboxNotFound, "file": errors.FileNotFound,
    "process": errors.ProcessNotFound, "snapshot": errors.SnapshotNotFound,
    "template": errors.TemplateNotFound, "volume": errors.VolumeNotFound,
}


@pytest.fixture(params=["e2b", "cube"])
def provider(request: pytest.FixtureRequest) -> E2BProvider:
    """The provider, made with a key and an address nothing listens on: translation
    needs no server."""
    cls = E2BProvider if request.param == "e2b" else CubeProvider
    return cls(api_key=KEY, api_url="http://127.0.0.1:9")


def translated(provider: E2BProvider, raised: BaseException, *, what: str = "sandbox",
               path: str | None = None) -> errors.SandboxError:
    """What ``translate`` turns ``raised`` into, checked for what every error carries."""
    with pytest.raises(errors.SandboxError) as caught, \
            provider._session.translate(SANDBOX, what=what, path=path):
        raise raised
    error = caught.value
    assert error.provider == provider.name
    assert error.sandbox_id == SANDBOX
    assert error.__cause__ is raised
    assert KEY not in str(error)
    assert KEY not in repr(error)
    return error


# ------------------------------------------------------------------ the SDK's exceptions

# Vendor errors whose meaning does not depend on the operation: (raised, neutral type).
_SAME_FOR_EVERY_OPERATION = [
    (e2bx.SandboxNotFoundException("sandbox sbx123 not found"), errors.SandboxNotFound),
    (e2bx.RateLimitException("slow down"), errors.RateLimited),
    (e2bx.ServiceBusyException("busy"), errors.Unavailable),
    (e2bx.SandboxNotRunningException("the sandbox is paused"), errors.SandboxNotRunning),
    (e2bx.SandboxUnreachableException("no route to envd"), errors.Unavailable),
    (e2bx.NotEnoughSpaceException("disk full"), errors.QuotaExceeded),
    (e2bx.InvalidArgumentException("bad argument"), errors.InvalidInput),
    (e2bx.TimeoutException("the request took too long"), errors.OperationTimeout),
    (e2bx.SandboxException("open /x: read-only file system"), errors.PermissionDenied),
    (e2bx.SandboxException("open /x: permission denied"), errors.PermissionDenied),
    (e2bx.SandboxException("open /x/y: not a directory"), errors.NotADirectory),
    (e2bx.SandboxException("read /x: is a directory"), errors.IsADirectory),
    (e2bx.SandboxException("remove /x: directory not empty"), errors.Conflict),
    (e2bx.SandboxException("409: already there"), errors.Conflict),
    (e2bx.SandboxException("502: bad gateway"), errors.Unavailable),
    (e2bx.SandboxException("503: unavailable"), errors.Unavailable),
    (e2bx.SandboxException("504: gateway timeout"), errors.Unavailable),
    (e2bx.SandboxException("403: forbidden"), errors.PermissionDenied),
    (e2bx.SandboxException("400: bad request"), errors.InvalidInput),
    (e2bx.SandboxException("the sandbox sbx123 was not found"), errors.SandboxNotRunning),
    (e2bx.SandboxException("teapot", status_code=409), errors.Conflict),
    (e2bx.GuestUnresponsiveException("resume it with a reboot"), errors.Conflict),  # a 409
]


@pytest.mark.parametrize("what", WHATS)
@pytest.mark.parametrize(("raised", "expected"), _SAME_FOR_EVERY_OPERATION,
                         ids=lambda v: type(v).__name__ if isinstance(v, BaseException)
                         else v.__name__)
def test_an_sdk_error_means_the_same_whatever_the_operation(
        provider: E2BProvider, raised: Exception, expected: type[errors.SandboxError],
        what: str) -> None:
    assert type(translated(provider, raised, what=what)) is expected


@pytest.mark.parametrize("what", WHATS)
def test_a_gone_sandbox_is_never_a_missing_file_or_process(provider: E2BProvider,
                                                           what: str) -> None:
    """``SandboxNotFoundException`` is also a ``NotFoundException``: whatever the call
    was about, the sandbox is what is missing."""
    raised = e2bx.SandboxNotFoundException("sandbox sbx123 not found")
    assert type(translated(provider, raised, what=what, path=PATH)) is errors.SandboxNotFound


@pytest.mark.parametrize("what", WHATS)
@pytest.mark.parametrize("raised", [e2bx.NotFoundException("no such thing"),
                                    e2bx.FileNotFoundException("no such file"),
                                    e2bx.SandboxException("404: not found")],
                         ids=["NotFoundException", "FileNotFoundException", "status-404"])
def test_not_found_names_what_the_operation_was_about(provider: E2BProvider,
                                                      raised: Exception, what: str) -> None:
    error = translated(provider, raised, what=what)
    assert type(error) is NOT_FOUND[what]


def test_not_found_of_a_file_names_its_path(provider: E2BProvider) -> None:
    error = translated(provider, e2bx.NotFoundException("no such file"), what="file",
                       path=PATH)
    assert type(error) is errors.FileNotFound
    assert PATH in str(error)


def test_not_found_of_something_else_is_the_root_not_found(provider: E2BProvider) -> None:
    error = translated(provider, e2bx.NotFoundException("no such thing"), what="secret")
    assert type(error) is errors.NotFound


def test_a_refused_key_names_the_setting_not_the_key(provider: E2BProvider) -> None:
    error = translated(provider, e2bx.AuthenticationException(f"bad key {KEY[:4]}..."))
    assert type(error) is errors.AuthenticationError
    assert provider.SETTINGS["api_key"] in str(error)


@pytest.mark.parametrize("raised", [e2bx.SandboxException("something odd"),
                                    e2bx.TemplateException("the template broke")],
                         ids=["SandboxException", "TemplateException"])
def test_an_error_of_no_known_kind_is_the_root_error_keeping_its_message(
        provider: E2BProvider, raised: Exception) -> None:
    error = translated(provider, raised)
    assert type(error) is errors.SandboxError
    assert str(raised) in str(error)


# ------------------------------------------------------------------ connect-rpc (envd)
# These run on an event loop: a cancellation of the call is told apart there.

_RPC = [
    (Code.ALREADY_EXISTS, "file exists", errors.FileExists),
    (Code.UNAUTHENTICATED, "bad token", errors.AuthenticationError),
    (Code.RESOURCE_EXHAUSTED, "too many", errors.RateLimited),
    (Code.UNAVAILABLE, "try later", errors.Unavailable),
    (Code.DEADLINE_EXCEEDED, "too slow", errors.Unavailable),
    (Code.CANCELED, "cancelled there", errors.Unavailable),
    (Code.UNAVAILABLE, "the sandbox sbx123 was not found", errors.SandboxNotRunning),
    (Code.PERMISSION_DENIED, "no", errors.PermissionDenied),
    (Code.INVALID_ARGUMENT, "bad", errors.InvalidInput),
    (Code.UNKNOWN, "open /x: read-only file system", errors.PermissionDenied),
    (Code.UNKNOWN, "mkdir /x/y: not a directory", errors.NotADirectory),
    (Code.UNKNOWN, "read /x: is a directory", errors.IsADirectory),
    (Code.UNKNOWN, "remove /x: directory not empty", errors.Conflict),
    (Code.INTERNAL, "boom", errors.SandboxError),
    (Code.FAILED_PRECONDITION, "nope", errors.SandboxError),
]


@pytest.mark.parametrize(("code", "message", "expected"), _RPC,
                         ids=[f"{c.name}-{m}" for c, m, _ in _RPC])
@pytest.mark.anyio
async def test_an_rpc_error_is_the_neutral_error_it_means(
        provider: E2BProvider, code: Code, message: str,
        expected: type[errors.SandboxError]) -> None:
    assert type(translated(provider, ConnectError(code, message), what="file")) is expected


@pytest.mark.parametrize("what", WHATS)
@pytest.mark.anyio
async def test_an_rpc_not_found_names_what_the_operation_was_about(provider: E2BProvider,
                                                             what: str) -> None:
    error = translated(provider, ConnectError(Code.NOT_FOUND, "no such entry"), what=what,
                       path=PATH)
    assert type(error) is NOT_FOUND[what]
    assert PATH in str(error)


@pytest.mark.anyio
async def test_an_rpc_timed_out_here_is_an_operation_timeout(provider: E2BProvider) -> None:
    raised = ConnectError(Code.DEADLINE_EXCEEDED, "deadline")
    raised.__cause__ = TimeoutError()
    assert type(translated(provider, raised)) is errors.OperationTimeout


@pytest.mark.anyio
async def test_an_rpc_cut_by_a_cancellation_is_that_cancellation(
        provider: E2BProvider) -> None:
    """A cancelled call stays cancelled: the cancellation, not an error, goes on up."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)
        except anyio.get_cancelled_exc_class() as cancelled:
            raised = ConnectError(Code.CANCELED, "cancelled")
            raised.__cause__ = cancelled
            with provider._session.translate(SANDBOX):
                raise raised from cancelled
    assert scope.cancelled_caught


# ------------------------------------------------------------------ the transport

@pytest.mark.parametrize(("raised", "expected"), [
    (httpx.ReadTimeout("read timed out"), errors.OperationTimeout),
    (httpx.ConnectError("connection refused"), errors.Unavailable),
    (httpx.RemoteProtocolError("peer closed"), errors.Unavailable),
    (ConnectionResetError("reset"), errors.Unavailable),
], ids=["ReadTimeout", "ConnectError", "RemoteProtocolError", "ConnectionResetError"])
@pytest.mark.anyio
async def test_a_transport_failure_is_transient(provider: E2BProvider, raised: Exception,
                                          expected: type[errors.SandboxError]) -> None:
    assert type(translated(provider, raised)) is expected


@pytest.mark.anyio
async def test_a_neutral_error_passes_through_untouched(provider: E2BProvider) -> None:
    raised = errors.Conflict("already neutral", provider=provider.name, sandbox_id=SANDBOX)
    with pytest.raises(errors.Conflict) as caught, \
            provider._session.translate(SANDBOX, what="file"):
        raise raised
    assert caught.value is raised


# ------------------------------------------------------------------ paths and arguments


def test_an_error_told_by_its_message_leads_with_the_path(provider: E2BProvider) -> None:
    raised = e2bx.SandboxException("open: read-only file system")
    error = translated(provider, raised, what="file", path=PATH)
    assert type(error) is errors.PermissionDenied
    where = f"[{provider.name} {SANDBOX}]"
    assert str(error) == f"{where} {PATH}: open: read-only file system"
    unnamed = translated(provider, e2bx.SandboxException("open: read-only file system"))
    assert str(unnamed) == f"{where} open: read-only file system"


@pytest.mark.anyio
async def test_an_rpc_file_exists_leads_with_the_path(provider: E2BProvider) -> None:
    error = translated(provider, ConnectError(Code.ALREADY_EXISTS, "exists"), what="file",
                       path=PATH)
    assert type(error) is errors.FileExists
    where = f"[{provider.name} {SANDBOX}]"
    assert str(error) == f"{where} {PATH}: exists"
    unnamed = translated(provider, ConnectError(Code.ALREADY_EXISTS, "exists"), what="file")
    assert str(unnamed) == f"{where} exists"


def test_a_status_is_read_from_the_start_of_a_message_with_several_colons(
        provider: E2BProvider) -> None:
    error = translated(provider, e2bx.SandboxException("404: stat /a:b: no such file"),
                       what="file")
    assert type(error) is errors.FileNotFound


def test_what_and_path_and_timeouts_are_passed_by_name(provider: E2BProvider) -> None:
    """A bare ``"file"`` could be taken for a path, a bare number for another limit."""
    with pytest.raises(TypeError):
        provider._session.translate(SANDBOX, "file")  # type: ignore[misc]
    with pytest.raises(TypeError):
        wait_ready(provider, SANDBOX, 5.0, provider="e2b")  # type: ignore[arg-type, misc]

    async def op() -> None:
        return None

    with pytest.raises(TypeError):
        retrying(op, 5.0)  # type: ignore[misc]
