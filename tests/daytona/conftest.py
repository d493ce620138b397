"""Fixtures for the Daytona provider's tests: the session's emulator, the SDK's clients."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from daytona import AsyncDaytona, Daytona, DaytonaConfig
from daytona_emulator_fixtures import daytona_emulator, running

__all__ = ["daytona_emulator"]


@pytest.fixture
def anyio_backend() -> str:
    """The daytona SDK's async client runs on aiohttp, which needs asyncio."""
    return "asyncio"


def _config() -> DaytonaConfig:
    em = running()
    return DaytonaConfig(api_key=em.api_key.reveal(), api_url=em.settings["DAYTONA_API_URL"],
                         target=em.settings["DAYTONA_TARGET"])


@pytest.fixture
def sync_client() -> Daytona:
    """The unmodified sync SDK, pointed at the emulator (it holds nothing to close)."""
    return Daytona(_config())


@pytest.fixture
async def async_client() -> AsyncIterator[AsyncDaytona]:
    """The unmodified async SDK, pointed at the emulator."""
    async with AsyncDaytona(_config()) as client:
        yield client
