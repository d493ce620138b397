"""Developer sessions: ``nox -s demo``, ``nox -s dist``, ``nox -s tests``,
``nox -s contract-<provider>`` (``local``, ``docker``, ``e2b``, ``cube``, ``daytona``),
``nox -s lint``, ``nox -s typecheck``, ``nox -s docs``, ``nox -s bench``,
``nox -s mutants``, ``nox -s flakes``."""

from __future__ import annotations

import argparse
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")
# Every distribution in the workspace: the SDK, the contract suite, each provider plugin,
# the emulators, each integration, the template builder.
DISTRIBUTIONS = [".", "contract_tests",
                 *sorted(str(p.parent) for p in Path("providers").glob("*/pyproject.toml")),
                 "emulators",
                 *sorted(str(p.parent) for p in Path("integrations").glob("*/pyproject.toml")),
                 "templates"]


def install(session: nox.Session, *groups: str) -> None:
    """Install the workspace's distributions (editable) plus dependency groups."""
    deps = [d for g in groups for d in nox.project.dependency_groups(PYPROJECT, g)]
    session.install(*(arg for path in DISTRIBUTIONS for arg in ("-e", path)), *deps)


@nox.session
def demo(session: nox.Session) -> None:
    """A guided tour on the embedded local provider."""
    session.install("-e", ".")
    session.run("psdk", "demo", *session.posargs)


@nox.session
def dist(session: nox.Session) -> None:
    """A wheel of every distribution in dist/ (``-- --outdir DIR``: in DIR), to install
    from a checkout: ``pip install --find-links dist 'sandbox-provider-sdk[e2b]'``."""
    parser = argparse.ArgumentParser(prog="nox -s dist --")
    parser.add_argument("--outdir", default="dist", help="where the wheels go (default: dist)")
    outdir = Path(parser.parse_args(session.posargs).outdir).resolve()
    session.install(*nox.project.dependency_groups(PYPROJECT, "dist"))
    for path in DISTRIBUTIONS:
        session.run("python", "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(outdir), path, silent=True)
    session.log(f"the wheels are in {outdir}; install the SDK with the plugins you use: "
                f"pip install --find-links {outdir} 'sandbox-provider-sdk[docker,e2b]'")


# The fast tier: the core, the CLI, the manager and the contract suite's own tests, on
# the in-process memory provider, without the tests marked slow (they start processes,
# wait out clocks or need a real backend).
FAST = ["-m", "not slow", "tests/core", "tests/cli", "tests/manager", "tests/contract_meta"]


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests and the contract suite against every provider installed here, on
    four worker processes that take tests as they free up (most tests wait on
    sandboxes, timeouts and clocks, not on the CPU: four finish a third sooner than two
    on two cores); ``-n 0`` after ``--`` runs them in this process. ``nox -s tests --
    fast`` runs the fast tier (a couple of minutes, on two workers); pytest's arguments
    may follow ``fast``."""
    install(session, "test")
    args = session.posargs
    if args[:1] == ["fast"]:
        session.run("pytest", "-n", "2", *FAST, *args[1:])
    else:
        session.run("pytest", "-n", "4", "--dist", "worksteal", "--durations=30", *args)


# The contract suite against one provider each, through ``psdk contract``: local and
# docker against this machine (bubblewrap, Docker Engine), the others against their
# emulator on 127.0.0.1, started by ``--emulator`` and backed by the local provider.
CONTRACT_RUNS = {"local": (), "docker": (), "e2b": ("--emulator",), "cube": ("--emulator",),
                 "daytona": ("--emulator",)}


def contract_session(provider: str, *options: str) -> None:
    """Define the session ``contract-<provider>``; pytest's arguments follow ``--``."""

    def run(session: nox.Session) -> None:
        install(session, "test")
        session.run("psdk", "contract", "--provider", provider, *options, "--",
                    *session.posargs)

    where = "its emulator" if options else "this machine"
    run.__doc__ = f"The contract suite against the {provider} provider, on {where}."
    run.__name__ = f"contract_{provider}"
    nox.session(name=f"contract-{provider}")(run)


for _provider, _options in CONTRACT_RUNS.items():
    contract_session(_provider, *_options)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the core package and the provider plugins."""
    install(session, "typecheck")
    session.run("mypy", "--strict")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ and say where it is; any warning fails.
    ``-- --serve`` then serves it on 127.0.0.1 (``--port N``, default 8000) until
    interrupted; ``-- --site-dir DIR`` builds it in DIR."""
    parser = argparse.ArgumentParser(prog="nox -s docs --")
    parser.add_argument("--serve", action="store_true",
                        help="serve the built site on 127.0.0.1 until interrupted")
    parser.add_argument("--port", type=int, default=8000, help="with --serve (default 8000)")
    parser.add_argument("--site-dir", default="site", help="where to build it (default: site)")
    options = parser.parse_args(session.posargs)
    site = Path(options.site_dir).resolve()
    install(session, "docs")
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # a notice from the theme, not about this site
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site))
    session.log(f"the site is in {site}: open {site / 'index.html'}, or serve it with "
                "nox -s docs -- --serve")
    if options.serve:
        session.log(f"serving it on http://127.0.0.1:{options.port}/ (Ctrl-C stops it)")
        session.run("python", "-m", "http.server", "--bind", "127.0.0.1", "--directory",
                    str(site), str(options.port))


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (every script in bench/): one JSON object per line, each a ratio
    against a baseline measured in the same run. ``-- --against REF [options]`` runs
    them for a git ref and for the working tree in one run instead, and prints each
    line's change (``bench/compare.py``)."""
    install(session)
    if session.posargs[:1] == ["--against"]:
        session.run("python", "bench/compare.py", *session.posargs[1:])
        return
    for script in sorted(Path("bench").glob("*.py")):
        if script.stem not in ("compare", "table"):  # tools, not benchmarks
            session.run("python", str(script), *session.posargs)


@nox.session
def mutants(session: nox.Session) -> None:
    """Mutation testing of the modules where a slip breaks a promise (``mutation/``):
    each module's kill rate, against the goal; arguments go to ``mutation/run.py``
    (module paths, ``--changed``, ``--survivors``)."""
    install(session, "test", "mutation")
    session.run("python", "mutation/run.py", *session.posargs)


#: The contract sections that ``flakes`` repeats, and the providers it repeats them on.
FLAKE_SECTIONS = "lifecycle,pause"
FLAKE_TESTS = ["tests/contract/test_local_contract.py",
               "tests/docker_provider/test_docker_contract.py",
               "tests/e2b/test_contract_e2b.py", "tests/e2b/test_contract_cube.py",
               "tests/daytona/test_daytona_contract.py"]


@nox.session
def flakes(session: nox.Session) -> None:
    """The contract's lifecycle sections on every provider (E2B, Cube and Daytona on
    their emulators), 20 times in a row (``-- N`` for another count); the first failing
    run stops it."""
    install(session, "test")
    runs = int(session.posargs[0]) if session.posargs else 20
    for run in range(1, runs + 1):
        session.log(f"run {run} of {runs}")
        session.run("pytest", "-n", "2", "-q",
                    f"--contract-sections={FLAKE_SECTIONS}", *FLAKE_TESTS)
