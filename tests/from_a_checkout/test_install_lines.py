"""Every install line in the documentation works from a checkout, as a user runs it:
``nox -s dist`` builds the wheels, and each ``pip install --find-links dist ...`` line
of the README and docs/ installs, in one fresh virtual environment, what it names (the
dependencies come from the package index by name, as they do for a user). The README's
first line runs as written, with pip; the others with ``uv pip install`` and the same
arguments into the same environment, which reads them as pip does and installs from
its cache in seconds where pip takes minutes of CPU. The wheels are cached by the
content of the sources they are built from."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from engines import missing

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`(pip install [^`]+)`")


def install_lines() -> list[tuple[str, str]]:
    """``(page, command)`` for every ``pip install`` in the pages' shell blocks and inline
    code, a prompt, a trailing comment and what follows ``&&`` cut off."""
    found = []
    for page in PAGES:
        text = page.read_text()
        name = str(page.relative_to(ROOT))
        lines = [line for kind, body in _FENCE.findall(text) if kind in ("sh", "console", "bash")
                 for line in body.splitlines()]
        lines += _SPAN.findall(_FENCE.sub("", text).replace("\n", " "))
        for line in lines:
            command = line.strip().removeprefix("$ ").split("&&")[0].split("  #")[0].strip()
            if command.startswith("pip install "):
                found.append((name, command))
    return found


def _own(command: str) -> bool:
    return any("sandbox-provider-sdk" in word for word in shlex.split(command))


def test_the_docs_install_this_project_one_way() -> None:
    lines = install_lines()
    assert any(_own(command) for _, command in lines)
    for page, command in lines:
        words = shlex.split(command)
        if not _own(command):
            assert words == ["pip", "install", "nox"], (page, command)  # the tool, by name
            continue
        # The project is not on the index yet: every line takes its wheels from dist/.
        assert words[2:4] == ["--find-links", "dist"], (page, command)
        assert all(re.fullmatch(r"sandbox-provider-sdk(\[[a-z0-9,-]+\])?", w) for w in words[4:]), \
            (page, command)


def test_every_install_line_installs_from_a_checkout(wheels: Path, tmp_path: Path) -> None:
    names = {p.name for p in wheels.glob("*.whl")}
    # The core, the docker, e2b, daytona and templates plugins, the emulators, the contract
    # suite, three integrations.
    assert len(names) == 10, names
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "dist").symlink_to(wheels)
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    environ = {k: v for k, v in os.environ.items()
               if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PSDK_PROVIDER", "PSDK_CONFIG")}
    environ["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{environ.get('PATH', '')}"
    environ["PSDK_HOME"] = str(tmp_path / "home")
    # Not what is installed, only how fast: no byte-compiling, no look for a newer pip.
    environ.update(PIP_NO_COMPILE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    uv = shutil.which("uv")
    if uv is None:
        missing("uv is not installed (pip install uv)")
    assert uv is not None
    python = str(env_dir / "bin" / "python")
    own = [(page, command) for page, command in install_lines() if _own(command)]
    assert own[0][0] == "README.md"
    first, *others = dict.fromkeys(command for _, command in own)
    runs = [["/bin/sh", "-c", first]]
    runs += [[uv, "pip", "install", "--python", python, *shlex.split(c)[2:]] for c in others]
    for argv in runs:
        done = subprocess.run(argv, cwd=checkout, env=environ, capture_output=True,
                              text=True, timeout=900, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{argv}:\n{done.stderr[-4000:]}"
    listed = subprocess.run([str(env_dir / "bin" / "psdk"), "providers", "--json"],
                            cwd=checkout, env=environ, capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0, listed.stderr
    providers = {row["name"]: row["error"] for row in json.loads(listed.stdout)}
    assert providers == dict.fromkeys(["cube", "daytona", "docker", "e2b", "local"])
    imported = subprocess.run(
        [python, "-c", "import provider_sdk_templates, provider_sdk_inspect, "
         "provider_sdk_contract, provider_sdk_emulators, redis, psycopg" +
         (", provider_sdk_deepagents, provider_sdk_openai_agents"
          if sys.version_info >= (3, 11) else "")],
        env=environ, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
