"""Contract, hostile section: a sandbox that answers ``files.download_dir`` with a
crafted archive.

The sandbox's ``tar`` is whatever its ``PATH`` finds first, so code in the sandbox can
answer a download with any archive it likes. Here a ``tar`` early on the sandbox's
``PATH`` hands back an archive made to escape: members with ``..`` or an absolute path,
a member written through a link the archive made, a hard link to a file outside, a
device, and an extended header larger than the caller's memory bound. Each is refused
with :class:`~provider_sdk.errors.UnsafeArchive`, and nothing outside the destination is
written. No capability gate: every provider has directory transfers.
"""

from __future__ import annotations

import io
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from provider_sdk.errors import UnsafeArchive
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.support import RssGrowth

_MiB = 1 << 20
_BIN = "/tmp/psdk-hostile-bin"
"""Where the crafted ``tar`` lives: first on the sandbox's ``PATH``."""
_CRAFTED = "/tmp/psdk-crafted.tar"
# Copies the crafted archive to wherever it is asked to write one ("-f FILE").
_TAR = """#!/bin/sh
while [ $# -gt 0 ]; do
  if [ "$1" = -f ]; then exec cp /tmp/psdk-crafted.tar "$2"; fi
  shift
done
exit 2
"""
# A pax header claiming 256 MiB, its bytes following: "$1" is where to write it.
_HUGE_HEADER = """#!/bin/sh
while [ $# -gt 0 ]; do
  if [ "$1" = -f ]; then
    { cat /tmp/psdk-crafted.tar; head -c 268435456 /dev/zero; } > "$2"; exit 0
  fi
  shift
done
exit 2
"""

# The crafted archive doubled 18 times: "$1" is where to write it.
_ENDLESS = """#!/bin/sh
while [ $# -gt 0 ]; do
  if [ "$1" = -f ]; then
    cp /tmp/psdk-crafted.tar "$2" || exit 1
    i=0
    while [ $i -lt 18 ]; do
      cat "$2" "$2" > "$2.x" && mv "$2.x" "$2" || exit 1
      i=$((i + 1))
    done
    exit 0
  fi
  shift
done
exit 2
"""


def _archive(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return out.getvalue()


def _file(name: str, data: bytes = b"escaped") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, b""


def _device(name: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info, b""


def _octal(number: int) -> bytes:
    return b"%011o\0" % number


def _sparse_gnu(name: str, size: int) -> bytes:
    """An old GNU sparse member ('S'): one byte of data at the end of ``size`` bytes."""
    info = tarfile.TarInfo(name)
    info.type, info.size = tarfile.GNUTYPE_SPARSE, 1
    header = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    header[386:410] = _octal(size - 1) + _octal(1)  # the map's first (offset, length)
    header[483:495] = _octal(size)  # the file's real size
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header) + b"x".ljust(tarfile.BLOCKSIZE, b"\0") + b"\0" * 1024


def _sparse_pax(name: str, size: int) -> bytes:
    """A GNU 1.0 sparse member in pax: its map, then one byte at the end of ``size``."""
    sparse_map = b"1\n%d\n1\n" % (size - 1)
    info = tarfile.TarInfo(f"GNUSparseFile.0/{name}")
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                        "GNU.sparse.name": name, "GNU.sparse.realsize": str(size)}
    data = sparse_map.ljust(tarfile.BLOCKSIZE, b"\0") + b"x"
    info.size = len(data)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


_SPARSE = {"gnu": _sparse_gnu, "pax": _sparse_pax}

#: Each crafted archive, given the local directory beside the destination.
_ESCAPES: dict[str, Callable[[Path], bytes]] = {
    "dotdot": lambda outside: _archive(_file("ok"), _file("../outside/escaped")),
    "absolute": lambda outside: _archive(_file(str(outside / "escaped"))),
    "through-own-link": lambda outside: _archive(_link("hop", str(outside)),
                                                 _file("hop/escaped")),
    "through-relative-link": lambda outside: _archive(_link("hop", "../outside"),
                                                      _file("hop/escaped")),
    "hard-link-out": lambda outside: _archive(
        _link("stolen", str(outside / "victim"), tarfile.LNKTYPE)),
    "device": lambda outside: _archive(_device("null")),
}


