"""What ``ProviderSandbox`` adds beyond the vendor suite, on the local provider: the
timeout and truncation of ``execute``, async methods running in the caller's loop, the
backend of a sandbox the caller already has, and its two kinds of delete."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from engines import require_bwrap
from provider_sdk_deepagents import ProviderSandbox
from provider_sdk_deepagents.sandbox import NATIVE_READ_LIMIT

from provider_sdk import open_provider
from provider_sdk import sync as psdk_sync
from provider_sdk.sandbox import Sandbox


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> str:
    require_bwrap()
    return str(tmp_path_factory.mktemp("deepagents-backend"))


@pytest.fixture(scope="module")
def backend(home: str) -> Iterator[ProviderSandbox]:
    made = ProviderSandbox.create(provider="local", provider_options={"home": home})
    yield made
    made.delete()


def test_execute_combines_output_in_the_order_it_was_written(
        backend: ProviderSandbox) -> None:
    result = backend.execute("echo one; echo two >&2; echo three; exit 3")
    assert result.output == "one\ntwo\nthree\n"
    assert result.exit_code == 3
    assert result.truncated is False


def test_a_command_past_its_timeout_returns_its_output_and_124(
        backend: ProviderSandbox) -> None:
    result = backend.execute("echo started; sleep 30", timeout=1)
    assert result.exit_code == 124
    assert result.output.startswith("started\n")
    assert "timed out after 1 seconds" in result.output


def test_a_command_killed_by_a_signal_exits_as_a_shell_reports_it(
        backend: ProviderSandbox) -> None:
    assert backend.execute("kill -TERM $$").exit_code == 128 + 15


def test_output_past_the_output_limit_is_dropped_and_reported(home: str) -> None:
    with ProviderSandbox.create(provider="local", provider_options={"home": home},
                                output_limit=1000) as small:
        result = small.execute("head -c 5000 /dev/zero | tr '\\0' x")
    assert result.output == "x" * 1000
    assert result.truncated is True


def test_a_text_file_past_the_native_read_limit_is_paged_where_it_is(
        backend: ProviderSandbox) -> None:
    lines = [f"{i:06d}" + "y" * 100 for i in range((NATIVE_READ_LIMIT // 100) + 50)]
    path = "/tmp/large-read/big.txt"
    assert backend.upload_files([(path, "\n".join(lines).encode())])[0].error is None
    page = backend.read(path, offset=len(lines) - 3, limit=10)
    assert page.file_data is not None
    assert page.file_data["content"] == "\n".join(lines[-3:])
    assert (page.start_line, page.end_line, page.next_offset) == (
        len(lines) - 2, len(lines), None)


def test_write_refuses_an_existing_file_and_leaves_it(backend: ProviderSandbox) -> None:
    assert backend.write("/tmp/once/file.txt", "first").error is None
    refused = backend.write("/tmp/once/file.txt", "second")
    assert refused.error is not None
    assert "already exists" in refused.error
    assert backend.download_files(["/tmp/once/file.txt"])[0].content == b"first"


def test_ls_reports_directories_and_sizes(backend: ProviderSandbox) -> None:
    backend.execute("mkdir -p /tmp/lsd/sub && printf 12345 > /tmp/lsd/five")
    entries = {e["path"]: e for e in backend.ls("/tmp/lsd").entries or []}
    assert entries["/tmp/lsd/sub"]["is_dir"] is True
    assert entries["/tmp/lsd/five"]["is_dir"] is False
    assert entries["/tmp/lsd/five"]["size"] == 5
    assert backend.ls("/tmp/lsd/five").error == "Path '/tmp/lsd/five': not_a_directory"
    assert backend.ls("/tmp/absent").error == "Path '/tmp/absent': path_not_found"


def test_glob_reports_paths_relative_to_the_root_by_default(backend: ProviderSandbox) -> None:
    """With no ``glob_paths``: files and directories, relative to the search root, as
    langchain-tests' sandbox suite expects; ``**`` reaches any depth."""
    backend.execute("mkdir -p /tmp/gr/d && touch /tmp/gr/a.py /tmp/gr/d/b.py")
    assert backend.glob_paths == "relative"
    assert backend.glob("*", path="/tmp/gr").matches == [{"path": "a.py", "is_dir": False},
                                                         {"path": "d", "is_dir": True}]
    assert [m["path"] for m in backend.glob("**/*.py", path="/tmp/gr").matches or []] == [
        "a.py", "d/b.py"]


