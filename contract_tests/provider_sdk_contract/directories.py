"""Contract: directory trees in and out of a sandbox (``files.upload_dir``,
``files.download_dir``), links kept as links and never followed, modes kept.

Every provider has them (they stand on the files and commands roles), so nothing here
is gated. The hostile archives a sandbox can send are in
:mod:`~provider_sdk_contract.hostile_archives`.
"""

from __future__ import annotations

import hashlib
import os
import random
import stat
from pathlib import Path

import pytest

from provider_sdk.errors import FileNotFound, NotADirectory, NotARegularFile
from provider_sdk.models import FileType
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.support import RssGrowth, new_marker

_MiB = 1 << 20


def tree_of(root: Path) -> dict[str, tuple[str, int, str]]:
    """Each entry under ``root`` (never following a link): its kind, permission bits,
    and its content's digest or its link's target."""
    found: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                found[rel] = ("file", stat.S_IMODE(st.st_mode),
                              hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def make_tree(root: Path, outside: Path) -> None:
    """A tree with what a copy must keep: nested and empty directories, binary files,
    several modes, links inside the tree and out of it (absolute and with ``..``)."""
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "private").mkdir(mode=0o700)
    (root / "src" / "pkg" / "data.bin").write_bytes(bytes(range(256)) * 64 + b"\0\r\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "src" / "run.sh").chmod(0o755)
    (root / "private" / "key").write_text("secret-ish\n")
    (root / "private" / "key").chmod(0o600)
    (root / "name with spaces \u00e9").write_text("x")
    (root / "src" / "inside").symlink_to("pkg/data.bin")
    (root / "out-absolute").symlink_to(outside)
    (root / "out-relative").symlink_to("../../outside-of-the-tree")
    (root / "dangling").symlink_to("no/such/file")
    (root / "private").chmod(0o700)


class DirectoryContract(ContractBase):
    """Directory trees round-trip through a sandbox with their links, modes and bytes;
    links are never followed out of the tree, on either side."""

    async def test_dirs_round_trip_keeps_files_links_and_modes(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A tree uploaded then downloaded is the same tree: files' bytes, permission
        bits, empty directories, and links (inside, outside, dangling) as links."""
        source, back = tmp_path / "source", tmp_path / "back"
        source.mkdir()
        make_tree(source, tmp_path / "outside")
        await sandbox.files.upload_dir(source, "psdk-tree")
        await sandbox.files.download_dir("psdk-tree", back)
        assert tree_of(back) == tree_of(source)

    async def test_dirs_upload_is_seen_by_the_files_api(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """What upload_dir wrote is there for the files API and for commands: bytes,
        modes, and links that point where they pointed."""
        source = tmp_path / "source"
        source.mkdir()
        make_tree(source, Path("/psdk-nowhere"))
        await sandbox.files.upload_dir(source, "/tmp/psdk-seen/tree")
        data = await sandbox.files.read("/tmp/psdk-seen/tree/src/pkg/data.bin")
        assert data == (source / "src" / "pkg" / "data.bin").read_bytes()
        run = await sandbox.files.stat("/tmp/psdk-seen/tree/src/run.sh")
        assert run.mode & 0o777 == 0o755
        key = await sandbox.files.stat("/tmp/psdk-seen/tree/private/key")
        assert key.mode & 0o777 == 0o600
        link = await sandbox.files.stat("/tmp/psdk-seen/tree/out-absolute")
        assert (link.type, link.symlink_target) == (FileType.SYMLINK, "/psdk-nowhere")
        result = await sandbox.exec(["/tmp/psdk-seen/tree/src/run.sh"])
        assert result.stdout == "run\n"
        assert await sandbox.files.list("/tmp/psdk-seen/tree/empty") == []

    async def test_dirs_upload_into_an_existing_directory_keeps_its_other_entries(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """Uploading into a directory that exists adds and replaces, removing nothing."""
        await sandbox.files.write("psdk-merge/kept.txt", "kept")
        await sandbox.files.write("psdk-merge/replaced.txt", "old")
        source = tmp_path / "source"
        source.mkdir()
        (source / "replaced.txt").write_text("new")
        await sandbox.files.upload_dir(source, "psdk-merge")
        assert await sandbox.files.read_text("psdk-merge/kept.txt") == "kept"
        assert await sandbox.files.read_text("psdk-merge/replaced.txt") == "new"

    async def test_dirs_upload_never_writes_through_a_link_in_the_sandbox(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """Where the sandbox's destination holds a link to elsewhere under a name the
        tree has as a directory, the directory replaces the link: nothing lands where
        the link pointed."""
        outside = f"/tmp/{new_marker('outside')}"
        await sandbox.files.mkdir(outside)
        await sandbox.exec(["mkdir", "-p", "psdk-linked"])
        await sandbox.exec(["ln", "-s", outside, "psdk-linked/sub"])
        source = tmp_path / "source"
        (source / "sub").mkdir(parents=True)
        (source / "sub" / "planted").write_text("planted")
        await sandbox.files.upload_dir(source, "psdk-linked")
        assert await sandbox.files.list(outside) == []
        sub = await sandbox.files.stat("psdk-linked/sub")
        assert sub.type == FileType.DIRECTORY
        assert await sandbox.files.read_text("psdk-linked/sub/planted") == "planted"

    async def test_dirs_download_never_writes_through_a_local_link(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """Where the local destination holds a link to elsewhere under a name the tree
        has as a directory, the directory replaces the link: nothing lands outside."""
        outside, dest = tmp_path / "outside", tmp_path / "dest"
        outside.mkdir()
        dest.mkdir()
        (dest / "sub").symlink_to(outside)
        await sandbox.files.write("psdk-tree/sub/planted", "planted")
        await sandbox.files.download_dir("psdk-tree", dest)
        assert list(outside.iterdir()) == []
        assert not (dest / "sub").is_symlink()
        assert (dest / "sub" / "planted").read_text() == "planted"

    async def test_dirs_upload_of_a_link_out_of_the_tree_copies_no_target(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A local link to a file outside the tree arrives as a link: the file it
        points at is not read, so its bytes are nowhere in the sandbox's copy."""
        secret = tmp_path / "secret.txt"
        marker = new_marker("secret")
        secret.write_text(marker)
        source = tmp_path / "source"
        source.mkdir()
        (source / "leak").symlink_to(secret)
        await sandbox.files.upload_dir(source, "psdk-leak")
        leak = await sandbox.files.stat("psdk-leak/leak")
        assert (leak.type, leak.symlink_target) == (FileType.SYMLINK, str(secret))
        found = await sandbox.exec(["grep", "-r", "-l", marker, "psdk-leak"])
        assert found.stdout == ""

    async def test_dirs_download_of_a_missing_directory_raises_file_not_found(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A missing tree is FileNotFound, and nothing is made locally."""
        with pytest.raises(FileNotFound):
            await sandbox.files.download_dir("psdk-no-such-dir", tmp_path / "dest")
        assert not (tmp_path / "dest").exists()

    async def test_dirs_download_of_a_file_raises_not_a_directory(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A file where a tree is expected is NotADirectory."""
        await sandbox.files.write("psdk-file", "x")
        with pytest.raises(NotADirectory):
            await sandbox.files.download_dir("psdk-file", tmp_path / "dest")

    async def test_dirs_upload_of_a_file_raises_not_a_directory(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A local file given as the tree is NotADirectory, and nothing is written."""
        (tmp_path / "file").write_text("x")
        with pytest.raises(NotADirectory):
            await sandbox.files.upload_dir(tmp_path / "file", "psdk-not-made")
        assert not await sandbox.files.exists("psdk-not-made")

    async def test_dirs_upload_of_a_fifo_raises_not_a_regular_file(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A FIFO in the local tree is refused (it could block forever) and nothing is
        unpacked in the sandbox."""
        source = tmp_path / "source"
        source.mkdir()
        (source / "a-file").write_text("x")
        os.mkfifo(source / "z-fifo")
        with pytest.raises(NotARegularFile):
            await sandbox.files.upload_dir(source, "psdk-fifo")
        assert not await sandbox.files.exists("psdk-fifo")

    async def test_dirs_transfer_192_mib_without_holding_it(
            self, sandbox: Sandbox, tmp_path: Path) -> None:
        """A 192 MiB tree goes in and out whole while this process grows by less than
        64 MiB: the archive streams, in both directions."""
        source, back = tmp_path / "source", tmp_path / "back"
        rng = random.Random(0xD1)
        for index in range(3):
            part = source / f"part{index}"
            part.mkdir(parents=True)
            with (part / "blob.bin").open("wb") as f:
                for _ in range(64):
                    f.write(rng.randbytes(_MiB))
        async with RssGrowth().measure() as rss:
            await sandbox.files.upload_dir(source, "psdk-big-tree")
            await sandbox.files.download_dir("psdk-big-tree", back)
        assert tree_of(back) == tree_of(source)
        assert rss.growth < 64 * _MiB, f"memory grew by {rss.growth / _MiB:.0f} MiB"
