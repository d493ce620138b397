"""The error tree: one root, each error also its builtin, each carrying provider and
sandbox id in its message."""

from __future__ import annotations

import inspect

import pytest

from provider_sdk import errors
from provider_sdk.errors import (
    AuthenticationError,
    CodeTimeout,
    CommandTimeout,
    ConfigError,
    Conflict,
    ContextNotFound,
    FileExists,
    FileNotFound,
    FileTooLarge,
    InvalidInput,
    IsADirectory,
    NotADirectory,
    NotFound,
    OperationTimeout,
    PermissionDenied,
    ProcessNotFound,
    ProviderNotFound,
    RateLimited,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
    SnapshotNotFound,
    TemplateBuildError,
    TemplateNotFound,
    Unavailable,
    UnsupportedCapability,
    VolumeNotFound,
)
from provider_sdk.interpreter import CodeResult
from provider_sdk.models import ExecResult

BUILTIN = [
    (ConfigError, ValueError),
    (ProviderNotFound, LookupError),
    (ProviderNotFound, ValueError),
    (UnsupportedCapability, NotImplementedError),
    (InvalidInput, ValueError),
    (IsADirectory, IsADirectoryError),
    (NotADirectory, NotADirectoryError),
    (AuthenticationError, PermissionError),
    (PermissionDenied, PermissionError),
    (NotFound, LookupError),
    (FileNotFound, FileNotFoundError),
    (SandboxNotRunning, RuntimeError),
    (FileExists, FileExistsError),
    (Unavailable, ConnectionError),
    (RateLimited, ConnectionError),
    (OperationTimeout, TimeoutError),
    (CommandTimeout, TimeoutError),
    (CodeTimeout, TimeoutError),
]

PARENT = [
    (SandboxNotFound, NotFound), (SnapshotNotFound, NotFound), (VolumeNotFound, NotFound),
    (TemplateNotFound, NotFound), (ProcessNotFound, NotFound), (FileNotFound, NotFound),
    (IsADirectory, InvalidInput), (NotADirectory, InvalidInput), (FileExists, Conflict),
    (RateLimited, Unavailable), (CommandTimeout, OperationTimeout),
    (CodeTimeout, OperationTimeout), (ContextNotFound, NotFound),
    (ProviderNotFound, ConfigError),
]


def _make(cls: type[SandboxError]) -> SandboxError:
    """An instance of any error class, carrying provider and sandbox id."""
    where = {"provider": "prov", "sandbox_id": "sb-1"}
    if cls is UnsupportedCapability:
        return cls("pause", **where)  # type: ignore[arg-type]
    if cls is CommandTimeout:
        return cls("too slow", result=ExecResult(exit_code=-9), **where)  # type: ignore[call-arg]
    if cls is CodeTimeout:
        return cls("too slow", result=CodeResult(), context_kept=True,  # type: ignore[call-arg]
                   **where)
    if cls is TemplateBuildError:
        return cls("boom", step="build", **where)  # type: ignore[call-arg]
    if cls is FileTooLarge:
        return cls("too big", limit=10, **where)  # type: ignore[call-arg]
    return cls("went wrong", **where)


ALL = [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
       if issubclass(obj, SandboxError)]


def test_every_public_error_is_listed() -> None:
    assert {cls.__name__ for cls in ALL} == set(errors.__all__)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_error_derives_from_the_root(cls: type[SandboxError]) -> None:
    assert issubclass(cls, SandboxError)


@pytest.mark.parametrize(("cls", "builtin"), BUILTIN,
                         ids=[f"{c.__name__}-{b.__name__}" for c, b in BUILTIN])
def test_error_is_caught_by_its_builtin(cls: type[SandboxError], builtin: type) -> None:
    with pytest.raises(builtin):
        raise _make(cls)


@pytest.mark.parametrize(("cls", "parent"), PARENT,
                         ids=[f"{c.__name__}-{p.__name__}" for c, p in PARENT])
