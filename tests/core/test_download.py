"""``Files.download``: the local file appears whole or not at all, whatever happens to the
copy (a refused source, an error or a cancellation midway), and errors name it."""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from memory_provider import STORE, MemoryProvider, Store

from provider_sdk import open_provider, registry
from provider_sdk.errors import NotARegularFile, Unavailable

pytestmark = pytest.mark.anyio

SEEN: list[builtins.list[str]] = []
GATE: builtins.list[anyio.Event] = []


class Flaky(MemoryProvider):
    """Reads record what the download directory held when they began; ``/flaky`` fails
    after one chunk, ``/hang`` waits after one chunk until cancelled."""

    watched: Path | None = None

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        if self.watched is not None:
            SEEN.append(sorted(os.listdir(self.watched)))
        if path in ("/flaky", "/hang"):
            yield b"x" * 4096
            if path == "/hang":
                await anyio.sleep_forever()
            raise Unavailable("the connection dropped", provider="flaky",
                              sandbox_id=sandbox_id)
        async for chunk in super()._read_file(sandbox_id, path):
            yield chunk


@pytest.fixture
def flaky(memory: Store, tmp_path: Path) -> Iterator[Path]:
    """The ``flaky`` provider, watching a fresh download directory (returned)."""
    registry.register("flaky", Flaky)
    out = tmp_path / "out"
    out.mkdir()
    Flaky.watched = out
    SEEN.clear()
    try:
        yield out
    finally:
        Flaky.watched = None
        registry.unregister("flaky")


async def test_download_writes_the_whole_file_and_reports_progress(flaky: Path) -> None:
    payload = os.urandom(3 * 4096 + 17)
    sizes: list[int] = []
    async with open_provider("flaky") as provider, provider.create() as sandbox:
        await sandbox.files.write("/data.bin", payload)
        await sandbox.files.write("/empty", b"")
        await sandbox.files.download("/data.bin", flaky / "data.bin", progress=sizes.append)
        await sandbox.files.download("/empty", str(flaky / "empty"))
    assert (flaky / "data.bin").read_bytes() == payload
    assert sum(sizes) == len(payload)
    assert (flaky / "empty").read_bytes() == b""
    assert sorted(os.listdir(flaky)) == ["data.bin", "empty"]
    umask = os.umask(0)
    os.umask(umask)
    assert (flaky / "data.bin").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("link", [False, True])
async def test_a_refused_source_creates_nothing_at_all(flaky: Path, link: bool) -> None:
    target = flaky / "keep"
    target.write_text("original")
    async with open_provider("flaky") as provider, provider.create() as sandbox:
        path = "/dev/zero"
        if link:
            STORE.add_special(sandbox.id, "/tmp/z", link_to="/dev/zero")
            path = "/tmp/z"
        with pytest.raises(NotARegularFile):
            await sandbox.files.download(path, target)
    assert SEEN == [["keep"]]  # not even a temporary file existed while the source was read
    assert target.read_text() == "original"
    assert os.listdir(flaky) == ["keep"]


async def test_an_error_midway_leaves_the_old_file_and_no_partial_one(flaky: Path) -> None:
    target = flaky / "keep"
    target.write_text("original")
    async with open_provider("flaky") as provider, provider.create() as sandbox:
        with pytest.raises(Unavailable, match="dropped"):
            await sandbox.files.download("/flaky", target)
    assert target.read_text() == "original"
    assert os.listdir(flaky) == ["keep"]


async def test_a_cancelled_download_leaves_no_partial_file(flaky: Path) -> None:
    async with open_provider("flaky") as provider, provider.create() as sandbox, \
            anyio.create_task_group() as tg:
        tg.start_soon(sandbox.files.download, "/hang", flaky / "big")
        deadline = time.monotonic() + 30
        while not os.listdir(flaky):  # the partial file, once the first chunk is in
            assert time.monotonic() < deadline, "the download never started writing"
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert os.listdir(flaky) == []


async def test_a_local_error_names_the_target_not_the_temporary_file(flaky: Path) -> None:
    target = flaky / "missing-dir" / "file"
    async with open_provider("flaky") as provider, provider.create() as sandbox:
        await sandbox.files.write("/data", b"data")
        with pytest.raises(FileNotFoundError) as caught:
            await sandbox.files.download("/data", target)
    assert caught.value.filename == str(target)
    assert ".psdk" not in str(caught.value)
    assert "partial" not in str(caught.value)
    assert str(target) in str(caught.value)
