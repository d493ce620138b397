"""What the local provider promises beyond the shared contract: isolation details,
state that outlives processes, restart recovery, idle kill, limits, and refusals."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
import textwrap
import threading
from pathlib import Path

import anyio
import pytest
from process_trees import ENDED, host_state

from provider_sdk import (
    ConfigError,
    Conflict,
    InvalidInput,
    Lifecycle,
    NetworkPolicy,
    PermissionDenied,
    ProcessOutput,
    Resources,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxState,
    TemplateNotFound,
    Unavailable,
    UnsupportedCapability,
    VolumeMount,
)
from provider_sdk.capabilities import Capability
from provider_sdk.local import (
    LocalProvider,
    UnisolatedWarning,
    _bwrap,
    _cgroups,
    _launch,
    _system,
)
from provider_sdk.local._client import AgentClient

pytestmark = pytest.mark.anyio


async def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll an async predicate until it is true or the deadline passes."""
    with anyio.fail_after(timeout):
        while not await predicate():  # noqa: ASYNC110 - polls another process's state
            await anyio.sleep(0.05)


async def test_sandbox_runs_as_user_1000_with_its_own_hostname(provider: LocalProvider) -> None:
    """Commands run as the unprivileged 'user' in a UTS namespace of their own."""
    async with provider.create() as sandbox:
        result = await sandbox.exec("id -u; id -un; hostname; echo $HOME; pwd")
    assert result.stdout.split() == ["1000", "user", "sandbox", "/home/user", "/home/user"]


async def test_arguments_and_environment_up_to_the_kernels_limit_reach_the_command(
        provider: LocalProvider) -> None:
    """A command's arguments and environment go to its supervisor (or the spawner) in a
    memory file when they outgrow a packet: 1.1 MiB of them run (the kernel allows 2 MiB, and
    128 KiB a string), and past that the command fails as it would on any Linux."""
    sandbox = await provider.create()
    pieces = [str(i) * (100 << 10) for i in range(10)]
    ran = await sandbox.exec(["sh", "-c", 'echo $# ${#BIG}; printf %s "$@" | md5sum',
                              "sh", *pieces], env={"BIG": "e" * (100 << 10)})
    expected = hashlib.md5("".join(pieces).encode()).hexdigest()
    assert (ran.exit_code, ran.stdout.split()[:3]) == (0, ["10", str(100 << 10), expected]), \
        ran
    too_many = await sandbox.exec(["true", *pieces * 3])
    assert too_many.exit_code == 127, too_many
    assert "Argument list too long" in too_many.stderr, too_many


async def test_a_command_after_a_pause_runs_under_a_supervisor_forked_ahead(
        provider: LocalProvider) -> None:
    """After a pause the agent holds a supervisor forked ahead of the next command:
    that command's parent started well before it (a supervisor forked for it would
    have started in the same clock tick), and one soon after another still runs."""
    starts = ('read -r p < /proc/$PPID/stat; read -r c < /proc/$$/stat; '
              'echo "${p##*) }"; echo "${c##*) }"')
    async with provider.create() as sandbox:
        for _ in range(2):
            await anyio.sleep(0.5)
            ran = await sandbox.exec(["sh", "-c", starts])
            assert ran.exit_code == 0, ran
            # Fields after the command name: the start time (in ticks) is the 20th.
            parent, command = (int(line.split()[19]) for line in ran.stdout.splitlines())
            ticks = os.sysconf("SC_CLK_TCK")
            assert command - parent >= ticks // 5, (parent, command)  # 200 ms at least
        quick = [await sandbox.exec(["true"]) for _ in range(3)]
        assert [r.exit_code for r in quick] == [0, 0, 0], quick


_PROCESSES_INSIDE = """
import json, os
started = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        started[pid] = int(stat[stat.rindex(b")") + 2:].split()[19])
print(json.dumps({"ns": os.readlink("/proc/self/ns/pid"), "started": started}))
"""


