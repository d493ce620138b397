"""The sync facade: each blocking call runs the async API in the portal's loop, with the
same results and the same errors; an interrupted call leaves nothing running."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from memory_provider import STORE, Store

from provider_sdk import ProcessExit, ProcessOutput
from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    CodeTimeout,
    ContextNotFound,
    FileNotFound,
    InvalidInput,
    ProviderNotFound,
    SandboxNotFound,
    SandboxNotRunning,
    UnsupportedCapability,
)
from provider_sdk.models import FileType, NetworkPolicy, SandboxState
from provider_sdk.sync import SyncProvider, SyncSandbox, open_provider


@pytest.fixture
def provider(memory: Store) -> Iterator[SyncProvider]:
    with open_provider("memory") as p:
        yield p


@pytest.fixture
def sandbox(provider: SyncProvider) -> Iterator[SyncSandbox]:
    with provider.create() as sb:
        yield sb


def _portal_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "provider-sdk-sync"}


def _wait_for(check: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s, still not: {what}")
        time.sleep(0.01)


# ------------------------------------------------------------------ provider


def test_open_provider_gives_a_named_provider(provider: SyncProvider) -> None:
    assert provider.name == "memory"
    assert provider.supports(Capability.PAUSE)
    assert provider.supports("exec.stream")
    assert Capability.METRICS in provider.capabilities
    assert provider.async_provider.name == "memory"


def test_open_provider_honours_the_configured_name(memory: Store,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_PROVIDER", "memory")
    with open_provider(label="sync") as provider:
        assert provider.name == "memory"
    assert STORE.opened[-1]["label"] == "sync"


def test_failed_open_raises_and_stops_its_loop_thread(memory: Store) -> None:
    before = _portal_threads()
    with pytest.raises(ProviderNotFound, match="memory"):
        open_provider("nope")
    _wait_for(lambda: _portal_threads() <= before, "the portal thread stopped")


def test_close_releases_the_provider_and_stops_the_loop(memory: Store) -> None:
    before = _portal_threads()
    provider = open_provider("memory")
    assert _portal_threads() - before
    closed = STORE.closed
    provider.close()
    provider.close()  # twice is fine
    assert STORE.closed == closed + 1
    _wait_for(lambda: _portal_threads() <= before, "the portal thread stopped")


def test_calls_after_close_raise(memory: Store) -> None:
    provider = open_provider("memory")
    provider.close()
    with pytest.raises(RuntimeError, match="closed"):
        provider.list()


def test_errors_keep_their_type(provider: SyncProvider) -> None:
    with pytest.raises(SandboxNotFound, match="mem-absent"):
        provider.get_info("mem-absent")
    with pytest.raises(InvalidInput, match="sandbox_id"):
        provider.get_info("")


def test_create_validates_the_spec_before_anything_runs(provider: SyncProvider) -> None:
    with pytest.raises(InvalidInput, match="cwd"):
        provider.create(cwd="relative")
    with pytest.raises(UnsupportedCapability, match=r"network\.policy"):
        provider.create(network=NetworkPolicy(allow_internet=True))
    assert provider.list() == []


def test_with_block_kills_the_sandbox(provider: SyncProvider) -> None:
    with provider.create(metadata={"k": "v"}) as sandbox:
        assert sandbox.info.state == SandboxState.RUNNING
        assert sandbox.metadata == {"k": "v"}
    with pytest.raises(SandboxNotFound):
        provider.get_info(sandbox.id)


def test_with_block_kills_the_sandbox_on_error(provider: SyncProvider) -> None:
    with pytest.raises(KeyError), provider.create() as sandbox:
        raise KeyError("body failed")
    assert provider.list() == []
    assert sandbox.info.state == SandboxState.KILLED


def test_keep_leaves_the_sandbox_running(provider: SyncProvider) -> None:
    with provider.create() as sandbox:
        assert sandbox.keep() is sandbox
    assert provider.get_info(sandbox.id).state == SandboxState.RUNNING
    sandbox.kill()


def test_connect_list_and_kill(provider: SyncProvider) -> None:
    a = provider.create(metadata={"owner": "alice"})
    b = provider.create(metadata={"owner": "bob"})
    assert [i.id for i in provider.list(metadata={"owner": "alice"})] == [a.id]
    again = provider.connect(b.id)
    assert again.id == b.id
    assert again.exec(["true"]).ok
    provider.kill(a.id)
    provider.kill(a.id)  # twice is fine
    assert [i.id for i in provider.list()] == [b.id]
    b.kill()


def test_connect_resumes_a_paused_sandbox(provider: SyncProvider,
                                          sandbox: SyncSandbox) -> None:
    sandbox.pause()
    assert provider.connect(sandbox.id, resume=False).info.state == SandboxState.PAUSED
    assert provider.connect(sandbox.id).info.state == SandboxState.RUNNING


def test_volumes(provider: SyncProvider) -> None:
    volume = provider.create_volume("data")
    assert provider.get_volume("data") == volume
    assert provider.list_volumes() == [volume]
    provider.delete_volume("data")
    assert provider.list_volumes() == []


def test_undeclared_capability_raises_through_the_facade(provider: SyncProvider) -> None:
    with pytest.raises(UnsupportedCapability, match=r"templates\.build"):
        provider.list_templates()


# ------------------------------------------------------------------- sandbox


def test_exec_returns_the_result(sandbox: SyncSandbox) -> None:
    result = sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")


def test_exec_passes_env_and_stdin(sandbox: SyncSandbox) -> None:
    result = sandbox.exec('printf "%s:" "$GREETING"; cat', env={"GREETING": "hi"},
                          stdin="from stdin")
    assert result.stdout == "hi:from stdin"


def test_exec_streams_to_callbacks_as_output_arrives(sandbox: SyncSandbox) -> None:
    chunks: list[bytes] = []
    errors: list[bytes] = []
    sandbox.exec(["sh", "-c", "echo one; echo two >&2"], on_stdout=chunks.append,
                 on_stderr=errors.append)
    assert b"".join(chunks) == b"one\n"
    assert b"".join(errors) == b"two\n"


def test_interrupted_exec_kills_the_command_before_returning(sandbox: SyncSandbox) -> None:
    pid_file = STORE.boxes[sandbox.id].host("pid")  # the sandbox's working directory
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "runs in the main thread, where SIGINT lands"

    def interrupt() -> None:
        _wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), "the pid file")
        signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        sandbox.exec(["sh", "-c", "echo $$ > pid; exec sleep 60"])
    pid = int(pid_file.read_text())
    assert not _alive(sandbox, pid), "the command outlived the interrupted call"
    assert sandbox.exec(["true"]).ok  # the facade still works afterwards


def _alive(sandbox: SyncSandbox, pid: int) -> bool:
    """Whether ``pid`` still runs in the sandbox: gone, or killed and not yet reaped (a
    zombie), is not."""
    stat = sandbox.exec(["cat", f"/proc/{pid}/stat"])
    return stat.ok and stat.stdout.rpartition(")")[2].split()[0] != "Z"


def test_lifecycle_methods_update_info(sandbox: SyncSandbox) -> None:
    assert sandbox.pause().state == SandboxState.PAUSED
    with pytest.raises(SandboxNotRunning):
        sandbox.exec(["true"])
    assert sandbox.resume().state == SandboxState.RUNNING
    assert sandbox.refresh().state == SandboxState.RUNNING
    metrics = sandbox.metrics()
    assert metrics.memory_bytes is not None
    assert metrics.memory_bytes > 0


def test_snapshot_and_create_from_it(provider: SyncProvider, sandbox: SyncSandbox) -> None:
    sandbox.files.write("/data/f.txt", "kept")
    snapshot = sandbox.snapshot()
    assert snapshot.captures == {"filesystem"}
    assert [s.id for s in provider.list_snapshots(sandbox_id=sandbox.id)] == [snapshot.id]
    with provider.create(snapshot=snapshot.id) as copy:
        assert copy.files.read_text("/data/f.txt") == "kept"
    provider.delete_snapshot(snapshot.id)
    assert provider.list_snapshots() == []


def test_undeclared_sandbox_capabilities_raise(sandbox: SyncSandbox) -> None:
    with pytest.raises(UnsupportedCapability, match=r"snapshot\.rollback"):
        sandbox.rollback("snap")
    with pytest.raises(UnsupportedCapability, match=r"network\.update"):
        sandbox.update_network(NetworkPolicy())


def test_shell_carries_cd_and_export_over(sandbox: SyncSandbox) -> None:
    sandbox.files.mkdir("/tmp/psdk shell dir")
    with sandbox.shell() as shell:
        assert shell.run("cd '/tmp/psdk shell dir' && export PSDK_SHELL_VAR=kept").ok
        assert shell.run("pwd; echo $PSDK_SHELL_VAR").stdout == "/tmp/psdk shell dir\nkept\n"


def test_code_context_keeps_state_streams_times_out_and_closes(sandbox: SyncSandbox) -> None:
    context = sandbox.code.create_context(cwd="/tmp")
    sandbox.code.run("x = 41", context=context)
    seen: list[str] = []
    result = sandbox.code.run("print('hi')\nx + 1", context=context, on_stdout=seen.append)
    assert (result.text, result.stdout, "".join(seen)) == ("42", "hi\n", "hi\n")
    with pytest.raises(CodeTimeout) as caught:
        sandbox.code.run("import time\ntime.sleep(60)", context=context, timeout=1)
    assert caught.value.context_kept
    assert sandbox.code.run("x", context=context).text == "41"
    sandbox.code.close_context(context)
    with pytest.raises(ContextNotFound):
        sandbox.code.run("x", context=context)


def test_interrupted_code_run_stops_the_code_and_keeps_the_context(
        sandbox: SyncSandbox) -> None:
    """Ctrl-C during a run interrupts the code in the sandbox too: the context answers
    the next run at once, with what it held."""
    context = sandbox.code.create_context()
    sandbox.code.run("kept = 1", context=context)
    started = threading.Event()
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "runs in the main thread, where SIGINT lands"

    def interrupt() -> None:
        if started.wait(30):
            signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        sandbox.code.run("import time\nprint('started', flush=True)\n"
                         "while True:\n    time.sleep(0.05)", context=context,
                         on_stdout=lambda _text: started.set())
    assert sandbox.code.run("kept", context=context, timeout=30).text == "1"


def test_background_process_stdin_wait_and_reattach(sandbox: SyncSandbox) -> None:
    process = sandbox.start(["sh", "-c", "read line; echo got $line; echo done >&2"])
    assert process.pid > 0
    process.write_stdin("hello\n")
    process.close_stdin()
    again = sandbox.process(process.pid)
    result = again.wait()
    assert (result.exit_code, result.stdout, result.stderr) == (0, "got hello\n", "done\n")


def test_process_events_end_with_the_exit(sandbox: SyncSandbox) -> None:
    process = sandbox.start(["sh", "-c", "echo a; exit 4"])
    events = list(process.events())
    assert events[-1] == ProcessExit(4)
    assert b"".join(e.data for e in events if isinstance(e, ProcessOutput)) == b"a\n"


def test_abandoned_event_iterator_is_closed(sandbox: SyncSandbox) -> None:
    process = sandbox.start(["sh", "-c", "echo first; exec sleep 60"])
    events = process.events()
    assert next(events) == ProcessOutput("stdout", b"first\n")
    events.close()  # type: ignore[attr-defined]
    process.kill()
    assert process.wait().exit_code == -9


# --------------------------------------------------------------------- files


def test_files_round_trip(sandbox: SyncSandbox) -> None:
    files = sandbox.files
    files.write("dir/a.bin", b"\x00\xff" * 10)
    files.write("dir/b.txt", "text")
    files.write("dir/c.txt", (bytes([i]) * 3 for i in range(65, 68)))
    assert files.read("dir/a.bin") == b"\x00\xff" * 10
    assert files.read_text("dir/b.txt") == "text"
    assert files.read_text("dir/c.txt") == "AAABBBCCC"
    assert b"".join(files.stream("dir/c.txt")) == b"AAABBBCCC"
    assert [e.name for e in files.list("dir")] == ["a.bin", "b.txt", "c.txt"]
    assert files.stat("dir").type == FileType.DIRECTORY
    assert files.stat("dir/b.txt").size == 4
    assert files.exists("dir/b.txt")
    assert not files.exists("dir/none")


def test_files_mkdir_rename_remove(sandbox: SyncSandbox) -> None:
    files = sandbox.files
    files.mkdir("/a/b/c")
    assert files.stat("/a/b/c").type == FileType.DIRECTORY
    files.write("/a/x", b"1")
    files.rename("/a/x", "/a/b/y")
    assert files.read("/a/b/y") == b"1"
    files.remove("/a", recursive=True)
    assert not files.exists("/a")
    with pytest.raises(FileNotFound):
        files.read("/a/b/y")


def test_files_upload_and_download(sandbox: SyncSandbox, tmp_path: Path) -> None:
    local = tmp_path / "in.bin"
    local.write_bytes(os.urandom(3 << 20))
    sandbox.files.upload(local, "/up/file.bin")
    assert sandbox.files.stat("/up/file.bin").size == 3 << 20
    sizes: list[int] = []
    sandbox.files.download("/up/file.bin", tmp_path / "out.bin", progress=sizes.append)
    assert (tmp_path / "out.bin").read_bytes() == local.read_bytes()
    assert sum(sizes) == 3 << 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.bin", "out.bin"]


def test_a_process_wait_keeps_at_most_its_output_limit(sandbox: SyncSandbox) -> None:
    result = sandbox.start(["sh", "-c", "printf 0123456789"]).wait(output_limit=4)
    assert (result.stdout, result.stdout_truncated) == ("0123", 6)


def test_check_template_says_what_the_builder_cannot_do(tmp_path: Path) -> None:
    from provider_sdk.local import LocalProvider
    from provider_sdk.models import TemplateSpec

    with open_provider("local", home=tmp_path) as provider:
        assert isinstance(provider.async_provider, LocalProvider)
        spec = TemplateSpec(name="t", dockerfile="FROM scratch\nHEALTHCHECK CMD true\n")
        assert [p.what for p in provider.check_template(spec)] == ["HEALTHCHECK"]


def test_files_errors_keep_their_type(sandbox: SyncSandbox) -> None:
    with pytest.raises(FileNotFound):
        sandbox.files.read("/missing")
    with pytest.raises(InvalidInput, match="path"):
        sandbox.files.write("", b"")


def test_repr_names_the_sandbox(provider: SyncProvider, sandbox: SyncSandbox) -> None:
    assert sandbox.id in repr(sandbox)
    assert "memory" in repr(provider)


# ------------------------------------------------- on the embedded local provider


def test_facade_end_to_end_on_the_local_provider(tmp_path: Path) -> None:
    with open_provider("local", home=str(tmp_path / "home")) as provider:
        with provider.create(metadata={"via": "sync"}) as sandbox:
            assert sandbox.exec(["sh", "-c", "echo $0"]).stdout == "sh\n"
            sandbox.files.write("/tmp/s.txt", "sync")
            assert sandbox.files.read_text("/tmp/s.txt") == "sync"
            with sandbox.shell() as shell:
                shell.run("cd /tmp && export V=1")
                assert shell.run("pwd; echo $V").stdout == "/tmp\n1\n"
            process = sandbox.start("read x; echo got $x")
            process.write_stdin("it\n")
            assert process.wait().stdout == "got it\n"
            assert sandbox.pause().state == SandboxState.PAUSED
            assert provider.connect(sandbox.id).info.state == SandboxState.RUNNING
            assert [i.id for i in provider.list(metadata={"via": "sync"})] == [sandbox.id]
        left = provider.list(metadata={"via": "sync"})
        assert all(i.state == SandboxState.KILLED for i in left)
