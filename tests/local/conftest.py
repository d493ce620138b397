"""Fixtures for the local provider's own tests: a fresh state directory per test
(``home``, ``provider``: see ``local_fixtures``), and ``local``, a provider on the home
of a module's built template."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from local_fixtures import home, provider, provider_in

from provider_sdk.local import LocalProvider
from provider_sdk.models import Template

__all__ = ["home", "local", "provider"]


@pytest.fixture
async def local(built: tuple[Path, Template]) -> AsyncIterator[LocalProvider]:
    """A provider on the home of the module's ``built`` fixture (a home and the template
    built in it, shared by the module); its sandboxes and snapshots are removed after."""
    async with provider_in(built[0]) as made:
        try:
            yield made
        finally:
            for snap in await made.list_snapshots():
                await made.delete_snapshot(snap.id)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
