"""Fixtures shared by the core's and the CLI's tests (imported by their conftests)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
import structlog
from memory_provider import STORE, MemoryProvider, Store

from provider_sdk import registry
from provider_sdk.cli import main


@pytest.fixture
def anyio_backend() -> str:
    """The core is tested on asyncio (the contract suite covers the other loops)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def clean_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No provider setting leaks in from the environment, the cwd or the user's config."""
    for var in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    # psdk's own records, beside tmp_path so that tests can list tmp_path.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path.with_name(f"{tmp_path.name}-data")))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def unconfigured_structlog() -> Iterator[None]:
    """Each test starts, and leaves, structlog unconfigured, as an application finds it."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def memory() -> Iterator[Store]:
    """``MemoryProvider`` registered as ``memory``; its shared state, empty for the test
    (whatever an earlier test in this process left) and emptied afterwards."""
    STORE.reset()
    registry.register("memory", MemoryProvider)
    try:
        yield STORE
    finally:
        registry.unregister("memory")
        STORE.reset()


@attrs.frozen
class Outcome:
    """What one ``psdk`` invocation did."""

    code: int
    out: str
    err: str


Psdk = Callable[..., Outcome]


@pytest.fixture
def psdk(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Psdk:
    """Run ``psdk`` in this process: ``psdk("ls", "--json")``."""
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # psdk sets it

    def run(*argv: str) -> Outcome:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run
