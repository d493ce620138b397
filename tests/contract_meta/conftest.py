"""The mini provider's log, for the contract plugin's meta-tests (see ``mini.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contract_meta.mini import MINI_CONFTEST
from provider_sdk import registry


@pytest.fixture
def log(pytester: pytest.Pytester) -> Iterator[Path]:
    """The mini provider's log; the providers are forgotten after the test. The runs
    inside use anyio's plugin, as the contract does: not pytest-asyncio, where it is
    installed (it only warns about its own settings there)."""
    pytester.makeconftest(MINI_CONFTEST)
    pytester.makeini("[pytest]\naddopts = -p no:asyncio\n")
    yield pytester.path / "mini.log"
    registry.unregister("mini")
    registry.unregister("mini-vol")
