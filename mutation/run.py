"""Mutation testing of the modules where a slip breaks a promise (``nox -s mutants``).

For each module in ``modules.toml`` it makes every mutant cosmic-ray's chosen operators
and this project's own (``operators.py``) can make, one at a time, and runs that
module's fast selection of tests against it: a test that fails (or hangs past the
module's timeout) kills the mutant; a mutant every test passes with survives. The
mutants are made in copies of the tree under ``.mutants/``, never in the tree itself,
and the tests import from those copies.

``--jobs N`` runs N mutants at once, each job in its own copy of the tree
(``.mutants/jobs/<n>/tree``) with its own test process, so a mutant never sees
another's; the results are the same as one job's. The test selections mostly wait (on
sleeps, timeouts, sandboxes), so more jobs than cores still pays.

Results are kept per module in ``results.json``, keyed by a hash of the module, its
tests and the operators, so an unchanged module is not run again; the mutants of a
module run so far are kept in a cosmic-ray session (``.mutants/<module>.sqlite``), so an
interrupted run goes on where it stopped. A survivor listed in ``equivalent.toml``, with
the reason it changes nothing anyone can see, does not count against the module.

    python mutation/run.py                      # every module (cached ones are not rerun)
    python mutation/run.py provider_sdk/files.py
    python mutation/run.py --changed [--base REF]   # modules changed since REF
    python mutation/run.py --survivors provider_sdk/files.py
    python mutation/run.py --jobs 4 provider_sdk/manager/_lookup.py

It prints the kill rate of each module and exits 1 if one is under ``--goal`` (0.85).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRATCH = ROOT / ".mutants"
RESULTS = HERE / "results.json"
CORE_OPERATORS = (
    # Comparisons, booleans, numbers, loops and exceptions: what a slip of the pen does.
    "core/ReplaceComparisonOperator_", "core/ReplaceAndWithOr", "core/ReplaceOrWithAnd",
    "core/ReplaceTrueWithFalse", "core/ReplaceFalseWithTrue", "core/AddNot",
    "core/ReplaceUnaryOperator_Delete_Not", "core/NumberReplacer",
    "core/ReplaceBreakWithContinue", "core/ReplaceContinueWithBreak",
    "core/ZeroIterationForLoop", "core/ExceptionReplacer",
    "core/ReplaceBinaryOperator_Add_Sub", "core/ReplaceBinaryOperator_Sub_Add",
    "core/ReplaceBinaryOperator_Mul_Div", "core/ReplaceBinaryOperator_Div_Mul",
    "core/ReplaceBinaryOperator_BitOr_BitAnd", "core/ReplaceBinaryOperator_BitAnd_BitOr",
)
PROJECT_OPERATORS = ("psdk/SwapMethod", "psdk/SkipCall", "psdk/LooseAnchors")
# Plugins installed for other test runs that a mutant's tests do without (startup time).
PLUGINS_OFF = ("-p", "no:langsmith_plugin", "-p", "no:codspeed", "-p", "no:benchmark",
               "-p", "no:recording", "-p", "no:syrupy", "-p", "no:socket", "-p", "no:xdist",
               "-p", "no:asyncio",
               # The leak check (tests/leaks.py): what it sees depends on the other runs
               # on the machine, and a mutant's verdict must not; and it asks every Engine twice.
               "-p", "no:leaks")


def _load(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def _exception_names(clause: Any) -> tuple[Any, ...]:
    """The names cosmic-ray's ExceptionReplacer replaces in an except clause, as its own
    method finds them, save that a dotted name in a tuple (``except (OSError,
    anyio.EndOfStream)``), where cosmic-ray 8.7 fails, has its last part replaced
    (``anyio.CosmicRayTestingException``)."""
    from parso.python.tree import Name
    from parso.tree import BaseNode

    caught = clause.children[1]
    if isinstance(caught, Name):
        return (caught,)
    inner = caught.children[1]
    if isinstance(inner, Name):
        return (inner,)
    return tuple(n.get_last_leaf() if isinstance(n, BaseNode) else n
                 for n in inner.children[::2])


def _operators() -> list[str]:
    import cosmic_ray.plugins
    from cosmic_ray.operators.exception_replacer import ExceptionReplacer
    from operators import OPERATORS  # mutation/ is on sys.path: this script's folder

    cosmic_ray.plugins.OPERATOR_PROVIDERS["psdk"] = OPERATORS
    ExceptionReplacer._name_nodes = staticmethod(_exception_names)
    ExceptionReplacer._name_nodes = staticmethod(_exception_names)
    names = [n for n in cosmic_ray.plugins.operator_names() if n.startswith(CORE_OPERATORS)]
    return sorted(names) + list(PROJECT_OPERATORS)


def _test_files(tests: list[str]) -> list[Path]:
    files: list[Path] = []
    for arg in tests:
        path = ROOT / arg.split("::")[0]
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += sorted(path.rglob("*.py"))
    return files


def _source_key(module: str, operators: list[str]) -> str:
    """What the mutants are made from: the module and the operators."""
    digest = hashlib.sha256()
    digest.update((ROOT / module).read_bytes())
    digest.update((HERE / "operators.py").read_bytes())
    digest.update(json.dumps(operators).encode())
    return digest.hexdigest()


def _key(module: str, entry: dict[str, Any], operators: list[str]) -> str:
    """What a module's result depends on: its mutants, and the tests run against them."""
    digest = hashlib.sha256(_source_key(module, operators).encode())
    for path in _test_files(entry["tests"]):
        digest.update(path.read_bytes())
    digest.update(json.dumps(entry, sort_keys=True).encode())
    return digest.hexdigest()


