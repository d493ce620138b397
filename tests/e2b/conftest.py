"""Fixtures for the E2B and Cube tests: emulators started in-process, on the local backend.

``e2b_emulator`` and ``cube_emulator`` start an emulator of that flavor in a thread of its
own (so the vendors' blocking SDKs and async code on the test's loop can both call it),
backed by the local provider in a fresh state directory, and point the environment at
it (``E2B_API_URL``, ``E2B_SANDBOX_URL``, ``E2B_API_KEY``, ... or ``CUBE_API_URL``,
``CUBE_API_KEY``, ...); each yields the :class:`~provider_sdk.emulators.RunningEmulator`.
``emulator_factory(name, faults={...})`` starts one with faults injected.

Where bubblewrap is missing or cannot create namespaces, these tests skip saying so,
except under CI (``CI=true``), where that is a failure: CI installs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest
from engines import require_namespaces
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk.emulators import EmulatorOptions, RunningEmulator

API_KEY = "emulator-test-key"

EmulatorFactory = Callable[..., RunningEmulator]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def local_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh state directory for the local backend; skips where bubblewrap is
    missing or unusable."""
    require_namespaces()
    home = tmp_path / "psdk-home"
    monkeypatch.setenv("PSDK_HOME", str(home))
    monkeypatch.delenv("PSDK_CONFIG", raising=False)
    return home


@pytest.fixture
def emulator_factory(local_backend: Path,
                     monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorFactory]:
    """Start emulators by name (``"e2b"``, ``"cube"``), optionally with faults; each
    points the environment at itself and is stopped at the end of the test."""
    with ExitStack() as stack:
        def start(name: str, *, faults: Mapping[str, str] | None = None,
                  api_key: str = API_KEY) -> RunningEmulator:
            options = EmulatorOptions(api_key=api_key,
                                      faults=dict(faults or {}))  # type: ignore[arg-type]
            running = stack.enter_context(run_in_thread(name, options))
            for key, value in running.environment().items():
                monkeypatch.setenv(key, value)
            return running

        yield start


@pytest.fixture
def e2b_emulator(emulator_factory: EmulatorFactory) -> RunningEmulator:
    """An E2B-flavored emulator; the environment points the ``e2b`` SDK at it."""
    return emulator_factory("e2b")


@pytest.fixture
def cube_emulator(emulator_factory: EmulatorFactory) -> RunningEmulator:
    """A Cube-flavored emulator; the environment points the ``cubesandbox`` SDK at it."""
    return emulator_factory("cube")
