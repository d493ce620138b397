"""Benchmarks of a git ref against the working tree, in one run: each line's ratio on
both sides and how much it changed.

Each benchmark script prints lines whose ``ratio`` is a time against a baseline measured
in the same run (lower is better). This runs every script once for the ref and once for
the working tree, alternating which side goes first, ``--repeat`` times, and compares
the medians of each line's ratios: a change past ``--flag`` (10 %) is marked, and one past
``--fail-over`` (off unless given) makes the exit status 1 once the script of that line
has run ``--confirm`` more times on each side and the medians still say so; a script
that fails on the working tree's side makes it 1 too. The ref's sources are exported
from git into a temporary directory and imported from there (every directory of the
checkout that holds a ``pyproject.toml`` is a source root), so both sides run in this
interpreter with the same installed dependencies.

Usage::

    python bench/compare.py                    # against the merge base with main
    python bench/compare.py v0.4.0 --repeat 5  # against a tag, five rounds each
    python bench/compare.py --scripts run,docker_provider --rounds 5 --fail-over 0.5

The ref is the merge base of ``HEAD`` and ``main`` by default (``HEAD~1`` on main itself).
A script the ref does not have is run for the working tree alone and reported without a
change. Not a test: nothing here is timed against a fixed number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
FLAG = 0.10
"""A change of a line's ratio past this fraction is marked."""


@attrs.define
class Side:
    """One side of the comparison: a checkout, and the ratios its scripts printed."""

    label: str
    root: Path
    ratios: dict[str, list[float]] = attrs.Factory(dict)
    failed: list[str] = attrs.Factory(list)

    def environment(self) -> dict[str, str]:
        """This process's environment with the checkout's source roots first on the path."""
        roots = sorted(str(p.parent) for p in self.root.glob("**/pyproject.toml")
                       if not any(part.startswith(".") for part in
                                  p.relative_to(self.root).parts))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        return env

    def run(self, script: str, rounds: int) -> None:
        """Run one benchmark script of this checkout; keep the ratios it printed."""
        path = self.root / "bench" / f"{script}.py"
        done = subprocess.run([sys.executable, str(path), "--rounds", str(rounds)],
                              cwd=self.root, env=self.environment(), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
            self.failed.append(f"{script}: exit {done.returncode}: {last}")
            return
        for name, ratio in parse(done.stdout):
            self.ratios.setdefault(f"{script}.{name}", []).append(ratio)


def parse(output: str) -> Iterator[tuple[str, float]]:
    """``(name, ratio)`` of each JSON line of a benchmark's output that has both."""
    for text in output.splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("name"), str) \
                and isinstance(line.get("ratio"), (int, float)):
            yield line["name"], float(line["ratio"])


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def default_ref() -> str:
    """The merge base of ``HEAD`` and ``main``, or ``HEAD~1`` on main itself."""
    base = git("merge-base", "HEAD", "main")
    return git("rev-parse", "HEAD~1") if base == git("rev-parse", "HEAD") else base


NOT_MEASURED = (":!tests", ":!docs", ":!mutation", ":!.ci", ":!*.md", ":!noxfile.py")
"""What the benchmarks do not run: a change there alone leaves nothing to compare."""


def measured_changes(ref: str) -> bool:
    """Whether the working tree differs from ``ref`` in what the benchmarks run (the
    packages, the emulators, the benchmarks themselves, the projects' metadata)."""
    changed = subprocess.run(["git", "diff", "--quiet", ref, "--", ".", *NOT_MEASURED],
                             cwd=ROOT, check=False, capture_output=True)
    untracked = git("ls-files", "--others", "--exclude-standard", "--", ".", *NOT_MEASURED)
    return changed.returncode != 0 or bool(untracked)


