"""Contract, hostile section: promises every provider makes about what the host holds.

A command may print without end and a sandbox may offer a device, a FIFO or a sparse
file to read: the caller's memory stays bounded and nothing hangs. These tests have no
capability gate (``exec.stream`` aside, for callbacks); the containment and seal tests
live in :mod:`~provider_sdk_contract.hostile_escapes` and
:mod:`~provider_sdk_contract.hostile_seal`.
"""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CommandTimeout, FileTooLarge, InvalidInput, NotARegularFile
from provider_sdk.models import ExecResult
from provider_sdk.provider import ProcessExit, ProcessOutput
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import RssGrowth, new_marker

_MiB = 1 << 20

FLOOD = 256 * _MiB
"""Bytes the output flood prints: four times the memory bound, so a caller that keeps
everything cannot pass, at a sixth of the cost of the 1.5 GiB the benchmark uses."""
MEMORY_BOUND = 64 * _MiB
"""How far the caller's memory may grow while a flood arrives."""
_SMALL_LIMIT = _MiB
"""The ``output_limit`` the flood tests pass: what is kept is negligible next to the bound."""
_PROMPT = 30.0
"""Seconds within which a refused read must be refused: a read that waits on a FIFO or
drains a device never comes back, so any bound shows it."""


def _assert_kept(result: ExecResult, kept: int, truncated: int,
                 stream: str = "stdout") -> None:
    """Assert that ``stream`` of ``result`` kept ``kept`` bytes and counted ``truncated``."""
    data: bytes = getattr(result, f"{stream}_bytes")
    counted: int = getattr(result, f"{stream}_truncated")
    assert (len(data), counted) == (kept, truncated), (
        f"{stream}: kept {len(data)} bytes and counted {counted} truncated; "
        f"expected {kept} and {truncated}")


