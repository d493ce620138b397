"""Write ``docs/benchmarks.md``: every benchmark line with its goal and what it measured
last, so a user can see what each provider costs over its bare backend or raw SDK.

It runs every script in ``bench/`` (``--scripts`` to choose; ``compare.py`` and this one
are tools, not benchmarks) and writes one table per script: the line, its ratio against
the baseline measured in the same run, the two medians behind it, the goal, and whether
the goal was met. Usage::

    python bench/table.py                     # run everything, rewrite the page
    python bench/table.py --scripts run,docker_provider --rounds 5 --output /tmp/b.md

The page names the commit and the machine the figures come from: regenerate it on a
quiet machine, after a change to a hot path.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"compare", "table"}
"""Scripts of ``bench/`` that are not benchmarks."""


def scripts_of(root: Path) -> list[str]:
    """The benchmark scripts of a checkout's ``bench/``, by name."""
    return sorted(p.stem for p in (root / "bench").glob("*.py") if p.stem not in TOOLS)


_ROLE = re.compile(r":\w+:`~?([\w.]*?)([\w]+)`")
"""A Python cross-reference of a docstring (``:class:`~a.B```), which Markdown shows as
code: the name alone where ``~`` says so."""


def summary(root: Path, script: str) -> str:
    """The first sentence of a script's docstring, on one line, in Markdown."""
    tree = ast.parse((root / "bench" / f"{script}.py").read_text())
    text = " ".join((ast.get_docstring(tree) or "").split())
    end = text.find(". ")
    text = text if end < 0 else text[:end + 1]
    return _ROLE.sub(lambda m: f"`{m[2]}`" if m[0].split("`")[1].startswith("~")
                     else f"`{m[1]}{m[2]}`", text)


def run(root: Path, script: str, rounds: int | None) -> list[dict[str, Any]]:
    """The JSON lines one script printed (a failing script raises)."""
    argv = [sys.executable, str(root / "bench" / f"{script}.py")]
    if rounds is not None:
        argv += ["--rounds", str(rounds)]
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise SystemExit(f"bench/{script}.py failed (exit {done.returncode}): {last}")
    return list(parse(done.stdout))


def parse(output: str) -> Iterable[dict[str, Any]]:
    """The lines of a benchmark's output that are results (a JSON object with a name)."""
    for text in output.splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("name"), str):
            yield line


def _figure(value: Any, unit: str) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
    return f"{value:.3g} {unit}"


def row(line: dict[str, Any]) -> str:
    """One line of a table: name, measured, baseline, ratio (or the field the goal is
    on), goal, met."""
    unit = str(line.get("unit") or "s")
    on = str(line.get("goal_on") or "ratio")
    measured = line.get(on)
    shown = f"{measured:.3g}" if isinstance(measured, (int, float)) else "-"
    if on != "ratio":
        shown = f"{on} {_figure(measured, unit)}"
    goal = line.get("goal")
    goal_text = "-" if goal is None else f"<= {goal:g}" if on == "ratio" \
        else f"<= {_figure(goal, unit)}"
    met = line.get("met")
    met_text = "-" if met is None else "yes" if met else "**no**"
    return (f"| `{line['name']}` | {shown} | {_figure(line.get('value'), unit)} | "
            f"{_figure(line.get('baseline'), unit)} | {goal_text} | {met_text} |")


def page(results: dict[str, list[dict[str, Any]]], summaries: dict[str, str],
         source: str) -> str:
    """The whole Markdown page."""
    parts = [
        "# Benchmarks",
        "",
        "What each provider and layer costs, as ratios against a baseline measured in "
        "the same run: the bare backend or the vendor's raw SDK doing the same work "
        "(lower is better; 1 is free). The two medians behind each ratio are shown too, "
        "but only the ratio is comparable between machines. A goal is what the line "
        "should stay within; a line without one is reported for reference.",
        "",
        f"Last measured: {source}. Regenerate this page with `python bench/table.py` "
        "on a quiet machine; compare a change with the code before it with "
        "`bench/compare.py` (see the contributors' page).",
    ]
    for script, lines in results.items():
        parts += ["", f"## `{script}`", "", summaries[script], "",
                  "| line | ratio | measured | baseline | goal | met |",
                  "|---|---|---|---|---|---|",
                  *(row(line) for line in lines)]
    return "\n".join(parts) + "\n"


def source_of(root: Path) -> str:
    """The commit and machine the figures come from."""
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                                check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "an unknown commit"
    day = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return f"commit `{commit}`, {day}, {os.cpu_count()} CPUs, Python " \
        f"{sys.version_info.major}.{sys.version_info.minor}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripts", help="comma-separated script names (default: every "
                        "benchmark in bench/)")
    parser.add_argument("--rounds", type=int, help="passed to each script")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    known = scripts_of(ROOT)
    wanted = args.scripts.split(",") if args.scripts else known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        parser.error(f"no such benchmark in bench/: {', '.join(unknown)}")
    results = {script: run(ROOT, script, args.rounds) for script in wanted}
    summaries = {script: summary(ROOT, script) for script in wanted}
    args.output.write_text(page(results, summaries, source_of(ROOT)))
    print(f"bench/table.py: wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