def test_glob_reports_absolute_file_paths_when_asked(home: str,
                                                     backend: ProviderSandbox) -> None:
    """``glob_paths="absolute"``: deepagents' own glob, regular files by absolute path,
    on a backend of a sandbox already made; closing it leaves the sandbox running."""
    backend.execute("mkdir -p /tmp/gl/d && touch /tmp/gl/a.py /tmp/gl/d/b.py")
    with psdk_sync.open_provider("local", home=home) as provider:
        absolute = ProviderSandbox.from_sandbox(provider.connect(backend.id),
                                                glob_paths="absolute")
        found = absolute.glob("*.py", path="/tmp/gl")
        absolute.close()
        assert absolute.closed
        assert provider.connect(backend.id).exec("true").exit_code == 0  # still open
    assert [m["path"] for m in found.matches or []] == ["/tmp/gl/a.py", "/tmp/gl/d/b.py"]


def test_delete_with_a_path_removes_it_and_without_one_kills_the_sandbox(
        home: str) -> None:
    made = ProviderSandbox.create(provider="local", provider_options={"home": home})
    made.execute("mkdir -p /tmp/gone/inner && touch /tmp/gone/inner/f")
    assert made.delete("/tmp/gone").path == "/tmp/gone"
    assert made.delete("/tmp/gone").error == "Error: '/tmp/gone' not found"
    assert made.download_files(["/tmp/gone/inner/f"])[0].error == "file_not_found"
    sandbox_id = made.id
    made.delete()
    made.delete()  # twice is not an error
    with psdk_sync.open_provider("local", home=home) as provider:
        assert sandbox_id not in {i.id for i in provider.list()}


def test_delete_after_close_is_refused(home: str) -> None:
    made = ProviderSandbox.create(provider="local", provider_options={"home": home})
    made.close()
    with pytest.raises(RuntimeError, match="closed"):
        made.delete()
    with psdk_sync.open_provider("local", home=home) as provider:
        provider.kill(made.id)


@pytest.fixture
async def owned_sandbox(home: str) -> AsyncIterator[Sandbox]:
    async with open_provider("local", home=home) as provider, \
            provider.create() as sandbox:
        yield sandbox


