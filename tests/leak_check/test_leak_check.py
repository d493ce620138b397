"""The end-of-run check (``tests/leaks.py``) fails a run whose test leaves a sandbox
running, and passes one whose sandbox is shared by a module's tests on two xdist workers
and killed when the module ends. Each run is a real pytest subprocess on the local
provider. A run started by another run's worker counts that run's other workers as
another run (what they leave is theirs, not its)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from engines import require_bwrap
from leaks import foreign_runs

from provider_sdk.sync import open_provider

TESTS = Path(__file__).resolve().parents[1]

LEAKING = '''
from provider_sdk.sync import open_provider

def test_leaves_its_sandbox_running(tmp_path):
    with open_provider("local", home=str(tmp_path / "home")) as provider:
        provider.create()
'''

SHARING = '''
import pytest
from provider_sdk.sync import open_provider

@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    with open_provider("local", home=str(home)) as provider:
        sandbox = provider.create()
        yield sandbox
        sandbox.kill()

@pytest.mark.parametrize("n", range(4))
def test_uses_the_modules_sandbox(shared, n):
    assert shared.exec(["true"]).ok
'''


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    require_bwrap()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("PSDK_TEST_LEAK_GRACE", "3")  # a leaked sandbox never goes away
    return pytester


def _kill_everything_under(root: Path) -> None:
    for sandboxes in root.rglob("sandboxes"):
        if (sandboxes.parent / "snapshots").is_dir():
            with open_provider("local", home=str(sandboxes.parent)) as provider:
                for info in provider.list():
                    provider.kill(info.id)


def test_a_sandbox_left_running_fails_the_run(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_leaky=LEAKING)
    try:
        result = inner.runpytest_subprocess("-p", "leaks", "-p", "no:cacheprovider",
                                            f"--basetemp={inner.path / 'base'}")
    finally:
        _kill_everything_under(inner.path)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*left behind by this run*", "cgroup: psdk-*"])


def test_a_sandbox_shared_by_a_module_on_two_workers_passes(
        inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # The grace a real run has: a kill's cleanup that finishes in the background on a
    # loaded machine is waited for, as it is there (the check ends as soon as it is).
    monkeypatch.delenv("PSDK_TEST_LEAK_GRACE")
    inner.makepyfile(test_sharing=SHARING)
    try:
        result = inner.runpytest_subprocess("-p", "leaks", "-p", "no:cacheprovider", "-n", "2",
                                            f"--basetemp={inner.path / 'base'}")
    finally:
        _kill_everything_under(inner.path)
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "left behind" not in result.stdout.str()


def test_a_worker_beside_this_one_is_another_run() -> None:
    # A run's controller (named pytest) with two workers: the one this run is (its own
    # child included) and another, which runs under no watched name of its own.
    controller = subprocess.Popen(
        ["bash", "-c", "exec -a pytest-controller bash -c "
         "\"bash -c 'sleep 301 & wait' & sleep 302 & wait\""])
    try:
        tree = _wait_for_children(controller.pid, 2)
        root = next(pid for pid in tree if _children(pid))
        sibling = next(pid for pid in tree if pid != root)
        found = [line.split()[0].rstrip(",") for line in foreign_runs(root)]
        assert str(sibling) in found
        assert str(controller.pid) not in found  # what started this run is not another
        assert not set(map(str, _children(root))) & set(found)
    finally:
        controller.kill()
        subprocess.run(["pkill", "-f", "sleep 30[12]"], check=False)
        controller.wait()


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _wait_for_children(pid: int, count: int) -> list[int]:
    for _ in range(200):
        children = _children(pid)
        if len(children) == count and all(_children(c) or _is_sleep(c) for c in children):
            return children
        time.sleep(0.05)
    pytest.fail(f"process {pid} did not start {count} children")


def _is_sleep(pid: int) -> bool:
    return Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
