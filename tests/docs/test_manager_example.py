"""The sandbox manager page's first example runs as written, and everything it makes
stays where its reader can see it (the working directory), not in a system directory
it would need root for."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from psdk_fixtures import clean_config, memory

from provider_sdk.manager import SQLiteStore

__all__ = ["clean_config", "memory"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "manager.md"


def _first_example() -> str:
    match = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert match is not None, "docs/manager.md has no Python example"
    return match.group(1)


def test_the_first_example_keeps_its_store_in_the_working_directory(
        clean_config: Path, memory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_PROVIDER", "memory")  # the example's open_provider()
    body = textwrap.indent(_first_example(), "    ")
    source = f"async def example():\n{body}    return manager\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, str(PAGE), "exec"), namespace)
    manager = anyio.run(namespace["example"])
    store = manager.store
    assert isinstance(store, SQLiteStore)
    assert store.path.resolve().is_relative_to(clean_config.resolve()), store.path
    assert store.path.resolve().is_file()
