"""Meta-tests of the contract plugin, run with pytester against a tiny in-test provider.

The provider below lives only in the generated conftest: it keeps sandboxes in a class
dict, declares ``metrics`` and nothing else, and appends what it does to a log file so
these tests can see whether a provider was opened and what was killed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider_sdk import registry

MINI_CONFTEST = '''
import itertools
from pathlib import Path

import attrs

from provider_sdk import registry
from provider_sdk.capabilities import Capability
from provider_sdk.errors import FileNotFound, SandboxNotFound, SandboxNotRunning
from provider_sdk.models import ExecResult, Metrics, SandboxInfo, SandboxState
from provider_sdk.provider import SandboxProvider

pytest_plugins = ["provider_sdk_contract.plugin"]


class MiniProvider(SandboxProvider):
    """Sandboxes are records; commands print nothing; files never exist."""

    name = "mini"
    capabilities = frozenset({Capability.METRICS})
    sandboxes: dict = {}
    ids = itertools.count()

    def __init__(self, *, log: str) -> None:
        self.log = Path(log)
        self._write("open")
        if self.log.with_name("narrow").exists():  # this instance holds none of them
            self._hold_only(frozenset())

    def _write(self, line):
        with self.log.open("a") as f:
            f.write(line + "\\n")

    async def _create(self, spec):
        info = SandboxInfo(id=f"mini-{next(self.ids)}", provider=self.name,
                           state=SandboxState.RUNNING, metadata=spec.metadata)
        self.sandboxes[info.id] = info
        self._write(f"create {info.id}")
        return info

    async def _info(self, sandbox_id):
        if sandbox_id not in self.sandboxes:
            raise SandboxNotFound("unknown", provider=self.name, sandbox_id=sandbox_id)
        return self.sandboxes[sandbox_id]

    async def _list(self, *, metadata, state):
        return list(self.sandboxes.values())

    async def _kill(self, sandbox_id):
        if sandbox_id in self.sandboxes:
            info = self.sandboxes[sandbox_id]
            self.sandboxes[sandbox_id] = attrs.evolve(info, state=SandboxState.KILLED)
            self._write(f"kill {sandbox_id}")

    async def _exec(self, sandbox_id, command):
        if (await self._info(sandbox_id)).state != SandboxState.RUNNING:
            raise SandboxNotRunning("killed", provider=self.name, sandbox_id=sandbox_id)
        return ExecResult(exit_code=0)

    async def _metrics(self, sandbox_id):
        return Metrics(memory_bytes=4096)

    def _read_file(self, sandbox_id, path):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _write_file(self, sandbox_id, path, chunks):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _list_dir(self, sandbox_id, path):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _stat(self, sandbox_id, path):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _mkdir(self, sandbox_id, path, *, parents, exist_ok):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _remove(self, sandbox_id, path, *, recursive):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _rename(self, sandbox_id, src, dst):
        raise FileNotFound(src, provider=self.name, sandbox_id=sandbox_id)


registry.register("mini", MiniProvider)
'''

CONTRACT = '''
from provider_sdk_contract import ProviderContract


class TestMiniContract(ProviderContract):
    provider_name = {name!r}
    known_failures = {known!r}
    test_timeout = 2

    def provider_options(self, tmp_path_factory):
        return {{"log": {log!r}}}
{extra}
'''

LEAK = '''
    async def test_leaks_a_tagged_sandbox(self, provider, factory):
        sandbox = await provider.create(factory.spec())
        print("leaked", sandbox.id)
'''

HANG = '''
    async def test_hangs(self, sandbox):
        import anyio
        await anyio.sleep_forever()
'''


@pytest.fixture
def log(pytester: pytest.Pytester) -> Iterator[Path]:
    """The mini provider's log; the provider is forgotten after the test. The runs
    inside use anyio's plugin, as the contract does: not pytest-asyncio, where it is
    installed (it only warns about its own settings there)."""
    pytester.makeconftest(MINI_CONFTEST)
    pytester.makeini("[pytest]\naddopts = -p no:asyncio\n")
    yield pytester.path / "mini.log"
    registry.unregister("mini")


def _contract(pytester: pytest.Pytester, log: Path, *, name: str = "mini",
              known: dict[str, str] | None = None, extra: str = "") -> None:
    pytester.makepyfile(test_mini=CONTRACT.format(name=name, known=known or {},
                                                  log=str(log), extra=extra))


def _log_lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_missing_capability_skips_with_a_reason(pytester: pytest.Pytester, log: Path) -> None:
    """A test requiring an undeclared capability is skipped, the reason naming it."""
    _contract(pytester, log)
    result = pytester.runpytest("-rs", "-k", "test_pause_keeps_files")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*provider 'mini' does not declare: pause*"])


def test_requirements_are_all_named_in_the_skip_reason(pytester: pytest.Pytester,
                                                       log: Path) -> None:
    """A test requiring several missing capabilities names each of them."""
    _contract(pytester, log)
    result = pytester.runpytest("-rs", "-k", "test_pause_memory_keeps_a_process_counting")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["*provider 'mini' does not declare: pause.memory, process.background*"])


def test_capability_skip_creates_no_provider(pytester: pytest.Pytester, log: Path) -> None:
    """Skips happen at collection: no provider is opened for a skipped test."""
    _contract(pytester, log)
    pytester.runpytest("-k", "test_pause_keeps_files or test_shell_cd_carries_over")
    assert "open" not in _log_lines(log)


def test_declared_capability_runs_its_test(pytester: pytest.Pytester, log: Path) -> None:
    """A test whose capability is declared runs (and here passes)."""
    _contract(pytester, log)
    result = pytester.runpytest("-k", "test_metrics_report_memory_in_use")
    result.assert_outcomes(passed=1)


def test_a_capability_the_instance_does_not_hold_skips_with_a_reason(
        pytester: pytest.Pytester, log: Path) -> None:
    """The class declares metrics but this instance narrows it away (where its host
    decides): the test is skipped once the provider is opened, not run and failed."""
    (pytester.path / "narrow").touch()
    _contract(pytester, log)
    result = pytester.runpytest("-rs", "-k", "test_metrics_report_memory_in_use")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*provider 'mini' does not declare: metrics*"])
    assert "open" in _log_lines(log)


def test_undeclared_capability_check_runs_for_a_lacking_provider(
        pytester: pytest.Pytester, log: Path) -> None:
    """The undeclared-capability check runs for a capability the provider lacks."""
    _contract(pytester, log)
    result = pytester.runpytest(
        "-k", "test_undeclared_capability_raises_unsupported_capability and background")
    result.assert_outcomes(passed=1)


def test_undeclared_capability_check_skips_a_declared_capability(
        pytester: pytest.Pytester, log: Path) -> None:
    """The undeclared-capability check skips, with a reason, a capability that is declared."""
    _contract(pytester, log)
    result = pytester.runpytest(
        "-rs", "-k", "test_undeclared_capability_raises_unsupported_capability and metrics")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*provider 'mini' declares metrics*"])


def test_stale_known_failure_is_a_usage_error(pytester: pytest.Pytester, log: Path) -> None:
    """A known_failures key naming no test stops the run with a usage error naming it."""
    _contract(pytester, log, known={"test_that_does_not_exist": "renamed long ago"})
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*known_failures names no test*test_that_does_not_exist*"])


def test_fixed_known_failure_fails_as_strict_xpass(pytester: pytest.Pytester,
                                                   log: Path) -> None:
    """A known failure that passes is reported as an XPASS(strict) failure with its reason."""
    _contract(pytester, log, known={"test_unknown_id_raises_sandbox_not_found": "bug #123"})
    result = pytester.runpytest("-rf", "-k", "test_unknown_id_raises_sandbox_not_found")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*bug #123*"])


def test_real_known_failure_is_an_expected_failure(pytester: pytest.Pytester,
                                                   log: Path) -> None:
    """A known failure that still fails is reported as xfailed, and the run passes."""
    _contract(pytester, log, known={"test_exec_returns_exit_code_and_stdout": "prints nothing"})
    result = pytester.runpytest("-k", "test_exec_returns_exit_code_and_stdout")
    result.assert_outcomes(xfailed=1)
    assert result.ret == pytest.ExitCode.OK


def test_known_failure_covers_every_parametrization(pytester: pytest.Pytester,
                                                    log: Path) -> None:
    """A known_failures key names a test function: each of its parameters is marked."""
    _contract(pytester, log, known={
        "test_exec_non_positive_timeout_is_invalid_input": "accepts any timeout"})
    result = pytester.runpytest("-k", "test_exec_non_positive_timeout_is_invalid_input")
    result.assert_outcomes(failed=3)


def test_missing_provider_name_is_a_usage_error(pytester: pytest.Pytester, log: Path) -> None:
    """A contract class without provider_name is a usage error."""
    _contract(pytester, log, name="")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*set provider_name*"])


def test_unknown_provider_is_a_usage_error(pytester: pytest.Pytester, log: Path) -> None:
    """A provider that is not installed is a usage error listing what is installed."""
    _contract(pytester, log, name="psdk-no-such-provider")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no provider named 'psdk-no-such-provider'*installed*mini*"])


def test_sandbox_fixture_kills_its_sandbox(pytester: pytest.Pytester, log: Path) -> None:
    """The sandbox a test used is killed after it."""
    _contract(pytester, log)
    result = pytester.runpytest("-k", "test_create_returns_a_running_sandbox")
    result.assert_outcomes(passed=1)
    lines = _log_lines(log)
    created = [line.split()[1] for line in lines if line.startswith("create ")]
    assert len(created) == 1
    assert f"kill {created[0]}" in lines


def test_leftover_sandboxes_are_killed_at_session_end(pytester: pytest.Pytester,
                                                      log: Path) -> None:
    """A tagged sandbox a test left running is killed when the session ends, with a warning."""
    _contract(pytester, log, extra=LEAK)
    result = pytester.runpytest("-s", "-k", "test_leaks_a_tagged_sandbox")
    result.assert_outcomes(passed=1, warnings=1)
    found = re.search(r"leaked (mini-\d+)", result.stdout.str())
    assert found is not None
    leaked = found.group(1)
    assert f"kill {leaked}" in _log_lines(log)
    result.stdout.fnmatch_lines([f"*left 1 behind, now removed: sandbox {leaked}*"])


def test_hung_test_fails_after_its_deadline(pytester: pytest.Pytester, log: Path) -> None:
    """A test still running after the class's test_timeout is cancelled and failed, and its
    sandbox is still killed."""
    _contract(pytester, log, extra=HANG)
    result = pytester.runpytest("-k", "test_hangs")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*still running after 2 s*"])
    lines = _log_lines(log)
    created = [line.split()[1] for line in lines if line.startswith("create ")]
    assert [f"kill {c}" in lines for c in created] == [True]


def test_the_event_loop_sections_are_the_suite_s_and_only_those(
        pytester: pytest.Pytester, log: Path) -> None:
    """A subclass of ``EventLoopContract`` collects the sections that lean on the event
    loop (commands, processes, shells, ports and their hostile ones) and no others."""
    pytester.makepyfile(test_mini=CONTRACT.replace("ProviderContract", "EventLoopContract")
                        .format(name="mini", known={}, log=str(log), extra=""))
    loop = pytester.runpytest("--collect-only", "-q")
    _contract(pytester, log)
    whole = pytester.runpytest("--collect-only", "-q")
    loop_tests = {line for line in loop.outlines if "::" in line}
    whole_tests = {line for line in whole.outlines if "::" in line}
    assert loop_tests < whole_tests
    names = {line.rsplit("::", 1)[-1] for line in loop_tests}
    for section in ("test_exec_", "test_process_", "test_shell_", "test_hostile_port"):
        assert any(name.startswith(section) for name in names), section
    for elsewhere in ("test_files_", "test_pause_", "test_snapshot", "test_volume"):
        assert not any(name.startswith(elsewhere) for name in names), elsewhere
