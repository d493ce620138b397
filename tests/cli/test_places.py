"""``psdk`` finds a sandbox or snapshot it made by its id alone, from any later process:
the provider that made it is recorded in the psdk home. Each ``psdk`` here is a real
subprocess, and the sandboxes are Docker containers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from engines import require_docker

from provider_sdk.cli.places import Places

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME", "XDG_DATA_HOME")}
    return {**env, "PSDK_HOME": str(home), "XDG_CONFIG_HOME": str(home / "xdg")}


def _psdk(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provider_sdk.cli", *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=_env(home), timeout=180, cwd=home.parent)


@pytest.fixture
def docker_sandbox(home: Path) -> Iterator[str]:
    require_docker()
    made = _psdk(home, "create", "--provider", "docker")
    assert made.returncode == 0, made.stderr
    ident = made.stdout.strip()
    yield ident
    _psdk(home, "kill", "--provider", "docker", ident)


def test_a_sandbox_made_by_psdk_is_used_by_its_id_alone(home: Path, docker_sandbox: str) -> None:
    ran = _psdk(home, "exec", docker_sandbox, "--", "echo", "hello")
    assert (ran.returncode, ran.stdout) == (0, "hello\n"), ran.stderr
    info = _psdk(home, "info", docker_sandbox)
    assert info.returncode == 0, info.stderr
    assert "provider:" in info.stdout
    assert "docker" in info.stdout
    for verb in ("pause", "resume"):
        changed = _psdk(home, verb, docker_sandbox)
        assert changed.returncode == 0, changed.stderr
    killed = _psdk(home, "kill", docker_sandbox)
    assert killed.returncode == 0, killed.stderr
    gone = _psdk(home, "info", docker_sandbox)
    assert gone.returncode == 1


def test_a_snapshot_made_by_psdk_is_found_by_its_id_alone(home: Path,
                                                         docker_sandbox: str) -> None:
    taken = _psdk(home, "snapshot", "create", docker_sandbox)
    assert taken.returncode == 0, taken.stderr
    snapshot = taken.stdout.strip()
    try:
        made = _psdk(home, "create", "--from-snapshot", snapshot)
        assert made.returncode == 0, made.stderr
        ran = _psdk(home, "exec", made.stdout.strip(), "--", "true")
        assert ran.returncode == 0, ran.stderr
        assert _psdk(home, "kill", made.stdout.strip()).returncode == 0
    finally:
        removed = _psdk(home, "snapshot", "rm", snapshot)
    assert removed.returncode == 0, removed.stderr
    assert Places(home / "cli" / "places").provider_of("snapshot", snapshot) is None


def test_an_unknown_id_names_every_provider_asked(home: Path, docker_sandbox: str) -> None:
    places = Places(home / "cli" / "places")
    places.remember("sandbox", "sb-gone", "docker")
    result = _psdk(home, "exec", "sb-gone", "--", "true")
    assert result.returncode == 1
    assert result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line
    assert "Traceback" not in line
    assert "'sb-gone'" in line
    assert "docker (where psdk made it)" in line
    assert "local (the default)" in line
    assert places.provider_of("sandbox", "sb-gone") is None  # the stale record is dropped


def test_an_explicit_provider_is_the_only_one_asked(home: Path, docker_sandbox: str) -> None:
    result = _psdk(home, "info", "--provider", "local", docker_sandbox)
    assert result.returncode == 1
    assert result.stderr.strip().endswith("asked local")
    assert "docker" not in result.stderr


def test_records_survive_a_broken_record_file(tmp_path: Path) -> None:
    places = Places(tmp_path)
    places.remember("sandbox", "a\nb", "docker")
    assert places.provider_of("sandbox", "a\nb") == "docker"
    record = next((tmp_path / "sandbox").iterdir())
    record.write_text("{not json")
    assert places.provider_of("sandbox", "a\nb") is None


def test_a_record_naming_a_provider_no_longer_installed_falls_back_to_the_default(
        home: Path) -> None:
    places = Places(home / "cli" / "places")
    places.remember("sandbox", "sb-elsewhere", "acme")
    result = _psdk(home, "kill", "sb-elsewhere")
    assert result.returncode == 1
    assert "asked acme (where psdk made it; not installed) and local (the default)" in \
        result.stderr
