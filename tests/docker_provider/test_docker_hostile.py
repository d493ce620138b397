"""The Docker provider against code that attacks it: kills that must reach every process,
timeouts that must not wedge the caller or the Engine, the files API's edges, the safe
defaults, snapshots that must not keep secrets, and memory kills reported as such."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import docker
import pytest
from provider_sdk_docker import DockerProvider, _host
from provider_sdk_docker._commands import (
    CONTAIN_DEADLINE,
    KILL_DEADLINE,
    PID_WAIT,
    START_DEADLINE,
    DockerCommands,
    _held,
)
from provider_sdk_docker._host import GROUP_PREFIX, HostControl, disk_quotas_possible
from provider_sdk_docker._labels import container_name
from provider_sdk_docker._scripts import HOLD

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.models import Resources, VolumeMount
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

#: Generous: the call must return, not be fast (these machines are noisy).
GRACE = 10

LIST_PROCS = 'for p in /proc/[0-9]*; do tr "\\0" " " < "$p/cmdline"; echo; done 2>/dev/null'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def engine() -> Iterator[docker.APIClient]:
    client = docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                              or "unix:///var/run/docker.sock", version="auto")
    yield client
    client.close()


@pytest.fixture
async def provider() -> AsyncIterator[DockerProvider]:
    provider = DockerProvider(pids_limit=128)
    if not getattr(provider, "host_control", True):
        pytest.skip("the Engine's containers are not controllable from this host")
    yield provider
    await provider.aclose()


@pytest.fixture
async def sandbox(provider: DockerProvider) -> AsyncIterator[Sandbox]:
    async with provider.create(resources=Resources(memory_mb=128)) as sandbox:
        yield sandbox


def _commands(provider: DockerProvider) -> DockerCommands:
    """The provider's commands role, which holds the host's control of its processes."""
    commands = provider._composed().commands
    assert isinstance(commands, DockerCommands)
    return commands


async def _procs(sandbox: Sandbox) -> list[str]:
    """Every process's command line; a listing that could not run fails the test."""
    with anyio.move_on_after(GRACE):
        result = await sandbox.exec(["/bin/sh", "-c", LIST_PROCS], user="0")
        if result.ok and not result.stderr:
            return [line for line in result.stdout.splitlines() if line.strip()]
    pytest.fail("could not list the sandbox's processes")


async def _running(sandbox: Sandbox, text: str) -> bool:
    return any(text in p for p in await _procs(sandbox))


async def _eventually(check: Callable[[], Awaitable[bool]]) -> bool:
    """Whether ``check`` comes true within GRACE seconds (polled)."""
    deadline = time.monotonic() + GRACE
    for _ in range(10_000):
        if await check() or time.monotonic() > deadline:
            break
        await anyio.sleep(0.1)
    return await check()


async def _timed_out(sandbox: Sandbox, command: str, *, timeout: float,
                     user: str | None = None) -> float:
    """Seconds ``command`` took to raise CommandTimeout (failing the test past GRACE)."""
    started = time.monotonic()
    with anyio.fail_after(timeout + GRACE), pytest.raises(errors.CommandTimeout):
        await sandbox.exec(command, timeout=timeout, user=user)
    return time.monotonic() - started


# ------------------------------------------------------------------ time and kills

async def test_a_flood_times_out_without_wedging_other_clients(sandbox: Sandbox) -> None:
    other = DockerProvider()
    try:
        peer = await other.connect(sandbox.id)
        seen: list[float] = []

        async def meanwhile() -> None:
            await anyio.sleep(2.5)  # while the first call is timing out
            started = time.monotonic()
            with anyio.fail_after(GRACE):
                assert (await peer.exec("echo hi")).stdout == "hi\n"
            seen.append(time.monotonic() - started)

        async with anyio.create_task_group() as tg:
            tg.start_soon(meanwhile)
            await _timed_out(sandbox, "yes", timeout=2)
        assert seen
    finally:
        await other.aclose()


