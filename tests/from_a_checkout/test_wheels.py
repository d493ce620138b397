"""What the wheels ``nox -s dist`` builds hold and require: the runtime wheels carry no
emulator and no HTTP server, every runtime requirement is a range, and with the core's
wheel alone ``psdk emulate`` says in one line what to install."""

from __future__ import annotations

import email
import email.message
import os
import re
import subprocess
import venv
import zipfile
from pathlib import Path

EMULATORS = "sandbox-provider-sdk-emulators"


def _wheel(wheels: Path, distribution: str) -> zipfile.ZipFile:
    (path,) = wheels.glob(f"{distribution.replace('-', '_')}-*.whl")
    return zipfile.ZipFile(path)


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    found = [n for n in wheel.namelist() if re.fullmatch(rf"[^/]+\.dist-info/{name}", n)]
    return wheel.read(found[0]).decode() if found else ""


def _requires(wheel: zipfile.ZipFile) -> list[str]:
    metadata: email.message.Message = email.message_from_string(_dist_info(wheel, "METADATA"))
    return metadata.get_all("Requires-Dist") or []


def test_the_runtime_wheels_hold_no_emulator_and_the_core_no_http_server(
        wheels: Path) -> None:
    core = _wheel(wheels, "sandbox-provider-sdk")
    assert "provider_sdk/emulators.py" in core.namelist()  # the lookup psdk uses stays
    # The core's own code kernel (provider_sdk/_code_kernel.py) is the code interpreter's;
    # the emulators' kit (its HTTP server, kernel and relays) stays out.
    assert [n for n in core.namelist()
            if re.search(r"emulator_|/kit/|kit\.py|port_relay|provider_sdk_emulators", n)] == []
    requires = _requires(core)
    assert [r for r in requires if re.match(r"h11\b", r)] == []
    assert [r for r in requires if r.startswith(EMULATORS)] == [
        f"{EMULATORS}<0.2,>=0.1.0; extra == 'emulators'"]
    for plugin in ("sandbox-provider-sdk-e2b", "sandbox-provider-sdk-daytona"):
        wheel = _wheel(wheels, plugin)
        assert [n for n in wheel.namelist() if "emulator" in n] == [], plugin
        assert "provider_sdk.emulators" not in _dist_info(wheel, "entry_points.txt"), plugin
    emulators = _wheel(wheels, EMULATORS)
    assert "provider_sdk_emulators/kit/http.py" in emulators.namelist()
    assert [r for r in _requires(emulators) if re.match(r"h11\b", r)] == ["h11<1,>=0.16.0"]
    assert _dist_info(emulators, "entry_points.txt").split("[provider_sdk.emulators]")[1] \
        .split() == ["cube", "=", "provider_sdk_emulators.e2b:cube_emulator",
                     "daytona", "=", "provider_sdk_emulators.daytona:daytona_emulator",
                     "e2b", "=", "provider_sdk_emulators.e2b:e2b_emulator"]


def test_every_runtime_requirement_is_a_range(wheels: Path) -> None:
    pinned = [(path.name, requirement) for path in sorted(wheels.glob("*.whl"))
              for requirement in _requires(zipfile.ZipFile(path))
              if "==" in requirement.partition(";")[0]]
    assert pinned == []


def test_emulate_with_the_core_alone_names_the_distribution_and_the_pip_line(
        wheels: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    environ = {k: v for k, v in os.environ.items()
               if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PSDK_PROVIDER", "PSDK_CONFIG")}
    environ.update(PSDK_HOME=str(tmp_path / "home"), PIP_NO_COMPILE="1",
                   PIP_DISABLE_PIP_VERSION_CHECK="1")
    installed = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--find-links",
         str(wheels), "sandbox-provider-sdk"], env=environ, capture_output=True, text=True,
        timeout=900, stdin=subprocess.DEVNULL)
    assert installed.returncode == 0, installed.stderr[-4000:]
    done = subprocess.run([str(env_dir / "bin" / "psdk"), "emulate", "e2b"], env=environ,
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "psdk: error: no emulator named 'e2b': it is in the distribution "
        f"{EMULATORS}; install it with: pip install {EMULATORS}; installed: none"]
