"""The core refuses what a provider does not declare before any hook runs: each part of
a spec, a network update and a shell's stdin and streams needs its capability, the error
names it, and the provider's hook is never called. Declared, the same call reaches the
hook. Capabilities narrowed on an instance are what that instance answers for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from memory_provider import STORE, MemoryControl, MemoryProvider, Store

from provider_sdk import registry
from provider_sdk.capabilities import Capability
from provider_sdk.errors import UnsupportedCapability
from provider_sdk.models import (
    Lifecycle,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    VolumeMount,
)
from provider_sdk.provider import Command

pytestmark = pytest.mark.anyio

_LOOPBACK = ("127.0.0.1/32",)


class Recording(MemoryProvider):
    """The memory provider, recording the hooks the core calls, without templates or
    read-only volumes (which it does) and with the default network policy."""

    capabilities = (MemoryProvider.capabilities
                    - {Capability.TEMPLATES, Capability.VOLUMES_READ_ONLY}) | {
        Capability.NETWORK_POLICY}
    calls: list[str]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls = []

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        self.calls.append("_create")
        return await super()._create(spec)

    async def _exec(self, sandbox_id: str, command: Command) -> Any:
        self.calls.append("_exec")
        return await super()._exec(sandbox_id, command)


def _with(*extra: Capability) -> Recording:
    """A recording provider whose class declares ``extra`` too (checked as the registry
    checks a plugin)."""
    cls = type("Declaring", (Recording,), {"capabilities": Recording.capabilities | set(extra)})
    return registry.check_provider_class(cls, "declaring")()


# Each capability a part of a spec needs (beyond those with hooks), and such a spec.
SPECS: list[tuple[Capability, SandboxSpec]] = [
    (Capability.TEMPLATES, SandboxSpec(template="psdk-template")),
    (Capability.RESOURCES_CPU, SandboxSpec(resources=Resources(cpu=1))),
    (Capability.RESOURCES_MEMORY, SandboxSpec(resources=Resources(memory_mb=256))),
    (Capability.RESOURCES_DISK, SandboxSpec(resources=Resources(disk_mb=1024))),
    (Capability.VOLUMES_READ_ONLY,
     SandboxSpec(volumes=[VolumeMount(volume="v", path="/mnt/v", read_only=True)])),
    (Capability.NETWORK_INTERNET, SandboxSpec(network=NetworkPolicy(allow_internet=True))),
    (Capability.NETWORK_ALLOW_OUT, SandboxSpec(network=NetworkPolicy(allow_out=_LOOPBACK))),
    (Capability.NETWORK_DENY_OUT, SandboxSpec(network=NetworkPolicy(deny_out=_LOOPBACK))),
    (Capability.LIFECYCLE_AUTO_KILL,
     SandboxSpec(lifecycle=Lifecycle(idle_timeout=60, on_idle="kill"))),
]


@pytest.mark.parametrize(("capability", "spec"), SPECS, ids=[str(c) for c, _ in SPECS])
async def test_a_spec_part_not_declared_is_refused_before_the_create_hook(
        memory: Store, capability: Capability, spec: SandboxSpec) -> None:
    provider = Recording()
    assert not provider.supports(capability)
    with pytest.raises(UnsupportedCapability) as caught:
        await provider.create(spec)
    assert caught.value.capability == str(capability)
    assert caught.value.provider == "memory"
    assert provider.calls == []
    assert STORE.boxes == {}


@pytest.mark.parametrize(("capability", "spec"), SPECS, ids=[str(c) for c, _ in SPECS])
async def test_the_same_spec_part_declared_reaches_the_create_hook(
        memory: Store, capability: Capability, spec: SandboxSpec) -> None:
    provider = _with(capability)
    for mount in spec.volumes:
        await provider.create_volume(mount.volume)
    sandbox = await provider.create(spec)
    assert provider.calls == ["_create"]
    await sandbox.kill()


async def test_a_network_update_needs_what_its_policy_opens(memory: Store) -> None:
    """``update_network`` checks the policy as create does, before the control plane's
    ``update_network``."""
    updates: list[NetworkPolicy] = []

    class Updates(MemoryControl):
        async def update_network(self, sandbox_id: str, policy: NetworkPolicy) -> None:
            updates.append(policy)

    cls = type("Updating", (Recording,), {
        "capabilities": Recording.capabilities | {Capability.NETWORK_UPDATE},
        "control_role": Updates})
    provider = registry.check_provider_class(cls, "updating")()
    sandbox = await provider.create()
    for policy, capability in ((NetworkPolicy(allow_internet=True), "network.internet"),
                               (NetworkPolicy(allow_out=_LOOPBACK), "network.allow_out"),
                               (NetworkPolicy(deny_out=_LOOPBACK), "network.deny_out")):
        with pytest.raises(UnsupportedCapability) as caught:
            await sandbox.update_network(policy)
        assert (caught.value.capability, caught.value.sandbox_id) == (capability, sandbox.id)
    assert updates == []
    await sandbox.update_network(NetworkPolicy())
    assert updates == [NetworkPolicy()]
    await sandbox.kill()


async def test_shell_stdin_is_refused_before_the_shell_runs_anything(memory: Store) -> None:
    provider = Recording()
    assert not provider.supports(Capability.SHELL_STDIN)
    sandbox = await provider.create()
    async with await sandbox.shell() as shell:
        ran = list(provider.calls)
        with pytest.raises(UnsupportedCapability) as caught:
            await shell.run("cat", stdin=b"psdk")
        assert caught.value.capability == "shell.stdin"
        assert provider.calls == ran
    await sandbox.kill()


async def test_shell_stdin_declared_reaches_the_command(memory: Store) -> None:
    provider = _with(Capability.SHELL_STDIN)
    sandbox = await provider.create()
    async with await sandbox.shell() as shell:
        assert (await shell.run("cat", stdin=b"psdk")).stdout == "psdk"
    await sandbox.kill()


async def test_shell_output_callbacks_need_exec_stream(memory: Store) -> None:
    cls = type("Quiet", (Recording,), {
        "capabilities": Recording.capabilities - {Capability.EXEC_STREAM}})
    provider = registry.check_provider_class(cls, "quiet")()
    sandbox = await provider.create()
    async with await sandbox.shell() as shell:
        ran = list(provider.calls)
        with pytest.raises(UnsupportedCapability) as caught:
            await shell.run("echo hi", on_stdout=print)
        assert caught.value.capability == "exec.stream"
        assert provider.calls == ran
    await sandbox.kill()


class Narrowing(Recording):
    """A provider whose instances hold what they are told to."""

    capabilities = Recording.capabilities | {Capability.VOLUMES_READ_ONLY}

    def __init__(self, held: Iterable[Capability],
                 why: Mapping[Capability, str] | None = None) -> None:
        super().__init__()
        self._hold_only(held, why)


async def test_an_instance_answers_for_what_it_holds(memory: Store) -> None:
    lacking = {Capability.VOLUMES, Capability.VOLUMES_SHARED, Capability.VOLUMES_READ_ONLY}
    narrowed = Narrowing(Narrowing.capabilities - lacking,
                         why={Capability.VOLUMES: "no volumes in this mode"})
    whole = Narrowing(Narrowing.capabilities)
    assert (whole.supports("volumes"), narrowed.supports("volumes")) == (True, False)
    assert lacking <= Narrowing.capabilities  # the class keeps its declaration
    assert registry.check_provider_class(Narrowing, "narrowing") is Narrowing
    with pytest.raises(UnsupportedCapability, match="no volumes in this mode") as caught:
        await narrowed.create(volumes=[VolumeMount(volume="v", path="/mnt/v")])
    assert caught.value.capability == "volumes"
    assert narrowed.calls == []


def test_an_instance_cannot_hold_more_or_break_what_a_capability_needs() -> None:
    with pytest.raises(TypeError, match=r"network\.update"):
        Narrowing(Recording.capabilities | {Capability.NETWORK_UPDATE})
    with pytest.raises(TypeError, match=r"volumes\.read_only needs volumes"):
        Narrowing(Narrowing.capabilities - {Capability.VOLUMES, Capability.VOLUMES_SHARED})
