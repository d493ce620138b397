"""The Daytona provider against code that attacks the caller, through the emulator:
output floods are kept within the limit (with counts), reads of devices and FIFOs are
refused before a byte is read, a timeout or a kill takes the whole tree down (odd
process names, new sessions and a double fork's orphan included), and a toolbox that
stops answering ends in a typed error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from daytona_emulator_fixtures import admin, provider_options
from process_trees import TREE, first_chunk, sleepers, until_started
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


@pytest.mark.parametrize("size", [3000, 5_000_000])  # inline, and from the files
async def test_an_output_flood_is_kept_within_the_limit_and_counted(sandbox: Sandbox,
                                                                    size: int) -> None:
    result = await sandbox.exec(f"head -c {size} /dev/zero; head -c {size + 7} /dev/zero >&2",
                                output_limit=1000)
    assert (len(result.stdout_bytes), result.stdout_truncated) == (1000, size - 1000)
    assert (len(result.stderr_bytes), result.stderr_truncated) == (1000, size + 7 - 1000)


async def test_a_timeout_keeps_a_bounded_partial_result(sandbox: Sandbox) -> None:
    with pytest.raises(errors.CommandTimeout) as caught:
        await sandbox.exec("head -c 1000000 /dev/zero; sleep 100", timeout=3,
                           output_limit=1000)
    partial = caught.value.result
    assert (len(partial.stdout_bytes), partial.stdout_truncated) == (1000, 1000000 - 1000)


async def test_a_huge_finite_timeout_overflows_nothing(sandbox: Sandbox) -> None:
    assert (await sandbox.exec("echo ok", timeout=1e300)).stdout == "ok\n"


@pytest.mark.parametrize("path", ["/dev/zero", "/tmp/fifo", "/tmp/to-zero", "/tmp/to-fifo"])
async def test_reads_of_devices_and_fifos_are_refused_at_once(sandbox: Sandbox, path: str,
                                                              tmp_path: Path) -> None:
    await sandbox.exec("mkfifo /tmp/fifo && ln -s /dev/zero /tmp/to-zero && "
                       "ln -s fifo /tmp/to-fifo")
    with anyio.fail_after(20):
        with pytest.raises(errors.NotARegularFile):
            await sandbox.files.read(path)
        with pytest.raises(errors.NotARegularFile):
            await first_chunk(sandbox, path)
        with pytest.raises(errors.NotARegularFile):
            await sandbox.files.download(path, tmp_path / "out")
    assert [entry async for entry in anyio.Path(tmp_path).iterdir()] == []
    await sandbox.exec("ln -sf /etc/hostname /tmp/to-file")
    assert await sandbox.files.read("/tmp/to-file") == await sandbox.files.read("/etc/hostname")


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
