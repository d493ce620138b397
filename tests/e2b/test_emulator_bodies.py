"""The emulators' bounded parts on their own: the body decoder shared by both emulator
families, the E2B emulator's streaming multipart reader, and its process streams' backlog."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from provider_sdk_emulators.kit.bodies import BodyTooLarge, decoded
from provider_sdk_emulators.kit.multipart import MultipartError, boundary_of, parts

from provider_sdk.errors import InvalidInput, QuotaExceeded

pytestmark = pytest.mark.anyio

DATA = b"".join(i.to_bytes(4, "big") for i in range(50_000))  # 200 kB, no repeats


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at:at + size]


async def _all(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


@pytest.mark.parametrize("size", [1, 7, 4096, 1 << 20])
@pytest.mark.parametrize(("encoding", "encode"), [
    (None, lambda d: d), ("identity", lambda d: d), ("gzip", gzip.compress),
    ("deflate", zlib.compress), ("gzip, deflate", lambda d: zlib.compress(gzip.compress(d))),
])
async def test_a_body_is_decoded_whatever_its_chunks(size: int, encoding: str | None,
                                                     encode: object) -> None:
    body = encode(DATA)  # type: ignore[operator]
    assert await _all(decoded(_chunks(body, size), encoding, limit=None)) == DATA


async def _collect(chunks: AsyncIterator[bytes], sizes: list[int]) -> None:
    async for chunk in chunks:
        sizes.append(len(chunk))


async def test_a_body_past_its_limit_stops_there() -> None:
    sizes: list[int] = []
    with pytest.raises(BodyTooLarge) as caught:
        await _collect(decoded(_chunks(DATA, 1000), None, limit=50_000), sizes)
    assert sum(sizes) <= 50_000
    assert caught.value.limit == 50_000
    assert isinstance(caught.value, QuotaExceeded)


async def test_a_bomb_is_stopped_after_the_limit_in_small_steps() -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(packer.compress(bytes(1 << 20)) for _ in range(64)) + packer.flush()
    assert len(bomb) < 100_000
    sizes: list[int] = []
    with pytest.raises(BodyTooLarge):
        # The whole bomb in one chunk: each step still yields a bounded piece.
        await _collect(decoded(_chunks(bomb, len(bomb)), "gzip", limit=8 << 20), sizes)
    assert sum(sizes) <= 8 << 20
    assert max(sizes) <= 1 << 20


@pytest.mark.parametrize(("body", "encoding", "message"), [
    (gzip.compress(DATA)[:-8], "gzip", "ends early"),
    (b"not gzip at all", "gzip", "corrupt"),
    (gzip.compress(DATA) + b"trailing", "gzip", "after its end"),
    (DATA, "br", "Content-Encoding"),
], ids=["truncated-gzip", "not-gzip", "trailing-bytes", "unknown-encoding"])
async def test_a_bad_encoding_is_invalid_input(body: bytes, encoding: str,
                                               message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        await _all(decoded(_chunks(body, 1000), encoding, limit=None))


def _form(files: list[tuple[str, bytes]]) -> tuple[bytes, bytes]:
    request = httpx.Request("POST", "http://127.0.0.1/", files=[
        ("file", (name, data, "application/octet-stream")) for name, data in files])
    return request.read(), boundary_of(request.headers["content-type"])


@pytest.mark.parametrize("size", [1, 3, 64, 65536, 1 << 22])
async def test_multipart_parts_stream_whatever_the_chunks(size: int) -> None:
    # Data that looks like a delimiter, CRLFs at the edges, an empty part.
    files = [("/a/dir/b c.txt", b"\r\n--" + DATA + b"\r\n"), ("/d/empty", b""), ("rel", DATA)]
    body, boundary = _form(files)
    got = []
    async for part in parts(_chunks(body, size), boundary):
        pieces = [chunk async for chunk in part.chunks()]
        assert all(len(p) <= max(size, 64) + 200 for p in pieces)  # never the whole part
        got.append((part.filename, b"".join(pieces)))
    assert got == files


async def test_an_unread_part_is_skipped() -> None:
    body, boundary = _form([("one", DATA), ("two", b"2")])
    names = []
    async for part in parts(_chunks(body, 1000), boundary):
        names.append(part.filename)
    assert names == ["one", "two"]


@pytest.mark.parametrize("cut", [10, 150, -10])
async def test_a_truncated_multipart_body_is_an_error(cut: int) -> None:
    body, boundary = _form([("one", DATA)])

    async def read_all() -> None:
        async for part in parts(_chunks(body[:cut], 100), boundary):
            await part.skip()

    with pytest.raises(MultipartError):
        await read_all()


def test_a_content_type_without_a_boundary_is_an_error() -> None:
    with pytest.raises(MultipartError):
        boundary_of("multipart/form-data")


async def test_a_process_stream_that_falls_behind_is_cut_off_with_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from provider_sdk_emulators.e2b import _process_entry
    from provider_sdk_emulators.e2b._process_entry import ProcessEntry

    monkeypatch.setattr(_process_entry, "_STALL", 0.05)
    entry = ProcessEntry(pid=1, config={}, tag=None, process=None)  # type: ignore[arg-type]
    slow = entry.subscribe()
    for index in range(5000):  # nobody reads: the stream must not hold them all
        await entry.publish({"event": {"data": {"stdout": str(index)}}})
    assert slow.statistics().current_buffer_used <= 1000
    assert not entry.subscribers
    items = [item async for item in slow]
    assert items[-1]["error"].code == "resource_exhausted"
    assert items[0] == {"event": {"data": {"stdout": "0"}}}


@pytest.mark.parametrize(("value", "seconds"), [
    (None, 60.0), ("2.5", 2.5), ("0", 60.0), ("-1", 60.0), ("inf", 60.0), ("nan", 60.0),
    ("soon", 60.0)])
def test_a_readers_patience_comes_from_the_environment_when_it_is_a_number_of_seconds(
        monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float) -> None:
    from provider_sdk_emulators.e2b._process_entry import STALL_VAR, ProcessEntry

    if value is None:
        monkeypatch.delenv(STALL_VAR, raising=False)
    else:
        monkeypatch.setenv(STALL_VAR, value)
    entry = ProcessEntry(pid=1, config={}, tag=None, process=None)  # type: ignore[arg-type]
    assert entry.patience == seconds


async def test_a_process_stream_waits_for_a_slow_reader() -> None:
    """Output is held back while a reader catches up, not dropped: every event arrives."""
    from provider_sdk_emulators.e2b._process_entry import _BACKLOG, ProcessEntry

    entry = ProcessEntry(pid=1, config={}, tag=None, process=None)  # type: ignore[arg-type]
    stream = entry.subscribe()
    got: list[dict[str, object]] = []

    async def read_slowly() -> None:
        async for item in stream:
            got.append(item)
            if len(got) % 100 == 0:
                await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_slowly)
        for index in range(3 * _BACKLOG):
            await entry.publish({"event": {"data": {"stdout": str(index)}}})
        entry.finish({"event": {"end": {}}})
    assert len(got) == 3 * _BACKLOG + 1
    assert "error" not in got[-1]


async def test_a_reader_still_behind_at_the_end_gets_the_end_not_an_error() -> None:
    """A process that ends while its reader's backlog is full: the reader gets every
    event, then the end (the stream keeps a slot for it)."""
    from provider_sdk_emulators.e2b._process_entry import _BACKLOG, ProcessEntry

    entry = ProcessEntry(pid=1, config={}, tag=None, process=None)  # type: ignore[arg-type]
    stream = entry.subscribe()
    for index in range(_BACKLOG):
        await entry.publish({"event": {"data": {"stdout": str(index)}}})
    entry.finish({"event": {"end": {}}})
    items = [item async for item in stream]
    assert len(items) == _BACKLOG + 1
    assert items[-1] == {"event": {"end": {}}}