def _boot_ticks() -> int:
    """Clock ticks since boot now, as /proc/PID/stat counts a process's start."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return int(uptime * os.sysconf("SC_CLK_TCK"))


async def test_sandbox_sees_only_its_own_processes(provider: LocalProvider) -> None:
    """The sandbox has a PID namespace of its own, and every process it sees started
    after it was created: no process of the host, whatever the sandbox's own helpers
    number."""
    before = _boot_ticks() - 1  # /proc/uptime is rounded down to a tick
    async with provider.create() as sandbox:
        result = await sandbox.exec(["/usr/bin/python3", "-c", _PROCESSES_INSIDE])
    inside = json.loads(result.stdout)
    assert inside["ns"] != os.readlink("/proc/self/ns/pid")
    assert "1" in inside["started"]
    older = {pid: at for pid, at in inside["started"].items() if at < before}
    assert not older, f"processes older than the sandbox are visible inside: {older}"


async def test_usr_is_read_only_and_host_root_is_invisible(provider: LocalProvider) -> None:
    """/usr is the host's, read-only; the host's /root and /etc/shadow do not exist."""
    async with provider.create() as sandbox:
        with pytest.raises(PermissionDenied) as refused:
            await sandbox.files.write("/usr/psdk-test", b"x")
        # The error names the user's path, not the temporary file the write goes through.
        assert "/usr/psdk-test" in str(refused.value)
        assert ".psdk-write" not in str(refused.value)
        assert not await sandbox.files.exists("/etc/shadow")
        assert await sandbox.files.list("/root") == []
        result = await sandbox.exec("touch /usr/bin/psdk-test")
    assert result.exit_code != 0
    assert not await anyio.Path("/usr/bin/psdk-test").exists()


async def test_python_is_added_beside_the_hosts_usr_local_bin(provider: LocalProvider) -> None:
    """Where the host has no python, ``python`` runs ``/usr/bin/python3`` from the
    sandbox's /usr/local/bin, which still shows every entry the host has there, and
    which the sandbox cannot write to; the host's /usr/local/bin gains nothing."""
    host = "/usr/local/bin"
    if not _system.python_alias_argv():
        pytest.skip("the host has a python of its own (a sandbox runs that one), or no "
                    "/usr/local/bin")
    listed = sorted(os.listdir(host))
    async with provider.create() as sandbox:
        found = await sandbox.exec("command -v python; readlink /usr/local/bin/python; "
                                   "ls -A /usr/local/bin")
        wrote = await sandbox.exec("touch /usr/local/bin/psdk-test")
    lines = found.stdout.splitlines()
    assert lines[:2] == ["/usr/local/bin/python", "/usr/bin/python3"], found
    assert sorted(lines[2:]) == sorted([*listed, "python"]), found
    assert wrote.exit_code != 0
    assert sorted(os.listdir(host)) == listed


async def test_unisolated_python_is_declared_where_the_host_has_one(home: Path) -> None:
    """Unisolated, commands run the host's programs: ``python`` is held exactly where
    a command finds one."""
    with pytest.warns(UnisolatedWarning):
        async with LocalProvider(home=home, unisolated=True) as provider, \
                provider.create() as sandbox:
            found = await sandbox.exec("command -v python")
    assert provider.supports(Capability.PYTHON) is (found.exit_code == 0), found


async def test_sandbox_outlives_the_process_that_created_it(home: Path) -> None:
    """A sandbox created by another (finished) process is listed, reconnected and used."""
    script = textwrap.dedent(f"""
        import anyio
        from provider_sdk.local import LocalProvider
        async def main():
            sandbox = await LocalProvider(home={str(home)!r}).create(metadata={{"by": "child"}})
            await sandbox.files.write("note.txt", "from the child")
            print(sandbox.id)
        anyio.run(main)
    """)
    done = await anyio.run_process([sys.executable, "-c", script], check=True)
    sandbox_id = done.stdout.decode().strip()
    async with LocalProvider(home=home) as provider:
        listed = await provider.list(metadata={"by": "child"})
        assert [i.id for i in listed] == [sandbox_id]
        assert listed[0].state == SandboxState.RUNNING
        async with await provider.connect(sandbox_id) as sandbox:
            assert await sandbox.files.read_text("note.txt") == "from the child"


