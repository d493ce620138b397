"""Fixtures for the local provider's own tests: a fresh state directory per test
(``home``, ``provider``: see ``local_fixtures``)."""

from __future__ import annotations

import pytest
from local_fixtures import home, provider

__all__ = ["home", "provider"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