def export(ref: str, into: Path) -> None:
    """The tree of ``ref``, written under ``into``."""
    archive = subprocess.run(["git", "archive", "--format=tar", ref], cwd=ROOT,
                             check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as file:
        file.write(archive)
        file.seek(0)
        with tarfile.open(fileobj=file) as tar:
            tar.extractall(into, filter="data")


@attrs.frozen
class Change:
    """One line of the comparison."""

    line: str
    ref: float | None
    tree: float

    @property
    def change(self) -> float | None:
        """The tree's ratio against the ref's, less one (``+0.25`` is 25 % slower)."""
        return None if self.ref is None else self.tree / self.ref - 1


def compare(ref: Side, tree: Side) -> list[Change]:
    """Each line the working tree printed, with the medians of both sides' ratios."""
    return [Change(line, statistics.median(ref.ratios[line]) if line in ref.ratios else None,
                   statistics.median(ratios))
            for line, ratios in tree.ratios.items()]


def alternate(base: Side, tree: Side, scripts: Iterable[str], theirs: set[str],
              round_: int, rounds: int) -> None:
    """One run of each script on each side, the ref first in even rounds (a script the
    ref does not have runs on the working tree alone)."""
    for script in scripts:
        for side in ([base, tree] if round_ % 2 == 0 else [tree, base]):
            if side is tree or script in theirs:
                side.run(script, rounds)


def table(changes: Iterable[Change], flag: float) -> str:
    rows = [f"{'line':<58} {'ref':>8} {'tree':>8} {'change':>8}"]
    for c in changes:
        ref = "-" if c.ref is None else f"{c.ref:.3f}"
        change = "" if c.change is None else f"{c.change:+.1%}"
        mark = "  <-" if c.change is not None and c.change > flag else ""
        rows.append(f"{c.line:<58} {ref:>8} {c.tree:>8.3f} {change:>8}{mark}")
    return "\n".join(rows)


def scripts_of(root: Path) -> list[str]:
    """The benchmark scripts of a checkout, by name (``run`` for ``bench/run.py``)."""
    return sorted(p.stem for p in (root / "bench").glob("*.py") if p.stem != "compare")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ref", nargs="?", help="a commit, branch or tag (default: the "
                        "merge base with main)")
    parser.add_argument("--scripts", help="comma-separated script names (default: every "
                        "script in bench/)")
    parser.add_argument("--rounds", type=int, default=5, help="samples per median, passed "
                        "to each script (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each script on "
                        "each side, alternating (default 3)")
    parser.add_argument("--flag", type=float, default=FLAG, help="mark a change past this "
                        "fraction (default 0.10)")
    parser.add_argument("--fail-over", type=float, default=None, help="exit 1 on a change "
                        "past this fraction (default: never)")
    parser.add_argument("--confirm", type=int, default=2, help="runs more of a script "
                        "with a line past --fail-over, on each side, before it fails "
                        "(default 2)")
    parser.add_argument("--if-changed", action="store_true", help="run nothing when the "
                        "working tree changes nothing the benchmarks run since the ref "
                        "(only tests, docs, Markdown, mutation results or CI files)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.rounds < 1 or args.confirm < 0:
        parser.error("--repeat and --rounds must be at least 1, --confirm at least 0")
    try:
        ref = git("rev-parse", "--verify", f"{args.ref or default_ref()}^{{commit}}")
    except subprocess.CalledProcessError as exc:
        parser.error(f"not a commit here: {args.ref}: {exc.stderr.strip()}")
    if args.if_changed and not measured_changes(ref):
        print(f"bench/compare.py: nothing the benchmarks run changed since {ref[:12]}: "
              "no comparison")
        return 0
    wanted = args.scripts.split(",") if args.scripts else scripts_of(ROOT)
    unknown = sorted(set(wanted) - set(scripts_of(ROOT)))
    if unknown:
        parser.error(f"no such script in bench/: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="psdk-compare-") as tmp:
        export(ref, Path(tmp))
        base, tree = Side(ref[:12], Path(tmp)), Side("tree", ROOT)
        theirs = set(scripts_of(base.root))
        started = time.monotonic()
        for round_ in range(args.repeat):
            alternate(base, tree, wanted, theirs, round_, args.rounds)
        changes = compare(base, tree)
        # A line past the limit may be one noisy run: its script runs again, on both
        # sides, before the medians decide.
        for round_ in range(args.repeat, args.repeat + args.confirm):
            suspects = sorted({c.line.partition(".")[0] for c in changes
                               if args.fail_over is not None and c.change is not None
                               and c.change > args.fail_over})
            if not suspects:
                break
            alternate(base, tree, suspects, theirs, round_, args.rounds)
            changes = compare(base, tree)
    runs = max((len(r) for r in tree.ratios.values()), default=0)
    confirmed = f" ({runs} where a line was confirmed)" if runs > args.repeat else ""
    print(f"bench/compare.py: {ref[:12]} (ref) against the working tree, "
          f"{args.repeat} runs each{confirmed}, {args.rounds} rounds a run, "
          f"{time.monotonic() - started:.0f} s")
    print(table(changes, args.flag))
    for side in (base, tree):
        for failure in side.failed:
            print(f"failed on {side.label}: {failure}", file=sys.stderr)
    worst = max((c.change for c in changes if c.change is not None), default=0.0)
    if tree.failed:
        return 1
    if args.fail_over is not None and worst > args.fail_over:
        print(f"a line is {worst:.0%} slower than on {ref[:12]} (more than "
              f"{args.fail_over:.0%})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
