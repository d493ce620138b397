"""The Docker provider on a real Engine: the container a sandbox is, checked the way a
security reviewer would (inspect it); errors; and ``psdk`` driving one sandbox from
several processes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import docker
import docker.errors
import pytest
from provider_sdk_docker import DEFAULT_TEMPLATE, DockerProvider, _ports
from provider_sdk_docker._commands import DockerCommands
from provider_sdk_docker._control import CAPABILITIES_KEPT, DockerControl
from provider_sdk_docker._files import DockerFiles
from provider_sdk_docker._labels import LABEL
from provider_sdk_docker._ports import DockerPorts

from provider_sdk import errors, registry
from provider_sdk.models import Lifecycle, NetworkPolicy, Resources, SandboxState, TemplateSpec

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def engine() -> Iterator[docker.APIClient]:
    client = docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                              or "unix:///var/run/docker.sock", version="auto")
    yield client
    client.close()


@pytest.fixture
async def provider() -> AsyncIterator[DockerProvider]:
    provider = DockerProvider()
    made: list[str] = []
    original = provider._create

    async def tracked(spec: Any) -> Any:
        info = await original(spec)
        made.append(info.id)
        return info

    provider._create = tracked  # type: ignore[method-assign]
    try:
        yield provider
    finally:
        for sandbox_id in made:
            await provider.kill(sandbox_id)
        await provider.aclose()


async def test_container_has_the_safe_defaults(provider: DockerProvider,
                                               engine: docker.APIClient) -> None:
    sandbox = await provider.create(resources=Resources(cpu=0.5, memory_mb=256))
    data = engine.inspect_container(f"psdk-{sandbox.id}")
    host = data["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == sorted(CAPABILITIES_KEPT)
    assert "SYS_ADMIN" not in host["CapAdd"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == provider.pids_limit
    assert host["Memory"] == 256 << 20
    assert host["MemorySwap"] == 256 << 20  # no swap on top
    assert host["NanoCpus"] == 500_000_000
    assert host["NetworkMode"] == "none"
    assert not host.get("Binds")
    # No host path and no Docker socket: only the sandbox's own bounded directories,
    # where the Engine has no storage quotas.
    bounded = sandbox.info.extra.get("bounded_dirs", [])
    assert sorted((m["Type"], m["Destination"]) for m in data["Mounts"]) == \
        sorted(("volume", path) for path in bounded)
    assert all(m["Name"].startswith(f"psdk-{sandbox.id}-bounded-") for m in data["Mounts"])
    assert data["Config"]["Labels"][LABEL] == sandbox.id
    # Inside: only loopback, and a bounding set without the dropped capabilities.
    net = await sandbox.exec(["cat", "/proc/net/dev"])
    assert [line.split(":")[0].strip() for line in net.stdout.splitlines()[2:]] == ["lo"]
    status = await sandbox.exec(["grep", "-E", "^(CapBnd|NoNewPrivs)", "/proc/self/status"])
    fields = dict(line.split(":\t") for line in status.stdout.splitlines())
    assert fields["NoNewPrivs"] == "1"
    assert int(fields["CapBnd"], 16) & (1 << 21) == 0  # CAP_SYS_ADMIN


async def test_default_memory_limit_applies_without_resources(
        provider: DockerProvider, engine: docker.APIClient) -> None:
    sandbox = await provider.create()
    assert engine.inspect_container(f"psdk-{sandbox.id}")["HostConfig"]["Memory"] == \
        provider.memory_mb << 20
    assert (await sandbox.refresh()).resources.memory_mb == provider.memory_mb


async def test_a_missing_image_is_template_not_found_naming_it(
        provider: DockerProvider) -> None:
    with pytest.raises(errors.TemplateNotFound, match="psdk-no-such-image:1"):
        await provider.create(template="psdk-no-such-image:1")


async def test_the_default_template_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_DOCKER_TEMPLATE", "psdk-absent:latest")
    async with DockerProvider() as provider:
        assert provider.template == "psdk-absent:latest"
        with pytest.raises(errors.TemplateNotFound, match="psdk-absent:latest"):
            await provider.create()


async def test_a_setting_changed_on_the_provider_reaches_its_sandboxes(
        provider: DockerProvider, engine: docker.APIClient) -> None:
    # The settings live where the roles read them: an assignment is not a copy that
    # the control plane never sees.
    provider.memory_mb = 192
    provider.pids_limit = 99
    sandbox = await provider.create()
    host = engine.inspect_container(f"psdk-{sandbox.id}")["HostConfig"]
    assert (host["Memory"], host["PidsLimit"]) == (192 << 20, 99)
    assert (provider.memory_mb, provider.pids_limit) == (192, 99)


async def test_the_provider_is_made_of_roles_not_hooks() -> None:
    # Every hook is the base's, passing each call to a role: the registry checks such a
    # provider by its roles when it is made.
    assert not registry._hook_based(DockerProvider)
    async with DockerProvider(host_control=False) as provider:
        roles = provider._composed()
    assert (type(roles.control), type(roles.commands), type(roles.files),
            type(roles.ports)) == (DockerControl, DockerCommands, DockerFiles, DockerPorts)


async def test_a_malformed_setting_is_a_config_error_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_DOCKER_PIDS_LIMIT", "lots")
    with pytest.raises(errors.ConfigError, match="PSDK_DOCKER_PIDS_LIMIT"):
        DockerProvider()


async def test_an_engine_that_is_down_is_unavailable_with_a_clear_message(
        tmp_path: Any) -> None:
    async with DockerProvider(base_url=f"unix://{tmp_path}/no-dockerd.sock") as provider:
        with pytest.raises(errors.Unavailable, match="cannot reach the Docker Engine") as caught:
            await provider.list()
        assert "no-dockerd.sock" in str(caught.value)


async def test_egress_lists_are_refused_not_ignored(provider: DockerProvider) -> None:
    """Neither list is declared: each is refused naming its capability, with the reason,
    and nothing is made (other tests may run sandboxes on the same Engine meanwhile)."""
    before = {info.id for info in await provider.list()}
    for policy, capability in ((NetworkPolicy(allow_out=["127.0.0.1/32"]), "network.allow_out"),
                               (NetworkPolicy(allow_internet=True, deny_out=["127.0.0.1/32"]),
                                "network.deny_out")):
        assert not provider.supports(capability)
        with pytest.raises(errors.UnsupportedCapability, match="per-destination") as caught:
            await provider.create(network=policy)
        assert caught.value.capability == capability
    assert {info.id for info in await provider.list()} <= before


async def test_an_idle_timeout_is_refused_not_ignored(provider: DockerProvider) -> None:
    """``lifecycle.auto_kill`` is not declared: the error says what to use instead."""
    assert not provider.supports("lifecycle.auto_kill")
    with pytest.raises(errors.UnsupportedCapability, match="SandboxManager") as caught:
        await provider.create(lifecycle=Lifecycle(idle_timeout=60))
    assert caught.value.capability == "lifecycle.auto_kill"


async def test_foreign_containers_are_neither_listed_nor_found(
        provider: DockerProvider, engine: docker.APIClient) -> None:
    foreign = engine.create_container(DEFAULT_TEMPLATE, command=["true"],
                                      name="psdk-f0f0f0f0f0f0",
                                      host_config=engine.create_host_config(network_mode="none"))
    try:
        assert "f0f0f0f0f0f0" not in [i.id for i in await provider.list()]
        with pytest.raises(errors.SandboxNotFound):
            await provider.get_info("f0f0f0f0f0f0")
        await provider.kill("f0f0f0f0f0f0")  # not ours: untouched
        assert engine.inspect_container(foreign["Id"])["Id"] == foreign["Id"]
    finally:
        engine.remove_container(foreign["Id"], force=True)


async def test_labels_are_the_metadata_and_survive_a_snapshot_cleanly(
        provider: DockerProvider, engine: docker.APIClient) -> None:
    source = await provider.create(metadata={"owner": "alice", "psdk-test": "labels"})
    snapshot = await source.snapshot()
    try:
        copy = await provider.create(snapshot=snapshot.id, metadata={"owner": "bob"})
        assert (await copy.refresh()).metadata == {"owner": "bob"}
        alice = await provider.list(metadata={"owner": "alice"})
        assert [i.id for i in alice] == [source.id]
    finally:
        await provider.delete_snapshot(snapshot.id)
    image_id = snapshot.extra["image_id"]
    assert engine.inspect_image(image_id)["Id"] == image_id  # its sandbox still uses it
    await copy.kill()
    with pytest.raises(docker.errors.ImageNotFound):
        engine.inspect_image(image_id)  # gone with its last sandbox


async def test_process_tree_of_a_timed_out_command_is_gone_from_the_container(
        provider: DockerProvider, engine: docker.APIClient) -> None:
    sandbox = await provider.create()
    with pytest.raises(errors.CommandTimeout):
        await sandbox.exec(["sh", "-c", "setsid sleep 300 & sleep 300"], timeout=1)
    top = engine.top(f"psdk-{sandbox.id}", ps_args="-eo pid,args")
    assert not [p for p in top["Processes"] if "sleep 300" in p[-1]]


async def test_a_paused_sandbox_keeps_its_processes_frozen(
        provider: DockerProvider, engine: docker.APIClient) -> None:
    sandbox = await provider.create()
    await sandbox.pause()
    assert engine.inspect_container(f"psdk-{sandbox.id}")["State"]["Paused"] is True
    assert (await sandbox.refresh()).state == SandboxState.PAUSED
    with pytest.raises(errors.SandboxNotRunning):
        await sandbox.exec(["true"])
    await sandbox.resume()
    assert (await sandbox.exec(["true"])).ok


async def test_template_build_has_no_network(provider: DockerProvider) -> None:
    spec = TemplateSpec(name="psdk-test-netless", dockerfile=(
        f"FROM {DEFAULT_TEMPLATE}\nRUN cat /proc/net/dev > /netdev\n"))
    template = await provider.build_template(spec, force=True)
    try:
        sandbox = await provider.create(template=template.id)
        text = await sandbox.files.read_text("/netdev")
        assert [line.split(":")[0].strip() for line in text.splitlines()[2:]] == ["lo"]
    finally:
        await provider.delete_template(template.id)


# ----------------------------------------------------------------- psdk processes


def psdk(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PSDK_PROVIDER", "PSDK_CONFIG")}
    return subprocess.run([sys.executable, "-m", "provider_sdk.cli", *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=env, timeout=120)


def test_psdk_run_on_docker_with_a_template() -> None:
    done = psdk("run", "--provider", "docker", "--template", DEFAULT_TEMPLATE, "--",
                "sh", "-c", "cat /etc/debian_version; exit 7")
    assert done.returncode == 7, done.stderr
    assert done.stdout.strip().split(".")[0] == "12"


def test_one_sandbox_driven_by_several_psdk_processes() -> None:
    created = psdk("create", "--provider", "docker", "--label", "psdk-test=cli")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    try:
        listed = psdk("ls", "--provider", "docker", "--label", "psdk-test=cli", "--json")
        assert [s["id"] for s in json.loads(listed.stdout)] == [sandbox_id]
        assert psdk("pause", "--provider", "docker", sandbox_id).returncode == 0
        info = json.loads(psdk("info", "--provider", "docker", sandbox_id, "--json").stdout)
        assert info["state"] == "paused"
        assert psdk("resume", "--provider", "docker", sandbox_id).returncode == 0
        ran = psdk("exec", "--provider", "docker", sandbox_id, "--", "echo", "hi")
        assert (ran.returncode, ran.stdout) == (0, "hi\n")
    finally:
        assert psdk("kill", "--provider", "docker", sandbox_id).returncode == 0
    gone = psdk("info", "--provider", "docker", sandbox_id)
    assert gone.returncode == 1
    assert "no sandbox" in gone.stderr


async def test_stdin_written_and_closed_at_once_after_start_is_never_lost(
        provider: DockerProvider) -> None:
    """The pid comes back only once stdin is held open and close is handled."""
    sandbox = await provider.create()
    results: list[bytes] = []

    async def one(n: int) -> None:
        process = await sandbox.start(["cat"])
        await process.write_stdin(f"line {n}\n".encode())
        await process.close_stdin()
        results.append((await process.wait()).stdout_bytes)

    async with anyio.create_task_group() as tg:
        for n in range(10):
            tg.start_soon(one, n)
    assert sorted(results) == sorted(f"line {n}\n".encode() for n in range(10))


async def test_a_relay_the_engine_never_starts_is_a_prompt_502(
        provider: DockerProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection to an exposed port whose relay exec the Engine never starts is
    answered 502, saying so, within the relay's deadline: the wait for the Engine is
    bounded as the connection inside is."""
    sandbox = await provider.create()
    exposed = await sandbox.expose(8080)

    async def never_started(exec_id: str, *, sandbox_id: str) -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(provider.engine, "attach", never_started)
    monkeypatch.setattr(_ports, "CONNECT_DEADLINE", 1.0)
    host, _, port = exposed.base_url.removeprefix("http://").rstrip("/").partition(":")
    answer = b""
    with anyio.fail_after(10):
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\nX-Psdk-Token: "
                              + exposed.token.reveal().encode() + b"\r\n\r\n")
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    answer += await stream.receive()
    assert answer.startswith(b"HTTP/1.1 502 "), answer[:200]
    assert b"did not start and connect within 1 s" in answer, answer[:400]
