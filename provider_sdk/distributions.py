"""What to run to install a distribution of this project: the words of every "install
X" hint in an error message.

From built wheels the hint names the distribution on the package index
(``pip install sandbox-provider-sdk-e2b``). From a checkout (the core installed editable
from a source tree, as ``nox`` and the README do it) the index has nothing to do with the
code being run, so the hint names the distribution's folder in that checkout
(``pip install -e /src/provider-sdk/providers/e2b``), found through the workspace's own
``pyproject.toml`` files rather than a list kept here.

This module only reads installation metadata and the checkout's ``pyproject.toml``
files; it must not import any plugin.
"""

from __future__ import annotations

import functools
import glob
import json
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["CORE", "install_hint"]

CORE = "sandbox-provider-sdk"
"""The core's distribution name (``provider-sdk`` on the index is an unrelated project)."""


def install_hint(distribution: str, *, extra: str | None = None) -> str:
    """The command that installs ``distribution`` (with ``extra``) where this core runs."""
    folder = _checkout_members().get(distribution)
    what = str(folder) if folder is not None else distribution
    target = shlex.quote(f"{what}[{extra}]" if extra else what)
    return f"pip install -e {target}" if folder is not None else f"pip install {target}"


@functools.lru_cache(maxsize=1)
def _checkout_members() -> dict[str, Path]:
    """Distribution name to folder, for every member of the checkout the core was
    installed from in editable mode; empty for an install from a wheel."""
    root = _editable_root()
    workspace = _toml(root / "pyproject.toml") if root is not None else {}
    if root is None or not workspace:
        return {}
    members = workspace.get("tool", {}).get("uv", {}).get("workspace", {}).get("members", [])
    found: dict[str, Path] = {}
    for folder in [root, *(Path(p) for m in members for p in sorted(glob.glob(str(root / m))))]:
        name = _toml(folder / "pyproject.toml").get("project", {}).get("name")
        if isinstance(name, str):
            found[name] = folder
    return found


def _toml(path: Path) -> dict[str, Any]:
    """A TOML file's content; empty if it cannot be read."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text())
    except (OSError, ValueError):  # TOMLDecodeError is a ValueError
        return {}


def _editable_root() -> Path | None:
    """The source tree the core was installed from in editable mode (PEP 610), if so."""
    from importlib import metadata  # only on the error path: it costs at start-up

    try:
        direct = metadata.distribution(CORE).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not direct:
        return None
    try:
        info = json.loads(direct)
    except ValueError:
        return None
    if not info.get("dir_info", {}).get("editable"):
        return None
    url = urlparse(str(info.get("url", "")))
    return Path(unquote(url.path)) if url.scheme == "file" else None
