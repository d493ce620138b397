"""The files API above the hooks (``provider_sdk.files.Files``): what a read loads before
it refuses a large file, the defaults and keyword-only options of each call, that each
call reaches its hook, and that a download never writes through a planted link."""

from __future__ import annotations

import builtins
import contextlib
import inspect
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import anyio
import anyio.lowlevel
import pytest
from memory_provider import MemoryProvider, Store

from provider_sdk import open_provider, registry
from provider_sdk.errors import Conflict, FileNotFound, FileTooLarge
from provider_sdk.files import Files
from provider_sdk.models import FileType

pytestmark = pytest.mark.anyio

_MiB = 1 << 20
OPENED: builtins.list[str] = []
CLOSED: builtins.list[str] = []


class Counting(MemoryProvider):
    """Records each read it opens and each it closes."""

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        OPENED.append(path)
        closed_by_reader = False
        try:
            if path == "/hang":  # one chunk, then nothing until cancelled
                yield b"h" * 4096
                await anyio.sleep_forever()
            async for chunk in super()._read_file(sandbox_id, path):
                yield chunk
        except GeneratorExit:  # closed by its reader: a cleanup that awaits, as a network
            closed_by_reader = True  # read's does, done only if the reader lets it finish
            await anyio.lowlevel.checkpoint()
            CLOSED.append(path)
            raise
        finally:
            if not closed_by_reader:
                CLOSED.append(path)


@pytest.fixture
def counting(memory: Store) -> Iterator[None]:
    registry.register("counting", Counting)
    OPENED.clear()
    CLOSED.clear()
    try:
        yield
    finally:
        registry.unregister("counting")


async def test_a_large_file_under_the_limit_is_read_whole(counting: None) -> None:
    # Past the size check (16 MiB): the first read stops there, the size is asked, and
    # the second read, to the limit, returns it all.
    size = 17 * _MiB
    async with open_provider("counting") as provider, provider.create() as sandbox:
        await sandbox.files.write("/big", b"y" * size)
        OPENED.clear()
        assert await sandbox.files.read("/big", limit=size) == b"y" * size
        assert await sandbox.files.read("/big", limit=size + _MiB) == b"y" * size
        assert OPENED == ["/big"] * 4


async def test_a_file_past_the_limit_is_refused_after_one_read_and_its_size(
        counting: None) -> None:
    # 17 MiB against a limit of 17 MiB - 1: the size refuses it; no second read loads
    # the file up to the limit first. Every read opened is closed at once.
    size = 17 * _MiB
    async with open_provider("counting") as provider, provider.create() as sandbox:
        await sandbox.files.write("/big", b"z" * size)
        OPENED.clear()
        with pytest.raises(FileTooLarge) as refused:
            await sandbox.files.read("/big", limit=size - 1)
        assert refused.value.limit == size - 1
        assert OPENED == ["/big"]
        assert CLOSED == ["/big"]


async def test_a_file_under_the_size_check_is_read_with_one_read(counting: None) -> None:
    # Up to 16 MiB a read asks for no size and reads once.
    size = 31 * _MiB // 2
    async with open_provider("counting") as provider, provider.create() as sandbox:
        await sandbox.files.write("/mid", b"m" * size)
        OPENED.clear()
        assert len(await sandbox.files.read("/mid")) == size
        assert OPENED == ["/mid"]


async def test_a_small_file_is_read_with_one_read(counting: None) -> None:
    async with open_provider("counting") as provider, provider.create() as sandbox:
        await sandbox.files.write("/small", b"abc")
        OPENED.clear()
        assert await sandbox.files.read("/small") == b"abc"
        assert await sandbox.files.read_text("/small", limit=3) == "abc"
        assert OPENED == ["/small", "/small"]
        with pytest.raises(FileTooLarge):
            await sandbox.files.read("/small", limit=2)
        assert CLOSED == OPENED


async def test_each_call_reaches_its_hook(memory: Store, tmp_path: Path) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        files = sandbox.files
        assert not await files.exists("/a")
        await files.write("/a", b"1")
        assert await files.exists("/a")
        await files.rename("/a", "/b")
        assert (await files.exists("/a"), await files.read("/b")) == (False, b"1")
        await files.remove("/b")
        assert not await files.exists("/b")
        local = tmp_path / "up"
        local.write_bytes(b"uploaded")
        await files.upload(local, "/up")
        assert await files.read("/up") == b"uploaded"


