"""Meta-tests of the helpers every contract test leans on, run with pytester: ``eventually``
(a poll that cannot fail would pass every test built on it), the deadline on each test,
the factory's cleanup, and the sweep of what a run left behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract_meta.mini import log_lines, write_contract

POLLS = '''
import time

import anyio
import pytest

from provider_sdk_contract.support import eventually

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_never_holds():
    calls = []

    async def never():
        calls.append(time.monotonic())
        return False

    began = time.monotonic()
    try:
        await eventually(never, what="the sky falling", timeout=0.5, interval=0.05)
    finally:
        print(f"calls={len(calls)} took={time.monotonic() - began:.3f}")


async def test_holds_on_the_third_look():
    calls = []

    async def third():
        calls.append(1)
        return len(calls) == 3

    await eventually(third, what="the third look", timeout=30, interval=0.01)
    assert len(calls) == 3


async def test_holds_at_once():
    calls = []

    async def now():
        calls.append(1)
        return True

    began = time.monotonic()
    await eventually(now, what="now", timeout=30, interval=10)
    assert calls == [1]
    assert time.monotonic() - began < 5


async def test_a_check_that_raises():
    async def broken():
        raise LookupError("the check itself broke")

    await eventually(broken, what="anything", timeout=30)
'''


def test_eventually_fails_naming_what_never_held(pytester: pytest.Pytester,
                                                 log: Path) -> None:
    """A condition that never holds fails the test after the timeout, naming it; until
    then it is checked again and again, at the interval."""
    pytester.makepyfile(test_polls=POLLS)
    result = pytester.runpytest("-s", "-k", "never_holds")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: after 0.5 s, still not: the sky falling*"])
    found = re.search(r"calls=(\d+) took=([\d.]+)", result.stdout.str())
    assert found is not None
    calls, took = int(found.group(1)), float(found.group(2))
    assert 0.5 <= took < 5
    assert 3 <= calls <= 11, calls  # every 0.05 s for 0.5 s, give or take a slow look


def test_eventually_returns_once_the_condition_holds(pytester: pytest.Pytester,
                                                     log: Path) -> None:
    """A condition that comes to hold ends the wait, after exactly the looks it took;
    one that holds at once is looked at once, without waiting an interval."""
    pytester.makepyfile(test_polls=POLLS)
    result = pytester.runpytest("-k", "third_look or at_once")
    result.assert_outcomes(passed=2)


def test_eventually_lets_a_broken_check_fail_the_test(pytester: pytest.Pytester,
                                                      log: Path) -> None:
    """An error in the check itself is the test's failure at once, not a retry or a pass."""
    pytester.makepyfile(test_polls=POLLS)
    result = pytester.runpytest("-k", "check_that_raises", "--durations=1", "-vv")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*LookupError: the check itself broke*"])
    result.stdout.no_fnmatch_line("*still not*")


QUICK = '''
    async def test_quick_and_wrong(self, provider):
        assert 1 + 1 == 3, "arithmetic"

    async def test_quick(self, provider):
        import anyio
        await anyio.sleep(0.1)

    def test_slow_but_not_async(self):
        import time
        time.sleep(1.5)

    from hypothesis import HealthCheck, given, settings, strategies as st

    @settings(max_examples=15, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.integers())
    async def test_slow_property(self, provider, n):
        import anyio
        await anyio.sleep(0.1)
'''


def test_a_test_within_its_deadline_keeps_its_own_verdict(pytester: pytest.Pytester,
                                                          log: Path) -> None:
    """The deadline changes nothing for a test that ends in time: it passes, or fails
    with its own assertion."""
    write_contract(pytester, log, extra=QUICK, timeout=1)
    result = pytester.runpytest("-k", "quick")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: arithmetic*"])
    result.stdout.no_fnmatch_line("*still running after*")


@pytest.mark.slow
def test_the_deadline_leaves_sync_and_property_tests_alone(pytester: pytest.Pytester,
                                                           log: Path) -> None:
    """A test that is not a coroutine, and a property test (each example is small, the
    whole takes longer than the deadline) run to their end."""
    write_contract(pytester, log, extra=QUICK, timeout=1)
    result = pytester.runpytest("-k", "slow_but_not_async or slow_property")
    result.assert_outcomes(passed=2)


@pytest.mark.slow
def test_the_deadline_is_the_class_s(pytester: pytest.Pytester, log: Path) -> None:
    """A test is cancelled at its class's ``test_timeout``, not at a fixed one."""
    write_contract(pytester, log, extra='''
    async def test_sleeps_a_while(self, provider):
        import anyio
        await anyio.sleep(1.5)
''', timeout=3)
    result = pytester.runpytest("-k", "sleeps_a_while")
    result.assert_outcomes(passed=1)
    write_contract(pytester, log, extra='''
    async def test_sleeps_a_while(self, provider):
        import anyio
        await anyio.sleep(1.5)
''', timeout=0.5)
    result = pytester.runpytest("-k", "sleeps_a_while")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*still running after 0.5 s*"])