def test_error_is_caught_by_its_parent(cls: type[SandboxError], parent: type) -> None:
    assert issubclass(cls, parent)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_str_carries_provider_and_sandbox_id(cls: type[SandboxError]) -> None:
    error = _make(cls)
    assert error.provider == "prov"
    assert error.sandbox_id == "sb-1"
    assert str(error).startswith("[prov sb-1] ")


def test_str_without_provider_or_sandbox_is_the_bare_message() -> None:
    assert str(SandboxError("plain")) == "plain"
    assert str(SandboxError("m", provider="p")) == "[p] m"
    assert str(SandboxError("m", sandbox_id="s")) == "[s] m"


def test_message_attribute_has_no_prefix() -> None:
    assert SandboxError("m", provider="p", sandbox_id="s").message == "m"


def test_unsupported_capability_names_the_capability_and_provider() -> None:
    error = UnsupportedCapability("pause.memory", provider="cube", detail="no CRIU")
    assert error.capability == "pause.memory"
    assert "'cube'" in str(error)
    assert "'pause.memory'" in str(error)
    assert str(error).endswith("no CRIU")


def test_command_timeout_carries_the_partial_result() -> None:
    partial = ExecResult(exit_code=-9, stdout_bytes=b"half")
    error = CommandTimeout("timed out", result=partial)
    assert error.result.stdout == "half"


def test_rate_limited_carries_retry_after() -> None:
    assert RateLimited("slow down", retry_after=2.5).retry_after == 2.5
    assert RateLimited("slow down").retry_after is None


def test_provider_not_found_lists_installed() -> None:
    assert ProviderNotFound("x", installed=("a", "b")).installed == ("a", "b")


def test_sandbox_not_running_carries_the_state() -> None:
    assert SandboxNotRunning("paused", state="paused").state == "paused"


def test_template_build_error_names_the_step() -> None:
    error = TemplateBuildError("no FROM", step="parse", log_tail="line 1")
    assert str(error) == "parse: no FROM"
    assert (error.step, error.log_tail) == ("parse", "line 1")


def test_template_build_error_is_plain_text() -> None:
    """A builder's colours, cursor moves and window titles are taken out; the text
    (brackets and backslashes of its own included) is kept."""
    error = TemplateBuildError("\x1b[91mreturned a non-zero code: 3\x1b[0m",
                               step="\x1b[1mRUN [x] exit 3\x1b[22m",
                               log_tail="a\x1b[2Kb\x1b]0;title\x07c\x1b]2;t\x1b\\d \\e\x1b7")
    assert str(error) == "RUN [x] exit 3: returned a non-zero code: 3"
    assert (error.step, error.log_tail) == ("RUN [x] exit 3", "abcd \\e")


def _translate(vendor: OSError) -> None:
    try:
        raise vendor
    except OSError as exc:
        raise Unavailable("backend unreachable", provider="p") from exc


def test_translated_error_keeps_its_cause() -> None:
    vendor = OSError("socket closed")
    with pytest.raises(Unavailable) as caught:
        _translate(vendor)
    assert caught.value.__cause__ is vendor


def test_reported_as_names_the_callers_path_instead_of_temporaries() -> None:
    from provider_sdk.errors import reported_as

    with pytest.raises(PermissionDenied) as caught, reported_as("/w/data.csv", "/w/.t-1", ".t-1"):
        raise PermissionDenied("mv: cannot move '/w/.t-1': Read-only file system (.t-1)",
                               provider="p", sandbox_id="s")
    assert str(caught.value) == \
        "[p s] mv: cannot move '/w/data.csv': Read-only file system (/w/data.csv)"


def test_on_behalf_of_makes_a_delegates_error_the_callers() -> None:
    from provider_sdk.errors import on_behalf_of

    with pytest.raises(TemplateBuildError) as caught, on_behalf_of("local"):
        raise TemplateBuildError("RUN failed", step="RUN", provider="docker")
    assert str(caught.value) == "[local] RUN: RUN failed"
