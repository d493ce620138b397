"""``bench/compare.py``: a benchmark line's ratio for a git ref against the working tree,
and a slowdown past the limit fails the comparison. Run on a small repository of its
own whose one benchmark prints the ratio a file of its checkout says, so the figures
are known in advance and only the tool is under test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = """\
import json, pathlib
ratio = float((pathlib.Path(__file__).parents[1] / "speed.txt").read_text())
print("warming up")
print(json.dumps({"name": "exec", "ratio": ratio, "goal": 3}))
print(json.dumps({"name": "create", "ratio": 2.0, "goal": 10}))
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                   cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose last commit's benchmark prints ``exec`` at 2.0."""
    (tmp_path / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "compare.py", tmp_path / "bench" / "compare.py")
    (tmp_path / "bench" / "run.py").write_text(BENCH)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "speed.txt").write_text("2.0")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


def _compare(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/compare.py", "HEAD", "--repeat", "2",
                           "--rounds", "1", *args], cwd=repo, capture_output=True,
                          text=True, timeout=120, check=False)


def _row(output: str, line: str) -> list[str]:
    return next(row.split() for row in output.splitlines() if row.startswith(line))


def test_a_line_twice_as_slow_is_shown_marked_and_fails_past_the_limit(repo: Path) -> None:
    (repo / "speed.txt").write_text("4.0")  # the working tree: twice the ref's ratio
    done = _compare(repo, "--fail-over", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert _row(done.stdout, "run.exec") == ["run.exec", "2.000", "4.000", "+100.0%", "<-"]
    assert _row(done.stdout, "run.create") == ["run.create", "2.000", "2.000", "+0.0%"]
    assert "100% slower" in done.stderr


def test_a_change_under_the_limit_is_marked_past_the_flag_and_passes(repo: Path) -> None:
    (repo / "speed.txt").write_text("2.4")
    done = _compare(repo, "--fail-over", "0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _row(done.stdout, "run.exec")[3:] == ["+20.0%", "<-"]


def test_without_a_limit_a_slowdown_is_only_shown(repo: Path) -> None:
    (repo / "speed.txt").write_text("8.0")
    done = _compare(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _row(done.stdout, "run.exec")[3] == "+300.0%"


def test_a_script_that_fails_on_the_working_tree_fails_the_comparison(repo: Path) -> None:
    (repo / "speed.txt").write_text("not a number")
    done = _compare(repo)
    assert done.returncode == 1
    assert "failed on tree: run: exit 1" in done.stderr


def test_a_ref_that_is_no_commit_is_a_usage_error(repo: Path) -> None:
    done = subprocess.run([sys.executable, "bench/compare.py", "no-such-ref"], cwd=repo,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "not a commit here: no-such-ref" in done.stderr


FIRST_RUN_SLOW = """\
import json, pathlib
checkout = pathlib.Path(__file__).parents[1]
seen = checkout / "runs.txt"
slow = (checkout / ".git").exists() and not seen.exists()  # the working tree's first run
seen.write_text("ran")
print(json.dumps({"name": "exec", "ratio": 4.0 if slow else 2.0, "goal": 3}))
"""


@pytest.mark.parametrize(("confirm", "status"), [("2", 0), ("0", 1)])
def test_a_line_past_the_limit_once_is_run_again_before_it_fails(
        repo: Path, confirm: str, status: int) -> None:
    """One slow run (the working tree's first) is outvoted by the runs that confirm it;
    without them, it fails."""
    (repo / "bench" / "run.py").write_text(FIRST_RUN_SLOW)
    _git(repo, "commit", "-q", "-am", "a benchmark whose first run is slow")
    done = subprocess.run([sys.executable, "bench/compare.py", "HEAD", "--repeat", "1",
                           "--rounds", "1", "--fail-over", "0.5", "--confirm", confirm],
                          cwd=repo, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == status, done.stdout + done.stderr


def test_with_if_changed_a_change_to_tests_and_docs_alone_compares_nothing(
        repo: Path) -> None:
    for path in ("tests/test_x.py", "docs/x.md", "README.md"):
        (repo / path).parent.mkdir(exist_ok=True)
        (repo / path).write_text("changed\n")
    done = _compare(repo, "--if-changed", "--fail-over", "0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing the benchmarks run changed since" in done.stdout
    assert "run.exec" not in done.stdout


def test_with_if_changed_an_edit_to_what_runs_is_compared(repo: Path) -> None:
    (repo / "speed.txt").write_text("4.0")
    done = _compare(repo, "--if-changed", "--fail-over", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert _row(done.stdout, "run.exec")[3] == "+100.0%"


def test_with_if_changed_a_new_file_of_what_runs_is_compared(repo: Path) -> None:
    (repo / "module.py").write_text("x = 1\n")  # untracked, beside the package
    done = _compare(repo, "--if-changed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _row(done.stdout, "run.exec")[3] == "+0.0%"  # compared, not skipped
