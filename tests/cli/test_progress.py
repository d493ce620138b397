"""Progress a person can read: ``psdk template build`` draws its steps with rich when
stderr is a terminal, and writes plain lines when it is not; stdout holds the template's
id alone either way. Each ``psdk`` is a real subprocess on the Docker provider."""

from __future__ import annotations

import json
import os
import pty
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from engines import require_docker

pytestmark = pytest.mark.slow


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME")}
    return {**base, "PSDK_HOME": str(tmp_path / "home"), "COLUMNS": "120"}


@pytest.fixture
def project(tmp_path: Path, env: dict[str, str]) -> Iterator[Path]:
    require_docker()
    from provider_sdk_docker import DEFAULT_TEMPLATE

    folder = tmp_path / f"progress-{secrets.token_hex(4)}"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        f"FROM {DEFAULT_TEMPLATE}\nRUN echo {secrets.token_hex(6)} > /opt/marker\n"
        "RUN true\n")
    yield folder
    # Every template built from it, by the ids the provider lists (each build is tagged
    # with its content hash): a removal that fails fails the test.
    listed = _psdk(env, "template", "ls", "--provider", "docker", "--json")
    for template in json.loads(listed.stdout):
        if template["name"] == folder.name:
            _psdk(env, "template", "rm", "--provider", "docker", template["id"])


def _psdk(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "provider_sdk.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done


def _build(project: Path, env: dict[str, str], stderr: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provider_sdk.cli", "template", "build",
                           str(project), "--provider", "docker", "--force"],
                          stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
                          timeout=300, stdin=subprocess.DEVNULL)


def test_build_off_a_terminal_prints_plain_step_lines(project: Path,
                                                      env: dict[str, str]) -> None:
    result = _build(project, env, subprocess.PIPE)
    assert result.returncode == 0, result.stderr
    template = result.stdout.strip()
    assert result.stdout == f"{template}\n"
    lines = result.stderr.splitlines()
    steps = [line for line in lines if line.startswith(f"{project.name}: Step ")]
    assert steps[0].startswith(f"{project.name}: Step 1/")
    assert steps[0].endswith(" : FROM psdk-base:bookworm-2")
    assert any(line.endswith(" : RUN true") for line in steps)
    assert lines[-1] == f"built template {template} on docker"
    assert "\x1b[" not in result.stderr


def test_build_on_a_terminal_draws_the_steps_with_rich(project: Path,
                                                       env: dict[str, str]) -> None:
    leader, follower = pty.openpty()
    try:
        result = _build(project, env, follower)
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed once everything was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
    assert result.returncode == 0
    template = result.stdout.strip()
    assert result.stdout == f"{template}\n"  # the id alone, whatever stderr is
    text = drawn.decode("utf-8", "replace")
    assert "\x1b[" in text  # drawn, and erased at the end
    assert "on docker" in text or "Step " in text
    assert "\u2501" in text  # the bar of steps
    assert re.search(r"\d/\d", text)  # and their count