def _copy_tree(tree: Path) -> Path:
    """A copy of the tracked tree (as it is on disk) at ``tree``, where mutants are made."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    if tree.exists():
        shutil.rmtree(tree)
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    return tree


def default_jobs() -> int:
    """One job per core this process may run on (2 where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0)) or 2
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 2


def _environment(tree: Path) -> dict[str, str]:
    """The tests import from the copy: its package roots come first on the path."""
    roots = [tree, tree / "contract_tests", tree / "templates", tree / "tests",
             *sorted(p.parent for p in tree.glob("providers/*/pyproject.toml")),
             *sorted(p.parent for p in tree.glob("integrations/*/pyproject.toml"))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(r) for r in roots)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _work_items(module_path: Path, operators: list[str]) -> Iterator[Any]:
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.ast.ast_query import ASTQuery
    from cosmic_ray.work_item import MutationSpec, WorkItem

    tree = get_ast_from_path(module_path)
    for name in operators:
        operator = cosmic_ray.plugins.get_operator(name)()
        positions = ((node, start, end) for node in ast_nodes(tree)
                     for start, end in operator.mutation_positions(node))
        for occurrence, (node, start, end) in enumerate(positions):
            yield WorkItem.single(job_id=uuid.uuid4().hex, mutation=MutationSpec(
                module_path=str(module_path), operator_name=name, occurrence=occurrence,
                start_pos=start, end_pos=end,
                definition_name=ASTQuery(node).get_definition_name()))


def _changed_lines(diff: str) -> tuple[str, str]:
    removed = [line[1:].strip() for line in diff.splitlines()
               if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in diff.splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(removed), " / ".join(added)


def _equivalents(module: str) -> list[dict[str, str]]:
    listed = _load(HERE / "equivalent.toml").get("mutant", [])
    return [m for m in listed if m["module"] == module]


def _is_equivalent(survivor: dict[str, str], known: list[dict[str, str]]) -> bool:
    return any(m["operator"] == survivor["operator"] and m["line"] == survivor["line"]
               and m["mutant"] == survivor["mutant"] for m in known)


class _Forker:
    """``forker.py``, started in a copy of the tree with that copy's environment; it
    writes each test run's output to ``log``."""

    def __init__(self, tree: Path, env: dict[str, str], log: Path) -> None:
        self._log = log
        self._proc = subprocess.Popen([sys.executable, str(HERE / "forker.py")], cwd=tree,
                                      env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)

    def run(self, args: list[str], timeout: float) -> tuple[int | str, str]:
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"args": args, "timeout": timeout,
                                           "log": str(self._log)}) + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the test process in {self._log.parent} has ended")
        return json.loads(answer)["status"], self._log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        """End the test process: at once (and the tests it runs) if one is under way."""
        assert self._proc.stdin is not None
        if self._proc.poll() is None:
            self._proc.terminate()  # forker.py ends its running tests' process group too
        self._proc.wait()
        self._proc.stdin.close()
        assert self._proc.stdout is not None
        self._proc.stdout.close()


# parso (cosmic-ray's parser) is not known to be safe to call from two threads at once.
_PARSING = threading.Lock()


