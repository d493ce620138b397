"""The unmodified ``e2b`` SDK's blocking API works against the emulator's E2B flavor."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from e2b import CommandExitException, PtySize, Sandbox, SandboxQuery, SandboxState
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    InvalidArgumentException,
    SandboxNotFoundException,
)

from provider_sdk.emulators import RunningEmulator


@pytest.fixture
def sandbox(e2b_emulator: RunningEmulator) -> Iterator[Sandbox]:
    sandbox = Sandbox.create(metadata={"suite": "sync"}, envs={"FOO": "from-create"})
    yield sandbox
    sandbox.kill()


def test_create_passes_env_and_metadata(sandbox: Sandbox) -> None:
    result = sandbox.commands.run("echo $FOO; echo $BAR", envs={"BAR": "from-run"})
    assert result.stdout == "from-create\nfrom-run\n"
    assert sandbox.get_info().metadata == {"suite": "sync"}


def test_command_output_exit_code_and_cwd(sandbox: Sandbox) -> None:
    result = sandbox.commands.run("pwd; echo oops >&2", cwd="/tmp")
    assert (result.stdout, result.stderr, result.exit_code) == ("/tmp\n", "oops\n", 0)
    with pytest.raises(CommandExitException) as failed:
        sandbox.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stdout == "partial\n"


def test_missing_cwd_is_invalid_argument(sandbox: Sandbox) -> None:
    with pytest.raises(InvalidArgumentException, match="does not exist"):
        sandbox.commands.run("pwd", cwd="/does/not/exist")


def test_commands_run_in_a_login_shell_that_resets_path(sandbox: Sandbox) -> None:
    # E2B's SDK sends `/bin/bash -l -c CMD` and envd runs exactly that: /etc/profile
    # overwrites the PATH the call gave, while other variables survive.
    result = sandbox.commands.run("echo $0; echo $PATH; echo $KEEP",
                                  envs={"PATH": "/opt/given:/usr/bin:/bin", "KEEP": "kept"})
    shell, path, kept = result.stdout.splitlines()
    assert shell == "/bin/bash"
    assert "/opt/given" not in path
    assert kept == "kept"


def test_output_is_streamed_to_callbacks(sandbox: Sandbox) -> None:
    seen: list[str] = []
    sandbox.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=seen.append)
    assert "".join(seen) == "1\n2\n3\n"


def test_background_command_reads_stdin(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("read line; echo got:$line", background=True, stdin=True)
    assert handle.pid in [p.pid for p in sandbox.commands.list()]
    sandbox.commands.send_stdin(handle.pid, "hello\n")
    assert handle.wait().stdout == "got:hello\n"


def test_background_command_is_killed(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("sleep 60", background=True)
    assert sandbox.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as killed:
        handle.wait()
    assert killed.value.exit_code == -1
    assert "killed" in (killed.value.error or "")
    assert handle.pid not in [p.pid for p in sandbox.commands.list()]
    assert sandbox.commands.kill(handle.pid) is False


def test_reconnect_to_a_background_command(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("read line; echo got:$line", background=True, stdin=True)
    handle.disconnect()
    again = sandbox.commands.connect(handle.pid)
    sandbox.commands.send_stdin(handle.pid, "again\n")
    assert again.wait().stdout == "got:again\n"


def test_binary_file_round_trip(sandbox: Sandbox) -> None:
    data = bytes(range(256)) * 64
    sandbox.files.write("/tmp/data/blob.bin", data)
    assert bytes(sandbox.files.read("/tmp/data/blob.bin", format="bytes")) == data


def test_relative_paths_resolve_against_home(sandbox: Sandbox) -> None:
    info = sandbox.files.write("notes.txt", "hi")
    assert info.path == "/home/user/notes.txt"
    assert sandbox.files.read("/home/user/notes.txt") == "hi"


def test_list_make_dir_rename_remove(sandbox: Sandbox) -> None:
    assert sandbox.files.make_dir("/tmp/work/sub") is True
    assert sandbox.files.make_dir("/tmp/work/sub") is False
    sandbox.files.write("/tmp/work/a.txt", "a")
    assert sorted(e.name for e in sandbox.files.list("/tmp/work")) == ["a.txt", "sub"]
    moved = sandbox.files.rename("/tmp/work/a.txt", "/tmp/work/sub/b.txt")
    assert moved.path == "/tmp/work/sub/b.txt"
    assert sandbox.files.get_info("/tmp/work/sub/b.txt").size == 1
    sandbox.files.remove("/tmp/work/sub")
    assert not sandbox.files.exists("/tmp/work/sub/b.txt")
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("/tmp/work/sub/b.txt")


def test_pause_then_connect_resumes_with_files_and_processes(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/kept.txt", "kept")
    handle = sandbox.commands.run("read line; echo after:$line", background=True, stdin=True)
    assert sandbox.pause() is True
    assert sandbox.pause() is False  # already paused
    assert sandbox.get_info().state == SandboxState.PAUSED
    assert sandbox.is_running() is False
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.is_running() is True
    assert resumed.files.read("/tmp/kept.txt") == "kept"
    resumed.commands.send_stdin(handle.pid, "resume\n")  # memory survived the pause
    assert handle.wait().stdout == "after:resume\n"


def test_list_filters_by_metadata(e2b_emulator: RunningEmulator) -> None:
    first = Sandbox.create(metadata={"owner": "alice", "k v": "a&b"})
    second = Sandbox.create(metadata={"owner": "bob"})
    try:
        found = Sandbox.list(query=SandboxQuery(metadata={"k v": "a&b"})).next_items()
        assert [s.sandbox_id for s in found] == [first.sandbox_id]
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert paused == []
        paginator = Sandbox.list(limit=1)
        pages = [paginator.next_items()]
        while paginator.has_next:
            pages.append(paginator.next_items())
        assert sorted(s.sandbox_id for page in pages for s in page) == sorted(
            [first.sandbox_id, second.sandbox_id])
    finally:
        first.kill()
        second.kill()


def test_kill_is_reported_once(e2b_emulator: RunningEmulator) -> None:
    sandbox = Sandbox.create()
    assert sandbox.kill() is True
    assert Sandbox.kill(sandbox.sandbox_id) is False
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sandbox.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id)


def test_wrong_api_key_is_refused(e2b_emulator: RunningEmulator) -> None:
    with pytest.raises(AuthenticationException, match="API key"):
        Sandbox.create(api_key="not-the-key")


def test_any_file_name_round_trips(sandbox: Sandbox) -> None:
    path = "/tmp/odd/\x1f \"quoted\" é;.txt"
    sandbox.files.write(path, b"odd")
    assert bytes(sandbox.files.read(path, format="bytes")) == b"odd"
    assert [e.name for e in sandbox.files.list("/tmp/odd")] == ["\x1f \"quoted\" é;.txt"]


def test_watch_dir_polls_changes(sandbox: Sandbox) -> None:
    sandbox.files.make_dir("/tmp/watched")
    sandbox.files.write("/tmp/watched/old.txt", "old")
    handle = sandbox.files.watch_dir("/tmp/watched")
    sandbox.files.write("/tmp/watched/new.txt", "new")
    sandbox.files.remove("/tmp/watched/old.txt")
    events = {(e.name, e.type.name) for e in handle.get_new_events()}
    handle.stop()
    assert events == {("new.txt", "CREATE"), ("new.txt", "CHMOD"), ("new.txt", "WRITE"),
                      ("old.txt", "REMOVE")}


def test_list_filters_by_template_and_start_time(sandbox: Sandbox) -> None:
    started = Sandbox.get_info(sandbox.sandbox_id).started_at
    mine = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(
        template="base", started_after=started - dt.timedelta(seconds=1))).next_items()]
    assert mine == [sandbox.sandbox_id]
    assert Sandbox.list(query=SandboxQuery(template="other")).next_items() == []
    assert Sandbox.list(query=SandboxQuery(
        started_after=started + dt.timedelta(microseconds=1))).next_items() == []


def test_pty_runs_an_interactive_shell_that_can_be_resized(sandbox: Sandbox) -> None:
    output = bytearray()
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    assert [p.args for p in sandbox.commands.list() if p.pid == terminal.pid] == [["-i", "-l"]]
    sandbox.pty.send_stdin(terminal.pid, b"stty size; tty\n")
    for _stdout, _stderr, pty in terminal:  # bounded: the PTY's 60 s timeout ends it
        output.extend(pty or b"")
        if b"/dev/pts/" in output:
            break
    sandbox.pty.resize(terminal.pid, PtySize(rows=40, cols=100))
    sandbox.pty.send_stdin(terminal.pid, b"stty size; exit 3\n")
    with pytest.raises(CommandExitException) as exited:
        terminal.wait(on_pty=output.extend)
    assert exited.value.exit_code == 3
    text = output.decode(errors="replace")
    assert "24 80" in text
    assert "/dev/pts/" in text
    assert "40 100" in text


def test_pty_is_killed(sandbox: Sandbox) -> None:
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    assert sandbox.pty.kill(terminal.pid) is True
    with pytest.raises(CommandExitException):
        terminal.wait()
