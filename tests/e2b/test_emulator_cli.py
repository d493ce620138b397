"""``psdk emulate e2b`` serves in the foreground until interrupted."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("flavor", ["e2b", "cube"])
def test_psdk_emulate_answers_health_and_stops_on_sigint(local_backend: Path,
                                                         flavor: str) -> None:
    port = _free_port()
    env = {**os.environ, "PSDK_HOME": str(local_backend)}
    process = subprocess.Popen(
        [sys.executable, "-m", "provider_sdk.cli", "emulate", flavor, "--port", str(port),
         "--api-key", "cli-key"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "the emulator did not start"
                time.sleep(0.05)
        assert answer.status_code == 200
        assert answer.json()["status"] == "ok"
        listing = httpx.get(f"http://127.0.0.1:{port}/v2/sandboxes",
                            headers={"X-API-Key": "cli-key"})
        assert listing.status_code == 200
        process.send_signal(signal.SIGINT)
        out, _err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode in (0, 130)
    assert f"127.0.0.1:{port}" in out


@pytest.mark.parametrize("flavor", ["e2b", "cube"])
def test_psdk_contract_runs_the_suite_through_the_emulator(local_backend: Path,
                                                           flavor: str) -> None:
    """``psdk contract --provider e2b|cube --emulator`` starts the emulator in-process and
    runs the suite (a slice of it here) through the real SDK."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CUBE_"))}
    done = subprocess.run(
        [sys.executable, "-m", "provider_sdk.cli", "contract", "--provider", flavor,
         "--emulator", "--", "-q", "-p", "no:cacheprovider", "-k",
         "test_exec_returns_exit_code_and_stdout or test_files_round_trip_multi_chunk_bytes"],
        env={**env, "PSDK_HOME": str(local_backend)}, capture_output=True, text=True,
        timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_psdk_emulate_e2b_stopped_by_sigterm_kills_its_sandboxes(local_backend: Path) -> None:
    # SIGTERM stops it as Ctrl-C does, as its normal end (status 0, one line): the
    # sandboxes it made go with it.
    port = _free_port()
    env = {**os.environ, "PSDK_HOME": str(local_backend)}
    process = subprocess.Popen(
        [sys.executable, "-m", "provider_sdk.cli", "emulate", "e2b", "--port", str(port),
         "--api-key", "cli-key"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "the emulator did not start"
                time.sleep(0.05)
        made = httpx.post(f"http://127.0.0.1:{port}/sandboxes", json={"templateID": "base"},
                          headers={"X-API-Key": "cli-key"}, timeout=60)
        assert made.status_code == 201, made.text
        assert len(_local_sandboxes(env)) == 1
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert err.splitlines()[-1] == ("e2b emulator stopped; the sandboxes it made are "
                                    "removed"), err
    assert _local_sandboxes(env) == []


def _local_sandboxes(env: dict[str, str]) -> list[str]:
    listed = subprocess.run(
        [sys.executable, "-m", "provider_sdk.cli", "ls", "--provider", "local", "--all",
         "--json"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    return [s["id"] for s in json.loads(listed.stdout) if s["state"] != "killed"]
