"""What ``nox -s dist`` builds, for the tests of what a user installs from a checkout."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from engines import missing

ROOT = Path(__file__).resolve().parents[2]
#: The sources the wheels are built from.
SOURCES = ["pyproject.toml", "README.md", "provider_sdk", "providers", "emulators",
           "templates", "integrations", "contract_tests"]


def _digest() -> str:
    digest = hashlib.sha256()
    for source in SOURCES:
        path = ROOT / source
        files = [path] if path.is_file() else sorted(
            p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts
            and not p.name.endswith((".pyc", ".egg-info")))
        for file in files:
            digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def wheels() -> Path:
    """What ``nox -s dist`` builds, for the sources as they are (cached by their content)."""
    nox = shutil.which("nox")
    if nox is None:
        missing("nox is not installed (pip install nox)")
    assert nox is not None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "psdk-tests"
    built = cache / "dist" / _digest()
    if not built.is_dir():
        partial = built.with_name(f".{built.name}.{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        done = subprocess.run([nox, "-r", "--envdir", str(cache / "nox"), "-s", "dist", "--",
                               "--outdir", str(partial)], cwd=ROOT, capture_output=True,
                              text=True, timeout=900, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout + done.stderr
        try:
            partial.rename(built)
        except OSError:  # another run built the same sources meanwhile
            shutil.rmtree(partial, ignore_errors=True)
    return built
