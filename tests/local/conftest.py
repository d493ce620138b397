"""Fixtures for the local provider's own tests: a fresh state directory per test.

Without bubblewrap these tests skip, except under CI (``CI=true``), where a missing
bubblewrap is a failure: CI installs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engines import require_bwrap

from provider_sdk.local import LocalProvider


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    require_bwrap()
    return tmp_path / "psdk-home"


@pytest.fixture
async def provider(home: Path) -> AsyncIterator[LocalProvider]:
    provider = LocalProvider(home=home)
    try:
        yield provider
    finally:
        for info in await provider.list():
            await provider.kill(info.id)
        await provider.aclose()
