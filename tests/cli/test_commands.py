"""``psdk`` commands, run in this process against the in-process memory provider: what
each prints, where, and the exit status."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import warnings
from pathlib import Path

import pytest
from memory_provider import STORE, MemoryProvider, Store
from psdk_fixtures import Psdk

from provider_sdk import registry
from provider_sdk.capabilities import Capability
from provider_sdk.cli import console as console_module
from provider_sdk.cli.commands import exit_status, parse_location
from provider_sdk.models import SandboxState

P = ("--provider", "memory")


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith("psdk: error: ")
    assert "Traceback" not in err
    return lines[0]


def _create(psdk: Psdk, *args: str) -> str:
    outcome = psdk("create", *P, *args)
    assert outcome.code == 0, outcome.err
    return outcome.out.strip()


# ----------------------------------------------------------------- providers


def test_providers_lists_each_one_on_a_short_line(psdk: Psdk, memory: Store,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_PROVIDER", "memory")
    outcome = psdk("providers")
    assert outcome.code == 0
    line = next(ln for ln in outcome.out.splitlines() if ln.startswith("memory"))
    assert line.split() == ["memory", "*",  # the configured default is starred
                            str(len(MemoryProvider.capabilities)), "of", str(len(Capability))]
    assert all(len(ln) <= 80 for ln in outcome.out.splitlines())
    assert outcome.err == "psdk providers --matrix shows which capabilities each one has\n"


def test_providers_matrix_has_a_row_per_capability_and_a_column_per_provider(
        psdk: Psdk, memory: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_PROVIDER", "memory")
    outcome = psdk("providers", "--matrix")
    assert outcome.code == 0
    header, *rows = outcome.out.splitlines()
    columns = header.split()
    assert columns[0] == "CAPABILITY"
    assert columns[1] == "local"  # the local provider first, then by name
    assert "memory*" in columns  # the default is starred
    assert [row.split()[0] for row in rows] == [c.value for c in Capability]
    at = columns.index("memory*")
    for row in rows:
        cells = row.split()
        declared = Capability(cells[0]) in MemoryProvider.capabilities
        assert cells[at] == ("yes" if declared else "-"), cells
    assert max(len(ln) for ln in outcome.out.splitlines()) < 100


def test_providers_json(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("providers", "--json")
    rows = {r["name"]: r for r in json.loads(outcome.out)}
    assert rows["memory"]["capabilities"] == sorted(str(c) for c in MemoryProvider.capabilities)
    assert rows["memory"]["error"] is None
    assert rows["memory"]["default"] is False


def test_providers_shows_a_plugin_that_will_not_load(psdk: Psdk, memory: Store) -> None:
    registry.register("broken", "psdk_no_such_module:Provider")
    try:
        outcome = psdk("providers")
    finally:
        registry.unregister("broken")
    assert outcome.code == 0
    line = next(ln for ln in outcome.out.splitlines() if ln.startswith("broken"))
    assert "cannot load" in line


# ----------------------------------------------------------------------- run


def test_run_prints_output_and_exits_with_the_commands_code(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("run", *P, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (outcome.code, outcome.out, outcome.err) == (3, "out\n", "err\n")


def test_run_kills_its_sandbox(psdk: Psdk, memory: Store) -> None:
    assert psdk("run", *P, "--", "true").code == 0
    assert STORE.boxes == {}


def test_run_passes_env(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("run", *P, "--env", "A=1", "--env", "B=x=y", "--", "sh", "-c",
                   'echo "$A $B"')
    assert outcome.out == "1 x=y\n"


def test_run_without_dashes_takes_plain_words(psdk: Psdk, memory: Store) -> None:
    assert psdk("run", *P, "echo", "plain").out == "plain\n"


@pytest.mark.slow
def test_run_timeout_exits_124_with_one_line_and_kills(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("run", *P, "--timeout", "0.3", "--", "sh", "-c", "echo started; sleep 30")
    assert outcome.code == 124
    assert outcome.out == "started\n"  # the partial output was streamed
    assert "timed out" in _one_error_line(outcome.err)
    assert STORE.boxes == {}


def test_run_without_a_command_is_a_usage_error(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("run", *P)
    assert outcome.code == 2
    assert "no command given" in _one_error_line(outcome.err)
    assert STORE.boxes == {}


@pytest.mark.parametrize("argv", [
    ("run", "--timeout", "0", "--", "true"),
    ("run", "--timeout", "soon", "--", "true"),
    ("run", "--env", "NOEQUALS", "--", "true"),
    ("create", "--label", "=v"),
    ("ls", "--bogus"),
    ("info",),
    ("ls", "--", "extra"),
    ("frobnicate",),
    (),
])
def test_usage_errors_exit_2_with_one_line(psdk: Psdk, memory: Store,
                                           argv: tuple[str, ...]) -> None:
    outcome = psdk(*argv)
    assert outcome.code == 2
    _one_error_line(outcome.err)


def test_help_exits_0(psdk: Psdk) -> None:
    outcome = psdk("--help")
    assert outcome.code == 0
    assert "psdk" in outcome.out


def test_version(psdk: Psdk) -> None:
    outcome = psdk("--version")
    assert (outcome.code, outcome.out.split()[0]) == (0, "psdk")


def test_output_of_a_provider_without_streaming_is_printed_at_the_end(
        psdk: Psdk, memory: Store) -> None:
    class Quiet(MemoryProvider):
        capabilities = MemoryProvider.capabilities - {Capability.EXEC_STREAM}

    registry.register("quiet", Quiet)
    try:
        outcome = psdk("run", "--provider", "quiet", "--", "sh", "-c", "echo a; echo b >&2")
        timed = psdk("run", "--provider", "quiet", "--timeout", "0.3", "--", "sh", "-c",
                     "echo partial; sleep 30")
    finally:
        registry.unregister("quiet")
    assert (outcome.code, outcome.out, outcome.err) == (0, "a\n", "b\n")
    assert (timed.code, timed.out) == (124, "partial\n")


def test_killed_by_signal_exits_128_plus_n() -> None:
    assert exit_status(-9) == 137
    assert exit_status(-15) == 143
    assert exit_status(0) == 0
    assert exit_status(300) == 300 & 0xFF


# -------------------------------------------------------------------- create


def test_create_prints_only_the_id_and_says_so_on_stderr(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("create", *P, "--label", "owner=alice", "--template", "base")
    assert outcome.code == 0
    sandbox_id = outcome.out.strip()
    assert outcome.out == f"{sandbox_id}\n"
    # no progress when stderr is not a terminal: the one line of what it did
    assert outcome.err == f"created sandbox {sandbox_id} on memory\n"
    info = STORE.boxes[sandbox_id].info
    assert (dict(info.metadata), info.template) == ({"owner": "alice"}, "base")


def test_create_from_snapshot(psdk: Psdk, memory: Store) -> None:
    source = _create(psdk)
    assert psdk("exec", *P, source, "--", "true").code == 0
    STORE.boxes[source].host("/home/user/kept.txt").write_bytes(b"kept")
    snapshot = psdk("snapshot", *P, source).out.strip()
    copy = _create(psdk, "--from-snapshot", snapshot)
    assert STORE.boxes[copy].host("/home/user/kept.txt").read_bytes() == b"kept"


def test_create_from_unknown_snapshot_is_one_line(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("create", *P, "--from-snapshot", "snap-none")
    assert outcome.code == 1
    assert "snap-none" in _one_error_line(outcome.err)


# ---------------------------------------------------------------------- exec


def test_exec_exits_with_the_commands_code(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("exec", *P, sandbox_id, "--", "sh", "-c", "echo hi; exit 7")
    assert (outcome.code, outcome.out) == (7, "hi\n")
    assert sandbox_id in STORE.boxes  # exec does not kill


def test_exec_options_before_the_id(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("exec", *P, "--env", "X=1", sandbox_id, "--", "sh", "-c", "echo $X")
    assert outcome.out == "1\n"


def test_exec_feeds_stdin_with_i(psdk: Psdk, memory: Store,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox_id = _create(psdk)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"piped\x00bytes")))
    outcome = psdk("exec", *P, "-i", sandbox_id, "--", "cat")
    assert outcome.out == "piped\x00bytes"


def test_exec_in_unknown_sandbox_is_one_line_exit_1(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("exec", *P, "mem-none", "--", "true")
    assert outcome.code == 1
    line = _one_error_line(outcome.err)
    assert "mem-none" in line
    assert "memory" in line


def test_exec_timeout_exits_124(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("exec", *P, "--timeout", "0.2", sandbox_id, "--", "sleep", "30")
    assert outcome.code == 124
    _one_error_line(outcome.err)


def test_exec_resumes_a_paused_sandbox(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    assert psdk("pause", *P, sandbox_id).code == 0
    assert psdk("exec", *P, sandbox_id, "--", "true").code == 0
    assert STORE.boxes[sandbox_id].info.state == SandboxState.RUNNING


# ---------------------------------------------------------------- ls and info


def test_ls_table_and_label_filter(psdk: Psdk, memory: Store) -> None:
    alice = _create(psdk, "--label", "owner=alice")
    bob = _create(psdk, "--label", "owner=bob", "--label", "team=x")
    outcome = psdk("ls", *P)
    header, *rows = outcome.out.splitlines()
    assert header.split() == ["ID", "PROVIDER", "STATE", "TEMPLATE", "CREATED", "METADATA"]
    assert [r.split()[:2] for r in rows] == [[alice, "memory"], [bob, "memory"]]
    assert rows[1].split()[-1] == "owner=bob,team=x"
    filtered = psdk("ls", *P, "--label", "owner=bob").out.splitlines()
    assert [r.split()[0] for r in filtered[1:]] == [bob]


def test_ls_json(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk, "--label", "k=v")
    data = json.loads(psdk("ls", *P, "--json").out)
    assert [(d["id"], d["state"], d["metadata"]) for d in data] == [
        (sandbox_id, "running", {"k": "v"})]


def test_info_text_and_json(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk, "--label", "k=v")
    text = psdk("info", *P, sandbox_id).out
    fields = dict(line.split(":", 1) for line in text.splitlines())
    assert fields["id"].strip() == sandbox_id
    assert fields["state"].strip() == "running"
    assert fields["metadata"].strip() == "k=v"
    assert fields["expires"].strip() == "never"
    data = json.loads(psdk("info", *P, sandbox_id, "--json").out)
    assert (data["id"], data["provider"], data["state"]) == (sandbox_id, "memory", "running")


def test_info_unknown_is_one_line_exit_1(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("info", *P, "mem-none")
    assert outcome.code == 1
    _one_error_line(outcome.err)


# ----------------------------------------------------------------- lifecycle


def test_pause_resume_kill(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    assert psdk("pause", *P, sandbox_id).code == 0
    assert STORE.boxes[sandbox_id].info.state == SandboxState.PAUSED
    assert psdk("resume", *P, sandbox_id).code == 0
    assert STORE.boxes[sandbox_id].info.state == SandboxState.RUNNING
    assert psdk("kill", *P, sandbox_id).code == 0
    assert sandbox_id not in STORE.boxes


def test_kill_unknown_is_an_error(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("kill", *P, "mem-none")
    assert outcome.code == 1
    assert "mem-none" in _one_error_line(outcome.err)


def test_unsupported_capability_is_one_line(psdk: Psdk, memory: Store) -> None:
    class NoPause(MemoryProvider):
        capabilities = MemoryProvider.capabilities - {Capability.PAUSE,
                                                      Capability.PAUSE_MEMORY}

    registry.register("nopause", NoPause)
    try:
        sandbox_id = _create(psdk)
        outcome = psdk("pause", "--provider", "nopause", sandbox_id)
    finally:
        registry.unregister("nopause")
    assert outcome.code == 1
    assert "does not support 'pause'" in _one_error_line(outcome.err)


def test_snapshot_prints_the_snapshot_id(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("snapshot", *P, sandbox_id)
    assert outcome.code == 0
    assert outcome.out.strip() in STORE.snapshots


# ------------------------------------------------------------------------ cp


def test_cp_upload_and_download(psdk: Psdk, memory: Store, tmp_path: Path) -> None:
    sandbox_id = _create(psdk)
    local = tmp_path / "data.bin"
    payload = os.urandom(2 << 20)
    local.write_bytes(payload)
    assert psdk("cp", *P, str(local), f"{sandbox_id}:/in/data.bin").code == 0
    assert STORE.boxes[sandbox_id].host("/in/data.bin").read_bytes() == payload
    assert psdk("cp", *P, f"{sandbox_id}:/in/data.bin", str(tmp_path / "back.bin")).code == 0
    assert (tmp_path / "back.bin").read_bytes() == payload
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back.bin", "data.bin"]


def test_cp_into_a_directory_keeps_the_name(psdk: Psdk, memory: Store,
                                            tmp_path: Path) -> None:
    sandbox_id = _create(psdk)
    (tmp_path / "a.txt").write_text("a")
    assert psdk("cp", *P, str(tmp_path / "a.txt"), f"{sandbox_id}:/home/user").code == 0
    assert psdk("cp", *P, str(tmp_path / "a.txt"), f"{sandbox_id}:/new/").code == 0
    assert psdk("cp", *P, "a.txt", f"{sandbox_id}:").code == 0  # relative, cwd is tmp_path
    box = STORE.boxes[sandbox_id]
    assert box.host("/home/user/a.txt").read_text() == box.host("/new/a.txt").read_text() == "a"
    out = tmp_path / "out"
    out.mkdir()
    assert psdk("cp", *P, f"{sandbox_id}:/new/a.txt", str(out)).code == 0
    assert (out / "a.txt").read_text() == "a"


def test_cp_between_sandboxes(psdk: Psdk, memory: Store) -> None:
    a, b = _create(psdk), _create(psdk)
    STORE.boxes[a].host("/x").write_bytes(b"shared")
    assert psdk("cp", *P, f"{a}:/x", f"{b}:/y").code == 0
    assert psdk("cp", *P, f"{a}:/x", f"{a}:/z").code == 0
    assert STORE.boxes[b].host("/y").read_bytes() == b"shared"
    assert STORE.boxes[a].host("/z").read_bytes() == b"shared"


def test_cp_errors(psdk: Psdk, memory: Store, tmp_path: Path) -> None:
    sandbox_id = _create(psdk)
    both_local = psdk("cp", *P, "a", "./b")
    assert both_local.code == 2
    assert "ID:PATH" in _one_error_line(both_local.err)
    missing_local = psdk("cp", *P, str(tmp_path / "absent"), f"{sandbox_id}:/x")
    assert missing_local.code == 1
    assert "absent" in _one_error_line(missing_local.err)
    missing_remote = psdk("cp", *P, f"{sandbox_id}:/absent", str(tmp_path / "x"))
    assert missing_remote.code == 1
    _one_error_line(missing_remote.err)
    directory = psdk("cp", *P, str(tmp_path), f"{sandbox_id}:/x")
    assert directory.code == 1
    assert "is a directory" in _one_error_line(directory.err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("text", "parsed"), [
    ("sb-1:/a/b", ("sb-1", "/a/b")),
    ("sb-1:rel", ("sb-1", "rel")),
    ("sb-1:", ("sb-1", "")),
    ("/abs/path", (None, "/abs/path")),
    ("./name:with-colon", (None, "./name:with-colon")),
    ("dir/file:x", (None, "dir/file:x")),
    ("plain", (None, "plain")),
])
def test_parse_location(text: str, parsed: tuple[str | None, str]) -> None:
    assert parse_location(text) == parsed


# ---------------------------------------------------------- progress, logging


def test_progress_is_drawn_only_on_a_terminal(psdk: Psdk, memory: Store, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox_id = _create(psdk)
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(8 << 20))
    quiet = psdk("cp", *P, str(local), f"{sandbox_id}:/big.bin")
    assert quiet.err == f"copied {local} to {sandbox_id}:/big.bin (8.0 MiB)\n"
    monkeypatch.setattr(console_module, "_isatty", lambda stream: True)
    monkeypatch.setattr(console_module.Progress, "advance", _advance_always)
    shown = psdk("cp", *P, str(local), f"{sandbox_id}:/big.bin")
    assert shown.code == 0
    assert "MiB / 8.0 MiB" in shown.err
    # the line is erased at the end, before the line that says what was done
    assert shown.err.endswith(f"\r\x1b[2Kcopied {local} to {sandbox_id}:/big.bin (8.0 MiB)\n")
    assert shown.out == ""


def _advance_always(self: console_module.Progress, n: int) -> None:
    self.done += n
    self._last = 1.0
    self._draw()


def test_quiet_by_default_and_debug_events_with_v(psdk: Psdk, memory: Store) -> None:
    quiet = psdk("ls", *P)
    assert quiet.err == ""
    loud = psdk("-v", "ls", *P)
    assert "sandbox.list.started" in loud.err
    assert "sandbox.list.complete" in loud.err
    assert "sandbox.list" not in loud.out
    after = psdk("ls", "-v", *P)  # -v also works after the subcommand
    assert "sandbox.list.started" in after.err


def test_library_warnings_print_as_one_line(psdk: Psdk, memory: Store) -> None:
    psdk("ls", *P)
    assert warnings.formatwarning("WITHOUT isolation,\n  really", RuntimeWarning, "f.py",
                                  1) == "psdk: warning: WITHOUT isolation, really\n"


def test_library_warnings_keep_their_location_with_v(psdk: Psdk, memory: Store) -> None:
    psdk("-v", "ls", *P)
    assert "f.py:1" in warnings.formatwarning("w", RuntimeWarning, "f.py", 1)


# --------------------------------------------------------- cp of non-files


@pytest.mark.parametrize(("path", "link_to"), [("/dev/zero", None), ("/tmp/fifo", None),
                                               ("/tmp/link", "/dev/zero")])
def test_cp_of_a_device_fifo_or_link_to_one_fails_at_once_and_writes_nothing(
        psdk: Psdk, memory: Store, tmp_path: Path, path: str, link_to: str | None) -> None:
    sandbox_id = _create(psdk)
    STORE.add_special(sandbox_id, "/tmp/fifo")
    if link_to is not None:
        STORE.add_special(sandbox_id, path, link_to=link_to)
    out = tmp_path / "out"
    out.mkdir()
    for dst in (str(out), str(out / "named")):
        outcome = psdk("cp", *P, f"{sandbox_id}:{path}", dst)
        assert outcome.code == 1
        line = _one_error_line(outcome.err)
        assert "not a regular file" in line
        assert sandbox_id in line
        assert list(out.iterdir()) == []
    between = psdk("cp", *P, f"{sandbox_id}:{path}", f"{sandbox_id}:/copy")
    assert between.code == 1
    assert "not a regular file" in _one_error_line(between.err)
    assert not STORE.boxes[sandbox_id].host("/copy").exists()


# ------------------------------------------------------------ broken records


def test_ls_hides_broken_records_with_one_warning(psdk: Psdk, memory: Store) -> None:
    good = _create(psdk)
    STORE.add_broken("mem-broken", "meta.json: not JSON (truncated?)")
    outcome = psdk("ls", *P)
    assert outcome.code == 0
    assert [r.split()[0] for r in outcome.out.splitlines()[1:]] == [good]
    assert outcome.err == "psdk: warning: 1 broken record hidden; psdk ls --all shows it\n"
    data = json.loads(psdk("ls", *P, "--json").out)
    assert [d["id"] for d in data] == [good]
    STORE.add_broken("mem-broken-2", "half created")
    assert "2 broken records hidden; psdk ls --all shows them" in psdk("ls", *P).err


def test_ls_all_shows_broken_records_with_the_reason(psdk: Psdk, memory: Store) -> None:
    good = _create(psdk)
    STORE.add_broken("mem-broken", "meta.json:\nnot JSON")
    outcome = psdk("ls", *P, "--all")
    assert (outcome.code, outcome.err) == (0, "")
    header, *rows = outcome.out.splitlines()
    assert header.split() == ["ID", "PROVIDER", "STATE", "TEMPLATE", "CREATED", "METADATA",
                              "PROBLEM"]
    cells = {r.split()[0]: r.split(None, 6) for r in rows}
    assert cells[good][2] == "running"
    assert cells["mem-broken"][2] == "broken"
    assert cells["mem-broken"][6] == "meta.json: not JSON"
    data = {d["id"]: d for d in json.loads(psdk("ls", *P, "--all", "--json").out)}
    assert data["mem-broken"]["state"] == "error"
    assert data["mem-broken"]["extra"]["broken"] == "meta.json:\nnot JSON"


def test_kill_removes_a_broken_record(psdk: Psdk, memory: Store) -> None:
    STORE.add_broken("mem-broken", "half created")
    assert psdk("kill", *P, "mem-broken").code == 0
    assert "mem-broken" not in STORE.boxes
    assert psdk("ls", *P).err == ""


def _store_file(tmp_path: Path) -> str:
    """The URL of a managers' SQLite store that exists (``psdk reap`` needs one)."""
    path = tmp_path / "bindings.sqlite3"
    sqlite3.connect(path).close()
    return f"sqlite:///{path}"


