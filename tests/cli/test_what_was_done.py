"""Every command that changes something says what it did, in one line on stderr (stdout
keeps the results alone); ``--quiet`` leaves that line out. ``exec`` and ``cp`` on a
paused sandbox say they resumed it. Run in this process against the memory provider."""

from __future__ import annotations

from pathlib import Path

import pytest
from memory_provider import STORE, Store
from psdk_fixtures import Psdk

from provider_sdk.models import SandboxState

P = ("--provider", "memory")


def _create(psdk: Psdk) -> str:
    outcome = psdk("create", *P)
    assert outcome.code == 0, outcome.err
    return outcome.out.strip()


def test_each_lifecycle_command_says_what_it_did(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    for verb, done in (("pause", "paused"), ("resume", "resumed"), ("kill", "killed")):
        outcome = psdk(verb, *P, sandbox_id)
        assert (outcome.code, outcome.out) == (0, ""), outcome.err
        assert outcome.err == f"{done} sandbox {sandbox_id} on memory\n"


def test_removing_a_broken_record_says_so(psdk: Psdk, memory: Store) -> None:
    STORE.add_broken("mem-broken", "half created")
    outcome = psdk("kill", *P, "mem-broken")
    assert outcome.err == "removed broken record mem-broken on memory\n"


def test_snapshots_and_volumes_say_what_was_made_and_removed(psdk: Psdk,
                                                             memory: Store) -> None:
    sandbox_id = _create(psdk)
    taken = psdk("snapshot", *P, sandbox_id)
    snapshot = taken.out.strip()
    assert taken.err == f"took snapshot {snapshot} of sandbox {sandbox_id} on memory\n"
    removed = psdk("snapshot", "rm", *P, snapshot)
    assert (removed.out, removed.err) == ("", f"removed snapshot {snapshot} on memory\n")
    made = psdk("volume", "create", *P, "data")
    assert (made.out, made.err) == ("data\n", "created volume data on memory\n")
    gone = psdk("volume", "rm", *P, "data")
    assert (gone.out, gone.err) == ("", "removed volume data on memory\n")


def test_cp_says_what_it_copied_each_way(psdk: Psdk, memory: Store, tmp_path: Path) -> None:
    sandbox_id = _create(psdk)
    (tmp_path / "in.txt").write_text("x" * 2048)
    up = psdk("cp", *P, "in.txt", f"{sandbox_id}:/tmp/")
    assert up.err == f"copied in.txt to {sandbox_id}:/tmp/in.txt (2.0 KiB)\n"
    down = psdk("cp", *P, f"{sandbox_id}:/tmp/in.txt", "out.txt")
    assert down.err == f"copied {sandbox_id}:/tmp/in.txt to out.txt (2.0 KiB)\n"
    across = psdk("cp", *P, f"{sandbox_id}:/tmp/in.txt", f"{sandbox_id}:/tmp/again.txt")
    assert across.err == (f"copied {sandbox_id}:/tmp/in.txt to {sandbox_id}:/tmp/again.txt "
                          "(2.0 KiB)\n")
    assert (tmp_path / "out.txt").read_text() == "x" * 2048


@pytest.mark.parametrize("quiet", ["-q", "--quiet"])
def test_quiet_leaves_only_the_results(psdk: Psdk, memory: Store, tmp_path: Path,
                                       quiet: str) -> None:
    made = psdk(quiet, "create", *P)
    assert made.code == 0
    sandbox_id = made.out.strip()
    assert made.err == ""
    (tmp_path / "f").write_text("f")
    for argv in (("cp", "f", f"{sandbox_id}:/tmp/f"), ("pause", sandbox_id),
                 ("exec", sandbox_id, "true"), ("kill", sandbox_id)):
        # psdk's options before the words that may be a command's own
        outcome = psdk(quiet, argv[0], *P, *argv[1:])
        assert (outcome.code, outcome.err) == (0, ""), argv


def test_exec_on_a_paused_sandbox_says_it_resumed_it(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    assert psdk("pause", *P, sandbox_id).code == 0
    outcome = psdk("exec", *P, sandbox_id, "echo", "hi")
    assert (outcome.code, outcome.out) == (0, "hi\n")
    assert outcome.err == f"resumed sandbox {sandbox_id} on memory (it was paused)\n"
    assert STORE.boxes[sandbox_id].info.state == SandboxState.RUNNING
    again = psdk("exec", *P, sandbox_id, "true")
    assert again.err == ""  # running: nothing to say


def test_cp_into_a_paused_sandbox_says_it_resumed_it(psdk: Psdk, memory: Store,
                                                    tmp_path: Path) -> None:
    sandbox_id = _create(psdk)
    assert psdk("pause", *P, sandbox_id).code == 0
    (tmp_path / "f").write_text("f")
    outcome = psdk("cp", *P, "f", f"{sandbox_id}:/tmp/f")
    assert outcome.code == 0
    assert outcome.err.splitlines() == [
        f"resumed sandbox {sandbox_id} on memory (it was paused)",
        f"copied f to {sandbox_id}:/tmp/f (1 B)"]