async def test_mkdir_makes_parents_and_accepts_an_existing_directory_by_default(
        memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.files.mkdir("/one/two/three")
        await sandbox.files.mkdir("/one/two/three")
        assert (await sandbox.files.stat("/one/two/three")).type == FileType.DIRECTORY


async def test_remove_keeps_a_directory_with_contents_by_default(memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.files.write("/full/f", b"x")
        with pytest.raises(Conflict):
            await sandbox.files.remove("/full")
        assert await sandbox.files.read("/full/f") == b"x"
        await sandbox.files.remove("/full", recursive=True)
        with pytest.raises(FileNotFound):
            await sandbox.files.stat("/full")


@pytest.mark.parametrize(("method", "keyword"), [
    ("read", "limit"), ("read_text", "limit"), ("mkdir", "parents"), ("mkdir", "exist_ok"),
    ("remove", "recursive"), ("download", "progress")])
def test_options_are_keyword_only(method: str, keyword: str) -> None:
    # A caller's positional slip (``read(path, 10)``) is a TypeError, not a quiet
    # misreading; the options may grow and be reordered.
    parameter = inspect.signature(getattr(Files, method)).parameters[keyword]
    assert parameter.kind == inspect.Parameter.KEYWORD_ONLY


async def test_download_never_writes_through_a_link_planted_at_its_temporary_name(
        memory: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Someone who can guess the hidden name beside the target plants a link there to
    # a file of theirs: the download fails rather than write through it.
    monkeypatch.setattr("provider_sdk.files.secrets.token_hex", lambda n: "f" * (2 * n))
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "target"
    os.symlink(victim, tmp_path / ".target.psdk-ffffffff")
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.files.write("/src", b"payload")
        with pytest.raises(OSError):  # noqa: PT011 - the OS's own error, named for the target
            await sandbox.files.download("/src", target)
    assert victim.read_text() == "keep"
    assert not target.exists()


async def test_download_closes_its_read_when_the_local_file_cannot_be_opened(
        counting: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hidden file opened, then handing it to anyio fails: its descriptor is closed
    # and the file removed; the sandbox's read is closed too.
    async def refused(*args: object, **kwargs: object) -> None:
        raise OSError(24, "Too many open files")

    async with open_provider("counting") as provider, provider.create() as sandbox:
        await sandbox.files.write("/src", b"payload")
        OPENED.clear()
        monkeypatch.setattr("provider_sdk.files.anyio.open_file", refused)
        with pytest.raises(OSError, match="Too many open files"):
            await sandbox.files.download("/src", tmp_path / "out")
        monkeypatch.undo()
        assert not [fd for fd in os.listdir("/proc/self/fd")
                    if str(tmp_path) in _target(fd)], "the hidden file is still open"
        assert os.listdir(tmp_path) == []
        assert CLOSED == OPENED == ["/src"]


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # closed meanwhile
        return ""


async def test_a_cancelled_download_closes_its_read(counting: None, tmp_path: Path) -> None:
    async with open_provider("counting") as provider, provider.create() as sandbox:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sandbox.files.download, "/hang", tmp_path / "out")
            await anyio.wait_all_tasks_blocked()
            assert OPENED == ["/hang"]
            tg.cancel_scope.cancel()
        assert CLOSED == ["/hang"]
        assert os.listdir(tmp_path) == []


async def test_a_stream_closed_under_cancellation_closes_the_providers_read(
        counting: None) -> None:
    # A caller cancelled while it holds a stream, closing it on the way out:
    # the provider's read is closed whole, its awaiting cleanup included.
    async with open_provider("counting") as provider, provider.create() as sandbox:
        stream = cast("AsyncGenerator[bytes, None]", sandbox.files.stream("/hang"))
        with anyio.move_on_after(0.2):
            async with contextlib.aclosing(stream) as chunks:
                assert await anext(chunks)
                await anyio.sleep_forever()  # holding the stream, between two chunks
        assert CLOSED == ["/hang"]
