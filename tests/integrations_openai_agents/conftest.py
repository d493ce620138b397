"""Fixtures for the OpenAI Agents SDK client's tests (helpers: ``agents_fixtures``): the
anyio backend, and the fixture modules of ``tests/e2b`` and ``tests/daytona`` (the
emulators') made importable, not copied."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

try:
    import agents  # noqa: F401
except ImportError:
    if os.environ.get("CI") == "true":  # CI installs the openai-agents group
        raise
    pytest.skip("openai-agents is not installed (the openai-agents dependency group)",
                allow_module_level=True)

_TESTS = Path(__file__).resolve().parent.parent
for _folder in ("e2b", "daytona"):
    if str(_TESTS / _folder) not in sys.path:
        sys.path.append(str(_TESTS / _folder))


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The Agents SDK is asyncio code."""
    return "asyncio"
