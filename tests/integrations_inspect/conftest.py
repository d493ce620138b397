"""Fixtures for the Inspect sandbox environment's tests: the anyio backend for
module-scoped sandboxes, and the test tree's own fixture modules (the emulators' of
``tests/e2b`` and ``tests/daytona``) made importable when this directory runs alone."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

try:
    import inspect_ai  # noqa: F401
except ImportError:
    if os.environ.get("CI") == "true":  # CI installs the inspect group: missing is a failure
        raise
    pytest.skip("inspect-ai is not installed (the inspect dependency group)",
                allow_module_level=True)

_TESTS = Path(__file__).resolve().parent.parent
for _folder in ("e2b", "daytona"):
    if str(_TESTS / _folder) not in sys.path:
        sys.path.append(str(_TESTS / _folder))


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Inspect runs on asyncio by default; one loop per module, so a module's sandbox
    serves all of its checks."""
    return "asyncio"
