"""The agent's view of a process tree (``_procs.children_of``, ``descendants``) against
processes whose names the code chose: the name in ``/proc/PID/stat`` may hold spaces
and parentheses, and a tree is found by parent pids alone."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_trees import ODD_NAMES, oddly_named

from provider_sdk.local import _launch, _procs


@pytest.fixture
def named(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes]]:
    """A shell named ``request.param``, with a child ``sleep``."""
    with oddly_named(tmp_path, request.param) as shell:
        yield shell


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")


@pytest.mark.parametrize("named", ODD_NAMES, indirect=True)
def test_a_process_is_the_child_of_its_parent_whatever_its_name(
        named: subprocess.Popen[bytes], request: pytest.FixtureRequest) -> None:
    assert _comm(named.pid) == request.node.callspec.params["named"]
    assert named.pid in _procs.children_of()[os.getpid()]


@pytest.mark.parametrize("named", ODD_NAMES, indirect=True)
def test_the_children_of_an_oddly_named_process_are_its_descendants(
        named: subprocess.Popen[bytes]) -> None:
    below = _procs.descendants(os.getpid())
    assert named.pid in below
    children = _procs.children_of().get(named.pid, [])
    assert len(children) == 1
    assert children[0] in below
    assert _comm(children[0]) == "sleep"


@pytest.mark.parametrize("named", ODD_NAMES, indirect=True)
def test_the_state_after_an_odd_name_is_the_process_s(
        named: subprocess.Popen[bytes]) -> None:
    """The fields read after the name are the process's own: its state, then its
    parent."""
    deadline = time.monotonic() + 10
    while (fields := _launch._stat_fields(named.pid)) is not None and fields[0] == b"R":
        assert time.monotonic() < deadline, "the shell never waited"
        time.sleep(0.01)
    assert fields is not None
    assert fields[0] == b"S"
    assert int(fields[1]) == os.getpid()
