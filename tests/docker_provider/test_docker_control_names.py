"""The host's view of a container's processes (``_host._table``, ``_subtree``)
against processes whose names the code chose: a tree is found by parent pids alone,
whatever a name holds."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_trees import ODD_NAMES, oddly_named
from provider_sdk_docker import _host


@pytest.fixture
def named(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes]]:
    with oddly_named(tmp_path, request.param) as shell:
        yield shell


@pytest.mark.parametrize("named", ODD_NAMES, indirect=True)
def test_an_oddly_named_process_and_its_child_are_in_the_subtree(
        named: subprocess.Popen[bytes]) -> None:
    table = _host._table()
    assert table[named.pid][0] == os.getpid()
    below = _host._subtree(table, os.getpid())
    assert named.pid in below
    assert next(pid for pid, (parent, _) in table.items() if parent == named.pid) in below
