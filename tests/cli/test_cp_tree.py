"""``psdk cp -r``: directory trees into, out of and between sandboxes of the local
provider, landing where ``cp -r`` puts them; without ``-r`` a directory is refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from psdk_fixtures import Psdk

P = ("--provider", "local")


@pytest.fixture
def sandbox_id(psdk: Psdk, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("PSDK_HOME", str(tmp_path.with_name(f"{tmp_path.name}-home")))
    created = psdk("create", *P)
    assert created.code == 0, created.err
    sandbox = created.out.strip()
    try:
        yield sandbox
    finally:
        psdk("kill", *P, sandbox)


def _tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("a")
    (root / "tool").write_text("#!/bin/sh\n")
    (root / "tool").chmod(0o750)
    (root / "link").symlink_to("/etc/hostname")


def test_cp_r_uploads_downloads_and_copies_between_keeping_links(
        psdk: Psdk, sandbox_id: str, tmp_path: Path) -> None:
    _tree(tmp_path / "proj")
    assert psdk("cp", *P, "-r", "proj", f"{sandbox_id}:/tmp/in").code == 0
    assert psdk("cp", *P, "-r", "proj", f"{sandbox_id}:/tmp/in").code == 0  # into it
    assert psdk("cp", *P, "-r", f"{sandbox_id}:/tmp/in", f"{sandbox_id}:/tmp/copy").code == 0
    assert psdk("cp", *P, "-r", f"{sandbox_id}:/tmp/copy", "back").code == 0
    back = tmp_path / "back"
    assert (back / "sub" / "a.txt").read_text() == "a"
    assert (back / "proj" / "sub" / "a.txt").read_text() == "a"  # the second copy, inside
    assert os.readlink(back / "link") == "/etc/hostname"
    assert (back / "tool").stat().st_mode & 0o777 == 0o750
    assert psdk("cp", *P, "-r", f"{sandbox_id}:/tmp/copy/sub", "back/sub").code == 0
    assert (back / "sub" / "sub" / "a.txt").read_text() == "a"  # into an existing dir


def test_cp_without_r_refuses_a_directory_and_names_the_option(
        psdk: Psdk, sandbox_id: str, tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    up = psdk("cp", *P, "proj", f"{sandbox_id}:/tmp/in")
    down = psdk("cp", *P, f"{sandbox_id}:/tmp", "out")
    for outcome in (up, down):
        assert outcome.code == 1
        assert "cp -r" in outcome.err
    assert not (tmp_path / "out").exists()