async def test_a_cancelled_flood_returns(sandbox: Sandbox) -> None:
    with anyio.fail_after(2 + GRACE):
        with anyio.move_on_after(2):
            await sandbox.exec("yes")
    assert not [p for p in await _procs(sandbox) if p.startswith("yes")]


async def test_the_kill_does_not_use_the_images_tools(sandbox: Sandbox) -> None:
    # Tools the old kill ran inside the container, replaced by code that does nothing.
    await sandbox.exec("cp /bin/true /usr/bin/tr && cp /bin/true /usr/bin/cat", user="0")
    await _timed_out(sandbox, "sleep 671 & exec sleep 672", timeout=1)
    result = await sandbox.exec(["/bin/sh", "-c",
                                 "for p in /proc/[0-9]*; do read -r c < $p/comm; "
                                 "echo $c; done"])
    assert result.stdout.split().count("sleep") == 1  # the keep-alive's only


async def test_kill_reaches_a_background_process_of_another_user(sandbox: Sandbox) -> None:
    first = await sandbox.start("sleep 681")  # root's first: the directory is root's
    await first.kill()
    process = await sandbox.start("setsid sh -c 'sleep 682 & sleep 683'", user="nobody")
    assert await _eventually(lambda: _running(sandbox, "sleep 683"))
    with anyio.fail_after(GRACE):
        await process.kill()
        await process.wait()
    assert not [p for p in await _procs(sandbox) if "sleep 68" in p]


async def test_escaped_processes_die_at_the_next_timeout(sandbox: Sandbox,
                                                         engine: docker.APIClient) -> None:
    # A process outside every command's cgroup, orphaned to PID 1: as one that escaped
    # before its exec's move would be (or one another client's docker exec started).
    started = engine.exec_create(f"psdk-{sandbox.id}", ["sh", "-c", "(sleep 691 &)"])
    engine.exec_start(started["Id"])
    assert [p for p in await _procs(sandbox) if "sleep 691" in p]
    await _timed_out(sandbox, "sleep 692", timeout=1)
    assert not [p for p in await _procs(sandbox) if "sleep 69" in p]


async def test_a_command_is_in_its_own_cgroup_from_its_first_instruction(
        sandbox: Sandbox) -> None:
    # Held until moved: not even a command that forks at once has a moment outside.
    for _ in range(10):
        result = await sandbox.exec(["cat", "/proc/self/cgroup"])
        freezer = next(line for line in result.stdout.splitlines() if ":freezer:" in line)
        assert freezer.rsplit("/", 1)[-1].startswith("psdk-"), freezer
    process = await sandbox.start(["cat", "/proc/self/cgroup"])
    with anyio.fail_after(GRACE):
        result = await process.wait()
    freezer = next(line for line in result.stdout.splitlines() if ":freezer:" in line)
    assert freezer.rsplit("/", 1)[-1].startswith("psdk-"), freezer


async def test_a_command_let_go_early_by_code_inside_is_still_killed(sandbox: Sandbox) -> None:
    # Code inside keeps continuing every process it may signal, held wrappers included,
    # while a command that daemonizes at once times out.
    spammer = await sandbox.start(["/bin/sh", "-c", "while :; do kill -CONT -1; done"],
                                  user="0")
    try:
        await _timed_out(sandbox, "setsid sh -c '(sleep 671 &)'; sleep 672", timeout=1.5)
    finally:
        with anyio.fail_after(GRACE):
            await spammer.kill()
    assert not [p for p in await _procs(sandbox) if "sleep 67" in p]