class HostileArchiveContract(ContractBase):
    """A crafted archive from the sandbox's ``tar`` is refused member by member, with
    nothing written outside the destination, and its headers are bounded."""

    async def _crafted(self, factory: Factory, tar_script: str, crafted: bytes) -> Sandbox:
        sandbox = await factory.sandbox(
            env={"PATH": f"{_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                         "/sbin:/bin"})
        await sandbox.files.write(f"{_BIN}/tar", tar_script)
        await sandbox.files.write(_CRAFTED, crafted)
        chmod = await sandbox.exec(["chmod", "755", f"{_BIN}/tar"])
        assert chmod.ok, chmod.stderr
        return sandbox

    @pytest.mark.parametrize("escape", sorted(_ESCAPES))
    async def test_hostile_archive_escape_is_refused_and_writes_nothing_outside(
            self, factory: Factory, tmp_path: Path, escape: str) -> None:
        """Each way out of the destination raises UnsafeArchive; the directory beside
        it stays empty, and a file a hard link aimed at is untouched."""
        outside, dest = tmp_path / "outside", tmp_path / "dest"
        outside.mkdir()
        (tmp_path / "victim").write_text("victim")
        (outside / "victim").write_text("victim")
        sandbox = await self._crafted(factory, _TAR, _ESCAPES[escape](outside))
        with pytest.raises(UnsafeArchive):
            await sandbox.files.download_dir("/tmp", dest)
        assert sorted(p.name for p in outside.iterdir()) == ["victim"]
        assert (outside / "victim").read_text() == "victim"
        assert (outside / "victim").stat().st_nlink == 1
        beside = sorted([p.name async for p in anyio.Path(tmp_path).iterdir()])
        assert beside == ["dest", "outside", "victim"]
        assert not any(p.is_file() and p.name in ("escaped", "stolen", "null")
                       for p in dest.rglob("*"))

    async def test_hostile_archive_link_out_is_kept_as_a_link_not_followed(
            self, factory: Factory, tmp_path: Path) -> None:
        """A link the archive makes to outside is made as a link; writing a file over
        its name replaces the link, and the file it pointed at is untouched."""
        outside, dest = tmp_path / "outside", tmp_path / "dest"
        outside.mkdir()
        (outside / "victim").write_text("victim")
        crafted = _archive(_link("hop", str(outside / "victim")), _file("hop", b"replaced"))
        sandbox = await self._crafted(factory, _TAR, crafted)
        await sandbox.files.download_dir("/tmp", dest)
        assert (outside / "victim").read_text() == "victim"
        assert not (dest / "hop").is_symlink()
        assert (dest / "hop").read_bytes() == b"replaced"

    async def test_hostile_archive_huge_header_keeps_the_caller_memory_bounded(
            self, factory: Factory, tmp_path: Path) -> None:
        """An extended header of 256 MiB is refused before it is read: UnsafeArchive,
        and this process grows by less than 64 MiB."""
        header = tarfile.TarInfo("././@PaxHeader")
        header.type, header.size = tarfile.XHDTYPE, 256 * _MiB
        sandbox = await self._crafted(factory, _HUGE_HEADER,
                                      header.tobuf(format=tarfile.USTAR_FORMAT))
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(240), pytest.raises(UnsafeArchive):
                await sandbox.files.download_dir("/tmp", tmp_path / "dest")
        assert rss.growth < 64 * _MiB, f"memory grew by {rss.growth / _MiB:.0f} MiB"

    @pytest.mark.parametrize("form", sorted(_SPARSE))
    async def test_hostile_archive_sparse_file_is_refused_and_not_filled_in(
            self, factory: Factory, tmp_path: Path, form: str) -> None:
        """A sparse member of 1 GiB in an archive of a few KiB raises UnsafeArchive and
        puts no block of it on the local disk."""
        dest = tmp_path / "dest"
        sandbox = await self._crafted(factory, _TAR, _SPARSE[form]("big", 1 << 30))
        with anyio.fail_after(120), pytest.raises(UnsafeArchive):
            await sandbox.files.download_dir("/tmp", dest)
        used = sum(p.lstat().st_blocks * 512 for p in dest.rglob("*"))
        assert used < _MiB, f"{used} bytes written for a sparse member"

    async def test_hostile_archive_opens_nothing_to_other_local_users(
            self, factory: Factory, tmp_path: Path) -> None:
        """An archive whose ``.`` and file are writable by everyone leaves the existing
        destination, and the file, writable by their owner alone."""
        dest = tmp_path / "dest"
        dest.mkdir(mode=0o700)
        top = tarfile.TarInfo(".")
        top.type, top.mode = tarfile.DIRTYPE, 0o777
        shared = tarfile.TarInfo("shared")
        shared.mode = 0o666
        sandbox = await self._crafted(factory, _TAR, _archive((top, b""), (shared, b"x")))
        await sandbox.files.download_dir("/tmp", dest)
        assert stat.S_IMODE(dest.stat().st_mode) == 0o755
        assert stat.S_IMODE((dest / "shared").stat().st_mode) == 0o644


    async def test_hostile_archive_of_many_headers_keeps_the_caller_memory_bounded(
            self, factory: Factory, tmp_path: Path) -> None:
        """An archive of 128 MiB that names the destination's ``.`` over and over holds
        nothing per header: this process grows by less than 64 MiB."""
        top = tarfile.TarInfo(".")
        top.type = tarfile.DIRTYPE
        sandbox = await self._crafted(factory, _ENDLESS,
                                      top.tobuf(format=tarfile.GNU_FORMAT))
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(240):
                await sandbox.files.download_dir("/tmp", tmp_path / "dest")
        assert rss.growth < 64 * _MiB, f"memory grew by {rss.growth / _MiB:.0f} MiB"

    async def test_hostile_archive_of_many_directories_keeps_the_caller_memory_bounded(
            self, factory: Factory, tmp_path: Path) -> None:
        """An archive of 20,000 directories, each named by a path of nearly 3 KiB,
        unpacks whole with each directory's mode, and this process grows by less than
        64 MiB: nothing is held per directory until the end."""
        deep = "/".join(f"{level:02d}".ljust(250, "d") for level in range(10))
        leaves = [f"{deep}/{index:05d}".ljust(len(deep) + 251, "l") for index in range(20000)]
        members = []
        for name in [deep, *leaves]:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o750
            members.append((info, b""))
        sandbox = await self._crafted(factory, _TAR, _archive(*members))
        dest = tmp_path / "dest"
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(600):
                await sandbox.files.download_dir("/tmp", dest)
        assert rss.growth < 64 * _MiB, f"memory grew by {rss.growth / _MiB:.0f} MiB"
        made = sorted(p.name for p in (dest / deep).iterdir())
        assert made == sorted(leaf.rsplit("/", 1)[1] for leaf in leaves)
        assert stat.S_IMODE((dest / leaves[-1]).stat().st_mode) == 0o750
        assert stat.S_IMODE((dest / deep).stat().st_mode) == 0o750

    async def test_hostile_archive_that_is_no_archive_raises_unsafe_archive(
            self, factory: Factory, tmp_path: Path) -> None:
        """Bytes that are no tar archive raise UnsafeArchive, not the reader's own error."""
        sandbox = await self._crafted(factory, _TAR, b"no archive at all\n" * 64)
        with pytest.raises(UnsafeArchive, match="not a tar archive"):
            await sandbox.files.download_dir("/tmp", tmp_path / "dest")
