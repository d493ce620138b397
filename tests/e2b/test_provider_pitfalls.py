"""The E2B and Cube providers absorb each backend's pitfalls, proven through the emulator:
the login shell, environment across phases, lifecycle mapping, Cube's v1 routes, idle
timeouts, ``pausing``, info spelling, binary reads, network policy, rollback."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2b import AsyncSandbox
from e2b.exceptions import SandboxException
from provider_emulators import emulator, faults, provider_options

from provider_sdk import open_provider
from provider_sdk.emulators import RunningEmulator
from provider_sdk.errors import InvalidInput, PermissionDenied, UnsupportedCapability
from provider_sdk.models import Lifecycle, NetworkPolicy, Resources, SandboxState
from provider_sdk.provider import SandboxProvider

pytestmark = pytest.mark.anyio

_PATH = "/opt/psdk-x:/usr/bin:/bin"


@pytest.fixture(scope="module", params=["e2b", "cube"])
def running(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    home: Path = tmp_path_factory.mktemp(f"{request.param}-pitfalls")
    with emulator(request.param, home) as em:
        yield em


@pytest.fixture
async def provider(running: RunningEmulator) -> AsyncIterator[SandboxProvider]:
    async with open_provider(running.name, **provider_options(running)) as opened:
        yield opened
    faults(running, {"pause_delay": 0})


async def _eventually_state(provider: SandboxProvider, sandbox_id: str,
                            wanted: set[SandboxState], timeout: float = 30) -> SandboxState:
    """Poll the sandbox's state, by listing (on Cube, asking about one sandbox is use
    that restarts its idle window), until it is one of ``wanted`` (``KILLED``: gone)."""
    with anyio.fail_after(timeout):
        while True:
            found = {i.id: i.state for i in await provider.list()}
            state = found.get(sandbox_id, SandboxState.KILLED)
            if state in wanted:
                return state
            await anyio.sleep(0.1)


async def test_env_path_survives_the_login_shell_the_raw_sdk_loses_it(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    """envd's ``bash -l`` resets PATH for the raw SDK; the provider's call keeps it."""
    async with provider.create() as sandbox:
        result = await sandbox.exec('printf %s "$PATH"', env={"PATH": _PATH})
        assert result.stdout == _PATH
        if running.name == "e2b":  # the raw e2b SDK reaches the e2b flavor directly
            options = provider_options(running)
            raw = await AsyncSandbox.connect(sandbox.id, api_key=options["api_key"],
                                             api_url=options["api_url"],
                                             sandbox_url=options["sandbox_url"])
            plain = await raw.commands.run('printf %s "$PATH"', envs={"PATH": _PATH})
            assert plain.stdout != _PATH, "the emulator no longer shows the pitfall"


async def test_two_phase_task_keeps_the_sandbox_environment(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    """Phase one installs a tool on the spec's PATH; phase two, from another provider
    instance, runs it by name and sees the spec's variables."""
    bindir = f"/tmp/psdk-tool-{secrets.token_hex(4)}"
    env = {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "TOOL_MODE": "fast lane"}
    async with provider.create(env=env) as sandbox:
        install = await sandbox.exec(
            f"mkdir -p {bindir} && printf '#!/bin/sh\\necho \"tool:$TOOL_MODE\"\\n' > "
            f"{bindir}/psdk-tool && chmod +x {bindir}/psdk-tool")
        assert install.exit_code == 0, install.stderr
        async with open_provider(running.name, **provider_options(running)) as second:
            again = await second.connect(sandbox.id)
            result = await again.exec(["psdk-tool"])
            override = await again.exec('printf %s "$TOOL_MODE"', env={"TOOL_MODE": "slow"})
        assert (result.exit_code, result.stdout) == (0, "tool:fast lane\n")
        assert override.stdout == "slow"


async def test_binary_reads_stay_binary(provider: SandboxProvider) -> None:
    """Every byte value a command writes is read back exactly (Cube's SDK mangles them)."""
    async with provider.create() as sandbox:
        made = await sandbox.exec(["bash", "-c", 'for i in $(seq 0 255); do '
                                   'printf "\\\\$(printf %03o "$i")"; done > /tmp/psdk-all.bin'])
        assert made.exit_code == 0, made.stderr
        assert await sandbox.files.read("/tmp/psdk-all.bin") == bytes(range(256))


