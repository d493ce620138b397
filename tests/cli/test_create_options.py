"""``psdk create``'s options: what a user reaches for (``--env``, ``--timeout``, ``--cpu``,
``--memory``, ``--disk``, ``--network``, ``--volume``) arrives in the spec the provider
gets, and what it means shows inside the sandbox. Run in this process against the memory
provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memory_provider import STORE, MemoryProvider, Store
from psdk_fixtures import Psdk

from provider_sdk import registry
from provider_sdk.capabilities import Capability
from provider_sdk.models import (
    Lifecycle,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    VolumeMount,
)

P = ("--provider", "memory")
SPECS: list[SandboxSpec] = []


class Recording(MemoryProvider):
    """The memory provider, declaring what ``create``'s options ask for, and keeping each
    spec it is given."""

    capabilities = MemoryProvider.capabilities | {
        Capability.RESOURCES_CPU, Capability.RESOURCES_MEMORY, Capability.RESOURCES_DISK,
        Capability.LIFECYCLE_AUTO_PAUSE, Capability.NETWORK_POLICY, Capability.NETWORK_INTERNET,
        Capability.NETWORK_ALLOW_OUT, Capability.NETWORK_DENY_OUT}

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        SPECS.append(spec)
        return await super()._create(spec)


@pytest.fixture
def recording(memory: Store) -> Iterator[list[SandboxSpec]]:
    SPECS.clear()
    registry.register("recording", Recording)
    try:
        yield SPECS
    finally:
        registry.unregister("recording")


def test_every_option_arrives_in_the_spec(psdk: Psdk, recording: list[SandboxSpec]) -> None:
    assert psdk("volume", "create", *P, "data").code == 0
    outcome = psdk("create", "--provider", "recording", "--env", "A=1", "--env", "B=x=y",
                   "--timeout", "1h30m", "--on-idle", "pause", "--cpu", "1.5", "--memory",
                   "2g", "--disk", "512", "--network", "internet", "--deny-out",
                   "10.0.0.0/8", "--allow-out", "192.0.2.0/24", "--volume", "data:/data:ro")
    assert outcome.code == 0, outcome.err
    [spec] = recording
    assert dict(spec.env) == {"A": "1", "B": "x=y"}
    assert spec.lifecycle == Lifecycle(idle_timeout=5400.0, on_idle="pause")
    assert spec.resources == Resources(cpu=1.5, memory_mb=2048, disk_mb=512)
    assert spec.network == NetworkPolicy(allow_internet=True, allow_out=("192.0.2.0/24",),
                                          deny_out=("10.0.0.0/8",))
    assert spec.volumes == (VolumeMount(volume="data", path="/data", read_only=True),)


def test_without_options_the_spec_is_the_default(psdk: Psdk,
                                                 recording: list[SandboxSpec]) -> None:
    assert psdk("create", "--provider", "recording").code == 0
    assert recording == [SandboxSpec()]


def test_env_and_volumes_reach_the_commands(psdk: Psdk, memory: Store) -> None:
    assert psdk("volume", "create", *P, "shared").code == 0
    made = psdk("create", *P, "--env", "GREETING=hello", "--volume", "shared:/mnt/shared")
    assert made.code == 0, made.err
    sandbox_id = made.out.strip()
    ran = psdk("exec", *P, sandbox_id, "sh", "-c", 'echo "$GREETING" > /mnt/shared/note; '
               'echo "$GREETING"')
    assert (ran.code, ran.out) == (0, "hello\n"), ran.err
    assert (Path(STORE.volumes["shared"]) / "note").read_text() == "hello\n"


@pytest.mark.parametrize(("option", "value", "words"), [
    ("--memory", "lots", "expected a size such as 512 (MiB), 512m or 2g"),
    ("--memory", "0", "expected a size"),
    ("--disk", "3t", "expected a size"),
    ("--cpu", "0", "expected a positive number of CPUs"),
    ("--timeout", "soon", "expected a duration"),
    ("--volume", "data", "expected VOLUME:/ABSOLUTE/PATH"),
    ("--volume", "data:relative", "expected VOLUME:/ABSOLUTE/PATH"),
    ("--network", "bridge", "invalid choice"),
])
def test_a_malformed_option_is_a_usage_error_that_names_it(
        psdk: Psdk, memory: Store, option: str, value: str, words: str) -> None:
    outcome = psdk("create", *P, option, value)
    assert outcome.code == 2
    assert outcome.err.startswith("psdk: error: ")
    assert option in outcome.err
    assert words in outcome.err
    assert STORE.boxes == {}


def test_an_option_the_provider_cannot_honour_is_one_line(psdk: Psdk, memory: Store) -> None:
    outcome = psdk("create", *P, "--cpu", "2")
    assert outcome.code == 1
    assert outcome.err.count("\n") == 1
    assert "does not support 'resources.cpu'" in outcome.err
    assert STORE.boxes == {}
