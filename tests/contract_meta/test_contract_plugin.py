"""Meta-tests of the contract plugin, run with pytester against a tiny in-test provider
(``mini.py``): capability skips, strict known failures, usage errors, cleanup, the
deadline and the sections."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract_meta.mini import CONTRACT, HANG, LEAK, log_lines, write_contract


def test_missing_capability_skips_with_a_reason(pytester: pytest.Pytester, log: Path) -> None:
    """A test requiring an undeclared capability is skipped, the reason naming it."""
    write_contract(pytester, log)
    result = pytester.runpytest("-rs", "-k", "test_pause_keeps_files")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*provider 'mini' does not declare: pause*"])


def test_requirements_are_all_named_in_the_skip_reason(pytester: pytest.Pytester,
                                                       log: Path) -> None:
    """A test requiring several missing capabilities names each of them."""
    write_contract(pytester, log)
    result = pytester.runpytest("-rs", "-k", "test_pause_memory_keeps_a_process_counting")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["*provider 'mini' does not declare: pause.memory, process.background*"])


def test_capability_skip_creates_no_provider(pytester: pytest.Pytester, log: Path) -> None:
    """Skips happen at collection: no provider is opened for a skipped test."""
    write_contract(pytester, log)
    pytester.runpytest("-k", "test_pause_keeps_files or test_shell_cd_carries_over")
    assert "open" not in log_lines(log)


def test_declared_capability_runs_its_test(pytester: pytest.Pytester, log: Path) -> None:
    """A test whose capability is declared runs (and here passes)."""
    write_contract(pytester, log)
    result = pytester.runpytest("-k", "test_metrics_report_memory_in_use")
    result.assert_outcomes(passed=1)


def test_a_capability_the_instance_does_not_hold_skips_with_a_reason(
        pytester: pytest.Pytester, log: Path) -> None:
    """The class declares metrics but this instance narrows it away (where its host
    decides): the test is skipped once the provider is opened, not run and failed."""
    (pytester.path / "narrow").touch()
    write_contract(pytester, log)
    result = pytester.runpytest("-rs", "-k", "test_metrics_report_memory_in_use")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*provider 'mini' does not declare: metrics*"])
    assert "open" in log_lines(log)


def test_undeclared_capability_check_runs_for_a_lacking_provider(
        pytester: pytest.Pytester, log: Path) -> None:
    """The undeclared-capability check runs for a capability the provider lacks."""
    write_contract(pytester, log)
    result = pytester.runpytest(
        "-k", "test_undeclared_capability_raises_unsupported_capability and background")
    result.assert_outcomes(passed=1)


def test_undeclared_capability_check_skips_a_declared_capability(
        pytester: pytest.Pytester, log: Path) -> None:
    """The undeclared-capability check skips, with a reason, a capability that is declared."""
    write_contract(pytester, log)
    result = pytester.runpytest(
        "-rs", "-k", "test_undeclared_capability_raises_unsupported_capability and metrics")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*provider 'mini' declares metrics*"])


def test_stale_known_failure_is_a_usage_error(pytester: pytest.Pytester, log: Path) -> None:
    """A known_failures key naming no test stops the run with a usage error naming it."""
    write_contract(pytester, log, known={"test_that_does_not_exist": "renamed long ago"})
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*known_failures names no test*test_that_does_not_exist*"])


def test_fixed_known_failure_fails_as_strict_xpass(pytester: pytest.Pytester,
                                                   log: Path) -> None:
    """A known failure that passes is reported as an XPASS(strict) failure with its reason."""
    write_contract(pytester, log, known={"test_unknown_id_raises_sandbox_not_found": "bug #123"})
    result = pytester.runpytest("-rf", "-k", "test_unknown_id_raises_sandbox_not_found")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*bug #123*"])


def test_real_known_failure_is_an_expected_failure(pytester: pytest.Pytester,
                                                   log: Path) -> None:
    """A known failure that still fails is reported as xfailed, and the run passes."""
    write_contract(pytester, log,
                   known={"test_exec_returns_exit_code_and_stdout": "prints nothing"})
    result = pytester.runpytest("-k", "test_exec_returns_exit_code_and_stdout")
    result.assert_outcomes(xfailed=1)
    assert result.ret == pytest.ExitCode.OK


def test_known_failure_covers_every_parametrization(pytester: pytest.Pytester,
                                                    log: Path) -> None:
    """A known_failures key names a test function: each of its parameters is marked."""
    write_contract(pytester, log, known={
        "test_exec_non_positive_timeout_is_invalid_input": "accepts any timeout"})
    result = pytester.runpytest("-k", "test_exec_non_positive_timeout_is_invalid_input")
    result.assert_outcomes(failed=3)


def test_missing_provider_name_is_a_usage_error(pytester: pytest.Pytester, log: Path) -> None:
    """A contract class without provider_name is a usage error."""
    write_contract(pytester, log, name="")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*set provider_name*"])


def test_unknown_provider_is_a_usage_error(pytester: pytest.Pytester, log: Path) -> None:
    """A provider that is not installed is a usage error listing what is installed."""
    write_contract(pytester, log, name="psdk-no-such-provider")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no provider named 'psdk-no-such-provider'*installed*mini*"])


def test_sandbox_fixture_kills_its_sandbox(pytester: pytest.Pytester, log: Path) -> None:
    """The sandbox a test used is killed after it."""
    write_contract(pytester, log)
    result = pytester.runpytest("-k", "test_create_returns_a_running_sandbox")
    result.assert_outcomes(passed=1)
    lines = log_lines(log)
    created = [line.split()[1] for line in lines if line.startswith("create ")]
    assert len(created) == 1
    assert f"kill {created[0]}" in lines


def test_leftover_sandboxes_are_killed_at_session_end(pytester: pytest.Pytester,
                                                      log: Path) -> None:
    """A tagged sandbox a test left running is killed when the session ends, with a warning."""
    write_contract(pytester, log, extra=LEAK)
    result = pytester.runpytest("-s", "-k", "test_leaks_a_tagged_sandbox")
    result.assert_outcomes(passed=1, warnings=1)
    found = re.search(r"leaked (mini-\d+)", result.stdout.str())
    assert found is not None
    leaked = found.group(1)
    assert f"kill {leaked}" in log_lines(log)
    result.stdout.fnmatch_lines([f"*left 1 behind, now removed: sandbox {leaked}*"])


@pytest.mark.slow
def test_hung_test_fails_after_its_deadline(pytester: pytest.Pytester, log: Path) -> None:
    """A test still running after the class's test_timeout is cancelled and failed, and its
    sandbox is still killed."""
    write_contract(pytester, log, extra=HANG)
    result = pytester.runpytest("-k", "test_hangs")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*still running after 2 s*"])
    lines = log_lines(log)
    created = [line.split()[1] for line in lines if line.startswith("create ")]
    assert [f"kill {c}" in lines for c in created] == [True]


@pytest.mark.slow
def test_the_event_loop_sections_are_the_suite_s_and_only_those(
        pytester: pytest.Pytester, log: Path) -> None:
    """A subclass of ``EventLoopContract`` collects the sections that lean on the event
    loop (commands, processes, shells, the code interpreter, ports, timeouts' escapes)
    and no others."""
    pytester.makepyfile(test_mini=CONTRACT.replace("ProviderContract", "EventLoopContract")
                        .format(name="mini", known={}, log=str(log), extra="", timeout=2))
    loop = pytester.runpytest("--collect-only", "-q")
    write_contract(pytester, log)
    whole = pytester.runpytest("--collect-only", "-q")
    loop_tests = {line for line in loop.outlines if "::" in line}
    whole_tests = {line for line in whole.outlines if "::" in line}
    assert loop_tests < whole_tests
    names = {line.rsplit("::", 1)[-1] for line in loop_tests}
    for section in ("test_exec_", "test_process_", "test_shell_", "test_port_",
                    "test_hostile_timeout_", "test_code_"):
        assert any(name.startswith(section) for name in names), section
    # The attacks on an exposed port are served from the proxy's own loop, whatever the
    # caller's: a second loop tries nothing new there.
    for elsewhere in ("test_files_", "test_pause_", "test_snapshot", "test_volume",
                      "test_hostile_port_"):
        assert not any(name.startswith(elsewhere) for name in names), elsewhere
