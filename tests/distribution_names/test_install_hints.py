"""Install hints are right where the code runs: from a checkout (the core installed
editable, as nox and the README install it) they name the checkout's folders; from a
built wheel they name the distributions, whose names are this project's, not the index's
unrelated ``provider-sdk``."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest
import tomllib

from provider_sdk import distributions, registry
from provider_sdk.distributions import CORE, install_hint
from provider_sdk.errors import ProviderNotFound

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
from provider_sdk.distributions import CORE, install_hint
from provider_sdk import registry
registry._entry_points = dict
try:
    registry.load("e2b")
except Exception as exc:
    print(exc)
print(install_hint(CORE, extra="redis"))
"""


def _names() -> dict[str, Path]:
    found = {}
    for path in [ROOT / "pyproject.toml", *ROOT.glob("*/pyproject.toml"),
                 *ROOT.glob("*/*/pyproject.toml")]:
        if ".nox" not in path.parts:
            found[tomllib.loads(path.read_text())["project"]["name"]] = path.parent
    return found


def test_every_distribution_has_the_projects_prefix() -> None:
    assert all(n == CORE or n.startswith(f"{CORE}-") for n in _names()), _names()


def test_from_a_checkout_a_hint_names_the_folder_to_install() -> None:
    if not distributions._checkout_members():
        pytest.skip("the core is not installed editable from this checkout")
    assert install_hint(f"{CORE}-e2b") == f"pip install -e {ROOT / 'providers' / 'e2b'}"
    assert install_hint(CORE, extra="postgres") == f"pip install -e '{ROOT}[postgres]'"


def test_a_missing_provider_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_entry_points", dict)
    monkeypatch.setattr(registry, "_loaded", {})  # as in a process that never loaded it
    with pytest.raises(ProviderNotFound) as caught:
        registry.load("e2b")
    assert install_hint(f"{CORE}-e2b") in str(caught.value)


def test_from_a_built_wheel_a_hint_names_the_distribution(tmp_path: Path) -> None:
    """The core built as a wheel and installed in a fresh environment."""
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    # The fresh environment's own pip builds the wheel: the tests' environment may have
    # none (one made by uv).
    wheels = tmp_path / "wheels"
    subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
                    str(ROOT)], check=True, capture_output=True)
    wheel = next(wheels.glob("sandbox_provider_sdk-*.whl"))
    subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], check=True,
                   capture_output=True)
    out = subprocess.run([python, "-c", _PROBE], check=True, capture_output=True, text=True,
                         cwd=tmp_path).stdout
    assert f"install it with: pip install {CORE}-e2b;" in out
    assert f"pip install '{CORE}[redis]'" in out
    assert str(ROOT) not in out
