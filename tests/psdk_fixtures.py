"""Fixtures shared by the core's and the CLI's tests (imported by their conftests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from memory_provider import STORE, MemoryProvider, Store

from provider_sdk import registry


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
    """``MemoryProvider`` registered as ``memory``; its shared state, emptied afterwards."""
    registry.register("memory", MemoryProvider)
    try:
        yield STORE
    finally:
        registry.unregister("memory")
        STORE.reset()