async def test_an_unreadable_file_is_permission_denied_at_once(
        provider: SandboxProvider) -> None:
    """envd's own failure to open a file is its 500, not a proxy's 502: the read is not
    retried as if the sandbox could not be reached, and says what went wrong."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/tmp/unreadable", b"x")
        await sandbox.exec("chmod 000 /tmp/unreadable")
        with anyio.fail_after(10), pytest.raises(PermissionDenied):
            await sandbox.files.read("/tmp/unreadable")


async def test_create_refuses_resources_the_backend_sizes_by_template(
        provider: SandboxProvider) -> None:
    """CPU and memory come with the template: ``resources.*`` is not declared, and asking
    for them is UnsupportedCapability naming the one asked for."""
    assert not provider.supports("resources.cpu")
    with pytest.raises(UnsupportedCapability) as caught:
        await provider.create(resources=Resources(cpu=2))
    assert caught.value.capability == "resources.cpu"


async def test_idle_timeout_slides_with_use_then_ends_the_sandbox(
        provider: SandboxProvider) -> None:
    """``Lifecycle(idle_timeout=3)``: used every half second for 6 s it lives on (Cube's
    idle window; E2B's deadline renewed on use); left alone, it ends."""
    sandbox = await provider.create(lifecycle=Lifecycle(idle_timeout=3))
    try:
        for _ in range(12):
            assert (await sandbox.exec(["true"])).exit_code == 0
            await anyio.sleep(0.5)
        assert {i.id: i.state for i in await provider.list()}.get(sandbox.id) == \
            SandboxState.RUNNING
        await _eventually_state(provider, sandbox.id, {SandboxState.KILLED})
    finally:
        await provider.kill(sandbox.id)


async def test_auto_pause_when_idle_then_auto_resume_on_use(
        provider: SandboxProvider) -> None:
    """``on_idle="pause"`` pauses an idle sandbox; with ``auto_resume`` the next command
    resumes it and runs, files intact."""
    async with provider.create(lifecycle=Lifecycle(idle_timeout=1, on_idle="pause",
                                                   auto_resume=True)) as sandbox:
        await sandbox.files.write("/tmp/psdk-kept.txt", b"kept")
        await _eventually_state(provider, sandbox.id, {SandboxState.PAUSED})
        result = await sandbox.exec(["cat", "/tmp/psdk-kept.txt"])
        assert result.stdout == "kept"
        assert (await provider.get_info(sandbox.id)).state == SandboxState.RUNNING


async def test_network_policy_is_sent_and_updated(provider: SandboxProvider) -> None:
    """The policy reaches the control plane at create (internet off, an allow list) and
    is replaced by ``update_network``; nothing is ever dialled."""
    policy = NetworkPolicy(allow_internet=False, allow_out=("203.0.113.7", "api.example.com"))
    async with provider.create(network=policy) as sandbox:
        info = await provider.get_info(sandbox.id)
        network: dict[str, Any] = info.extra["network"] or {}
        assert info.extra["allow_internet"] is False
        assert network.get("allowOut") == ["203.0.113.7", "api.example.com"]
        await sandbox.update_network(NetworkPolicy(allow_internet=True,
                                                   deny_out=("198.51.100.0/24",)))
        info = await provider.get_info(sandbox.id)
        network = info.extra["network"] or {}
        assert info.extra["allow_internet"] is True
        assert network.get("denyOut") == ["198.51.100.0/24"]
        assert not network.get("allowOut")


async def test_e2b_auto_resume_needs_on_idle_pause(running: RunningEmulator,
                                                   provider: SandboxProvider) -> None:
    """E2B resumes by itself only what it paused on idle; Cube resumes any paused one."""
    lifecycle = Lifecycle(auto_resume=True)
    if running.name == "e2b":
        with pytest.raises(InvalidInput, match="on_idle='pause'"):
            await provider.create(lifecycle=lifecycle)
        return
    async with provider.create(lifecycle=lifecycle) as sandbox:
        await sandbox.pause()
        assert (await sandbox.exec(["echo", "woke"])).stdout == "woke\n"


async def test_cube_create_falls_back_to_v1_where_the_raw_sdk_fails(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    """Released Cube answers 405 to the e2b SDK's ``POST /v2/sandboxes``; the provider
    falls back to ``POST /sandboxes`` (also for a request v2 could carry)."""
    if running.name != "cube":
        pytest.skip("Cube's routes only")
    options = provider_options(running)
    with pytest.raises(SandboxException) as caught:
        await AsyncSandbox.create(template=options["template"], timeout=60,
                                  api_key=options["api_key"], api_url=options["api_url"])
    assert caught.value.status_code == 405
    for _ in range(2):
        async with provider.create(lifecycle=Lifecycle(idle_timeout=60)) as sandbox:
            assert (await sandbox.exec(["echo", "v1"])).stdout == "v1\n"


async def test_cube_info_spelling_and_never_expiring_sandboxes(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    """Cube's info (camelCase and snake_case, no ``endAt`` when it never expires) is
    read whole: a default sandbox never expires, one with an idle window does."""
    if running.name != "cube":
        pytest.skip("Cube's info only")
    async with provider.create() as forever, \
            provider.create(lifecycle=Lifecycle(idle_timeout=600)) as idle:
        info = await provider.get_info(forever.id)
        assert info.expires_at is None
        assert info.created_at is not None
        assert info.resources.cpu
        assert info.resources.memory_mb
        assert (await provider.get_info(idle.id)).expires_at is not None
        listed = {i.id: i for i in await provider.list(metadata={})}
        assert listed[forever.id].expires_at is None


async def test_the_providers_own_label_is_hidden_and_reserved(
        provider: SandboxProvider) -> None:
    """The ``psdk`` label that keeps the working directory and idle window is set on the
    backend, shown in no ``metadata``, and refused in what a caller passes."""
    async with provider.create(cwd="/tmp", metadata={"owner": "alice"},
                               lifecycle=Lifecycle(idle_timeout=600)) as sandbox:
        seen = [sandbox.info, await provider.get_info(sandbox.id),
                *[i for i in await provider.list() if i.id == sandbox.id]]
        assert [dict(i.metadata) for i in seen] == [{"owner": "alice"}] * 3
        assert seen[1].extra["cwd"] == "/tmp"
    with pytest.raises(InvalidInput, match=rf"^\[{provider.name}\] metadata: label 'psdk'"):
        await provider.create(metadata={"psdk": "{}"})


async def test_cube_pause_waits_for_paused(running: RunningEmulator,
                                           provider: SandboxProvider) -> None:
    """Cube answers pause at once and shows ``pausing``; ``pause()`` returns at ``paused``."""
    if running.name != "cube":
        pytest.skip("Cube's pausing state only")
    faults(running, {"pause_delay": 1})
    served = faults(running)["served"]["pause_delay"]
    async with provider.create() as sandbox:
        info = await sandbox.pause()
        assert info.state == SandboxState.PAUSED
    assert faults(running)["served"]["pause_delay"] > served


async def test_cube_rollback_restores_in_place(running: RunningEmulator,
                                               provider: SandboxProvider) -> None:
    """``rollback`` (Cube's ``ex_rollback``) restores files in the same sandbox."""
    if running.name != "cube":
        pytest.skip("Cube's rollback only")
    async with provider.create() as sandbox:
        await sandbox.files.write("psdk-roll.txt", b"before")
        snap = await sandbox.snapshot()
        try:
            await sandbox.files.write("psdk-roll.txt", b"after")
            info = await sandbox.rollback(snap)
            assert (info.id, info.state) == (sandbox.id, SandboxState.RUNNING)
            assert await sandbox.files.read("psdk-roll.txt") == b"before"
        finally:
            await provider.delete_snapshot(snap.id)


@pytest.mark.parametrize("spelling", ["camel", "snake"])
def test_cube_info_is_read_in_either_spelling(spelling: str) -> None:
    """A payload in only one of Cube's spellings, without ``endAt``, parses the same."""
    from provider_sdk_e2b.cube import _to_remote

    camel = {"sandboxID": "c1", "templateID": "tpl-x", "startedAt": "2026-12-02T10:00:00Z",
             "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "envdVersion": "0.6.13",
             "state": "pausing", "metadata": {"k": "v"}}
    snake = {"sandbox_id": "c1", "template_id": "tpl-x",
             "started_at": "2026-12-02T10:00:00.123456789+00:00", "cpu_count": 2,
             "memory_mb": 512, "disk_size_mb": 1024, "envd_version": "0.6.13",
             "state": "pausing", "metadata": {"k": "v"}}
    remote = _to_remote(camel if spelling == "camel" else snake)
    assert (remote.id, remote.template, remote.state, remote.metadata) == (
        "c1", "tpl-x", "pausing", {"k": "v"})
    assert (remote.cpu, remote.memory_mb, remote.disk_mb) == (2, 512, 1024)
    assert remote.started_at is not None
    assert (remote.started_at.year, remote.started_at.hour) == (2026, 10)
    assert remote.end_at is None
