"""The public methods the base classes write once: validation before any hook runs,
capability checks, list narrowing, ``async with`` cleanup, and the emulated shell."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from memory_provider import STORE, MemoryProvider, Store

from provider_sdk import open_provider, registry
from provider_sdk.capabilities import HOOKS, Capability
from provider_sdk.errors import (
    FileNotFound,
    InvalidInput,
    SandboxNotFound,
    UnsupportedCapability,
)
from provider_sdk.models import (
    Lifecycle,
    NetworkPolicy,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    VolumeMount,
)
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import EmulatedShell

pytestmark = pytest.mark.anyio


# Only the required core and exec.stream: the memory provider with its other hooks unset.
_Lean = type("_Lean", (MemoryProvider,), {
    "capabilities": frozenset({Capability.EXEC_STREAM}),
    **{hook: getattr(SandboxProvider, hook)
       for cap in (Capability.PROCESS_BACKGROUND, Capability.SHELL_PERSISTENT, Capability.PAUSE,
                   Capability.SNAPSHOT_FILESYSTEM, Capability.VOLUMES, Capability.METRICS)
       for hook in HOOKS[cap]},
})


async def test_list_narrows_what_the_backend_returns(memory: Store) -> None:
    async with open_provider("memory") as provider:
        a = await provider.create(metadata={"owner": "alice", "team": "x"})
        b = await provider.create(metadata={"owner": "bob"})
        await b.pause()
        assert [i.id for i in await provider.list(metadata={"owner": "alice"})] == [a.id]
        assert [i.id for i in await provider.list(state="paused")] == [b.id]
        assert [i.id for i in await provider.list(state=SandboxState.RUNNING,
                                                  metadata={"team": "x"})] == [a.id]
        assert await provider.list(metadata={"owner": "alice", "team": "y"}) == []


async def test_list_refuses_an_unknown_state_naming_it(memory: Store) -> None:
    async with open_provider("memory") as provider:
        with pytest.raises(InvalidInput, match="state: 'asleep'"):
            await provider.list(state="asleep")


async def test_list_refuses_non_string_metadata(memory: Store) -> None:
    async with open_provider("memory") as provider:
        with pytest.raises(InvalidInput, match="metadata"):
            await provider.list(metadata={"k": 1})  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", ["", "a/b", "x\0y"])
async def test_bad_sandbox_id_is_invalid_input(memory: Store, bad: str) -> None:
    async with open_provider("memory") as provider:
        for call in (provider.get_info, provider.connect, provider.kill):
            with pytest.raises(InvalidInput, match="sandbox_id"):
                await call(bad)


@pytest.mark.parametrize(("spec", "capability"), [
    (SandboxSpec(snapshot="snap-1"), "snapshot.filesystem"),
    (SandboxSpec(volumes=[VolumeMount(volume="v", path="/v")]), "volumes"),
    (SandboxSpec(network=NetworkPolicy(allow_internet=True)), "network.policy"),
    (SandboxSpec(lifecycle=Lifecycle(idle_timeout=60, on_idle="pause")),
     "lifecycle.auto_pause"),
    (SandboxSpec(lifecycle=Lifecycle(auto_resume=True)), "lifecycle.auto_resume"),
])
async def test_spec_needing_an_undeclared_capability_creates_nothing(
        memory: Store, spec: SandboxSpec, capability: str) -> None:
    registry.register("lean", _Lean)
    try:
        async with open_provider("lean") as provider:
            with pytest.raises(UnsupportedCapability) as caught:
                await provider.create(spec)
    finally:
        registry.unregister("lean")
    assert caught.value.capability == capability
    assert STORE.boxes == {}


async def test_create_fields_override_the_spec(memory: Store) -> None:
    async with open_provider("memory") as provider:
        creation = provider.create(SandboxSpec(template="a", metadata={"k": "v"}), template="b")
        assert creation.spec.template == "b"
        assert creation.spec.metadata == {"k": "v"}


async def test_async_with_kills_on_error_and_on_cancel(memory: Store) -> None:
    async with open_provider("memory") as provider:
        with pytest.raises(KeyError):
            async with provider.create():
                raise KeyError("body")
        with anyio.move_on_after(0.1):
            async with provider.create():
                await anyio.sleep(30)
        assert STORE.boxes == {}


async def test_keep_leaves_the_sandbox(memory: Store) -> None:
    async with open_provider("memory") as provider:
        async with provider.create() as sandbox:
            sandbox.keep()
        assert (await provider.get_info(sandbox.id)).state == SandboxState.RUNNING


async def test_kill_twice_is_fine_and_marks_the_handle(memory: Store) -> None:
    async with open_provider("memory") as provider:
        sandbox = await provider.create()
        await sandbox.kill()
        await sandbox.kill()
        assert sandbox.info.state == SandboxState.KILLED
        with pytest.raises(SandboxNotFound):
            await provider.get_info(sandbox.id)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"cmd": []}, "cmd"),
    ({"cmd": ["echo", 1]}, "cmd"),
    ({"cmd": ["echo", "a\0b"]}, "NUL"),
    ({"cmd": "true", "timeout": 0}, "timeout"),
    ({"cmd": "true", "timeout": True}, "timeout"),
    ({"cmd": "true", "cwd": ""}, "path"),
    ({"cmd": "true", "env": {"1X": "v"}}, "env"),
    ({"cmd": "true", "env": {"X\n": "v"}}, "env"),
])
async def test_exec_validates_before_running(memory: Store, kwargs: dict[str, object],
                                             match: str) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with pytest.raises(InvalidInput, match=match):
            await sandbox.exec(**kwargs)  # type: ignore[arg-type]


async def test_exec_of_a_string_runs_bash(memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        result = await sandbox.exec("echo $((6 * 7)) | tr 4 x")
        assert result.stdout == "x2\n"


async def test_undeclared_exec_features_raise(memory: Store) -> None:
    registry.register("lean", _Lean)
    try:
        async with open_provider("lean") as provider, provider.create() as sandbox:
            with pytest.raises(UnsupportedCapability, match=r"exec\.user"):
                await sandbox.exec("true", user="root")
            for call in (sandbox.pause, sandbox.resume, sandbox.snapshot, sandbox.metrics,
                         sandbox.shell):
                with pytest.raises(UnsupportedCapability):
                    await call()
            with pytest.raises(UnsupportedCapability, match=r"process\.background"):
                await sandbox.start("true")
            with pytest.raises(UnsupportedCapability, match=r"process\.background"):
                sandbox.process(1)
            with pytest.raises(UnsupportedCapability, match="volumes"):
                await provider.list_volumes()
            with pytest.raises(UnsupportedCapability, match=r"snapshot\.filesystem"):
                await provider.list_snapshots()
    finally:
        registry.unregister("lean")


async def test_streaming_needs_exec_stream(memory: Store) -> None:
    class Quiet(MemoryProvider):
        capabilities = MemoryProvider.capabilities - {Capability.EXEC_STREAM}

    registry.register("quiet", Quiet)
    try:
        async with open_provider("quiet") as provider, provider.create() as sandbox:
            with pytest.raises(UnsupportedCapability, match=r"exec\.stream"):
                await sandbox.exec("true", on_stdout=print)
    finally:
        registry.unregister("quiet")


@pytest.mark.parametrize("pid", [0, -1, True, "12"])
async def test_bad_pid_is_invalid_input(memory: Store, pid: object) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with pytest.raises(InvalidInput, match="pid"):
            sandbox.process(pid)  # type: ignore[arg-type]


def test_supports_takes_members_and_names() -> None:
    provider = MemoryProvider()
    assert provider.supports(Capability.PAUSE)
    assert provider.supports("pause")
    assert not provider.supports("network.update")


@pytest.mark.parametrize("path", ["", "a\0b", "\0"], ids=["empty", "nul", "only-nul"])
async def test_bad_paths_are_invalid_input(memory: Store, path: str, tmp_path: Path) -> None:
    """Every file call refuses an empty path or one holding NUL, as either of its paths,
    before anything is done: nothing is read, written, moved or made."""
    local = tmp_path / "local.txt"
    local.write_text("kept")
    async with open_provider("memory") as provider, provider.create() as sandbox:
        files = sandbox.files
        await files.write("/tmp/src.txt", b"source")
        for call in (files.read, files.read_text, files.stat, files.mkdir, files.remove,
                     files.list, files.exists):
            with pytest.raises(InvalidInput, match="path"):
                await call(path)
        with pytest.raises(InvalidInput, match="path"):
            await files.write(path, b"")
        with pytest.raises(InvalidInput, match="path"):
            await files.rename("/tmp/src.txt", path)
        with pytest.raises(InvalidInput, match="path"):
            await files.rename(path, "/tmp/dst.txt")
        with pytest.raises(InvalidInput, match="path"):
            await files.upload(local, path)
        with pytest.raises(InvalidInput, match="path"):
            await files.download(path, local)
        with pytest.raises(InvalidInput, match="path"):
            async for _ in files.stream(path):
                pass
        assert await files.read("/tmp/src.txt") == b"source"
        assert not await files.exists("/tmp/dst.txt")
    assert local.read_text() == "kept"
    assert [p.name async for p in anyio.Path(tmp_path).iterdir()] == ["local.txt"]


async def test_failed_download_leaves_the_local_file_alone(memory: Store,
                                                          tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("original")
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with pytest.raises(FileNotFound):
            await sandbox.files.download("/absent", target)
    assert await anyio.Path(target).read_text() == "original"
    assert [p.name async for p in anyio.Path(tmp_path).iterdir()] == ["keep.txt"]


async def test_emulated_shell_keeps_cwd_and_exports(memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.files.mkdir("/tmp/start")
        async with await EmulatedShell.open(sandbox, cwd="/tmp/start",
                                            env={"START": "s"}) as shell:
            assert (await shell.run("pwd; echo $START")).stdout == "/tmp/start\ns\n"
            await shell.run("mkdir -p sub && cd sub && export ADDED=a; exit 3")
            result = await shell.run("pwd; echo $ADDED")
            assert result.stdout == "/tmp/start/sub\na\n"
            assert (await shell.run("LOCAL=x; true")).ok
            assert (await shell.run("echo \"[$LOCAL]\"")).stdout == "[]\n"


async def test_emulated_shell_in_a_missing_directory_is_invalid_input(memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with pytest.raises(InvalidInput, match="shell"):
            await EmulatedShell.open(sandbox, cwd="/tmp/absent", env={})


def test_exit_status_above_128_reads_as_a_signal() -> None:
    from provider_sdk.provider import exit_code_from_status

    assert [exit_code_from_status(s) for s in (0, 1, 128, 137, 143, 192, 193, 255)] == \
        [0, 1, 128, -9, -15, -64, 193, 255]


def test_help_on_sandbox_shows_files_and_info() -> None:
    import pydoc

    import provider_sdk

    text = pydoc.render_doc(provider_sdk.Sandbox, renderer=pydoc.plaintext)
    assert " |  files\n |      File operations inside the sandbox" in text
    assert " |  info\n |      The last known" in text


async def test_invalid_input_names_its_provider_in_the_prefix(memory: Store) -> None:
    async with open_provider("memory") as provider:
        sandbox = await provider.create()
        calls = [lambda: provider.get_info(""), lambda: provider.create(cwd="relative"),
                 lambda: provider.list(state="asleep"), lambda: sandbox.files.read(""),
                 lambda: sandbox.files.read("f", limit=0), lambda: sandbox.exec([]),
                 lambda: sandbox.exec("true", timeout=-1), lambda: sandbox.exec([""]),
                 lambda: sandbox.exec("true", env={"1bad": "x"}),
                 lambda: sandbox.process(0).wait(output_limit=0)]
        for call in calls:
            with pytest.raises(InvalidInput) as caught:
                await call()
            assert str(caught.value).startswith("[memory"), str(caught.value)


async def test_a_hook_error_without_a_provider_leaves_with_one(memory: Store) -> None:
    async def untagged(sandbox_id: str) -> SandboxInfo:
        raise SandboxNotFound("gone")

    async with open_provider("memory") as provider:
        provider._info = untagged  # type: ignore[method-assign]
        with pytest.raises(SandboxNotFound) as caught:
            await provider.get_info("mem-x")
    assert (caught.value.provider, caught.value.sandbox_id) == ("memory", "mem-x")
    assert str(caught.value) == "[memory mem-x] gone"


async def test_an_empty_program_name_is_invalid_input(memory: Store) -> None:
    async with open_provider("memory") as provider:
        sandbox = await provider.create()
        for call in (lambda: sandbox.exec([""]), lambda: sandbox.start(["", "x"])):
            with pytest.raises(InvalidInput, match=r"^\[memory mem-\d+\] cmd: the program"):
                await call()