class HostileOutputContract(ContractBase):
    """Hostile output and reads: floods are truncated and counted, the caller's memory
    stays bounded, devices and FIFOs are refused at once, timeouts are finite."""

    async def test_hostile_output_flood_keeps_the_caller_memory_bounded(
            self, sandbox: Sandbox) -> None:
        """256 MiB on stdout: the result keeps ``output_limit`` bytes, counts the rest as
        truncated, and this process grows by less than 64 MiB meanwhile."""
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(240):
                result = await sandbox.exec(["head", "-c", str(FLOOD), "/dev/zero"],
                                            timeout=200, output_limit=_SMALL_LIMIT)
        assert result.exit_code == 0, result.stderr
        assert rss.growth < MEMORY_BOUND, (
            f"the caller grew by {rss.growth / _MiB:.0f} MiB for a {FLOOD // _MiB} MiB flood")
        _assert_kept(result, _SMALL_LIMIT, FLOOD - _SMALL_LIMIT)
        assert result.stdout_bytes == bytes(_SMALL_LIMIT)
        assert result.truncated

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_hostile_background_flood_keeps_the_caller_memory_bounded(
            self, sandbox: Sandbox) -> None:
        """256 MiB on a background process's stdout: ``wait()`` keeps ``output_limit``
        bytes, counts the rest as truncated, and this process grows by less than 64 MiB
        meanwhile."""
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(300):
                process = await sandbox.start(["head", "-c", str(FLOOD), "/dev/zero"])
                result = await process.wait(output_limit=_SMALL_LIMIT)
        assert result.exit_code == 0, result.stderr
        assert rss.growth < MEMORY_BOUND, (
            f"the caller grew by {rss.growth / _MiB:.0f} MiB for a {FLOOD // _MiB} MiB "
            "background flood")
        _assert_kept(result, _SMALL_LIMIT, FLOOD - _SMALL_LIMIT)
        assert result.stdout_bytes == bytes(_SMALL_LIMIT)

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_hostile_background_flood_read_slowly_loses_nothing(
            self, sandbox: Sandbox) -> None:
        """A background process prints 96 MiB while its reader pauses after each chunk
        for the first seconds: the reader still gets every byte, then the exit (the
        provider holds the process back rather than drop what a reader still needs)."""
        size = 96 * _MiB
        process = await sandbox.start(["head", "-c", str(size), "/dev/zero"])
        received, exit_code = 0, None
        began = anyio.current_time()
        with anyio.fail_after(300):
            async for event in process.events():
                if isinstance(event, ProcessOutput):
                    assert event.data.count(0) == len(event.data)
                    received += len(event.data)
                    if anyio.current_time() - began < 3:
                        await anyio.sleep(0.05)
                elif isinstance(event, ProcessExit):
                    exit_code = event.exit_code
        assert (received, exit_code) == (size, 0), (
            f"received {received} of {size} bytes, exit {exit_code}")

    async def test_hostile_stderr_flood_is_truncated_and_counted(
            self, sandbox: Sandbox) -> None:
        """A flood on stderr is bounded and counted the same way, stdout left whole."""
        size = 24 * _MiB
        with anyio.fail_after(120):
            result = await sandbox.exec(
                ["bash", "-c", f"echo out; head -c {size} /dev/zero >&2"],
                timeout=100, output_limit=_SMALL_LIMIT)
        assert (result.exit_code, result.stdout) == (0, "out\n")
        _assert_kept(result, _SMALL_LIMIT, size - _SMALL_LIMIT, "stderr")
        assert result.stdout_truncated == 0

    async def test_hostile_output_past_the_default_limit_is_truncated(
            self, sandbox: Sandbox) -> None:
        """Without ``output_limit`` the provider's default applies: the result keeps
        ``provider.output_limit`` bytes and counts the rest."""
        limit = sandbox.provider.output_limit
        size = limit + 4 * _MiB
        with anyio.fail_after(120):
            result = await sandbox.exec(["head", "-c", str(size), "/dev/zero"], timeout=100)
        assert result.exit_code == 0, result.stderr
        _assert_kept(result, limit, size - limit)

    async def test_hostile_output_under_the_limit_is_not_truncated(
            self, sandbox: Sandbox) -> None:
        """Output of exactly ``output_limit`` bytes is kept whole and nothing is counted."""
        with anyio.fail_after(60):
            result = await sandbox.exec(["head", "-c", str(_SMALL_LIMIT), "/dev/zero"],
                                        output_limit=_SMALL_LIMIT)
        _assert_kept(result, _SMALL_LIMIT, 0)
        assert not result.truncated

    @requires(Capability.EXEC_STREAM)
    async def test_hostile_output_callbacks_see_every_byte_past_the_limit(
            self, sandbox: Sandbox) -> None:
        """Streaming callbacks get every byte of a flood, not just the kept ones."""
        size = 40 * _MiB
        seen = {"stdout": 0, "stderr": 0}

        def on_stdout(chunk: bytes) -> None:
            seen["stdout"] += len(chunk)

        def on_stderr(chunk: bytes) -> None:
            seen["stderr"] += len(chunk)

        script = f"head -c {size} /dev/zero; head -c {size // 4} /dev/zero >&2"
        with anyio.fail_after(120):
            result = await sandbox.exec(["bash", "-c", script], timeout=100,
                                        output_limit=_SMALL_LIMIT, on_stdout=on_stdout,
                                        on_stderr=on_stderr)
        assert seen == {"stdout": size, "stderr": size // 4}, f"callbacks saw {seen}"
        _assert_kept(result, _SMALL_LIMIT, size - _SMALL_LIMIT)
        _assert_kept(result, _SMALL_LIMIT, size // 4 - _SMALL_LIMIT, "stderr")

    # ------------------------------------------------------------------------ reads

    async def test_hostile_read_past_the_limit_raises_file_too_large(
            self, sandbox: Sandbox) -> None:
        """``files.read(path, limit=N)`` of a larger file raises FileTooLarge."""
        path = f"/tmp/{new_marker('big')}"
        made = await sandbox.exec(["sh", "-c", f'head -c {2 * _MiB + 1} /dev/zero > "$1"',
                                   "psdk", path])
        assert made.exit_code == 0, made.stderr
        with anyio.fail_after(_PROMPT), pytest.raises(FileTooLarge):
            await sandbox.files.read(path, limit=2 * _MiB)

    async def test_hostile_read_at_the_limit_returns_the_file(self, sandbox: Sandbox) -> None:
        """A file of exactly ``limit`` bytes is read whole."""
        path = f"/tmp/{new_marker('exact')}"
        await sandbox.exec(["sh", "-c", f'head -c {_MiB} /dev/zero > "$1"', "psdk", path])
        with anyio.fail_after(_PROMPT):
            assert await sandbox.files.read(path, limit=_MiB) == bytes(_MiB)

    async def test_hostile_read_of_a_sparse_file_raises_file_too_large(
            self, sandbox: Sandbox) -> None:
        """A 4 GiB sparse file (free for the sandbox to make) is FileTooLarge under the
        default limit, promptly, and this process does not grow meanwhile."""
        path = f"/tmp/{new_marker('sparse')}"
        made = await sandbox.exec(["truncate", "-s", "4G", path])
        assert made.exit_code == 0, made.stderr
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(_PROMPT), pytest.raises(FileTooLarge):
                await sandbox.files.read(path)
        assert rss.growth < MEMORY_BOUND, f"the caller grew by {rss.growth / _MiB:.0f} MiB"

    async def test_hostile_read_of_dev_zero_is_not_a_regular_file(
            self, sandbox: Sandbox) -> None:
        """Reading ``/dev/zero`` raises NotARegularFile at once instead of filling memory."""
        with anyio.fail_after(_PROMPT), pytest.raises(NotARegularFile):
            await sandbox.files.read("/dev/zero")

    async def test_hostile_read_of_a_fifo_is_not_a_regular_file(
            self, sandbox: Sandbox) -> None:
        """Reading a FIFO the sandbox made raises NotARegularFile at once instead of hanging."""
        path = f"/tmp/{new_marker('fifo')}"
        made = await sandbox.exec(["mkfifo", path])
        assert made.exit_code == 0, made.stderr
        with anyio.fail_after(_PROMPT), pytest.raises(NotARegularFile):
            await sandbox.files.read(path)

    async def test_hostile_read_of_a_symlink_to_dev_zero_is_not_a_regular_file(
            self, sandbox: Sandbox) -> None:
        """A symlink the sandbox made to ``/dev/zero`` is refused like the device itself."""
        path = f"/tmp/{new_marker('link')}"
        made = await sandbox.exec(["ln", "-s", "/dev/zero", path])
        assert made.exit_code == 0, made.stderr
        with anyio.fail_after(_PROMPT), pytest.raises(NotARegularFile):
            await sandbox.files.read(path)

    @pytest.mark.parametrize("call", ["stream", "download"])
    @pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
    async def test_hostile_stream_or_download_through_a_symlink_to_a_device_is_refused(
            self, sandbox: Sandbox, tmp_path: Path, call: str, target: str) -> None:
        """A stream or a download of a symlink to ``/dev/zero`` or to a FIFO raises
        NotARegularFile before a byte arrives, and a download leaves no file behind."""
        link = f"/tmp/{new_marker('to-' + target.strip('/').replace('/', '-'))}"
        made = await sandbox.exec(["sh", "-c", 'case $1 in /*) ;; *) mkfifo "$2.fifo"; '
                                   'set -- "$2.fifo" "$2";; esac; ln -s "$1" "$2"',
                                   "psdk-link", target, link])
        assert made.exit_code == 0, made.stderr

        async def fetch() -> None:
            if call == "stream":
                async for _chunk in sandbox.files.stream(link):
                    pass
            else:
                await sandbox.files.download(link, tmp_path / "out")

        with anyio.fail_after(_PROMPT), pytest.raises(NotARegularFile):
            await fetch()
        assert [entry async for entry in anyio.Path(tmp_path).iterdir()] == []

    # --------------------------------------------------------------------- timeouts

    async def test_hostile_timeout_keeps_a_bounded_partial_result(
            self, sandbox: Sandbox) -> None:
        """A command that prints past its output limit and then times out raises
        CommandTimeout whose result kept the limit and counted the rest."""
        with anyio.fail_after(3 + _PROMPT), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(["sh", "-c", "head -c 1000000 /dev/zero; sleep 100"],
                               timeout=3, output_limit=1000)
        _assert_kept(caught.value.result, 1000, 1_000_000 - 1000)

    async def test_hostile_huge_finite_timeout_overflows_nothing(
            self, sandbox: Sandbox) -> None:
        """A finite timeout far past any clock (``1e300``) is taken and the command runs."""
        with anyio.fail_after(_PROMPT):
            result = await sandbox.exec(["echo", "ok"], timeout=1e300)
        assert (result.exit_code, result.stdout) == (0, "ok\n")

    @pytest.mark.parametrize("timeout", [math.inf, math.nan],
                             ids=["infinite", "not-a-number"])
    async def test_hostile_exec_timeout_must_be_finite(
            self, sandbox: Sandbox, timeout: float) -> None:
        """An infinite or NaN timeout is refused with InvalidInput before anything runs."""
        marker = f"/tmp/{new_marker('ran')}"
        with anyio.fail_after(_PROMPT), pytest.raises(InvalidInput):
            await sandbox.exec(["touch", marker], timeout=timeout)
        assert not await sandbox.files.exists(marker)
