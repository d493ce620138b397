"""The emulator backed by the Docker provider: the same SDK calls work there too.

Skips without a Docker Engine and the base image, except under CI (``CI=true``), which
has both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2b import Sandbox
from engines import require_docker
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk.emulators import EmulatorOptions, RunningEmulator


@pytest.fixture
def docker_emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningEmulator]:
    require_docker()
    options = EmulatorOptions(api_key="docker-key", backend="docker")
    with run_in_thread("e2b", options) as running:
        for key, value in running.environment().items():
            monkeypatch.setenv(key, value)
        yield running


def test_sdk_calls_work_on_the_docker_backend(docker_emulator: RunningEmulator) -> None:
    with Sandbox.create(envs={"FOO": "docker"}) as sandbox:
        result = sandbox.commands.run("echo $FOO; pwd")
        assert result.stdout == "docker\n/home/user\n"
        sandbox.files.write("data.bin", b"\x00\xffdocker")
        assert bytes(sandbox.files.read("/home/user/data.bin", format="bytes")) == \
            b"\x00\xffdocker"
        assert sandbox.pause() is True
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert resumed.commands.run("cat data.bin").stdout == "\x00\ufffddocker"