@pytest.mark.anyio
async def test_async_methods_run_in_the_callers_loop_and_thread(
        owned_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = ProviderSandbox.from_sandbox(owned_sandbox)
    seen: list[tuple[object, int]] = []
    original = owned_sandbox.exec

    async def recording_exec(*args: Any, **kwargs: Any) -> Any:
        seen.append((asyncio.get_running_loop(), threading.get_ident()))
        return await original(*args, **kwargs)

    monkeypatch.setattr(owned_sandbox, "exec", recording_exec)
    assert (await backend.aexecute("echo native")).output == "native\n"
    assert seen == [(asyncio.get_running_loop(), threading.get_ident())]
    with pytest.raises(RuntimeError, match="use the async methods"):
        backend.execute("echo blocked")


@pytest.mark.anyio
async def test_a_backend_made_in_a_loop_serves_sync_calls_from_other_threads(
        home: str) -> None:
    backend = await ProviderSandbox.acreate(provider="local",
                                            provider_options={"home": home})
    try:
        result = await asyncio.to_thread(backend.execute, "echo from a thread")
        assert result.output == "from a thread\n"
        uploaded = await backend.aupload_files([("/tmp/async/x.bin", b"\x00\xff")])
        assert uploaded[0].error is None
        downloaded = await asyncio.to_thread(backend.download_files, ["/tmp/async/x.bin"])
        assert downloaded[0].content == b"\x00\xff"
    finally:
        await backend.adelete()


@pytest.mark.anyio
async def test_async_calls_from_another_loop_reach_the_backends_own_loop(
        backend: ProviderSandbox) -> None:
    results = await asyncio.gather(*(backend.aexecute(f"echo {i}") for i in range(3)))
    assert [r.output for r in results] == ["0\n", "1\n", "2\n"]


def test_from_a_sync_sandbox_the_backend_leaves_its_provider_open(home: str) -> None:
    with psdk_sync.open_provider("local", home=home) as provider:
        sandbox = provider.create()
        backend = ProviderSandbox.from_sandbox(sandbox)
        assert backend.execute("echo borrowed").output == "borrowed\n"
        backend.delete()
        assert sandbox.id not in {i.id for i in provider.list()}
        assert provider.create().kill() is None  # the provider is still open


def test_secrets_in_the_environment_stay_out_of_the_repr(home: str) -> None:
    made = ProviderSandbox.create(provider="local", provider_options={"home": home},
                                  env={"API_TOKEN": "s3cr3t-value"})
    try:
        assert made.execute("echo $API_TOKEN").output == "s3cr3t-value\n"
        assert "s3cr3t" not in repr(made)
    finally:
        made.delete()


def test_an_unknown_provider_names_what_is_installed() -> None:
    from provider_sdk import ProviderNotFound

    with pytest.raises(ProviderNotFound, match="local"):
        ProviderSandbox.create(provider="no-such-provider")


def test_the_relative_path_rules_of_file_transfers(backend: ProviderSandbox,
                                                   tmp_path: Path) -> None:
    assert backend.upload_files([("relative.txt", b"x")])[0].error == "invalid_path"
    assert backend.download_files(["relative.txt"])[0].error == "invalid_path"
    backend.execute("mkdir -p /tmp/dir-download")
    assert backend.download_files(["/tmp/dir-download"])[0].error == "is_directory"


@pytest.mark.anyio
async def test_async_with_kills_the_sandbox_at_the_end_of_the_block(home: str) -> None:
    async with await ProviderSandbox.acreate(provider="local",
                                             provider_options={"home": home}) as backend:
        sandbox_id = backend.id
        assert (await backend.aexecute("echo inside")).output == "inside\n"
    assert backend.closed
    async with open_provider("local", home=home) as provider:
        assert sandbox_id not in {i.id for i in await provider.list()}


def test_a_backend_whose_loop_has_ended_says_so(home: str) -> None:
    async def made_in_a_loop() -> ProviderSandbox:
        return await ProviderSandbox.acreate(provider="local", provider_options={"home": home})

    backend = asyncio.run(made_in_a_loop())
    with pytest.raises(RuntimeError, match="no longer runs"):
        backend.execute("true")
    with psdk_sync.open_provider("local", home=home) as provider:
        provider.kill(backend.id)


def test_an_interrupted_call_cancels_the_command_in_the_sandbox(
        backend: ProviderSandbox) -> None:
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "runs in the main thread, where SIGINT lands"
    backend.execute("rm -f /tmp/interrupted-started /tmp/interrupted-finished")

    def interrupt() -> None:  # as Ctrl-C would, once the command runs
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if backend.download_files(["/tmp/interrupted-started"])[0].error is None:
                break
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        backend.execute("touch /tmp/interrupted-started; sleep 3; "
                        "touch /tmp/interrupted-finished")
    time.sleep(3.5)
    assert backend.execute("test -e /tmp/interrupted-finished; echo $?").output == "1\n"


def test_edit_changes_a_file_in_place_keeping_its_mode(backend: ProviderSandbox) -> None:
    backend.execute("printf 'echo before\\n' > /tmp/tool.sh && chmod 755 /tmp/tool.sh")
    assert backend.edit("/tmp/tool.sh", "before", "after").occurrences == 1
    result = backend.execute("stat -c %a /tmp/tool.sh && /tmp/tool.sh")
    assert result.output == "755\nafter\n"


def test_a_backend_left_open_does_not_hold_the_interpreter_at_exit(home: str) -> None:
    script = ("from provider_sdk_deepagents import ProviderSandbox\n"
              "b = ProviderSandbox.create(provider='local',\n"
              f"                          provider_options={{'home': {home!r}}})\n"
              "print(b.id)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    left = done.stdout.strip()
    with psdk_sync.open_provider("local", home=home) as provider:
        assert left in {i.id for i in provider.list()}  # the sandbox outlives the process
        provider.kill(left)