FACTORY = '''
    async def test_makes_and_leaves(self, factory):
        sandbox = await factory.sandbox()
        volume = await factory.volume()
        print("made", sandbox.id, volume.name)
'''


def test_the_factory_removes_what_a_test_made(pytester: pytest.Pytester, log: Path) -> None:
    """Sandboxes and volumes a test made through the factory are gone after it, and the
    sweep finds nothing left."""
    write_contract(pytester, log, name="mini-vol", extra=FACTORY)
    result = pytester.runpytest("-s", "-k", "makes_and_leaves")
    result.assert_outcomes(passed=1)
    found = re.search(r"made (mini-\d+) (\S+)", result.stdout.str())
    assert found is not None
    sandbox, volume = found.groups()
    lines = log_lines(log)
    assert f"kill {sandbox}" in lines
    assert f"delete-volume {volume}" in lines
    assert lines.index(f"kill {sandbox}") < lines.index(f"delete-volume {volume}")
    result.stdout.no_fnmatch_line("*left * behind*")


def test_a_cleanup_that_fails_warns_and_keeps_the_verdict(pytester: pytest.Pytester,
                                                           log: Path) -> None:
    """A kill refused at cleanup leaves the test's verdict as it was, with a warning that
    names the call; the sweep's own failure warns too."""
    (pytester.path / "kill-fails").touch()
    write_contract(pytester, log, extra=FACTORY.replace("        volume = await factory.volume()\n",
                                                        "        volume = sandbox\n")
                   .replace("volume.name", "volume.id"))
    result = pytester.runpytest("-k", "makes_and_leaves", "-W", "always")
    result.assert_outcomes(passed=1, warnings=2)
    result.stdout.fnmatch_lines(["*contract cleanup: kill('mini-*') failed: Unavailable*",
                                 "*contract sweep failed*refuses kills*"])


SWEEP = '''
    async def test_leaves_things_behind(self, provider, psdk_contract_run):
        from provider_sdk_contract.run import TAG_KEY, volume_prefix
        tag = {TAG_KEY: psdk_contract_run.id}
        left = await provider.create(metadata=tag)
        killed = await provider.create(metadata=tag)
        await killed.kill()
        other = await provider.create(metadata={TAG_KEY: "another-run"})
        await provider.create_volume(volume_prefix(psdk_contract_run.id) + "left")
        await provider.create_volume("psdk-contract-another-run-kept")
        print("ids", left.id, killed.id, other.id)
'''


def test_the_sweep_removes_only_what_the_run_left(pytester: pytest.Pytester,
                                                  log: Path) -> None:
    """At the session's end the run's live sandboxes are killed and its volumes deleted,
    with a warning listing them; a sandbox already killed, another run's sandbox and
    another run's volume are left alone."""
    write_contract(pytester, log, name="mini-vol", extra=SWEEP)
    result = pytester.runpytest("-s", "-k", "leaves_things_behind")
    result.assert_outcomes(passed=1, warnings=1)
    found = re.search(r"ids (mini-\d+) (mini-\d+) (mini-\d+)", result.stdout.str())
    assert found is not None
    left, killed, other = found.groups()
    lines = log_lines(log)
    assert f"kill {left}" in lines
    assert lines.count(f"kill {killed}") == 1  # by the test, not again by the sweep
    assert f"kill {other}" not in lines
    deleted = [line.split()[1] for line in lines if line.startswith("delete-volume ")]
    assert len(deleted) == 1
    assert deleted[0].endswith("-left")
    assert deleted[0] != "psdk-contract-another-run-kept"
    result.stdout.fnmatch_lines(
        [f"*left 2 behind, now removed: sandbox {left}, volume {deleted[0]}*"])


def test_contract_sections_keep_only_the_named_sections(pytester: pytest.Pytester,
                                                        log: Path) -> None:
    """``--contract-sections`` keeps the tests of the named sections (the classes that
    define them) and deselects the rest of the contract."""
    write_contract(pytester, log)
    whole = pytester.runpytest("--collect-only", "-q")
    some = pytester.runpytest("--collect-only", "-q", "--contract-sections=lifecycle, Pause")
    names = {line.rsplit("::", 1)[-1] for line in some.outlines if "::" in line}
    assert "test_pause_reports_the_paused_state" in names
    assert "test_create_returns_a_running_sandbox" in names
    assert not any(n.startswith(("test_files_", "test_exec_returns", "test_snapshot"))
                   for n in names)
    assert len(names) < len({line for line in whole.outlines if "::" in line})
    some.stdout.fnmatch_lines(["*deselected*"])