async def test_stopped_sandbox_resumes_from_its_files(provider: LocalProvider) -> None:
    """After its processes die (as on a host restart) a sandbox is STOPPED; resume
    starts it again with its files."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/tmp/kept", b"still here")
        meta = json.loads((provider.home / "sandboxes" / sandbox.id / "meta.json").read_text())
        _launch.kill(_launch.Launched(**meta["launch"]))
        assert (await sandbox.refresh()).state == SandboxState.STOPPED
        with pytest.raises(SandboxNotRunning):
            await sandbox.exec("true")
        assert (await sandbox.resume()).state == SandboxState.RUNNING
        assert await sandbox.files.read(b"/tmp/kept".decode()) == b"still here"


async def test_idle_timeout_kills_the_sandbox(provider: LocalProvider) -> None:
    """Lifecycle(idle_timeout, on_idle='kill'): an idle sandbox ends and is gone."""
    sandbox = await provider.create(lifecycle=Lifecycle(idle_timeout=0.5, on_idle="kill"))

    async def gone() -> bool:
        return sandbox.id not in [i.id for i in await provider.list()]

    await wait_for(gone)
    with pytest.raises(SandboxNotFound):
        await provider.get_info(sandbox.id)
    assert not (provider.home / "sandboxes" / sandbox.id).exists()


async def test_idle_timeout_waits_for_background_processes(provider: LocalProvider) -> None:
    """A running background process is activity: the sandbox is not idle."""
    async with provider.create(lifecycle=Lifecycle(idle_timeout=0.3)) as sandbox:
        process = await sandbox.start("sleep 1.5; echo finished")
        await anyio.sleep(1)
        assert (await sandbox.refresh()).state == SandboxState.RUNNING
        assert (await process.wait()).stdout == "finished\n"


async def test_memory_limit_reaches_the_cgroup(provider: LocalProvider) -> None:
    """Resources(memory_mb) becomes the sandbox's memory limit, reported by metrics."""
    if not _cgroups.Cgroup.available():
        pytest.skip("cgroup v1 controllers are not writable here")
    async with provider.create(resources=Resources(memory_mb=256, cpu=0.5)) as sandbox:
        metrics = await sandbox.metrics()
    assert metrics.memory_limit_bytes == 256 << 20
    assert metrics.memory_bytes is not None
    assert metrics.memory_bytes > 0


async def test_refuses_what_it_cannot_do_before_creating(provider: LocalProvider) -> None:
    """Internet, disk quotas where loop mounts are not possible, and unknown templates
    are typed errors; nothing is left."""
    with pytest.raises(UnsupportedCapability, match="allow_internet"):
        await provider.create(network=NetworkPolicy(allow_internet=True))
    if Capability.LIMITS_DISK not in provider.capabilities:
        with pytest.raises(UnsupportedCapability, match="disk"):
            await provider.create(resources=Resources(disk_mb=100))
    with pytest.raises(TemplateNotFound, match="ubuntu"):
        await provider.create(template="ubuntu")
    assert await provider.list() == []


async def test_volume_in_use_cannot_be_deleted(provider: LocalProvider) -> None:
    """Deleting a volume a running sandbox mounts is a Conflict; after the kill it works."""
    await provider.create_volume("shared")
    sandbox = await provider.create(volumes=[VolumeMount(volume="shared", path="/data")])
    with pytest.raises(Exception, match="mounted by"):
        await provider.delete_volume("shared")
    await sandbox.kill()
    await provider.delete_volume("shared")
    assert await provider.list_volumes() == []


@pytest.mark.parametrize("name", ["..", "-data", "a b", "x" * 129])
async def test_bad_volume_name_is_invalid_input(provider: LocalProvider, name: str) -> None:
    """A volume name that could escape the state directory, or holds what the local
    provider does not take, is refused, and nothing is made for it."""
    with pytest.raises(InvalidInput, match="volume name"):
        await provider.create_volume(name)
    assert await provider.list_volumes() == []


async def test_spec_env_is_kept_private_on_the_host(provider: LocalProvider) -> None:
    """Env values never show in the info, and the state files are owner-only."""
    async with provider.create(env={"API_TOKEN": "s3cr3t-value"}) as sandbox:
        assert "s3cr3t-value" not in repr(await sandbox.refresh())
        directory = provider.home / "sandboxes" / sandbox.id
        for name in ("meta.json", "agent.json"):
            assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
        assert stat.S_IMODE(provider.home.stat().st_mode) == 0o700
        ps = await anyio.run_process(["ps", "axww", "-o", "args"], check=True)
        assert b"s3cr3t-value" not in ps.stdout


