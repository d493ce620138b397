"""``mutation/run.py`` with several jobs: the same results as one job, each job in a copy
of the tree of its own, and a session that an interrupted run goes on with. Run on a
small repository of its own (a module of one comparison, and a test that kills all its
mutants but one), whose test writes down which copy it ran in and when, so that what
the jobs did is known, not guessed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = "calc/core.py"
SOURCE = """\
def bigger(a, b):
    return a if a > b else b
"""
# Each run writes down the copy it imported the module from, when it began and ended,
# and whether the module's file changed under it (another job writing into its copy).
TEST = """\
import json, os, pathlib, time
from calc import core

def test_bigger():
    path = pathlib.Path(core.__file__)
    before = path.read_text()
    began = time.time()
    time.sleep(0.4)
    record = {"tree": str(path.parents[1]), "began": began, "ended": time.time(),
              "changed": path.read_text() != before}
    with open(os.environ["RUNS_LOG"], "a") as log:
        log.write(json.dumps(record) + "\\n")
    assert core.bigger(2, 1) == 2
    assert core.bigger(1, 2) == 2
    assert core.bigger(-1, -2) == -1
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                   cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with run.py and its parts, one module to mutate and its test."""
    repo = tmp_path.resolve() / "repo"
    (repo / "mutation").mkdir(parents=True)
    for name in ("run.py", "forker.py", "operators.py"):
        shutil.copy(ROOT / "mutation" / name, repo / "mutation" / name)
    (repo / "mutation" / "equivalent.toml").write_text("")
    (repo / "mutation" / "modules.toml").write_text(
        f'[module."{MODULE}"]\ntests = ["tests/test_core.py"]\ntimeout = 60\n')
    (repo / "calc").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / MODULE).write_text(SOURCE)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_core.py").write_text(TEST)
    (repo / ".gitignore").write_text(".mutants/\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def _environment(runs_log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["RUNS_LOG"] = str(runs_log)
    env.pop("PYTHONPATH", None)
    return env


def _mutants(repo: Path, *args: str, runs_log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "mutation/run.py", *args], cwd=repo,
                          env=_environment(runs_log), capture_output=True, text=True,
                          timeout=600, check=False)


def _result(repo: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((repo / "mutation" / "results.json").read_text())
    return result[MODULE]


def _runs(runs_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in runs_log.read_text().splitlines()]


def _session(repo: Path) -> tuple[int, int]:
    """The module's session: how many mutants it holds, and how many have a result."""
    path = repo / ".mutants" / (MODULE.replace("/", "__") + ".sqlite")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # made by the run, not here
    try:
        items = db.execute("SELECT count(*) FROM work_items").fetchone()[0]
        results = db.execute("SELECT count(*) FROM work_results").fetchone()[0]
    finally:
        db.close()
    return items, results


def _overlapping(runs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
            if a["began"] < b["ended"] and b["began"] < a["ended"]]


@pytest.fixture
def serial(repo: Path, tmp_path: Path) -> dict[str, Any]:
    """The module's result with one job (then forgotten: the next run starts afresh)."""
    done = _mutants(repo, "--jobs", "1", MODULE, runs_log=tmp_path / "serial.log")
    assert done.returncode == 0, done.stdout + done.stderr  # 7 of 8 killed: 87.5 %
    result = _result(repo)
    runs = _runs(tmp_path / "serial.log")
    assert _overlapping(runs) == []
    shutil.rmtree(repo / ".mutants")
    (repo / "mutation" / "results.json").unlink()
    return {"result": result, "runs": len(runs)}


def test_jobs_run_mutants_at_once_each_in_its_own_copy_with_a_serial_runs_result(
        repo: Path, tmp_path: Path, serial: dict[str, Any]) -> None:
    runs_log = tmp_path / "jobs.log"
    done = _mutants(repo, "--jobs", "3", MODULE, runs_log=runs_log)
    assert done.returncode == 0, done.stdout + done.stderr
    result = _result(repo)
    assert result == serial["result"]
    killed, survived = result["killed"], result["survived"]
    assert survived == 1  # `>=` for `>`: no test compares equal numbers
    assert [s["mutant"] for s in result["survivors"]] == ["return a if a >= b else b"]
    assert killed + survived + result["not_run"] == _session(repo)[0] == _session(repo)[1]

    runs = _runs(runs_log)
    # The unmutated run, then one per mutant (a killed one fails after writing its line).
    assert len(runs) == serial["runs"] == 1 + killed + survived
    jobs = repo / ".mutants" / "jobs"
    assert {Path(r["tree"]).parent for r in runs} <= {jobs / str(n) for n in range(3)}
    assert len({r["tree"] for r in runs}) == 3
    assert not any(r["changed"] for r in runs)
    together = _overlapping(runs)
    assert together, "no two mutants ran at once"
    shared = [(a, b) for a, b in together if a["tree"] == b["tree"]]
    assert shared == [], "two jobs ran in one copy of the tree at once"
    assert (repo / MODULE).read_text() == SOURCE
    for n in range(3):
        assert (jobs / str(n) / "tree" / MODULE).read_text() == SOURCE


def test_an_interrupted_run_with_jobs_goes_on_where_it_stopped(
        repo: Path, tmp_path: Path, serial: dict[str, Any]) -> None:
    first_log = tmp_path / "first.log"
    run = subprocess.Popen([sys.executable, "mutation/run.py", "--jobs", "2", MODULE],
                           cwd=repo, env=_environment(first_log), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(sqlite3.OperationalError):  # no session yet
                if _session(repo)[1] >= 2:
                    break
            assert run.poll() is None, run.communicate()[0]
            time.sleep(0.05)
        else:
            pytest.fail("no result in 300 s")
        run.send_signal(signal.SIGTERM)  # as a cancelled CI job is ended
        run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    items, kept = _session(repo)
    assert 2 <= kept < items  # stopped part way, what was done is kept
    # Each mutant's result was kept as it came: only the two under way (one per job)
    # may have run without one. (The first of the runs is the module's, unmutated.)
    assert len(_runs(first_log)) - 1 <= kept + 2

    second_log = tmp_path / "second.log"
    done = _mutants(repo, "--jobs", "2", MODULE, runs_log=second_log)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _result(repo) == serial["result"]
    assert _session(repo) == (items, items)
    # Only the mutants without a result ran again: nothing was lost, nothing run twice.
    assert len(_runs(second_log)) == items - kept
    assert (repo / MODULE).read_text() == SOURCE


def test_jobs_must_be_at_least_one(repo: Path, tmp_path: Path) -> None:
    done = _mutants(repo, "--jobs", "0", MODULE, runs_log=tmp_path / "none.log")
    assert done.returncode == 2
    assert "--jobs must be at least 1" in done.stderr