class _Job:
    """One job: a copy of the tree of its own, and a test process started in it. A job
    runs one mutant at a time; no other job ever writes to its copy."""

    def __init__(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.tree = _copy_tree(home / "tree")
        self._forker = _Forker(self.tree, _environment(self.tree), home / "test-run.log")

    def test(self, args: list[str], timeout: float) -> tuple[int | str, str]:
        return self._forker.run(args, timeout)

    def run_mutant(self, module: str, item: Any, args: list[str], timeout: float) -> Any:
        """Make ``item``'s mutant of ``module`` in this job's copy, run the tests against
        it, and put the module back; return the ``WorkResult``."""
        import cosmic_ray.plugins
        from cosmic_ray.mutating import mutate_code
        from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

        mutation = item.mutations[0]
        target = self.tree / module
        original = target.read_bytes()
        source = original.decode()
        with _PARSING:
            operator = cosmic_ray.plugins.get_operator(mutation.operator_name)()
            mutated = mutate_code(source, operator, mutation.occurrence)
        if mutated is None:
            return WorkResult(worker_outcome=WorkerOutcome.NO_TEST)
        try:
            target.write_text(mutated, encoding="utf-8")
            status, output = self.test(args, timeout)
        finally:
            target.write_bytes(original)
        diff = "\n".join(difflib.unified_diff(
            source.splitlines(), mutated.splitlines(), lineterm="", n=0))
        return WorkResult(
            worker_outcome=WorkerOutcome.NORMAL, output=output, diff=diff,
            test_outcome=TestOutcome.SURVIVED if status == 0 else TestOutcome.KILLED)

    def close(self) -> None:
        self._forker.close()


class _Jobs:
    """The jobs, made once the first module needs them; each is lent to one mutant at
    a time."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._jobs: list[_Job] = []
        self._free: list[_Job] = []
        self._lock = threading.Lock()

    def _start(self) -> None:
        if not self._jobs:
            SCRATCH.mkdir(exist_ok=True)
            self._jobs = [_Job(SCRATCH / "jobs" / str(n)) for n in range(self.count)]
            self._free = list(self._jobs)

    def first(self) -> _Job:
        self._start()
        return self._jobs[0]

    def take(self) -> _Job:
        with self._lock:
            return self._free.pop()

    def give_back(self, job: _Job) -> None:
        with self._lock:
            self._free.append(job)

    def close(self) -> None:
        for job in self._jobs:
            job.close()


def _forget(db: Any, outcome: Any) -> None:
    """Drop the results with ``outcome``, so those mutants run again."""
    from cosmic_ray.work_db import WorkResultStorage

    with db._session_maker.begin() as session:
        session.query(WorkResultStorage).filter(
            WorkResultStorage.test_outcome == outcome).delete()


def _run_pending(module: str, db: Any, jobs: _Jobs, args: list[str],
                 timeout: float) -> None:
    """Run the session's pending mutants, ``jobs.count`` at once; each result is written
    to the session as soon as it is known, so an interrupted run loses only the mutants
    under way."""
    pending = list(db.pending_work_items)
    total = db.num_work_items
    done = total - len(pending)

    def run(item: Any) -> tuple[Any, Any]:
        job = jobs.take()  # there are as many workers as jobs: one is always free
        try:
            return item, job.run_mutant(module, item, args, timeout)
        finally:
            jobs.give_back(job)

    with ThreadPoolExecutor(max_workers=jobs.count) as pool:
        running: set[Future[tuple[Any, Any]]] = {pool.submit(run, i) for i in pending}
        try:
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    item, result = future.result()
                    db.set_result(item.job_id, result)
                    done += 1
                    print(f"  {module} {done}/{total} {item.mutations[0].operator_name} "
                          f"{result.test_outcome}", flush=True)
        except BaseException:
            for future in running:
                future.cancel()
            jobs.close()  # ends the mutants under way: they run again on the next run
            raise


def run_module(module: str, entry: dict[str, Any], operators: list[str],
               jobs: _Jobs) -> dict[str, Any]:
    """Run (or go on with) one module's session; return its summary."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    key = _key(module, entry, operators)
    jobs.first()  # .mutants/ and the copies exist before the session is opened
    db_path = SCRATCH / (module.replace("/", "__") + ".sqlite")
    stamp = db_path.with_suffix(".key")
    args = ["-x", "-q", "-p", "no:cacheprovider", *PLUGINS_OFF, *entry["tests"]]
    timeout = float(entry.get("timeout", 60))
    source = _source_key(module, operators)
    stamped = json.loads(stamp.read_text()) if stamp.exists() else {}
    with use_db(str(db_path), WorkDB.Mode.create) as db:
        if stamped.get("key") != key:
            began = time.monotonic()
            status, output = jobs.first().test(args, timeout * 4)
            if status != 0:
                raise SystemExit(f"{module}: its tests fail without a mutant:\n{output}")
            print(f"{module}: its tests take {time.monotonic() - began:.1f} s", flush=True)
            if stamped.get("source") == source:
                # Same mutants, other tests: what was killed stays killed only if the
                # tests it failed are still there; run the survivors again, and the rest
                # where tests were removed or changed (a full run: --rerun).
                _forget(db, TestOutcome.SURVIVED)
            else:
                db.clear()
                db.add_work_items(_work_items(ROOT / module, operators))
            stamp.write_text(json.dumps({"key": key, "source": source}))
        _run_pending(module, db, jobs, args, timeout)
        survivors, killed, other = [], 0, 0
        for item, result in db.completed_work_items:
            if result.test_outcome == TestOutcome.KILLED:
                killed += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                line, mutant = _changed_lines(result.diff or "")
                mutation = item.mutations[0]
                survivors.append({"operator": mutation.operator_name, "line": line,
                                  "mutant": mutant, "at": mutation.start_pos[0],
                                  "in": mutation.definition_name or ""})
            else:
                other += 1
    known = _equivalents(module)
    live = [s for s in survivors if not _is_equivalent(s, known)]
    counted = killed + len(live)
    return {"key": key, "killed": killed, "survived": len(live),
            "equivalent": len(survivors) - len(live), "not_run": other,
            "rate": round(killed / counted, 4) if counted else 1.0,
            # In the order of the module, whatever order the jobs finished in.
            "survivors": sorted(live, key=lambda s: (s["at"], s["operator"], s["mutant"]))}


def _changed_modules(base: str | None, modules: list[str]) -> list[str]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.strip()

    if base is None:
        base = os.environ.get("PSDK_MUTANTS_BASE") or git("merge-base", "HEAD", "main")
        if base == git("rev-parse", "HEAD"):
            base = git("rev-parse", "HEAD~1")  # on main itself: its last change
    changed = set(git("diff", "--name-only", base, "--").splitlines())
    return [m for m in modules if m in changed]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to run (default: all)")
    parser.add_argument("--changed", action="store_true",
                        help="only the modules changed since --base")
    parser.add_argument("--base", help="the commit to compare with (default: the merge "
                        "base with main; on main itself, the commit before)")
    parser.add_argument("--goal", type=float, default=0.85)
    parser.add_argument("--survivors", action="store_true",
                        help="print each module's survivors, as they were last run")
    parser.add_argument("--rerun", action="store_true",
                        help="run the modules even where the cached result still holds")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="mutants run at once, each in its own copy of the tree "
                        "(default: the number of cores)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    config = _load(HERE / "modules.toml")["module"]
    modules = args.modules or list(config)
    unknown = [m for m in modules if m not in config]
    if unknown:
        parser.error(f"not in modules.toml: {', '.join(unknown)}")
    if args.changed:
        modules = _changed_modules(args.base, modules)
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.survivors:
        for module in modules:
            for s in results.get(module, {}).get("survivors", []):
                print(f"{module}:{s['at']} in {s['in']} [{s['operator']}]\n"
                      f"    - {s['line']}\n    + {s['mutant']}")
        return 0
    sys.path.insert(0, str(HERE))
    operators = _operators()
    jobs = _Jobs(args.jobs)
    # Ended (a CI job cancelled): stop as Ctrl-C does, ending the tests under way; the
    # session keeps every result so far.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return _check(modules, config, results, operators, jobs, args)
    finally:
        jobs.close()


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _check(modules: list[str], config: dict[str, Any], results: dict[str, Any],
           operators: list[str], jobs: _Jobs, args: argparse.Namespace) -> int:
    """Each module's result, cached or run; the table; 1 if one is under the goal."""
    for module in modules:
        entry = config[module]
        cached = results.get(module)
        if args.rerun:
            (SCRATCH / (module.replace("/", "__") + ".key")).unlink(missing_ok=True)
        if cached and not args.rerun and cached["key"] == _key(module, entry, operators):
            summary = {**cached, "survivors": [s for s in cached["survivors"]
                                               if not _is_equivalent(s, _equivalents(module))]}
            summary["equivalent"] += cached["survived"] - len(summary["survivors"])
            summary["survived"] = len(summary["survivors"])
            counted = summary["killed"] + summary["survived"]
            summary["rate"] = round(summary["killed"] / counted, 4) if counted else 1.0
        else:
            summary = run_module(module, entry, operators, jobs)
        results[module] = summary
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(f"\n{'module':58} {'killed':>6} {'surv.':>5} {'equiv.':>6} {'rate':>6}")
    failing = []
    for module in modules:
        r = results[module]
        print(f"{module:58} {r['killed']:6} {r['survived']:5} {r['equivalent']:6} "
              f"{r['rate']:6.1%}")
        if r["rate"] < args.goal:
            failing.append(module)
    if not modules:
        print("(no module to check)")
    if failing:
        print(f"\nunder the goal of {args.goal:.0%}: {', '.join(failing)}; "
              f"see `python mutation/run.py --survivors MODULE`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