async def test_an_exec_whose_pid_the_engine_never_tells_is_found_and_contained(
        provider: DockerProvider, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    # An Engine that never says the pid: each held wrapper is found by its name on the
    # host, moved and let go, not left stopped for good.
    api = provider.engine.api

    async def silent(method: str, *args: object, **kwargs: object) -> object:
        answer = await api(method, *args, **kwargs)
        if method == "exec_inspect" and isinstance(answer, dict) and answer.get("Running"):
            return {**answer, "Pid": 0}
        return answer

    monkeypatch.setattr(provider.engine, "api", silent)
    with anyio.fail_after(3 * GRACE):
        result = await sandbox.exec(["cat", "/proc/self/cgroup"], timeout=GRACE)
        process = await sandbox.start(["cat", "/proc/self/cgroup"])
        started = await process.wait()
    for output in (result.stdout, started.stdout):
        freezer = next(line for line in output.splitlines() if ":freezer:" in line)
        assert freezer.rsplit("/", 1)[-1].startswith("psdk-"), freezer


def _held_exec(engine: docker.APIClient, sandbox: Sandbox, group: str) -> str:
    """An exec made as the provider makes one (held, named ``group``), not yet started:
    a runtime that is slow to start it, however long the test likes."""
    created = engine.exec_create(container_name(sandbox.id),
                                 _held(["/bin/sh", "-c", "exit 7"], group, ""))
    return str(created["Id"])


async def _exit_status(engine: docker.APIClient, exec_id: str) -> int:
    def ended() -> bool:
        state = engine.exec_inspect(exec_id)
        return not state["Running"] and state["ExitCode"] is not None

    with anyio.fail_after(GRACE):
        while not ended():  # noqa: ASYNC110
            await anyio.sleep(0.05)  # polls the Engine: there is no event to wait on
    return int(engine.exec_inspect(exec_id)["ExitCode"])


async def test_an_exec_the_runtime_is_slow_to_start_is_still_let_go(
        provider: DockerProvider, sandbox: Sandbox, engine: docker.APIClient) -> None:
    # The search for a new exec's pid outlasts any deadline of its own: an exec that
    # starts late (a loaded host) is found, moved and let go, not held for good.
    control = await _commands(provider)._host_control(sandbox.id)
    assert control is not None
    group = f"{GROUP_PREFIX}slow-{os.getpid()}"
    exec_id = _held_exec(engine, sandbox, group)
    late = CONTAIN_DEADLINE + PID_WAIT + 1

    async def start_late() -> None:
        await anyio.sleep(late)
        engine.exec_start(exec_id, detach=True)

    with anyio.fail_after(late + 3 * GRACE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(start_late)
            await _commands(provider)._contain(control, exec_id, group, sandbox.id)
        assert await _exit_status(engine, exec_id) == 7
    await anyio.to_thread.run_sync(control.release, group)


async def test_an_exec_whose_search_is_cancelled_never_runs(
        provider: DockerProvider, sandbox: Sandbox, engine: docker.APIClient) -> None:
    # A caller that gives up while the exec has not started yet: the exec that starts
    # a moment later is killed while still held; its command never runs.
    control = await _commands(provider)._host_control(sandbox.id)
    assert control is not None
    group = f"{GROUP_PREFIX}gone-{os.getpid()}"
    exec_id = _held_exec(engine, sandbox, group)
    with anyio.fail_after(CONTAIN_DEADLINE + KILL_DEADLINE + GRACE):
        async with anyio.create_task_group() as tg:
            async def give_up() -> None:
                await anyio.sleep(1)
                tg.cancel_scope.cancel()
                engine.exec_start(exec_id, detach=True)

            tg.start_soon(give_up)
            await _commands(provider)._contain(control, exec_id, group, sandbox.id)
    assert await _exit_status(engine, exec_id) == 128 + 9
    await anyio.to_thread.run_sync(control.release, group)


async def test_an_exec_the_host_gave_up_on_is_killed_when_it_starts(
        provider: DockerProvider, sandbox: Sandbox, engine: docker.APIClient) -> None:
    # A search cancelled (the caller's timeout), and the runtime starting the exec only
    # long after: the host kills it when it shows, while code inside keeps continuing
    # it. Its command never runs.
    control = await _commands(provider)._host_control(sandbox.id)
    assert control is not None
    group = f"{GROUP_PREFIX}late-{os.getpid()}"
    created = engine.exec_create(container_name(sandbox.id), _held(
        ["/bin/sh", "-c", "touch /tmp/psdk-ran; exit 7"], group, ""))
    with anyio.move_on_after(0.5):
        await _commands(provider)._contain(control, created["Id"], group, sandbox.id)
    await anyio.sleep(CONTAIN_DEADLINE + 1)  # past what was once the host's last look
    engine.exec_start(created["Id"], detach=True)
    continue_it = ('for p in /proc/[0-9]*; do case $(tr "\\0" " " <"$p/cmdline") in '
                   f'*{group}*) kill -CONT "${{p#/proc/}}" ;; esac; done 2>/dev/null; :')
    for _ in range(10):
        assert (await sandbox.exec(["/bin/sh", "-c", continue_it], user="0")).ok
    assert await _exit_status(engine, created["Id"]) == 128 + 9
    assert not await sandbox.files.exists("/tmp/psdk-ran")
    assert not await _running(sandbox, group)


async def test_a_cancelled_start_leaves_no_process(sandbox: Sandbox) -> None:
    # A caller that gives up at any moment of a start: whatever it got no handle on ends.
    started = []
    for i in range(40):  # moments spread over a start's course, which takes ~0.1-0.3 s
        with anyio.move_on_after(0.005 + (i % 20) * 0.015):
            started.append(await sandbox.start(["sleep", "301"]))
    for process in started:
        await process.kill()
    # A start given up on before its pid was known is killed whenever the runtime starts
    # it, which a loaded Engine may put off as long as it may take to start (30 s).
    with anyio.fail_after(START_DEADLINE):
        while await _running(sandbox, "sleep 301"):  # noqa: ASYNC110
            await anyio.sleep(0.1)  # polls the sandbox: there is no event to wait on


async def test_a_process_named_as_a_held_exec_is_not_taken_for_it(
        provider: DockerProvider, sandbox: Sandbox, engine: docker.APIClient) -> None:
    # A process in the container's own cgroup (under another client's exec) named as a
    # held wrapper: its parent is inside the container, never the runtime, so the host
    # does not take it for an exec.
    outer = engine.exec_create(
        container_name(sandbox.id),
        ["/bin/sh", "-c", '/bin/sh -c "$1" psdk-impostor "" sleep 60 & exec sleep 61',
         "outer", HOLD])
    engine.exec_start(outer["Id"], detach=True)
    control = await _commands(provider)._host_control(sandbox.id)
    with anyio.fail_after(GRACE):
        while not await _running(sandbox, "psdk-impostor"):  # noqa: ASYNC110
            await anyio.sleep(0.05)  # polls the sandbox: there is no event to wait on

    def named() -> list[int]:
        return [pid for pid in _host._procs(control.freezer)
                if b"psdk-impostor" in Path(f"/proc/{pid}/cmdline").read_bytes()]

    assert await anyio.to_thread.run_sync(named), "the impostor is not in the container's cgroup"
    found = await anyio.to_thread.run_sync(
        lambda: control.find_held("psdk-impostor", deadline=time.monotonic() + 1))
    assert found is None


async def test_the_hold_leaves_the_environment_as_given(sandbox: Sandbox) -> None:
    # The shell that holds a command sets PWD; the command gets only what it was given.
    plain = await sandbox.exec(["/usr/bin/env"], cwd="/tmp")
    assert "PWD" not in {line.partition("=")[0] for line in plain.stdout.splitlines()}
    process = await sandbox.start(["/usr/bin/env"], cwd="/tmp")
    with anyio.fail_after(GRACE):
        started = await process.wait()
    assert "PWD" not in {line.partition("=")[0] for line in started.stdout.splitlines()}
    given = await sandbox.exec(["/usr/bin/env"], cwd="/tmp", env={"PWD": "/elsewhere"})
    assert "PWD=/elsewhere" in given.stdout.splitlines()


@pytest.mark.parametrize("host_control", [True, False], ids=["held", "plain"])
async def test_commands_and_processes_get_pwd_as_docker_gives_it(host_control: bool) -> None:
    # The command's own PWD, else the one the container's environment sets: the shells
    # a command is started through (the hold, a background process's supervisor) set
    # their own, which must not reach it.
    provider = DockerProvider(host_control=host_control)
    try:
        async with provider.create(env={"PWD": "/srv"}) as sandbox:
            async def pwd(env: dict[str, str] | None = None) -> list[str]:
                ran = await sandbox.exec(["/usr/bin/env"], cwd="/tmp", env=env)
                process = await sandbox.start(["/usr/bin/env"], cwd="/tmp", env=env)
                with anyio.fail_after(GRACE):
                    started = await process.wait()
                return [next((line for line in out.splitlines() if line.startswith("PWD=")),
                             "") for out in (ran.stdout, started.stdout)]

            assert await pwd() == ["PWD=/srv"] * 2
            assert await pwd({"PWD": "/elsewhere"}) == ["PWD=/elsewhere"] * 2
    finally:
        await provider.aclose()


# -------------------------------------------------------------------------- files

async def test_write_never_replaces_a_directory(sandbox: Sandbox) -> None:
    await sandbox.exec("mkdir -p /work/project/src /work/p2/sub && touch /work/project/a",
                       user="0")
    before = (await sandbox.exec("ls /etc | wc -l")).stdout
    for path in ("/work/project", "/work/p2/sub/..", "/etc", "/"):
        with pytest.raises(errors.IsADirectory):
            await sandbox.files.write(path, b"x")
    assert (await sandbox.exec("ls -A /work/project")).stdout.split() == ["a", "src"]
    assert (await sandbox.exec("test -d /work/p2/sub")).ok
    assert (await sandbox.exec("ls /etc | wc -l")).stdout == before


async def test_write_is_atomic_and_leaves_no_temporary_files(sandbox: Sandbox) -> None:
    old, new = b"o" * (3 << 20), b"n" * (2 << 20)
    await sandbox.files.write("/work/f", old)
    sizes: list[str] = []

    async def watch() -> None:
        # A process inside reads the file as it is being replaced, again and again.
        result = await sandbox.exec("for i in $(seq 400); do wc -c < /work/f 2>&1; done")
        sizes.extend(result.stdout.split("\n")[:-1])

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        for count in range(1000):
            if sizes:
                break
            await sandbox.files.write("/work/f", new if count % 2 else old)
    assert len(sizes) == 400
    assert set(sizes) <= {str(len(old)), str(len(new))}
    await sandbox.files.write("/work/f", new)
    assert await sandbox.files.read("/work/f") == new
    assert (await sandbox.exec("ls -A /work")).stdout.split() == ["f"]


async def test_reads_racing_writes_inside_fail_only_typed(sandbox: Sandbox) -> None:
    await sandbox.exec("mkdir -p /work && head -c 1M /dev/zero > /work/a && "
                       "cp /work/a /work/f")
    failures: list[Exception] = []

    async def reads() -> None:
        for _ in range(60):
            try:
                await sandbox.files.read("/work/f")
            except errors.SandboxNotFound as exc:  # the sandbox is there all along
                failures.append(exc)
            except errors.SandboxError:
                pass  # the file gone or changed mid-read: a typed answer
            except Exception as exc:
                failures.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sandbox.exec, "for i in $(seq 400); do rm -f /work/f; "
                                    "cp /work/a /work/f; done")
        tg.start_soon(reads)
    assert failures == []


async def test_without_host_control_a_timeout_still_returns() -> None:
    provider = DockerProvider(host_control=False)
    try:
        async with provider.create() as sandbox:
            await _timed_out(sandbox, "sleep 601 & sleep 602", timeout=1)
            assert not [p for p in await _procs(sandbox) if "sleep 60" in p]
    finally:
        await provider.aclose()


async def test_special_paths_are_typed_errors(sandbox: Sandbox) -> None:
    for path in ("/dev/shm/x", "/etc/hosts", "/proc/1/environ"):
        with pytest.raises(errors.PermissionDenied):
            await sandbox.files.write(path, b"x")


async def test_reads_of_non_files_fail_at_once(sandbox: Sandbox) -> None:
    await sandbox.exec("mkdir -p /work && mkfifo /work/fifo && ln -s /work/fifo /work/link && "
                       "ln -s /dev/zero /work/zero", user="0")
    for path in ("/work/fifo", "/work/link", "/work/zero", "/dev/zero", "/dev/null"):
        with anyio.fail_after(GRACE), pytest.raises(errors.NotARegularFile):
            await sandbox.files.read(path)


async def test_output_is_bounded_in_the_caller(sandbox: Sandbox) -> None:
    seen = 0

    def count(chunk: bytes) -> None:
        nonlocal seen
        seen += len(chunk)

    result = await sandbox.exec("head -c 64M /dev/zero", output_limit=1 << 20,
                                on_stdout=count)
    assert len(result.stdout_bytes) == 1 << 20
    assert result.stdout_truncated == (64 << 20) - (1 << 20)
    assert seen == 64 << 20


# --------------------------------------------------------- defaults and snapshots

async def test_safe_defaults(provider: DockerProvider, sandbox: Sandbox,
                             engine: docker.APIClient) -> None:
    host = engine.inspect_container(f"psdk-{sandbox.id}")["HostConfig"]
    assert host["NanoCpus"] == int(provider.cpus * 1e9) > 0
    assert host["LogConfig"]["Type"] == "none"
    assert provider.supports(Capability.EXEC_CONTAINED)
    assert provider.supports(Capability.LIMITS_MEMORY)
    assert provider.supports(Capability.LIMITS_PIDS)
    assert provider.supports(Capability.LIMITS_DISK) == provider.disk_quota
    if provider.disk_quota:
        # btrfs counts the image's files too: the size leaves disk_mb above them.
        assert int(host["StorageOpt"]["size"].rstrip("M")) >= provider.disk_mb
        assert (await sandbox.refresh()).resources.disk_mb == provider.disk_mb
    remote = DockerProvider(host_control=False)
    assert not remote.supports(Capability.EXEC_CONTAINED)
    assert not remote.supports(Capability.LIMITS_DISK)
    assert DockerProvider.capabilities >= remote.capabilities


XFS_QUOTA = ("36 1 7:3 / /var/lib/psdk-docker rw,relatime - xfs /dev/loop3 "
             "rw,attr2,inode64,logbufs=8,logbsize=32k,prjquota")
ROOT_EXT4 = "25 1 253:1 / / rw,relatime - ext4 /dev/vda rw"


@pytest.mark.parametrize(("info", "mountinfo", "expected"), [
    ({"Driver": "overlay2", "DockerRootDir": "/var/lib/psdk-docker"},
     f"{ROOT_EXT4}\n{XFS_QUOTA}", True),
    ({"Driver": "overlay2", "DockerRootDir": "/var/lib/docker"},
     f"{ROOT_EXT4}\n{XFS_QUOTA}", False),
    ({"Driver": "overlay2", "DockerRootDir": "/var/lib/psdk-docker"},
     f"{ROOT_EXT4}\n{XFS_QUOTA.replace(',prjquota', '')}", False),
    # A later mount over the storage hides the quota-enabled one.
    ({"Driver": "overlay2", "DockerRootDir": "/var/lib/psdk-docker"},
     f"{XFS_QUOTA}\n40 36 0:50 / /var/lib/psdk-docker/overlay2 rw - tmpfs tmpfs rw", False),
    ({"Driver": "vfs", "DockerRootDir": "/var/lib/psdk-docker"}, XFS_QUOTA, False),
    ({"Driver": "overlay2"}, XFS_QUOTA, False),
    ({"Driver": "btrfs", "DockerRootDir": "/var/lib/docker"}, ROOT_EXT4, True),
], ids=["xfs-pquota", "other-root", "xfs-no-quota", "hidden", "vfs", "no-root", "btrfs"])
def test_disk_quotas_are_found_from_the_engines_storage_mount(
        info: dict[str, str], mountinfo: str, expected: bool) -> None:
    assert disk_quotas_possible(info, mountinfo) is expected


async def test_a_full_filesystem_is_quota_exceeded_and_keeps_nothing_of_the_write(
        provider: DockerProvider, engine: docker.APIClient) -> None:
    """A write through the files API that fills its filesystem (here an 8 MiB tmpfs
    volume) is ``QuotaExceeded``, and no part of the file stays to hold the room."""
    name = f"psdk-test-small-{os.urandom(4).hex()}"
    engine.create_volume(name, driver="local", labels={"psdk.volume": "1"},
                         driver_opts={"type": "tmpfs", "device": "tmpfs", "o": "size=8m"})
    try:
        async with provider.create(volumes=[VolumeMount(volume=name, path="/small")]
                                   ) as sandbox:
            with pytest.raises(errors.QuotaExceeded):
                await sandbox.files.write("/small/big", bytes(16 << 20))
            assert await sandbox.files.list("/small") == []
            await sandbox.files.write("/small/fits", bytes(6 << 20))
            assert (await sandbox.files.stat("/small/fits")).size == 6 << 20
    finally:
        engine.remove_volume(name, force=True)


async def test_snapshots_do_not_keep_the_create_env(provider: DockerProvider,
                                                    engine: docker.APIClient) -> None:
    secret = "hunter2-" + os.urandom(4).hex()
    async with provider.create(env={"SECRET": secret}) as source:
        assert (await source.exec("echo $SECRET")).stdout.strip() == secret
        snapshot = await source.snapshot()
    try:
        config = engine.inspect_image(snapshot.extra["image"])["Config"]
        assert secret not in repr(config)
        async with provider.create(snapshot=snapshot.id) as copy:
            assert "SECRET" not in (await copy.exec("env")).stdout
        async with provider.create(snapshot=snapshot.id, env={"A": "1"}) as copy:
            names = {line.partition("=")[0] for line in (await copy.exec("env")).stdout
                     .splitlines()}
            assert "A" in names
            assert "SECRET" not in names
    finally:
        await provider.delete_snapshot(snapshot.id)


# ------------------------------------------------------------------------- memory

async def test_memory_kills_are_reported(provider: DockerProvider) -> None:
    async with provider.create(resources=Resources(memory_mb=64)) as sandbox:
        # tail holds all it keeps in memory; the pipeline still exits 0.
        result = await sandbox.exec("head -c 256M /dev/zero | tail -c 200M > /dev/null; true")
        assert result.exit_code == 0
        assert result.oom_killed
        assert not (await sandbox.exec("true")).oom_killed


@pytest.mark.parametrize(("moves", "freezes"), [
    ([1, 1, 1, 1, 0], False),  # one process turning up again: the runtime joining it
    ([5, 3, 2, 0], True),      # a tree that forks faster than it is moved
    ([1, 0], False),
])
def test_the_container_is_frozen_only_for_a_forking_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moves: list[int],
        freezes: bool) -> None:
    """Moving an exec into its cgroup freezes the whole container (which any exec
    started meanwhile finds paused) only when passes keep finding several processes
    outside, never for a lone one moved back by the runtime."""
    control = HostControl("c0ffee", 1, tmp_path / "freezer", None)
    control.freezer.mkdir()
    (control.freezer / "freezer.state").write_text("THAWED\n")
    left = iter(moves)
    monkeypatch.setattr(HostControl, "_move_subtree", lambda self, group, pid: next(left, 0))
    states: list[str] = []
    monkeypatch.setattr("provider_sdk_docker._host._set_state",
                        lambda group, state, deadline: states.append(state))
    control.contain("psdk-test", 4242, deadline=time.monotonic() + 5)
    assert states == (["FROZEN", "THAWED"] if freezes else []), states
