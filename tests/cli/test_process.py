"""``psdk`` as a separate process: exit statuses, one-line errors with no traceback,
streaming, Ctrl-C, and one sandbox driven from several ``psdk`` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from provider_sdk.distributions import install_hint

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent.parent

# Runs psdk with the in-process memory provider registered first. Entry points are the
# only providers another process can see; this stands in for one where that is enough.
_WITH_MEMORY = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from provider_sdk import registry; "
    "registry.register('memory', 'memory_provider:MemoryProvider'); "
    "from provider_sdk.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME")}
    return {**env, **extra}


def psdk(*argv: str, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m provider_sdk.cli`` to completion."""
    return subprocess.run([sys.executable, "-m", "provider_sdk.cli", *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=env or _env(), timeout=timeout)


def psdk_memory(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run psdk in a new process with the memory provider registered."""
    return subprocess.run([sys.executable, "-c", _WITH_MEMORY, str(TESTS), *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=_env(), timeout=timeout)


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith("psdk: error: ")
    return lines[0]


def _wait_for(check: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s, still not: {what}")
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# --------------------------------------------------------------- error paths


def test_unknown_provider_names_the_installed_ones() -> None:
    result = psdk("ls", "--provider", "nope")
    assert result.returncode == 1
    line = _one_error_line(result.stderr)
    assert "'nope'" in line
    assert "installed:" in line
    assert "local" in line
    assert result.stdout == ""


# Runs psdk as if the daytona plugin were not installed (this checkout installs it).
_WITHOUT_DAYTONA = (
    "import sys; from provider_sdk import registry; found = registry._entry_points; "
    "registry._entry_points = lambda: {k: v for k, v in found().items() if k != 'daytona'}; "
    "from provider_sdk.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_unknown_well_known_provider_says_what_to_install() -> None:
    result = subprocess.run([sys.executable, "-c", _WITHOUT_DAYTONA, "ls", "--provider",
                             "daytona"], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, env=_env(), timeout=120)
    assert result.returncode == 1
    assert install_hint("sandbox-provider-sdk-daytona") in _one_error_line(result.stderr)


def test_configured_provider_is_used_by_default() -> None:
    result = psdk("ls", env=_env(PSDK_PROVIDER="nope"))
    assert result.returncode == 1
    assert "'nope'" in _one_error_line(result.stderr)


def test_broken_config_file_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "psdk.toml"
    config.write_text("provider = [\n")
    result = psdk("ls", env=_env(PSDK_CONFIG=str(config)))
    assert result.returncode == 1
    assert str(config) in _one_error_line(result.stderr)


def test_usage_error_exits_2_with_one_line() -> None:
    result = psdk("exec")
    assert result.returncode == 2
    assert "ID" in _one_error_line(result.stderr)


def test_an_empty_command_name_is_a_usage_error_that_says_so() -> None:
    result = psdk_memory("run", "--provider", "memory", "--", "")
    assert result.returncode == 2
    line = _one_error_line(result.stderr)
    assert "command's name is empty" in line
    assert "Permission denied" not in line


def test_unknown_sandbox_exits_1_with_one_line() -> None:
    result = psdk_memory("info", "--provider", "memory", "mem-none")
    assert result.returncode == 1
    assert "mem-none" in _one_error_line(result.stderr)


def test_run_exits_with_the_commands_code() -> None:
    result = psdk_memory("run", "--provider", "memory", "--", "sh", "-c",
                         "echo a; echo b >&2; exit 5")
    assert (result.returncode, result.stdout, result.stderr) == (5, "a\n", "b\n")


def test_run_timeout_exits_124() -> None:
    result = psdk_memory("run", "--provider", "memory", "--timeout", "0.3", "--",
                         "sleep", "30")
    assert result.returncode == 124
    assert "timed out" in _one_error_line(result.stderr)


def test_output_streams_and_ctrl_c_kills_the_command() -> None:
    # The command runs in the sandbox's PID namespace; the host finds it by its argv.
    script = "echo first; sleep 60; echo never"
    marker = f"psdk-ctrl-c-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WITH_MEMORY, str(TESTS), "run", "--provider", "memory",
         "--", "sh", "-c", script, marker],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        env=_env(), text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "first\n"  # arrives while the command still runs
        assert _running(["sh", "-c", script, marker])
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "interrupted" in _one_error_line(err)
    _wait_for(lambda: not _running(["sh", "-c", script, marker]), "the command was killed")


def _running(argv: list[str]) -> list[int]:
    """Host pids of the live processes whose command line is ``argv``."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry / "cmdline").read_bytes() == wanted and _alive(int(entry.name)):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def test_contract_without_the_suite_says_what_to_install(tmp_path: Path) -> None:
    # A module shadowing the suite's package that cannot be imported stands for "absent".
    shadow = tmp_path / "provider_sdk_contract"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('absent')\n")
    env = _env(PYTHONPATH=str(tmp_path))
    result = psdk("contract", "--provider", "local", env=env)
    assert result.returncode == 1
    assert install_hint("sandbox-provider-sdk-contract") in _one_error_line(result.stderr)


def test_contract_with_an_unknown_provider_is_one_line() -> None:
    result = psdk("contract", "--provider", "nope")
    assert result.returncode == 1
    assert "'nope'" in _one_error_line(result.stderr)


# ------------------------------------------------ several processes, one sandbox


@pytest.fixture
def local_env(tmp_path: Path) -> dict[str, str]:
    """Environment for psdk on the local provider (it ships with the SDK), with its state
    in a temp dir."""
    return _env(PSDK_HOME=str(tmp_path / "home"), PSDK_PROVIDER="local")


def test_sandbox_created_by_one_process_is_used_by_others(local_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    created = psdk("create", "--label", "owner=cli-test", env=local_env)
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    try:
        listed = json.loads(psdk("ls", "--label", "owner=cli-test", "--json",
                                 env=local_env).stdout)
        assert [(s["id"], s["state"]) for s in listed] == [(sandbox_id, "running")]

        ran = psdk("exec", sandbox_id, "--env", "GREETING=hi", "--", "sh", "-c",
                   'echo "$GREETING"; exit 3', env=local_env)
        assert (ran.returncode, ran.stdout) == (3, "hi\n")

        local = tmp_path / "in.txt"
        local.write_text("payload")
        assert psdk("cp", str(local), f"{sandbox_id}:/tmp/in.txt", env=local_env).returncode == 0
        assert psdk("exec", sandbox_id, "--", "cat", "/tmp/in.txt",
                    env=local_env).stdout == "payload"
        back = tmp_path / "back.txt"
        assert psdk("cp", f"{sandbox_id}:/tmp/in.txt", str(back), env=local_env).returncode == 0
        assert back.read_text() == "payload"

        assert psdk("pause", sandbox_id, env=local_env).returncode == 0
        info = json.loads(psdk("info", sandbox_id, "--json", env=local_env).stdout)
        assert info["state"] == "paused"
        assert psdk("resume", sandbox_id, env=local_env).returncode == 0
        info = json.loads(psdk("info", sandbox_id, "--json", env=local_env).stdout)
        assert info["state"] == "running"

        snapshot = psdk("snapshot", sandbox_id, env=local_env)
        assert snapshot.returncode == 0, snapshot.stderr
        assert snapshot.stdout.strip()
    finally:
        killed = psdk("kill", sandbox_id, env=local_env)
    assert killed.returncode == 0, killed.stderr
    remaining = json.loads(psdk("ls", "--label", "owner=cli-test", "--json",
                                env=local_env).stdout)
    assert [s for s in remaining if s["state"] != "killed"] == []


def test_run_on_local_leaves_no_sandbox(local_env: dict[str, str]) -> None:
    result = psdk("run", "--", "sh", "-c", "echo ran", env=local_env)
    assert (result.returncode, result.stdout) == (0, "ran\n"), result.stderr
    remaining = json.loads(psdk("ls", "--json", env=local_env).stdout)
    assert [s for s in remaining if s["state"] != "killed"] == []


def test_contract_runs_the_suite_and_exits_with_pytests_status(
        local_env: dict[str, str]) -> None:
    passed = psdk("contract", "--provider", "local", "--", "-q", "-p", "no:cacheprovider",
                  "-k", "test_create_returns_a_running_sandbox", env=local_env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed" in passed.stdout
    nothing = psdk("contract", "--provider", "local", "--", "-q", "-k", "no_such_test_at_all",
                   env=local_env)
    assert nothing.returncode == 5  # pytest: no tests collected


# ------------------------------------------------------------ cp of non-files


def _cp_refused(local_env: dict[str, str], tmp_path: Path, setup: str, path: str) -> None:
    created = psdk("create", env=local_env)
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    try:
        made = psdk("exec", sandbox_id, "--", "sh", "-c", setup, env=local_env)
        assert made.returncode == 0, made.stderr
        out = tmp_path / "out"
        out.mkdir()
        # A FIFO with no writer blocks a reader forever: without the refusal, this hangs.
        result = psdk("cp", f"{sandbox_id}:{path}", str(out), env=local_env, timeout=30)
        assert result.returncode == 1
        assert "not a regular file" in _one_error_line(result.stderr)
        assert list(out.iterdir()) == []
    finally:
        psdk("kill", sandbox_id, env=local_env)


def test_cp_of_a_fifo_on_local_fails_at_once(local_env: dict[str, str],
                                             tmp_path: Path) -> None:
    _cp_refused(local_env, tmp_path, "mkfifo /tmp/fifo", "/tmp/fifo")


def test_cp_of_a_symlink_to_a_fifo_on_local_fails_at_once(local_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    _cp_refused(local_env, tmp_path, "mkfifo /tmp/fifo && ln -s /tmp/fifo /tmp/link",
                "/tmp/link")
