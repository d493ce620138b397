"""What the host keeps from a sandbox is bounded: exec output per stream, files read
into memory; streaming callbacks still see everything."""

from __future__ import annotations

import math

import pytest

from provider_sdk import FileTooLarge, InvalidInput, open_provider
from provider_sdk.limits import OutputBuffer

pytestmark = pytest.mark.anyio


def test_buffer_keeps_the_head_and_counts_the_rest() -> None:
    buf = OutputBuffer(10)
    for chunk in (b"abcd", b"efghij", b"klm", b"", b"nop"):
        buf.append(chunk)
    assert (buf.value(), buf.dropped) == (b"abcdefghij", 6)


def test_buffer_under_its_limit_drops_nothing() -> None:
    buf = OutputBuffer(10)
    buf.append(b"0123456789")
    assert (buf.value(), buf.dropped) == (b"0123456789", 0)


async def test_exec_keeps_output_limit_bytes_and_says_how_many_it_dropped(memory: object) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        seen: list[bytes] = []
        result = await sandbox.exec("head -c 100000 /dev/zero", output_limit=1000,
                                    on_stdout=seen.append)
    assert (len(result.stdout_bytes), result.stdout_truncated, result.truncated) == \
        (1000, 99000, True)
    assert sum(map(len, seen)) == 100000


async def test_provider_output_limit_is_the_default_for_every_call(memory: object) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        provider.output_limit = 10
        result = await sandbox.exec("echo 0123456789abcdef >&2")
    assert (result.stderr_bytes, result.stderr_truncated) == (b"0123456789", 7)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
async def test_a_bad_output_limit_is_invalid_input(memory: object, bad: object) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with pytest.raises(InvalidInput, match="output_limit"):
            await sandbox.exec("true", output_limit=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [math.inf, math.nan, -math.inf, 0, -1, "5"])
async def test_timeout_must_be_finite_and_positive(memory: object, bad: object) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with pytest.raises(InvalidInput, match="timeout"):
            await sandbox.exec("true", timeout=bad)  # type: ignore[arg-type]


async def test_read_past_its_limit_is_file_too_large(memory: object) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.files.write("big", b"x" * 50_000)
        with pytest.raises(FileTooLarge) as caught:
            await sandbox.files.read("big", limit=10_000)
        assert caught.value.limit == 10_000
        assert await sandbox.files.read("big", limit=50_000) == b"x" * 50_000


async def test_provider_read_limit_is_the_default(memory: object) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        provider.read_limit = 100
        await sandbox.files.write("f", b"y" * 101)
        with pytest.raises(FileTooLarge):
            await sandbox.files.read_text("f")