def test_reap_removes_broken_records_and_says_so(psdk: Psdk, memory: Store,
                                                 tmp_path: Path) -> None:
    store = _store_file(tmp_path)
    unbound = _create(psdk, "--label", "psdk.manager.owner=gone")
    untagged = _create(psdk, "--label", "owner=gone")  # made by hand: never reaped
    STORE.add_broken("mem-broken", "meta.json: {}")
    dry = psdk("reap", *P, "--store", store, "--dry-run")
    assert dry.code == 0
    assert sorted(dry.out.splitlines()) == sorted(
        [f"{unbound}  psdk.manager.owner=gone", "mem-broken  broken: meta.json: {}"])
    assert dry.err == ("would kill 1 unbound sandbox and would remove 1 broken record on "
                       "'memory'\n")
    assert {unbound, untagged, "mem-broken"} <= set(STORE.boxes)
    done = psdk("reap", *P, "--store", store)
    assert done.code == 0
    assert done.err == "killed 1 unbound sandbox and removed 1 broken record on 'memory'\n"
    assert set(STORE.boxes) == {untagged}


def test_reap_older_than_spares_broken_records_of_unknown_age(psdk: Psdk, memory: Store,
                                                             tmp_path: Path) -> None:
    store = _store_file(tmp_path)
    STORE.add_broken("mem-broken", "half created")
    outcome = psdk("reap", *P, "--store", store, "--older-than", "1h")
    assert outcome.code == 0
    assert "mem-broken" in STORE.boxes
