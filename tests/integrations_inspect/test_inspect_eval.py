"""End to end through Inspect's own command line: ``inspect eval`` of
``examples/inspect_eval.py`` offline on the mock model, the ``psdk`` name found through
the entry point alone, and ``inspect sandbox cleanup psdk``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import anyio
import pytest
from daytona_emulator_fixtures import daytona_emulator, running
from engines import require_bwrap, require_docker

from provider_sdk import emulators, open_provider
from provider_sdk.models import SandboxState

__all__ = ["daytona_emulator"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "inspect_eval.py"
BIN = Path(sys.executable).parent


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PSDK_", "INSPECT_"))}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "PSDK_HOME": str(home), **extra}


def _inspect(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "inspect"), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


def _live(home: Path, provider: str, settings: Mapping[str, str] | None = None) -> list[str]:
    """Ids of the live sandboxes an Inspect run made on ``provider``."""
    async def ids() -> list[str]:
        async with open_provider(provider, **({"home": str(home)} if provider == "local"
                                              else {})) as p:
            found = await p.list(metadata={"inspect-sandbox": "psdk"})
            return [i.id for i in found if i.state != SandboxState.KILLED]

    with pytest.MonkeyPatch.context() as patch:
        for key, value in (settings or {}).items():
            patch.setenv(key, value)
        return anyio.run(ids)


@contextlib.contextmanager
def _settings(provider: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """What ``provider`` reads from the environment, with its emulator running if it
    is a vendor's (on 127.0.0.1, backed by the local provider)."""
    if provider == "docker":
        require_docker()
        yield {}
        return
    require_bwrap()
    if provider == "local":
        yield {}
    elif provider == "daytona":
        yield running().environment()
    else:
        from provider_emulators import emulator

        with emulator(provider, tmp_path / "backend") as em:
            yield em.environment()


@pytest.mark.parametrize("provider", ["local", "docker", "e2b", "cube", "daytona"])
def test_inspect_eval_of_the_example_scores_every_sample(
        provider: str, tmp_path: Path, daytona_emulator: emulators.RunningEmulator) -> None:
    """``inspect eval examples/inspect_eval.py -T provider=...``: the one field switches
    the backend; each sample's commands run in a sandbox of its own, the scorer sees
    their output, and nothing is left running."""
    with _settings(provider, tmp_path) as settings:
        before = set(_live(tmp_path, provider, settings))
        done = _inspect("eval", str(EXAMPLE.relative_to(ROOT)), "--model", "mockllm/model",
                        "-T", f"provider={provider}", "--log-dir", str(tmp_path / "logs"),
                        "--log-format", "json", "--display", "none",
                        env=_env(tmp_path, **settings), cwd=ROOT)
        after = set(_live(tmp_path, provider, settings))
    assert done.returncode == 0, done.stderr
    [log_file] = (tmp_path / "logs").glob("*.json")
    log = json.loads(log_file.read_text())
    assert log["status"] == "success", log.get("error")
    assert log["eval"]["sandbox"]["type"] == "psdk"
    assert log["eval"]["sandbox"]["config"]["provider"] == provider
    assert log["results"]["completed_samples"] == 3
    [score] = log["results"]["scores"]
    assert score["metrics"]["accuracy"]["value"] == 1.0
    # The eval left nothing running; others' sandboxes on a shared Engine may come and go.
    assert after <= before


def test_the_example_runs_as_a_script(tmp_path: Path) -> None:
    """``python examples/inspect_eval.py --provider local`` prints its scores."""
    require_bwrap()
    done = subprocess.run([sys.executable, str(EXAMPLE), "--provider", "local"],
                          env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"provider": "local", "status": "success", "samples": 3,
                       "scores": {"accuracy": 1.0, "stderr": 0.0}}


def test_psdk_is_found_through_the_entry_point_alone(tmp_path: Path) -> None:
    """Inspect finds ``psdk`` with nothing of this package imported by hand."""
    code = ("import sys\n"
            "from inspect_ai.util._sandbox.registry import registry_find_sandboxenv\n"
            "assert 'provider_sdk_inspect' not in sys.modules\n"
            "print(registry_find_sandboxenv('psdk').__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "PsdkSandboxEnvironment"


def test_inspect_sandbox_cleanup_kills_what_a_run_left(tmp_path: Path) -> None:
    """Sandboxes a sample never cleaned up are found by their tag and killed; one
    named by id is killed alone; an untagged sandbox is left alone."""
    require_bwrap()
    from provider_sdk_inspect import PsdkConfig, PsdkSandboxEnvironment

    config = PsdkConfig(provider="local", options={"home": str(tmp_path)})

    async def leave_two() -> tuple[list[str], str]:
        left = []
        for _ in range(2):
            envs = await PsdkSandboxEnvironment.sample_init("leaky", config, {})
            left.append(envs["default"].as_type(PsdkSandboxEnvironment).sandbox.id)
        async with open_provider("local", home=str(tmp_path)) as provider:
            other = await provider.create()
        return left, other.id

    left, untagged = anyio.run(leave_two)
    env = _env(tmp_path, PSDK_PROVIDER="local")
    one = _inspect("sandbox", "cleanup", "psdk", left[0], env=env, cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert set(_live(tmp_path, "local")) == {left[1]}
    rest = _inspect("sandbox", "cleanup", "psdk", env=env, cwd=tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert _live(tmp_path, "local") == []

    async def state() -> SandboxState:
        async with open_provider("local", home=str(tmp_path)) as provider:
            info = await provider.get_info(untagged)
            await provider.kill(untagged)
            return info.state
    assert anyio.run(state) == SandboxState.RUNNING
