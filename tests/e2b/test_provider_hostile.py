"""The E2B and Cube providers against code that attacks the caller, through each flavor's
emulator: output floods are kept within the limit (with counts), reads of devices and
FIFOs are refused before a byte is read, a timeout or a kill takes the whole tree down
(odd process names, new sessions and a double fork's orphan included)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from process_trees import TREE, first_chunk, sleepers, until_started
from provider_emulators import emulator, faults, provider_options

from provider_sdk import errors, open_provider
from provider_sdk.emulators import RunningEmulator
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["e2b", "cube"])
def running(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    home: Path = tmp_path_factory.mktemp(f"{request.param}-hostile")
    with emulator(request.param, home) as em:
        yield em


@pytest.fixture
async def sandbox(running: RunningEmulator) -> AsyncIterator[Sandbox]:
    async with open_provider(running.name, **provider_options(running)) as provider, \
            provider.create() as made:
        yield made


async def test_an_output_flood_is_kept_within_the_limit_and_counted(sandbox: Sandbox) -> None:
    seen = [0]

    def count(chunk: bytes) -> None:
        seen[0] += len(chunk)

    result = await sandbox.exec("head -c 3000000 /dev/zero; head -c 70000 /dev/zero >&2",
                                output_limit=65536, on_stdout=count)
    assert (len(result.stdout_bytes), result.stdout_truncated) == (65536, 3000000 - 65536)
    assert (len(result.stderr_bytes), result.stderr_truncated) == (65536, 70000 - 65536)
    assert result.truncated
    assert seen[0] == 3000000  # the callback got every byte


async def test_a_timeout_keeps_a_bounded_partial_result(sandbox: Sandbox) -> None:
    with pytest.raises(errors.CommandTimeout) as caught:
        await sandbox.exec("head -c 1000000 /dev/zero; sleep 100", timeout=5,
                           output_limit=1000)
    partial = caught.value.result
    assert len(partial.stdout_bytes) == 1000
    assert partial.stdout_truncated == 1000000 - 1000


async def test_a_huge_finite_timeout_overflows_nothing(sandbox: Sandbox) -> None:
    result = await sandbox.exec("echo ok", timeout=1e300)
    assert result.stdout == "ok\n"


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
    with anyio.fail_after(30):
        while survivors := await sleepers(sandbox):
            pytest.fail(f"still alive after the timeout: {survivors}")


async def test_killing_a_process_kills_its_whole_tree(sandbox: Sandbox) -> None:
    process = await sandbox.start(["bash", "-c", TREE])
    await until_started(sandbox, 5)
    await process.kill()
    with anyio.fail_after(30):
        result = await process.wait()
    assert result.exit_code == -9
    assert await sleepers(sandbox) == []


async def test_a_data_plane_that_stops_answering_ends_in_a_typed_error(
        running: RunningEmulator) -> None:
    options = provider_options(running, request_timeout=1, ready_timeout=1)
    async with open_provider(running.name, **options) as provider, \
            provider.create() as sandbox:
        await sandbox.files.write("/tmp/f", b"x")
        process = await sandbox.start(["cat"])
        faults(running, {"latency": 5})
        try:
            calls = {"read": lambda: sandbox.files.read("/tmp/f"),
                     "stat": lambda: sandbox.files.stat("/tmp/f"),
                     "exec": lambda: sandbox.exec("true", timeout=1),
                     "write_stdin": lambda: process.write_stdin(b"x"),
                     "kill": process.kill}
            hung = []
            for name, call in calls.items():
                try:
                    with anyio.fail_after(30):
                        await call()
                except (errors.OperationTimeout, errors.Unavailable):
                    continue
                hung.append(name)  # it answered despite the latency: no deadline
            assert hung == []
        finally:
            faults(running, {"latency": 0})
