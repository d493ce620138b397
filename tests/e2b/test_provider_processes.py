"""Background processes on the E2B provider: what envd forgets, the provider keeps,
within a bound."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from provider_emulators import emulator, provider_options
from provider_sdk_e2b._procs import Proc

from provider_sdk import open_provider
from provider_sdk.emulators import RunningEmulator
from provider_sdk.errors import ProcessNotFound
from provider_sdk.provider import SandboxProvider

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    home: Path = tmp_path_factory.mktemp("e2b-processes")
    with emulator("e2b", home) as em:
        yield em


@pytest.fixture
async def provider(running: RunningEmulator) -> AsyncIterator[SandboxProvider]:
    async with open_provider("e2b", **provider_options(running)) as opened:
        yield opened


async def test_wait_after_the_process_exited_still_gets_its_exit(
        provider: SandboxProvider) -> None:
    """envd forgets a process when it exits; ``wait`` afterwards still has its output."""
    async with provider.create() as sandbox:
        process = await sandbox.start(["sh", "-c", "echo done; exit 7"])
        await sandbox.exec(["sleep", "0.5"])  # long after the process exited
        with anyio.fail_after(30):
            result = await process.wait()
        assert (result.exit_code, result.stdout) == (7, "done\n")


async def test_closing_the_stdin_of_a_process_that_ended_does_nothing(
        provider: SandboxProvider) -> None:
    """envd answers "not found" for a process that has ended; closing its stdin is a
    no-op, as on every provider, however quickly the process ended."""
    async with provider.create() as sandbox:
        process = await sandbox.start(["sh", "-c", "exit 4"])
        with anyio.fail_after(30):
            assert (await process.wait()).exit_code == 4
        await process.close_stdin()
        with pytest.raises(ProcessNotFound):
            await sandbox.provider._close_stdin(sandbox.id, 999_999)


async def test_kept_output_is_bounded_oldest_dropped_first(
        provider: SandboxProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unread output beyond the limit drops its oldest part; the newest and the exit stay."""
    monkeypatch.setattr(Proc, "LIMIT", 64 << 10)
    async with provider.create() as sandbox:
        process = await sandbox.start(
            ["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' a; echo end"])
        kept = provider._session.procs[(sandbox.id, process.pid)]  # type: ignore[attr-defined]
        with anyio.fail_after(60):
            while not kept.done:  # every event is in before anything reads them
                await kept.changed.wait()
            result = await process.wait()
        assert result.exit_code == 0
        assert result.stdout.endswith("aaaaend\n")
        assert 0 < len(result.stdout_bytes) <= (64 << 10) + (32 << 10)  # a chunk of slack


async def test_a_command_that_closes_its_stdin_and_runs_on_returns_its_exit(
        provider: SandboxProvider) -> None:
    """envd refuses the input of a process that closed its stdin (a broken pipe) while
    the process runs on: what it did not read is dropped, and exec returns its exit."""
    async with provider.create() as sandbox:
        result = await sandbox.exec(["sh", "-c", "exec 0<&-; sleep 1; echo ran; exit 3"],
                                    stdin=b"psdk" * (1 << 20), timeout=60)
        assert (result.exit_code, result.stdout) == (3, "ran\n")
