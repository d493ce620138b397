"""Fixtures for the deepagents adapter's tests (helpers: ``deepagents_fixtures``).

The emulator fixture modules of ``tests/e2b`` and ``tests/daytona`` are imported from
there, not copied: their directories go on the import path here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

for _sub in ("e2b", "daytona"):
    _path = str(Path(__file__).resolve().parents[1] / _sub)
    if _path not in sys.path:
        sys.path.append(_path)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """deepagents is asyncio code."""
    return "asyncio"
