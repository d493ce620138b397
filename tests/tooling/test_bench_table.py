"""``bench/table.py``: the benchmarks page, written from a run of the scripts. Run on a
small repository of its own whose benchmarks print known lines, so only the tool is
under test; and the repository's own page covers every benchmark it has."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAST = '''"""Operations of :class:`~pkg.Pool` and :func:`pkg.make` against the bare
backend. More words here."""
import json, sys
rounds = sys.argv[sys.argv.index("--rounds") + 1] if "--rounds" in sys.argv else "none"
print("warming up")
print(json.dumps({"name": "exec_p50", "value": 0.0021, "baseline": 0.001, "ratio": 2.1,
                  "goal": 3, "unit": "s", "met": True}))
print(json.dumps({"name": "create_p50", "value": 0.1, "baseline": 0.004, "ratio": 25.0,
                  "goal": 10, "unit": "s", "met": False}))
print(json.dumps({"name": "rounds_" + rounds, "value": 2.5, "baseline": 2.0, "ratio": 1.25,
                  "goal": None, "unit": "s", "met": None}))
'''
MEMORY = '''"""Memory of the caller."""
import json
print(json.dumps({"name": "rss", "value": 70.0, "baseline": 20.0, "difference": 50.0,
                  "goal": 64, "goal_on": "difference", "unit": "MiB", "met": True}))
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "bench").mkdir()
    for tool in ("table.py", "compare.py"):
        shutil.copy(ROOT / "bench" / tool, tmp_path / "bench" / tool)
    (tmp_path / "bench" / "fast.py").write_text(FAST)
    (tmp_path / "bench" / "memory.py").write_text(MEMORY)
    return tmp_path


def _table(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/table.py", "--output", "page.md", *args],
                          cwd=repo, capture_output=True, text=True, timeout=60, check=False)


def _rows(page: str) -> dict[str, list[str]]:
    return {cells[0]: cells[1:] for line in page.splitlines() if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}


def test_the_page_has_every_line_with_its_goal_and_whether_it_was_met(repo: Path) -> None:
    done = _table(repo, "--rounds", "2")
    assert done.returncode == 0, done.stderr
    page = (repo / "page.md").read_text()
    rows = _rows(page)
    assert rows["`exec_p50`"] == ["2.1", "2.1 ms", "1 ms", "<= 3", "yes"]
    assert rows["`create_p50`"] == ["25", "100 ms", "4 ms", "<= 10", "**no**"]
    assert rows["`rounds_2`"] == ["1.25", "2.5 s", "2 s", "-", "-"]  # --rounds passed on
    assert rows["`rss`"] == ["difference 50 MiB", "70 MiB", "20 MiB", "<= 64 MiB", "yes"]
    # One section per benchmark, in name order, each with its docstring's first sentence;
    # the tools are not benchmarks.
    assert re.findall(r"^## `(\w+)`", page, re.MULTILINE) == ["fast", "memory"]
    assert "Operations of `Pool` and `pkg.make` against the bare backend.\n" in page
    assert "More words" not in page
    assert "Last measured: commit `an unknown commit`" in page  # not a git checkout


def test_a_failing_benchmark_fails_the_page_and_leaves_it_alone(repo: Path) -> None:
    (repo / "page.md").write_text("before\n")
    (repo / "bench" / "memory.py").write_text("raise SystemExit('no engine here')\n")
    done = _table(repo)
    assert done.returncode == 1
    assert "bench/memory.py failed (exit 1): no engine here" in done.stderr
    assert (repo / "page.md").read_text() == "before\n"


def test_an_unknown_script_is_a_usage_error(repo: Path) -> None:
    done = _table(repo, "--scripts", "fast,compare")
    assert done.returncode == 2
    assert "no such benchmark in bench/: compare" in done.stderr


def test_the_repositorys_page_covers_every_benchmark() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    benchmarks = sorted(p.stem for p in (ROOT / "bench").glob("*.py")
                        if p.stem not in ("compare", "table"))
    assert re.findall(r"^## `(\w+)`", page, re.MULTILINE) == benchmarks
    assert "Last measured: commit `" in page
