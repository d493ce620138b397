"""Contract: file operations (``sandbox.files``), always binary-safe and never escaping."""

from __future__ import annotations

import hashlib
import itertools
import posixpath
import random
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    FileExists,
    FileNotFound,
    InvalidInput,
    IsADirectory,
    NotADirectory,
    PermissionDenied,
    SandboxError,
)
from provider_sdk.models import FileType
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import RssGrowth, new_marker

_MiB = 1 << 20

# One sandbox serves every example of a property test; examples stay few so the whole
# suite runs in minutes against a real backend.
_PROPERTY = settings(max_examples=25, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])

# A single path component: no '/', no NUL, not '.' or '..', at most 200 UTF-8 bytes.
_NAMES = st.text(st.characters(codec="utf-8", exclude_characters="/\0"),
                 min_size=1, max_size=50).filter(
    lambda s: s not in (".", "..") and len(s.encode()) <= 200)

_example = itertools.count()


def _sha256_of_local(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_MiB):
            digest.update(chunk)
    return digest.hexdigest()


class FilesContract(ContractBase):
    """Files: bytes and names round-trip; directories, stat, remove, rename; big files in
    chunks; errors; paths resolve inside the sandbox only."""

    async def test_files_upload_and_download_256_mib_in_chunks(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A 256 MiB file goes in and out whole, without ever sitting in this process's memory."""
        size = 256 * _MiB
        source = tmp_path / "upload.bin"
        digest = hashlib.sha256()
        rng = random.Random(0x5D5C)
        with source.open("wb") as f:
            for _ in range(size // _MiB):
                chunk = rng.randbytes(_MiB)
                digest.update(chunk)
                f.write(chunk)
        target = tmp_path / "download.bin"
        async with RssGrowth().measure() as rss:
            await sandbox.files.upload(source, "/tmp/psdk-big.bin")
            await sandbox.files.download("/tmp/psdk-big.bin", target)
        assert (await sandbox.files.stat("/tmp/psdk-big.bin")).size == size
        assert target.stat().st_size == size
        assert _sha256_of_local(target) == digest.hexdigest()
        assert rss.growth < 64 * _MiB, f"memory grew by {rss.growth / _MiB:.0f} MiB"

    @_PROPERTY
    @given(data=st.binary(max_size=1 << 16))
    async def test_files_round_trip_arbitrary_bytes(self, sandbox: Sandbox, data: bytes) -> None:
        """Any bytes written are read back identical."""
        path = f"/tmp/psdk-bytes/{next(_example)}.bin"
        await sandbox.files.write(path, data)
        assert await sandbox.files.read(path) == data

    @_PROPERTY
    @given(name=_NAMES)
    async def test_files_round_trip_arbitrary_file_names(self, sandbox: Sandbox,
                                                         name: str) -> None:
        """Any valid file name is written, listed and read back under exactly that name."""
        directory = f"/tmp/psdk-names/{next(_example)}"
        path = f"{directory}/{name}"
        await sandbox.files.write(path, name.encode())
        entries = await sandbox.files.list(directory)
        assert [(e.name, e.type) for e in entries] == [(name, FileType.FILE)]
        assert await sandbox.files.read(path) == name.encode()

    async def test_files_round_trip_multi_chunk_bytes(self, sandbox: Sandbox) -> None:
        """A few MiB of random bytes, spanning chunk boundaries, round-trip exactly."""
        data = random.Random(7).randbytes(3 * _MiB + 7)
        await sandbox.files.write("/tmp/psdk-chunks.bin", data)
        assert await sandbox.files.read("/tmp/psdk-chunks.bin") == data

    async def test_files_write_accepts_a_stream_of_chunks(self, sandbox: Sandbox) -> None:
        """``write`` takes an async iterable of byte chunks."""
        async def chunks() -> AsyncIterator[bytes]:
            for i in range(5):
                yield bytes([i]) * 1000

        await sandbox.files.write("/tmp/psdk-stream.bin", chunks())
        expected = b"".join(bytes([i]) * 1000 for i in range(5))
        assert await sandbox.files.read("/tmp/psdk-stream.bin") == expected

    async def test_files_write_text_and_read_text(self, sandbox: Sandbox) -> None:
        """Text is written as UTF-8 and read back as the same text."""
        text = "héllo\nwörld ✓ 🙂\n"
        await sandbox.files.write("/tmp/psdk-text.txt", text)
        assert await sandbox.files.read_text("/tmp/psdk-text.txt") == text
        assert await sandbox.files.read("/tmp/psdk-text.txt") == text.encode()

    async def test_files_write_replaces_the_whole_file(self, sandbox: Sandbox) -> None:
        """Writing a shorter content over a file leaves nothing of the old one."""
        await sandbox.files.write("/tmp/psdk-replace.txt", b"a long original content")
        await sandbox.files.write("/tmp/psdk-replace.txt", b"short")
        assert await sandbox.files.read("/tmp/psdk-replace.txt") == b"short"

    @requires(Capability.FILES_PERMISSIONS)
    async def test_files_write_over_a_read_only_file_is_permission_denied(
            self, sandbox: Sandbox) -> None:
        """A file its user may not write is not replaced: ``PermissionDenied``, and the
        file keeps its content and mode."""
        path = "/tmp/psdk-read-only.txt"
        await sandbox.files.write(path, b"original")
        assert (await sandbox.exec(["chmod", "444", path])).exit_code == 0
        with pytest.raises(PermissionDenied, match=r"psdk-read-only\.txt"):
            await sandbox.files.write(path, b"replaced")
        assert await sandbox.files.read(path) == b"original"
        assert (await sandbox.files.stat(path)).mode & 0o777 == 0o444
        assert not [e.name for e in await sandbox.files.list("/tmp")
                    if e.name.startswith(".psdk")]  # no temporary file left

    @requires(Capability.FILES_PERMISSIONS)
    async def test_files_read_of_an_unreadable_file_is_permission_denied(
            self, sandbox: Sandbox) -> None:
        """A file its user may not read is not read: ``PermissionDenied``."""
        path = "/tmp/psdk-write-only.txt"
        await sandbox.files.write(path, b"secret")
        assert (await sandbox.exec(["chmod", "200", path])).exit_code == 0
        with pytest.raises(PermissionDenied, match=r"psdk-write-only\.txt"):
            await sandbox.files.read(path)

    @requires(Capability.FILES_PERMISSIONS)
    async def test_files_write_over_a_file_keeps_its_mode(self, sandbox: Sandbox) -> None:
        """Writing over an executable leaves it executable, with the new content."""
        path = "/tmp/psdk-script.sh"
        await sandbox.files.write(path, "#!/bin/sh\necho old\n")
        assert (await sandbox.exec(["chmod", "750", path])).exit_code == 0
        await sandbox.files.write(path, "#!/bin/sh\necho new\n")
        assert (await sandbox.files.stat(path)).mode & 0o777 == 0o750
        assert (await sandbox.exec([path])).stdout == "new\n"

    async def test_files_write_empty_file(self, sandbox: Sandbox) -> None:
        """An empty file is created, with size 0."""
        await sandbox.files.write("/tmp/psdk-empty", b"")
        assert await sandbox.files.read("/tmp/psdk-empty") == b""
        assert (await sandbox.files.stat("/tmp/psdk-empty")).size == 0

    async def test_files_write_creates_parent_directories(self, sandbox: Sandbox) -> None:
        """Writing into missing nested directories creates them."""
        await sandbox.files.write("/tmp/psdk-nest/a/b/c/file.txt", b"deep")
        assert await sandbox.files.read("/tmp/psdk-nest/a/b/c/file.txt") == b"deep"
        assert (await sandbox.files.stat("/tmp/psdk-nest/a/b")).type == FileType.DIRECTORY

    async def test_files_mkdir_creates_nested_directories(self, sandbox: Sandbox) -> None:
        """``mkdir`` creates a directory and its parents."""
        await sandbox.files.mkdir("/tmp/psdk-mkdir/x/y")
        assert (await sandbox.files.stat("/tmp/psdk-mkdir/x/y")).type == FileType.DIRECTORY

    async def test_files_written_are_seen_by_commands(self, sandbox: Sandbox) -> None:
        """A file written through ``files`` is what commands in the sandbox read."""
        data = bytes(range(256))
        await sandbox.files.write("/tmp/psdk-shared.bin", data)
        result = await sandbox.exec(["cat", "/tmp/psdk-shared.bin"])
        assert result.stdout_bytes == data

    async def test_files_written_by_commands_are_readable(self, sandbox: Sandbox) -> None:
        """A file a command writes is what ``files.read`` returns."""
        await sandbox.exec(["sh", "-c", r"printf 'cmd\000\377' > /tmp/psdk-by-cmd"])
        assert await sandbox.files.read("/tmp/psdk-by-cmd") == b"cmd\x00\xff"

    async def test_files_list_returns_the_entries(self, sandbox: Sandbox) -> None:
        """``list`` returns each entry once, sorted, with absolute paths and types."""
        await sandbox.files.write("/tmp/psdk-list/b.bin", b"12345")
        await sandbox.files.write("/tmp/psdk-list/a.txt", b"1")
        await sandbox.files.mkdir("/tmp/psdk-list/sub")
        entries = await sandbox.files.list("/tmp/psdk-list")
        assert [(e.path, e.name, e.type) for e in entries] == [
            ("/tmp/psdk-list/a.txt", "a.txt", FileType.FILE),
            ("/tmp/psdk-list/b.bin", "b.bin", FileType.FILE),
            ("/tmp/psdk-list/sub", "sub", FileType.DIRECTORY),
        ]
        assert entries[1].size == 5

    async def test_files_stat_reports_type_and_size_of_a_file(self, sandbox: Sandbox) -> None:
        """``stat`` of a file gives its absolute path, type ``file`` and exact size."""
        await sandbox.files.write("/tmp/psdk-stat.bin", b"x" * 1234)
        info = await sandbox.files.stat("/tmp/psdk-stat.bin")
        assert (info.path, info.type, info.size) == ("/tmp/psdk-stat.bin", FileType.FILE, 1234)

    async def test_files_stat_reports_a_directory(self, sandbox: Sandbox) -> None:
        """``stat`` of a directory gives type ``directory``."""
        await sandbox.files.mkdir("/tmp/psdk-stat-dir")
        assert (await sandbox.files.stat("/tmp/psdk-stat-dir")).type == FileType.DIRECTORY

    async def test_files_stat_reports_a_symlink_without_following_it(
            self, sandbox: Sandbox) -> None:
        """``stat`` of a symlink reports the link itself, and its target."""
        await sandbox.exec(["ln", "-s", "/tmp/psdk-target", "/tmp/psdk-link"])
        info = await sandbox.files.stat("/tmp/psdk-link")
        assert (info.type, info.symlink_target) == (FileType.SYMLINK, "/tmp/psdk-target")

    async def test_files_exists_tells_present_from_absent(self, sandbox: Sandbox) -> None:
        """``exists`` is true for a file and a directory, false for a missing path."""
        await sandbox.files.write("/tmp/psdk-exists/file", b"x")
        assert await sandbox.files.exists("/tmp/psdk-exists/file")
        assert await sandbox.files.exists("/tmp/psdk-exists")
        assert not await sandbox.files.exists("/tmp/psdk-exists/missing")

    async def test_files_remove_deletes_a_file(self, sandbox: Sandbox) -> None:
        """``remove`` deletes a file."""
        await sandbox.files.write("/tmp/psdk-remove.txt", b"x")
        await sandbox.files.remove("/tmp/psdk-remove.txt")
        assert not await sandbox.files.exists("/tmp/psdk-remove.txt")

    async def test_files_remove_recursive_deletes_a_directory_tree(
            self, sandbox: Sandbox) -> None:
        """``remove(recursive=True)`` deletes a directory with everything in it."""
        await sandbox.files.write("/tmp/psdk-tree/a/b/file.txt", b"x")
        await sandbox.files.write("/tmp/psdk-tree/top.txt", b"y")
        await sandbox.files.remove("/tmp/psdk-tree", recursive=True)
        assert not await sandbox.files.exists("/tmp/psdk-tree")

    async def test_files_rename_moves_a_file(self, sandbox: Sandbox) -> None:
        """``rename`` moves content to the new path; the old path is gone."""
        await sandbox.files.write("/tmp/psdk-src.txt", b"moved")
        await sandbox.files.rename("/tmp/psdk-src.txt", "/tmp/psdk-dst.txt")
        assert await sandbox.files.read("/tmp/psdk-dst.txt") == b"moved"
        assert not await sandbox.files.exists("/tmp/psdk-src.txt")

    async def test_files_rename_replaces_an_existing_file(self, sandbox: Sandbox) -> None:
        """``rename`` onto an existing file replaces it."""
        await sandbox.files.write("/tmp/psdk-new.txt", b"new")
        await sandbox.files.write("/tmp/psdk-old.txt", b"old content")
        await sandbox.files.rename("/tmp/psdk-new.txt", "/tmp/psdk-old.txt")
        assert await sandbox.files.read("/tmp/psdk-old.txt") == b"new"

    async def test_files_relative_paths_resolve_against_the_working_directory(
            self, sandbox: Sandbox) -> None:
        """A relative path names the file under the sandbox's working directory."""
        workdir = (await sandbox.exec(["pwd"])).stdout.strip()
        name = f"{new_marker('rel')}.txt"
        await sandbox.files.write(name, b"relative")
        result = await sandbox.exec(["cat", posixpath.join(workdir, name)])
        assert result.stdout_bytes == b"relative"
        assert await sandbox.files.read(name) == b"relative"

    async def test_files_relative_paths_follow_the_spec_cwd(self, factory: Factory) -> None:
        """With ``SandboxSpec(cwd=...)``, relative paths resolve under that directory."""
        sandbox = await factory.sandbox(cwd="/tmp")
        await sandbox.files.write("psdk-spec-cwd.txt", b"in tmp")
        assert await sandbox.files.read("/tmp/psdk-spec-cwd.txt") == b"in tmp"

    async def test_files_read_missing_raises_file_not_found(self, sandbox: Sandbox) -> None:
        """Reading a path that does not exist raises FileNotFound."""
        with pytest.raises(FileNotFound) as caught:
            await sandbox.files.read("/tmp/psdk-missing/nothing.txt")
        assert caught.value.sandbox_id == sandbox.id

    async def test_files_stat_missing_raises_file_not_found(self, sandbox: Sandbox) -> None:
        """``stat`` of a missing path raises FileNotFound."""
        with pytest.raises(FileNotFound):
            await sandbox.files.stat("/tmp/psdk-missing-stat")

    async def test_files_list_missing_raises_file_not_found(self, sandbox: Sandbox) -> None:
        """Listing a missing directory raises FileNotFound."""
        with pytest.raises(FileNotFound):
            await sandbox.files.list("/tmp/psdk-missing-dir")

    async def test_files_reading_a_directory_raises_is_a_directory(
            self, sandbox: Sandbox) -> None:
        """Reading a directory as a file raises IsADirectory."""
        await sandbox.files.mkdir("/tmp/psdk-a-dir")
        with pytest.raises(IsADirectory):
            await sandbox.files.read("/tmp/psdk-a-dir")

    async def test_files_list_of_a_file_raises_not_a_directory(self, sandbox: Sandbox) -> None:
        """Listing a file as a directory raises NotADirectory."""
        await sandbox.files.write("/tmp/psdk-not-a-dir", b"x")
        with pytest.raises(NotADirectory):
            await sandbox.files.list("/tmp/psdk-not-a-dir")

    @pytest.mark.parametrize("operation", ["write", "upload", "mkdir", "rename"])
    async def test_files_under_a_file_raise_not_a_directory_naming_the_path(
            self, sandbox: Sandbox, operation: str, tmp_path: Path) -> None:
        """A path whose parent is a file is ``NotADirectory`` (not ``FileExists``) for
        every operation that makes something there; the message names the caller's path
        and the provider, never a temporary file."""
        await sandbox.files.write("/tmp/psdk-plain-file", b"x")
        await sandbox.files.write("/tmp/psdk-rename-src", b"y")
        path = "/tmp/psdk-plain-file/psdk-under"
        local = tmp_path / "local.bin"
        local.write_bytes(b"z")
        calls = {"write": lambda: sandbox.files.write(path, b"z"),
                 "upload": lambda: sandbox.files.upload(local, path),
                 "mkdir": lambda: sandbox.files.mkdir(path),
                 "rename": lambda: sandbox.files.rename("/tmp/psdk-rename-src", path)}
        with pytest.raises(NotADirectory) as caught:
            await calls[operation]()
        text = str(caught.value)
        assert path in text
        assert text.startswith(f"[{sandbox.provider.name} ")
        assert ".psdk" not in text
        assert "partial" not in text
        assert await sandbox.files.read("/tmp/psdk-plain-file") == b"x"

    async def test_files_mkdir_existing_without_exist_ok_raises_file_exists(
            self, sandbox: Sandbox) -> None:
        """``mkdir(exist_ok=False)`` on an existing directory raises FileExists."""
        await sandbox.files.mkdir("/tmp/psdk-exists-dir")
        with pytest.raises(FileExists):
            await sandbox.files.mkdir("/tmp/psdk-exists-dir", exist_ok=False)

    async def test_files_remove_missing_raises_file_not_found(self, sandbox: Sandbox) -> None:
        """Removing a path that does not exist raises FileNotFound."""
        with pytest.raises(FileNotFound):
            await sandbox.files.remove("/tmp/psdk-missing-remove")

    async def test_files_rename_missing_raises_file_not_found(self, sandbox: Sandbox) -> None:
        """Renaming a path that does not exist raises FileNotFound."""
        with pytest.raises(FileNotFound):
            await sandbox.files.rename("/tmp/psdk-missing-src", "/tmp/psdk-missing-dst")

    async def test_files_remove_keeps_a_non_empty_directory_unless_recursive(
            self, sandbox: Sandbox) -> None:
        """Removing a non-empty directory without ``recursive`` raises and deletes nothing."""
        await sandbox.files.write("/tmp/psdk-full-dir/kept.txt", b"kept")
        with pytest.raises(SandboxError):
            await sandbox.files.remove("/tmp/psdk-full-dir")
        assert await sandbox.files.read("/tmp/psdk-full-dir/kept.txt") == b"kept"

    @pytest.mark.parametrize("path", ["", "/tmp/psdk\0nul", "\0"], ids=["empty", "nul", "only-nul"])
    async def test_files_empty_or_nul_path_is_invalid_input(self, sandbox: Sandbox,
                                                             path: str, tmp_path: Path) -> None:
        """An empty path, or one containing NUL, is refused by every file call, as either
        path of a rename, and as the sandbox's end of an upload or a download; nothing
        is moved and no local file is written."""
        files = sandbox.files
        local = tmp_path / "local.txt"
        local.write_bytes(b"local")
        await files.write("/tmp/psdk-nul-src", b"source")
        with pytest.raises(InvalidInput):
            await files.read(path)
        with pytest.raises(InvalidInput):
            await files.write(path, b"x")
        with pytest.raises(InvalidInput):
            await files.stat(path)
        with pytest.raises(InvalidInput):
            await files.remove(path)
        with pytest.raises(InvalidInput):
            await files.mkdir(path)
        with pytest.raises(InvalidInput):
            await files.list(path)
        with pytest.raises(InvalidInput):
            await files.rename("/tmp/psdk-nul-src", path)
        with pytest.raises(InvalidInput):
            await files.rename(path, "/tmp/psdk-nul-dst")
        with pytest.raises(InvalidInput):
            await files.upload(local, path)
        with pytest.raises(InvalidInput):
            await files.download(path, local)
        with pytest.raises(InvalidInput):
            async for _ in files.stream(path):
                pass
        assert await files.read("/tmp/psdk-nul-src") == b"source"
        assert not await files.exists("/tmp/psdk-nul-dst")
        assert local.read_bytes() == b"local"
        assert [p.name async for p in anyio.Path(tmp_path).iterdir()] == ["local.txt"]

    async def test_files_dotdot_never_reaches_outside_the_sandbox(
            self, sandbox: Sandbox) -> None:
        """``../../../../tmp/x`` resolves inside the sandbox (to its /tmp), never on the host."""
        name = new_marker("escape")
        await sandbox.files.write(f"../../../../../../../../tmp/{name}", b"contained")
        assert not await anyio.Path(f"/tmp/{name}").exists()
        assert await sandbox.files.read(f"/tmp/{name}") == b"contained"
        assert (await sandbox.exec(["test", "-f", f"/tmp/{name}"])).exit_code == 0

    async def test_files_absolute_dotdot_stays_at_the_sandbox_root(
            self, sandbox: Sandbox) -> None:
        """``/..`` above the root stays at the sandbox's root, as in any process inside."""
        name = new_marker("root")
        await sandbox.files.write(f"/../../tmp/../tmp/{name}", b"root")
        assert await sandbox.files.read(f"/tmp/{name}") == b"root"
        assert not await anyio.Path(f"/tmp/{name}").exists()

    async def test_files_symlink_to_an_absolute_path_resolves_inside(
            self, sandbox: Sandbox) -> None:
        """Writing through a symlink to ``/tmp`` lands in the sandbox's /tmp, not the host's."""
        name = new_marker("linked")
        link = f"/tmp/{new_marker('link')}"
        assert (await sandbox.exec(["ln", "-s", "/tmp", link])).exit_code == 0
        await sandbox.files.write(f"{link}/{name}", b"via link")
        assert not await anyio.Path(f"/tmp/{name}").exists()
        assert (await sandbox.exec(["cat", f"/tmp/{name}"])).stdout_bytes == b"via link"

    async def test_files_symlink_never_reads_a_host_file(self, sandbox: Sandbox,
                                                         tmp_path: Path) -> None:
        """A symlink inside naming a host file's path does not read the host file."""
        secret = tmp_path / "host-secret.txt"
        secret.write_text(new_marker("secret"))
        link = f"/tmp/{new_marker('hostlink')}"
        assert (await sandbox.exec(["ln", "-s", str(secret), link])).exit_code == 0
        with pytest.raises(FileNotFound):
            await sandbox.files.read(link)
