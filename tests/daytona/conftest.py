"""Fixtures for the Daytona provider's tests: the session's emulator, the SDK's clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from daytona import AsyncDaytona, Daytona, Sandbox
from daytona_emulator_fixtures import daytona_emulator, sdk_config

__all__ = ["daytona_emulator"]


@pytest.fixture
def anyio_backend() -> str:
    """The daytona SDK's async client runs on aiohttp, which needs asyncio."""
    return "asyncio"


@pytest.fixture
def sync_client() -> Daytona:
    """The unmodified sync SDK, pointed at the emulator (it holds nothing to close)."""
    return Daytona(sdk_config())


@pytest.fixture
async def async_client() -> AsyncIterator[AsyncDaytona]:
    """The unmodified async SDK, pointed at the emulator."""
    async with AsyncDaytona(sdk_config()) as client:
        yield client


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """One SDK sandbox of the default snapshot (language python) for a module's tests;
    a module that needs another defines its own."""
    client = Daytona(sdk_config())
    made = client.create()
    yield made
    client.delete(made)