async def test_agent_survives_malformed_requests(provider: LocalProvider) -> None:
    """Garbage on the agent's socket gets an error reply; the sandbox keeps working."""
    async with provider.create() as sandbox:
        # Reached through its directory's descriptor: a test's home may make the
        # socket's path longer than the kernel takes, as the provider's client knows.
        directory = os.open(provider.home / "sandboxes" / sandbox.id, os.O_PATH)
        for payload in (b"J" + struct.pack(">I", 5) + b"{nope",
                        b"J" + struct.pack(">I", 2) + b"[]",
                        b"\x00\x00"):
            with socket.socket(socket.AF_UNIX) as raw:
                raw.connect(f"/proc/self/fd/{directory}/agent.sock")
                raw.sendall(payload)
                raw.shutdown(socket.SHUT_WR)
                raw.recv(4096)
        os.close(directory)
        assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_missing_bubblewrap_is_a_config_error(home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bwrap on PATH, create refuses and says how to install it."""
    monkeypatch.setenv("PATH", str(home))
    with pytest.raises(ConfigError, match="apt-get install bubblewrap"):
        await LocalProvider(home=home).create()


async def test_unisolated_mode_warns_on_every_create(home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """unisolated=True works without bwrap, and every create warns loudly."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(_bwrap, "bwrap_path", lambda: None)
    async with LocalProvider(home=home, unisolated=True) as provider:
        # Root's file operations pass every permission check: not declared then.
        assert provider.supports(Capability.FILES_PERMISSIONS) is (os.geteuid() != 0)
        for _ in range(2):
            with pytest.warns(UnisolatedWarning, match="WITHOUT isolation") as said:
                sandbox = await provider.create()
            assert [w.filename for w in said] == [__file__]  # the caller's line
            await sandbox.files.write("hello.txt", "hi")
            result = await sandbox.exec("cat hello.txt")
            assert result.stdout == "hi"
            root = provider.home / "sandboxes" / sandbox.id / "root"
            assert (root / "home/user/hello.txt").read_text() == "hi"
            await sandbox.kill()
        with pytest.warns(UnisolatedWarning) as said:
            async with provider.create():
                pass
        assert [w.filename for w in said] == [__file__]


async def test_capabilities_are_per_instance_unisolated_or_isolated(home: Path) -> None:
    """Volumes and templates need bubblewrap: the class declares them (as its entry point's
    data does), an isolated instance holds them, an unisolated one does not, and the core
    refuses them there, with the reason, before anything is made."""
    from provider_sdk import registry

    needs_bwrap = {Capability.VOLUMES, Capability.VOLUMES_SHARED, Capability.VOLUMES_READ_ONLY,
                   Capability.TEMPLATES, Capability.TEMPLATES_BUILD}
    isolated = LocalProvider(home=home)
    unisolated = LocalProvider(home=home, unisolated=True)
    assert needs_bwrap <= registry.declared_capabilities("local") == LocalProvider.capabilities
    for capability in needs_bwrap:
        assert (isolated.supports(capability), unisolated.supports(capability)) == (True, False)
    for unbounded in (Capability.NETWORK_INTERNET, Capability.NETWORK_ALLOW_OUT):
        assert not isolated.supports(unbounded)
    await isolated.create_volume("shared")
    try:
        for spec, capability in (
                ({"volumes": [VolumeMount(volume="shared", path="/mnt/v")]}, "volumes"),
                ({"template": "psdk-anything"}, "templates")):
            with pytest.raises(UnsupportedCapability, match="bubblewrap") as caught:
                await unisolated.create(**spec)
            assert caught.value.capability == capability
        with pytest.raises(UnsupportedCapability, match="volumes"):
            await unisolated.list_volumes()
    finally:
        await isolated.delete_volume("shared")
    assert await isolated.list() == []
    assert not list((home / "sandboxes").iterdir())


async def test_kill_ends_every_process_and_removes_the_cgroups(provider: LocalProvider) -> None:
    """After kill, no process of the sandbox is left and its state is gone."""
    sandbox = await provider.create()
    await sandbox.start("sleep 300")
    meta = json.loads((provider.home / "sandboxes" / sandbox.id / "meta.json").read_text())
    launched = _launch.Launched(**meta["launch"])
    assert _launch.namespace_pids(launched)
    await sandbox.kill()
    assert _launch.namespace_pids(launched) == []
    assert not provider._shared.cgroup(sandbox.id).exists()
    assert not (provider.home / "sandboxes" / sandbox.id).exists()


async def test_paused_sandbox_is_frozen_not_stopped(provider: LocalProvider) -> None:
    """Pause stops every process in place (state T or frozen), resume continues them."""
    async with provider.create() as sandbox:
        await sandbox.pause()
        meta = json.loads((provider.home / "sandboxes" / sandbox.id / "meta.json").read_text())
        launched = _launch.Launched(**meta["launch"])
        assert _launch.alive(launched)
        with pytest.raises(SandboxNotRunning, match="paused"):
            await sandbox.files.read("/etc/hostname")
        await sandbox.resume()
        assert await sandbox.files.read_text("/etc/hostname") == "sandbox\n"


async def test_pause_without_a_freezer_stops_by_signal(provider: LocalProvider,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Where cgroups are not writable, pause sends SIGSTOP to the whole tree."""
    monkeypatch.setattr(_cgroups.Cgroup, "available", staticmethod(lambda: False))
    fallback = LocalProvider(home=provider.home)
    async with fallback.create() as sandbox:
        process = await sandbox.start("while true; do sleep 0.05; done")
        await sandbox.pause()
        meta = json.loads((provider.home / "sandboxes" / sandbox.id / "meta.json").read_text())
        pids = _launch.namespace_pids(_launch.Launched(**meta["launch"]))
        states = {pid: host_state(pid) for pid in pids}
        # A child that had just ended is a zombie (or gone): it cannot run again.
        alive = {state for state in states.values() if state is not None and state not in ENDED}
        assert alive, states  # the sandbox's init and agent at least
        assert alive <= {"T", "t"}, states
        assert (await sandbox.refresh()).state == SandboxState.PAUSED
        await sandbox.resume()
        await process.kill()
        assert (await sandbox.exec("echo ok")).stdout == "ok\n"


async def test_client_refuses_an_oversized_frame_from_the_agent(tmp_path: Path) -> None:
    """The agent is inside the sandbox: a frame claiming 1 GiB is refused, not allocated."""
    path = tmp_path / "fake-agent.sock"
    server = socket.socket(socket.AF_UNIX)
    directory = os.open(tmp_path, os.O_PATH)  # however long the test's path is
    server.bind(f"/proc/self/fd/{directory}/{path.name}")
    os.close(directory)
    server.listen()

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"J" + struct.pack(">I", 1 << 30))
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = AgentClient(str(path), provider="local", sandbox_id="fake")
    with pytest.raises(Unavailable):
        await client.call("ping")
    thread.join()
    server.close()


async def test_concurrent_first_creates_in_a_fresh_home_all_succeed(
        provider: LocalProvider) -> None:
    """The home's shared /etc is made once even when the first creates race for it."""
    sandboxes = []

    async def create() -> None:
        sandboxes.append(await provider.create())

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(create)
    assert len({s.id for s in sandboxes}) == 4
    assert not [p for p in (provider.home / "base").iterdir() if p.name.startswith(".etc-")]


async def test_a_sandbox_killed_mid_exec_raises_a_sandbox_error(
        provider: LocalProvider) -> None:
    """The exec in flight gets a neutral error, not the transport's, nor a group of one."""
    sandbox = await provider.create()
    caught: list[BaseException] = []

    async def run() -> None:
        try:
            await sandbox.exec(["sleep", "30"])
        except BaseException as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0.3)
        await provider.kill(sandbox.id)
    assert len(caught) == 1
    assert isinstance(caught[0], SandboxError), repr(caught[0])


async def test_a_paused_sandbox_is_thawed_before_it_is_killed(
        provider: LocalProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frozen processes take no signal: kill thaws first, so it never waits them out."""
    sandbox = await provider.create()
    await sandbox.pause()
    cgroup = provider._shared.cgroup(sandbox.id)
    if not cgroup.exists():
        pytest.skip("no cgroup freezer here")
    frozen_at_kill: list[bool] = []
    real_kill = _launch.kill
    monkeypatch.setattr(_launch, "kill", lambda launched: (
        frozen_at_kill.append(cgroup.frozen()), real_kill(launched))[-1])
    await provider.kill(sandbox.id)
    assert frozen_at_kill == [False]


async def test_stdin_for_a_process_that_closed_it_is_a_conflict_however_much_is_sent(
        provider: LocalProvider) -> None:
    """The agent reads what the client sends before it says that the process closed its
    stdin; an answer mid-send ended the client's connection (``Unavailable``) instead."""
    async with provider.create() as sandbox:
        process = await sandbox.start(["sh", "-c", "exec 0<&-; echo closed; sleep 60"],
                                      stdin=True)
        async for event in process.events():
            if isinstance(event, ProcessOutput):
                break
        for _ in range(3):
            with pytest.raises(Conflict, match="closed its stdin"):
                await process.write_stdin(bytes(8 << 20))
        await process.kill()
