"""The Daytona provider against code that attacks the caller, through the emulator,
where it goes past the contract's hostile sections (which it runs too): a timeout, a
cancellation or a kill takes the whole tree down, odd process names, new sessions and a
double fork's orphan included, and a toolbox that stops answering ends in a typed
error."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from daytona_emulator_fixtures import admin, provider_options
from process_trees import TREE, sleepers, until_started
from provider_sdk_daytona.provider import DaytonaProvider

from provider_sdk import errors
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def no_faults_left() -> Any:
    yield
    admin({name: 0 for name in admin()["known"]})


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with DaytonaProvider(**provider_options(), unavailable_window=5) as provider, \
            provider.create() as made:
        yield made


async def test_a_timeout_kills_the_whole_tree(sandbox: Sandbox) -> None:
    with anyio.fail_after(60), pytest.raises(errors.CommandTimeout):
        await sandbox.exec(TREE, timeout=3)
    assert await sleepers(sandbox) == []


async def test_a_cancelled_exec_kills_the_whole_tree(sandbox: Sandbox) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(sandbox.exec, TREE)
        await until_started(sandbox, 5)
        tg.cancel_scope.cancel()
    assert await sleepers(sandbox) == []


async def test_killing_a_process_kills_its_whole_tree(sandbox: Sandbox) -> None:
    process = await sandbox.start(["bash", "-c", TREE])
    await until_started(sandbox, 5)
    await process.kill()
    with anyio.fail_after(30):
        result = await process.wait()
    assert result.exit_code == -9
    assert await sleepers(sandbox) == []


async def test_a_toolbox_that_stops_answering_ends_in_a_typed_error() -> None:
    async with DaytonaProvider(**provider_options(), unavailable_window=5,
                               request_timeout=1) as provider, provider.create() as sandbox:
        await sandbox.files.write("/tmp/f", b"x")
        admin({"latency": 5})
        with anyio.fail_after(30):
            for call in (sandbox.files.read("/tmp/f"), sandbox.files.stat("/tmp/f"),
                         sandbox.exec("true", timeout=1)):
                with pytest.raises(errors.OperationTimeout):
                    await call
        admin({"latency": 0})


def test_request_timeout_must_be_a_positive_number() -> None:
    for bad in (0, -1, float("inf"), float("nan"), "5", True):
        with pytest.raises(errors.ConfigError):
            DaytonaProvider(**provider_options(), request_timeout=bad)  # type: ignore[arg-type]


# Code inside shares the daemon's user, so it may rewrite the files the provider leaves
# in /tmp: the exec wrapper's pid file (named for the run's token, which is the mark in
# the command's own environment) and a background process's pid-to-token map.
_FIFO_FOR_PID = ('f=/tmp/.psdk-exec-$PSDK_TREE.pid; rm -f "$f" && mkfifo "$f" || exit 9; '
                 + TREE)


async def test_a_timeout_ends_the_tree_of_a_command_that_made_its_pid_file_a_fifo(
        sandbox: Sandbox) -> None:
    """A command that replaces its wrapper's pid file with a FIFO, and keeps its
    environment (the mark), still has its tree ended by its timeout, and promptly: the
    kill reads the pid without waiting for a writer that never comes (it waited until
    its own exec timed out, 30 s, and killed nothing)."""
    with anyio.fail_after(3 + 15), pytest.raises(errors.CommandTimeout):
        await sandbox.exec(_FIFO_FOR_PID, timeout=3)
    with anyio.fail_after(30):
        while survivors := await sleepers(sandbox):
            pytest.fail(f"still alive after the timeout: {survivors}")


# Run first by a background process that rewrites its pid map: waits until the wrapper
# has written it ($f).
_ONCE_MAPPED = "f=/tmp/.psdk-pid-$$; while [ ! -e $f ]; do sleep 0.05; done; "


async def _map_of(sandbox: Sandbox, pid: int) -> str:
    return (await sandbox.files.read(f"/tmp/.psdk-pid-{pid}")).decode().strip()


async def test_a_second_provider_kills_a_process_that_removed_its_pid_map(
        sandbox: Sandbox) -> None:
    """A background process that deletes the file mapping its pid to its token is still
    killed by another provider instance, which holds nothing of it but its pid."""
    process = await sandbox.start(["bash", "-c", _ONCE_MAPPED + "rm -f $f; exec sleep 621"])
    with anyio.fail_after(30):
        while not await _sleeping(sandbox, "621"):  # noqa: ASYNC110 - processes inside
            await anyio.sleep(0.05)
    async with DaytonaProvider(**provider_options(), unavailable_window=5) as second:
        theirs = (await second.connect(sandbox.id)).process(process.pid)
        await theirs.kill()
    with anyio.fail_after(30):
        result = await process.wait()
    assert result.exit_code == -9


async def test_a_pid_map_naming_another_process_does_not_turn_the_kill_on_it(
        sandbox: Sandbox) -> None:
    """A background process that writes another process's token into its own pid map
    (the other's mark) neither spares its own orphans nor gets the other killed when
    another provider instance kills it by pid."""
    bystander = await sandbox.start(["sleep", "622"])
    token = await _map_of(sandbox, bystander.pid)
    script = (_ONCE_MAPPED + f"echo {token} > $f.new && mv $f.new $f; "
              "( setsid sleep 623 & ); exec sleep 624")
    process = await sandbox.start(["bash", "-c", script])
    with anyio.fail_after(30):
        while len(await _sleeping(sandbox, "62[34]")) < 2:  # noqa: ASYNC110 - inside
            await anyio.sleep(0.05)
    assert await _map_of(sandbox, process.pid) == token
    async with DaytonaProvider(**provider_options(), unavailable_window=5) as second:
        await (await second.connect(sandbox.id)).process(process.pid).kill()
    with anyio.move_on_after(10):
        while await _sleeping(sandbox, "62[34]"):  # noqa: ASYNC110 - processes inside
            await anyio.sleep(0.1)
    try:
        assert await _sleeping(sandbox, "62[34]") == [], "its orphan outlived the kill"
        assert await _sleeping(sandbox, "622"), "the kill ended another process"
    finally:
        await bystander.kill()


async def test_a_live_process_without_its_mark_does_not_turn_the_kill_on_another(
        sandbox: Sandbox) -> None:
    """A background process that writes another process's token into its own pid map
    and then runs on without its mark in its environment (exec'd without it) does not
    get the other process killed when another provider instance kills it by pid: a
    process that still runs is killed with the mark its environment holds, never with
    what its map says (the map was read whenever the environment held no mark)."""
    bystander = await sandbox.start(["sleep", "628"])
    token = await _map_of(sandbox, bystander.pid)
    script = (_ONCE_MAPPED + f"echo {token} > $f.new && mv $f.new $f; "
              "exec env -u PSDK_TREE sleep 629")
    process = await sandbox.start(["bash", "-c", script])
    with anyio.fail_after(30):
        while not await _sleeping(sandbox, "629"):  # noqa: ASYNC110 - processes inside
            await anyio.sleep(0.05)
    assert await _map_of(sandbox, process.pid) == token
    try:
        async with DaytonaProvider(**provider_options(), unavailable_window=5) as second:
            await (await second.connect(sandbox.id)).process(process.pid).kill()
        with anyio.fail_after(30):
            assert (await process.wait()).exit_code == -9
        assert await _sleeping(sandbox, "628"), "the kill ended another process"
    finally:
        await bystander.kill()


async def test_a_pid_map_that_is_not_text_does_not_keep_a_second_provider_from_killing(
        sandbox: Sandbox) -> None:
    """A pid map that code inside filled with bytes that are not UTF-8 does not keep
    another provider instance from killing the process by its pid (it raised a raw
    decoding error)."""
    process = await sandbox.start(["bash", "-c", _ONCE_MAPPED + "printf '\\377\\376' > $f.new; "
                                   "mv $f.new $f; exec sleep 625"])
    with anyio.fail_after(30):
        while not await _sleeping(sandbox, "625"):  # noqa: ASYNC110 - processes inside
            await anyio.sleep(0.05)
    assert await sandbox.files.read(f"/tmp/.psdk-pid-{process.pid}") == b"\xff\xfe"
    async with DaytonaProvider(**provider_options(), unavailable_window=5) as second:
        await (await second.connect(sandbox.id)).process(process.pid).kill()
    with anyio.fail_after(30):
        result = await process.wait()
    assert result.exit_code == -9


async def test_closing_the_stdin_of_a_process_that_rewrote_its_wrapper_pid_kills_nothing(
        sandbox: Sandbox) -> None:
    """A background process that writes ``-1`` where its wrapper's pid is kept: closing
    its stdin signals no other process (``kill -USR1 -1`` ended every process of the
    daemon's user)."""
    bystander = await sandbox.start(["sleep", "626"])
    w = "/tmp/.psdk-proc-$PSDK_TREE.wpid"
    process = await sandbox.start(["bash", "-c", f"while [ ! -s {w} ]; do sleep 0.05; done; "
                                   f"echo -1 > {w}.new && mv {w}.new {w}; exec sleep 627"])
    with anyio.fail_after(30):
        while not await _sleeping(sandbox, "627"):  # noqa: ASYNC110 - processes inside
            await anyio.sleep(0.05)
    try:
        with contextlib.suppress(errors.SandboxError):
            await process.close_stdin()
        assert await _sleeping(sandbox, "626"), "closing a stdin ended another process"
    finally:
        with contextlib.suppress(errors.SandboxError):
            await process.kill()
            await bystander.kill()


async def _sleeping(sandbox: Sandbox, pattern: str) -> list[str]:
    """Live ``sleep`` processes whose argument matches the ERE ``pattern``."""
    found = await sandbox.exec(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | "
        f"grep -qE '^sleep {pattern} ?$' && ! grep -q ') Z' $p/stat && cat $p/stat; done; true")
    return [line for line in found.stdout.splitlines() if line]
