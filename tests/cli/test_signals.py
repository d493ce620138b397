"""SIGTERM and SIGHUP to a real ``psdk`` process clean up as Ctrl-C does: ``run``'s sandbox
is killed, ``exec``'s command stopped, ``cp`` leaves no partial file; the exit status is
128 + the signal's number. A server (``emulate``) stopped by Ctrl-C, SIGTERM or SIGHUP
removes its sandboxes, says so in one line and exits with 0: a stop is its normal end."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent.parent

STOPS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGHUP, id="SIGHUP")]
SERVER_STOPS = [pytest.param(signal.SIGINT, id="SIGINT"), *STOPS]


@pytest.fixture
def local_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """psdk on the local provider with its state in a temp dir; what a test leaves there
    is killed afterwards."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME")}
    env.update(PSDK_HOME=str(tmp_path / "home"), PSDK_PROVIDER="local")
    yield env
    for sandbox_id in _live(env):
        _psdk("kill", sandbox_id, env=env)


def _psdk(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provider_sdk.cli", *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=env, timeout=120)


def _start(*argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "provider_sdk.cli", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env, text=True)


def _live(env: dict[str, str]) -> list[str]:
    """The local provider's live sandboxes (also those an emulator made on it); only
    local's, so that the listing imports no vendor SDK a test's client used."""
    listed = _psdk("ls", "--provider", "local", "--all", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    return [s["id"] for s in json.loads(listed.stdout) if s["state"] != "killed"]


def _wait_for(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s, still not: {what}")
        time.sleep(0.02)


def _stop(proc: subprocess.Popen[str], sig: signal.Signals) -> str:
    """Send ``sig``; return stderr once psdk has exited (killed if it never does)."""
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert err.splitlines()[-1] == f"psdk: error: stopped by {sig.name}", err
    assert "Traceback" not in err
    return err


def _readline(stream: IO[str] | None) -> str:
    assert stream is not None
    return stream.readline()


def _host_pids_running(argv: list[str]) -> list[int]:
    """Host processes whose command line is exactly ``argv`` (local sandboxes' processes
    are host processes in their own namespaces)."""
    wanted = "\0".join(argv) + "\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_text(errors="replace") == wanted:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("sig", STOPS)
def test_a_stopped_run_kills_its_sandbox(local_env: dict[str, str],
                                         sig: signal.Signals) -> None:
    proc = _start("run", "--", "sh", "-c", "echo ready; exec sleep 600", env=local_env)
    assert _readline(proc.stdout) == "ready\n"  # the sandbox exists and runs the command
    assert len(_live(local_env)) == 1
    _stop(proc, sig)
    assert _live(local_env) == []


def test_a_stopped_exec_stops_the_command(local_env: dict[str, str]) -> None:
    created = _psdk("create", env=local_env)
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    marker = f"{600 + secrets.randbelow(10_000)}.{secrets.randbelow(1000)}"
    proc = _start("exec", sandbox_id, "--", "sh", "-c", f"echo ready; exec sleep {marker}",
                  env=local_env)
    assert _readline(proc.stdout) == "ready\n"
    _wait_for(lambda: _host_pids_running(["sleep", marker]), "the command runs")
    _stop(proc, signal.SIGTERM)
    _wait_for(lambda: not _host_pids_running(["sleep", marker]), "the command was stopped")
    assert _live(local_env) == [sandbox_id]  # exec leaves the sandbox itself alone


def test_a_stopped_cp_leaves_no_partial_file(local_env: dict[str, str],
                                             tmp_path: Path) -> None:
    created = _psdk("create", env=local_env)
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    # Sparse: large to copy, nothing on the sandbox's disk.
    made = _psdk("exec", sandbox_id, "--", "truncate", "-s", "8G", "/tmp/big", env=local_env)
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    out.mkdir()
    proc = _start("cp", f"{sandbox_id}:/tmp/big", str(out), env=local_env)
    _wait_for(lambda: any(p.stat().st_size > 0 for p in out.iterdir()) or proc.poll(),
              "the copy started writing")
    assert proc.poll() is None, proc.communicate()
    _stop(proc, signal.SIGTERM)
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("sig", SERVER_STOPS)
def test_a_stopped_emulator_removes_its_sandboxes_and_ends_cleanly(
        local_env: dict[str, str], sig: signal.Signals) -> None:
    key = secrets.token_hex(16)
    proc = _start("emulate", "daytona", "--backend", "local", "--api-key", key, env=local_env)
    settings: dict[str, str] = {}
    while "DAYTONA_TARGET" not in settings:
        line = _readline(proc.stdout)
        assert line, proc.communicate()
        export, assignment = shlex.split(line)  # export NAME=VALUE, ready to paste
        assert export == "export"
        name, _, value = assignment.partition("=")
        settings[name] = value
    client = {**local_env, **settings, "DAYTONA_API_KEY": key}
    made = _psdk("create", "--provider", "daytona", env=client)
    assert made.returncode == 0, made.stderr
    assert len(_live(local_env)) == 1
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert err.splitlines()[-1] == ("daytona emulator stopped; the sandboxes it made are "
                                    "removed"), err
    assert "error" not in err
    assert _live(local_env) == []
