"""The sync facade's terminals and directory trees, on the local provider: the blocking
twins reach the same sandbox as the async calls do."""

from __future__ import annotations

import os
from pathlib import Path

from provider_sdk.sync import open_provider


def test_sync_terminal_and_directory_tree(home: Path, tmp_path: Path) -> None:
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "f.txt").write_text("f")
    (tmp_path / "tree" / "link").symlink_to("sub/f.txt")
    with open_provider("local", home=str(home)) as provider, provider.create() as sandbox:
        sandbox.files.upload_dir(tmp_path / "tree", "copied")
        with sandbox.terminal.open(cols=50, rows=10,
                                   cmd="stty size; cat copied/link; exit 9") as term:
            printed = b"".join(term)
            assert term.wait() == 9
        assert b"10 50" in printed
        assert b"f" in printed.split(b"10 50", 1)[1]
        sandbox.files.download_dir("copied", tmp_path / "back")
    assert os.readlink(tmp_path / "back" / "link") == "sub/f.txt"
    assert (tmp_path / "back" / "sub" / "f.txt").read_text() == "f"
