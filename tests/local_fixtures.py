"""Fixtures for tests that run on the local provider (imported by their conftests): a
fresh state directory per test, and a provider whose sandboxes are all killed after it.

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
def home(tmp_path: Path) -> Path:
    """The local provider's state directory for this test (bubblewrap required)."""
    require_bwrap()
    return tmp_path / "psdk-home"


@pytest.fixture
async def provider(home: Path) -> AsyncIterator[LocalProvider]:
    """A local provider in ``home``; every sandbox it has is killed afterwards."""
    provider = LocalProvider(home=home)
    try:
        yield provider
    finally:
        for info in await provider.list():
            await provider.kill(info.id)
        await provider.aclose()
