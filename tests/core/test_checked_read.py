"""``read_after_check``: the read and its check run together; which outcome wins."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from provider_sdk.checked_read import read_after_check
from provider_sdk.errors import FileNotFound, NotARegularFile, Unavailable

pytestmark = pytest.mark.anyio


class Reads:
    """A read whose opening and closing are recorded."""

    def __init__(self, *, fails: Exception | None = None, hangs: bool = False) -> None:
        self.fails = fails
        self.hangs = hangs
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.started = anyio.Event()
        self.finished = anyio.Event()

    async def open(self) -> str:
        self.started.set()
        if self.hangs:
            await anyio.sleep_forever()
        try:
            if self.fails is not None:
                raise self.fails
            self.opened.append("reader")
            return "reader"
        finally:
            self.finished.set()

    async def close(self, reader: str) -> None:
        self.closed.append(reader)


def check_that(*, raises: Exception | None = None,
               after: Reads | None = None) -> Callable[[], Awaitable[None]]:
    async def check() -> None:
        if after is not None:
            await after.started.wait()  # the read is on its way before the check answers
        if raises is not None:
            raise raises
    return check


async def test_a_passed_check_hands_back_the_read_asked_for_at_the_same_time() -> None:
    reads = Reads()
    got = await read_after_check(check_that(after=reads), reads.open, reads.close)
    assert got == "reader"
    assert reads.closed == []


async def test_a_special_file_gives_up_a_read_that_waits_for_ever() -> None:
    reads = Reads(hangs=True)
    with anyio.fail_after(10), pytest.raises(NotARegularFile):
        await read_after_check(check_that(raises=NotARegularFile("fifo"), after=reads),
                               reads.open, reads.close)
    assert reads.opened == []


async def test_a_special_file_closes_a_read_that_opened() -> None:
    reads = Reads()

    async def check() -> None:
        await reads.finished.wait()
        raise NotARegularFile("device")

    with pytest.raises(NotARegularFile):
        await read_after_check(check, reads.open, reads.close)
    assert reads.closed == ["reader"]


async def test_a_special_file_wins_over_the_reads_own_error() -> None:
    reads = Reads(fails=Unavailable("the read broke"))

    async def check() -> None:
        await reads.finished.wait()  # the read has failed
        raise NotARegularFile("socket")

    with pytest.raises(NotARegularFile):
        await read_after_check(check, reads.open, reads.close)


async def test_the_reads_error_comes_before_the_checks() -> None:
    reads = Reads(fails=FileNotFound("no such file: read"))
    with pytest.raises(FileNotFound, match="read"):
        await read_after_check(check_that(raises=FileNotFound("no such file: check"),
                                          after=reads), reads.open, reads.close)


async def test_a_check_that_fails_otherwise_closes_the_read_and_says_why() -> None:
    reads = Reads()

    async def check() -> None:
        await reads.finished.wait()
        raise Unavailable("the check broke")

    with pytest.raises(Unavailable, match="check"):
        await read_after_check(check, reads.open, reads.close)
    assert reads.closed == ["reader"]
