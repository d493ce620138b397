"""Fixtures for the tests of ``psdk mcp``: a state directory for the local provider per
module, whose sandboxes are all killed when the module ends.

Without bubblewrap these tests skip, except under CI (``CI=true``), where that is a
failure: CI installs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from engines import require_namespaces
from local_fixtures import provider_in


def kill_everything(home: Path) -> None:
    """Kill every sandbox the local provider in ``home`` has."""
    async def sweep() -> None:
        async with provider_in(home):
            pass

    anyio.run(sweep)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory for one module's servers: the local provider's state in ``psdk/``,
    psdk's own records in ``data/``; every sandbox in it is killed afterwards."""
    require_namespaces()
    path = tmp_path_factory.mktemp("mcp")
    yield path
    kill_everything(path / "psdk")
