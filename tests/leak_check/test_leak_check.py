"""The end-of-run check (``tests/leaks.py``) fails a run whose test leaves a sandbox
running, and passes one whose sandbox is shared by a module's tests on two xdist workers
and killed when the module ends. Each run is a real pytest subprocess on the local
provider."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from engines import require_bwrap

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
