"""Where ``psdk`` takes its words: the global options anywhere the user puts them, the
command to run from the first word that is not one of psdk's (``psdk exec ID ls -la``),
and usage errors that blame the right word and say what to write instead. Run in this
process against the memory provider."""

from __future__ import annotations

import pytest
from memory_provider import STORE, Store
from psdk_fixtures import Psdk

P = ("--provider", "memory")


def _create(psdk: Psdk) -> str:
    outcome = psdk("create", *P)
    assert outcome.code == 0, outcome.err
    return outcome.out.strip()


@pytest.mark.parametrize("argv", [
    ("--provider", "memory", "ls"),
    ("--provider=memory", "ls"),
    ("ls", "--provider", "memory"),
    ("ls", "--provider=memory"),
    ("-v", "--provider", "memory", "ls", "-q"),
])
def test_the_provider_is_taken_before_or_after_the_command(psdk: Psdk, memory: Store,
                                                          argv: tuple[str, ...]) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk(*argv, "--json")
    assert outcome.code == 0, outcome.err
    assert sandbox_id in outcome.out


def test_a_provider_given_before_a_command_with_actions_is_kept(psdk: Psdk,
                                                                memory: Store) -> None:
    sandbox_id = _create(psdk)
    taken = psdk("--provider", "memory", "snapshot", sandbox_id)
    assert taken.code == 0, taken.err
    assert taken.out.strip() in STORE.snapshots
    listed = psdk("--provider=memory", "snapshot", "ls", "--json")
    assert taken.out.strip() in listed.out


def test_exec_takes_every_word_after_the_id_as_the_command(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("exec", *P, sandbox_id, "sh", "-c", "echo $0 $1", "-la", "--", "x")
    assert (outcome.code, outcome.out) == (0, "-la --\n"), outcome.err


def test_exec_options_between_the_id_and_the_command_are_psdks(psdk: Psdk,
                                                              memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("exec", sandbox_id, "--env", "X=1", "--provider=memory", "--cwd", "/tmp",
                   "sh", "-c", 'echo "$X $PWD"')
    assert (outcome.code, outcome.out) == (0, "1 /tmp\n"), outcome.err


def test_run_takes_its_command_from_the_first_plain_word(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("run", *P, "--env", "A=b", "sh", "-c", "echo $A $0", "-x")
    assert (outcome.code, outcome.out) == (0, "b -x\n"), outcome.err


def test_dashes_still_end_psdks_options(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("exec", *P, sandbox_id, "--", "--not-an-option-of-psdk")
    assert outcome.code == 127  # the sandbox's shell found no such program
    assert outcome.out == ""


def test_an_option_of_the_command_before_its_name_says_where_it_goes(psdk: Psdk,
                                                                    memory: Store) -> None:
    sandbox_id = _create(psdk)
    outcome = psdk("exec", *P, sandbox_id, "-la")
    assert outcome.code == 2
    assert outcome.err.count("\n") == 1
    assert "unrecognized arguments: -la" in outcome.err
    assert "psdk exec ID ls -la" in outcome.err


def test_a_provider_where_the_command_goes_is_named_as_such(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("memory", "ls")
    assert outcome.code == 2
    assert outcome.err.startswith("psdk: error: 'memory' is a provider, not a command")
    assert "psdk --provider memory ls" in outcome.err


def test_emulate_refuses_a_provider_and_names_its_backend_option(psdk: Psdk) -> None:
    outcome = psdk("--provider", "local", "emulate", "e2b")
    assert outcome.code == 2
    assert "--backend" in outcome.err


def test_quiet_silences_the_line_of_what_was_done(psdk: Psdk, memory: Store) -> None:
    sandbox_id = _create(psdk)
    for argv in (("-q", "pause", *P, sandbox_id), ("resume", *P, sandbox_id, "--quiet")):
        outcome = psdk(*argv)
        assert (outcome.code, outcome.out, outcome.err) == (0, "", "")
    killed = psdk("kill", *P, sandbox_id)
    assert killed.err == f"killed sandbox {sandbox_id} on memory\n"
