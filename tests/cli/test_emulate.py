"""Emulator plugins: lookup, ``psdk emulate``'s errors, ``psdk contract --emulator``."""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from memory_provider import Store
from psdk_fixtures import Psdk

from provider_sdk import emulators
from provider_sdk.config import Secret
from provider_sdk.distributions import install_hint
from provider_sdk.errors import ConfigError

STARTED: list[emulators.EmulatorOptions] = []


@asynccontextmanager
async def echo_emulator(options: emulators.EmulatorOptions) -> AsyncIterator[
        emulators.RunningEmulator]:
    """A real TCP listener on 127.0.0.1 that answers each connection with its options."""

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.send(f"{options.backend} {dict(options.faults)}".encode())

    STARTED.append(options)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=options.port)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        assert options.api_key is not None
        yield emulators.RunningEmulator(
            name="memory", url=f"tcp://127.0.0.1:{port}",
            settings={"MEMORY_URL": f"tcp://127.0.0.1:{port}"},
            api_key_settings=("MEMORY_KEY",), api_key=options.api_key)
        tg.cancel_scope.cancel()


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``echo_emulator`` installed as the emulator ``memory``."""
    STARTED.clear()
    monkeypatch.setattr(emulators, "_entry_points", lambda: {"memory": lambda: echo_emulator})


def test_an_unknown_emulator_names_the_distribution_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulators, "_entry_points", dict)
    hint = install_hint("sandbox-provider-sdk-emulators")
    for name in ("e2b", "cube", "daytona"):
        with pytest.raises(ConfigError, match=re.escape(
                "it is in the distribution sandbox-provider-sdk-emulators; install it with: "
                f"{hint}; installed: none")):
            emulators.load(name)
    with pytest.raises(ConfigError, match=r"no emulator named 'nope'; installed: none$"):
        emulators.load("nope")


def test_emulate_without_the_emulators_says_in_one_line_what_to_install(
        psdk: Psdk, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulators, "_entry_points", dict)
    result = psdk("emulate", "e2b", "--api-key", "k")
    assert result.code == 1
    assert result.out == ""
    assert result.err.splitlines() == [
        "psdk: error: no emulator named 'e2b': it is in the distribution "
        "sandbox-provider-sdk-emulators; install it with: "
        f"{install_hint('sandbox-provider-sdk-emulators')}; installed: none"]


def test_a_plugin_that_fails_to_import_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> object:
        raise ImportError("no module named vendor")

    monkeypatch.setattr(emulators, "_entry_points", lambda: {"e2b": broken})
    hint = install_hint("sandbox-provider-sdk-emulators")
    with pytest.raises(ConfigError, match=r"failed to import .*reinstall "
                       + re.escape(f"sandbox-provider-sdk-emulators: {hint}")):
        emulators.load("e2b")


def test_options_hide_the_key_and_the_environment_reveals_it() -> None:
    options = emulators.EmulatorOptions(api_key="s3cret", faults={"resume_504": "2"})
    assert "s3cret" not in repr(options)
    running = emulators.RunningEmulator(name="x", url="http://127.0.0.1:1",
                                        settings={"X_URL": "http://127.0.0.1:1"},
                                        api_key_settings=("X_KEY", "Y_KEY"), api_key="s3cret")
    assert "s3cret" not in repr(running)
    assert running.environment() == {"X_URL": "http://127.0.0.1:1", "X_KEY": "s3cret",
                                     "Y_KEY": "s3cret"}


@pytest.mark.anyio
async def test_run_serves_on_loopback_until_the_block_exits(installed: None) -> None:
    options = emulators.EmulatorOptions(backend="docker", api_key="k", faults={"a": "1"})
    async with emulators.run("memory", options) as running:
        host, port = running.url.removeprefix("tcp://").split(":")
        async with await anyio.connect_tcp(host, int(port)) as stream:
            assert await stream.receive() == b"docker {'a': '1'}"
    with pytest.raises(OSError, match=r"(?i)connect"):
        await anyio.connect_tcp(host, int(port))


def test_emulate_reports_an_unknown_emulator_in_one_line(psdk: Psdk) -> None:
    outcome = psdk("emulate", "nope")
    assert outcome.code == 1
    assert outcome.err.startswith("psdk: error: no emulator named 'nope'")


def test_emulate_rejects_a_bad_port_and_a_bad_fault(psdk: Psdk) -> None:
    assert psdk("emulate", "e2b", "--port", "http").code == 2
    assert psdk("emulate", "e2b", "--fault", "novalue").code == 2


def test_contract_with_emulator_passes_its_settings_and_a_fresh_key(
        psdk: Psdk, memory: Store, installed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str] | None] = []

    def call(command: list[str], env: dict[str, str] | None) -> int:
        assert Path(command[command.index("--rootdir") + 2]).is_file()
        seen.append(env)
        return 0

    monkeypatch.setattr(subprocess, "call", call)
    assert psdk("contract", "--provider", "memory", "--emulator", "--backend", "docker").code == 0
    assert psdk("contract", "--provider", "memory", "--emulator").code == 0
    first, second = seen
    assert first is not None
    assert second is not None
    assert first["MEMORY_URL"].startswith("tcp://127.0.0.1:")
    assert len(first["MEMORY_KEY"]) >= 24
    assert first["MEMORY_KEY"] != second["MEMORY_KEY"]
    assert [o.backend for o in STARTED] == ["docker", "local"]
    assert all(isinstance(o.api_key, Secret) for o in STARTED)


def test_contract_without_emulator_inherits_the_environment(
        psdk: Psdk, memory: Store, installed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str] | None] = []
    monkeypatch.setattr(subprocess, "call", lambda command, env: seen.append(env) or 0)
    assert psdk("contract", "--provider", "memory").code == 0
    assert seen == [None]
    assert STARTED == []
