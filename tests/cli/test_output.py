"""What ``psdk`` prints, for scripts and for people: a command that makes something prints
its id alone (or JSON with ``--json``), tables have headers, and a table cell is safe
whatever a label holds. Each ``psdk`` is a real subprocess on the local provider."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME", "XDG_DATA_HOME")}
    return {**base, "PSDK_HOME": str(tmp_path / "home"), "PSDK_PROVIDER": "local",
            "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def _psdk(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "provider_sdk.cli", *argv],
                            capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            env=env, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _ok(env: dict[str, str], *argv: str) -> str:
    result = _psdk(env, *argv)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _relabel(env: dict[str, str], sandbox: str, labels: dict[str, str]) -> None:
    """Give a local sandbox ``labels`` behind psdk's back, as another tool (or a record
    written before labels were checked) could: psdk must still print it safely."""
    meta = Path(env["PSDK_HOME"]) / "sandboxes" / sandbox / "meta.json"
    data = json.loads(meta.read_text())
    data["metadata"] = labels
    meta.write_text(json.dumps(data))


def _id_alone(out: str) -> str:
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert lines[0].strip() == lines[0]
    assert " " not in lines[0]
    assert "\t" not in lines[0]
    return lines[0]


@pytest.mark.slow
def test_create_prints_its_id_alone_and_json_with_json(env: dict[str, str]) -> None:
    ident = _id_alone(_ok(env, "create"))
    data = json.loads(_ok(env, "create", "--json", "--label", "k=v"))
    assert data["provider"] == "local"
    assert data["metadata"] == {"k": "v"}
    for made in (ident, data["id"]):
        _ok(env, "kill", made)


@pytest.mark.slow
def test_snapshot_create_ls_rm(env: dict[str, str]) -> None:
    sandbox = _id_alone(_ok(env, "create"))
    try:
        snapshot = _id_alone(_ok(env, "snapshot", "create", sandbox))
        shorthand = _id_alone(_ok(env, "snapshot", sandbox))
        table = _ok(env, "snapshot", "ls").splitlines()
        assert table[0].split() == ["ID", "SANDBOX", "CAPTURES", "CREATED"]
        assert {line.split()[0] for line in table[1:]} == {snapshot, shorthand}
        listed = json.loads(_ok(env, "snapshot", "ls", "--json", "--sandbox", sandbox))
        assert {s["id"] for s in listed} == {snapshot, shorthand}
        assert json.loads(_ok(env, "snapshot", "rm", "--json", snapshot, shorthand)) == [
            snapshot, shorthand]
        assert _ok(env, "snapshot", "ls").split() == table[0].split()  # the header alone
    finally:
        _ok(env, "kill", sandbox)


@pytest.mark.slow
def test_volume_create_ls_rm(env: dict[str, str]) -> None:
    made = _id_alone(_ok(env, "volume", "create", "data"))
    table = _ok(env, "volume", "ls").splitlines()
    assert table[0].split() == ["ID", "NAME", "CREATED"]
    assert table[1].split()[:2] == [made, "data"]
    assert [v["name"] for v in json.loads(_ok(env, "volume", "ls", "--json"))] == ["data"]
    assert _ok(env, "volume", "rm", "data") == ""
    assert json.loads(_ok(env, "volume", "ls", "--json")) == []


@pytest.mark.slow
def test_template_ls_has_a_header(env: dict[str, str]) -> None:
    assert _ok(env, "template", "ls").splitlines()[0].split() == [
        "ID", "NAME", "CONTENT", "CREATED"]


def test_emulate_does_not_take_provider(env: dict[str, str]) -> None:
    result = _psdk(env, "emulate", "e2b", "--provider", "docker")
    assert result.returncode == 2
    assert "--provider" in result.stderr


@pytest.mark.slow
def test_a_label_with_control_characters_and_100_kb_stays_on_one_short_line(
        env: dict[str, str]) -> None:
    big = "x" * 100_000
    sandbox = _id_alone(_ok(env, "create"))
    _relabel(env, sandbox, {"note": "a\nb\x1b[31mred", "big": big})
    try:
        table = _ok(env, "ls").splitlines()
        assert table[0].split() == ["ID", "PROVIDER", "STATE", "TEMPLATE", "CREATED", "METADATA"]
        assert len(table) == 2
        row = table[1]
        assert "\x1b" not in row
        assert len(row) < 300
        assert "\\x1b" in row or "\u2026" in row
        info = _ok(env, "info", sandbox)
        assert "\x1b" not in info
        assert max(len(line) for line in info.splitlines()) < 300
        data = json.loads(_ok(env, "info", "--json", sandbox))
        assert data["metadata"]["big"] == big  # JSON keeps values whole
    finally:
        _ok(env, "kill", sandbox)


@pytest.mark.slow
def test_reap_lines_escape_what_a_label_holds(env: dict[str, str], tmp_path: Path) -> None:
    from provider_sdk.manager.manager import OWNER_LABEL

    sandbox = _id_alone(_ok(env, "create"))
    # An owner may hold format characters (no control character: no manager writes one).
    _relabel(env, sandbox, {OWNER_LABEL: "eve\u202ekilled 99 sandboxes"})
    store = tmp_path / "bindings.sqlite3"
    sqlite3.connect(store).close()
    try:
        out = _ok(env, "reap", "--dry-run", "--store", f"sqlite:///{store}")
        assert out == f"{sandbox}  {OWNER_LABEL}=eve\\u202ekilled 99 sandboxes\n"
    finally:
        _ok(env, "kill", sandbox)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["snapshot", "volume", "template"])
@pytest.mark.parametrize("before", [True, False])
def test_provider_before_or_after_the_action_is_honoured(env: dict[str, str],
                                                         command: str, before: bool) -> None:
    argv = ["--provider", "nope", "ls"] if before else ["ls", "--provider", "nope"]
    result = _psdk(env, command, *argv)
    assert result.returncode == 1
    assert "no provider named 'nope'" in result.stderr
