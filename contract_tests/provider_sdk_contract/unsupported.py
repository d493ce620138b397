"""Contract: calling an undeclared capability raises UnsupportedCapability.

Each capability backed by a call, or by a part of a spec, is checked on its own, and
only for a provider that does not declare it (the plugin skips the others with a
reason), so every provider is checked on every capability it lacks. A call that needs
another capability first (a shell's stdin needs the shell) runs only where the provider
declares that one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import UnsupportedCapability
from provider_sdk.models import Lifecycle, NetworkPolicy, Resources, TemplateSpec, VolumeMount
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import lacks, requires

Call = Callable[[Sandbox, Factory], Awaitable[Any]]

# Addresses a policy names; nothing here is reached (the call is refused first).
_LOOPBACK = ("127.0.0.1/32",)


def _ignore(_chunk: bytes) -> None:
    return None


async def _shell_stdin(sandbox: Sandbox) -> None:
    async with await sandbox.shell() as shell:
        await shell.run("cat", stdin=b"psdk")


# The call that needs each capability; none of them may create anything.
CALLS: dict[Capability, Call] = {
    Capability.EXEC_STREAM: lambda s, f: s.exec(["true"], on_stdout=_ignore),
    Capability.EXEC_USER: lambda s, f: s.exec(["true"], user="nobody"),
    Capability.PROCESS_BACKGROUND: lambda s, f: s.start(["true"]),
    Capability.SHELL_PERSISTENT: lambda s, f: s.shell(),
    Capability.SHELL_STDIN: lambda s, f: _shell_stdin(s),
    Capability.PAUSE: lambda s, f: s.pause(),
    Capability.LIFECYCLE_AUTO_PAUSE: lambda s, f: f.sandbox(
        lifecycle=Lifecycle(idle_timeout=600, on_idle="pause")),
    Capability.LIFECYCLE_AUTO_RESUME: lambda s, f: f.sandbox(
        lifecycle=Lifecycle(auto_resume=True)),
    Capability.LIFECYCLE_AUTO_KILL: lambda s, f: f.sandbox(
        lifecycle=Lifecycle(idle_timeout=600, on_idle="kill")),
    Capability.SNAPSHOT_FILESYSTEM: lambda s, f: s.snapshot(),
    Capability.SNAPSHOT_ROLLBACK: lambda s, f: s.rollback("psdk-no-snapshot"),
    Capability.VOLUMES: lambda s, f: f.provider.list_volumes(),
    Capability.VOLUMES_READ_ONLY: lambda s, f: f.sandbox(volumes=[
        VolumeMount(volume="psdk-no-volume", path="/mnt/psdk", read_only=True)]),
    Capability.NETWORK_POLICY: lambda s, f: f.sandbox(
        network=NetworkPolicy(allow_internet=True)),
    Capability.NETWORK_INTERNET: lambda s, f: f.sandbox(
        network=NetworkPolicy(allow_internet=True)),
    Capability.NETWORK_ALLOW_OUT: lambda s, f: f.sandbox(
        network=NetworkPolicy(allow_out=_LOOPBACK)),
    Capability.NETWORK_DENY_OUT: lambda s, f: f.sandbox(
        network=NetworkPolicy(deny_out=_LOOPBACK)),
    Capability.NETWORK_UPDATE: lambda s, f: s.update_network(NetworkPolicy()),
    Capability.METADATA_UPDATE: lambda s, f: s.set_metadata({"psdk-label": "set"}),
    Capability.METRICS: lambda s, f: s.metrics(),
    Capability.RESOURCES_CPU: lambda s, f: f.sandbox(resources=Resources(cpu=1)),
    Capability.RESOURCES_MEMORY: lambda s, f: f.sandbox(resources=Resources(memory_mb=512)),
    Capability.RESOURCES_DISK: lambda s, f: f.sandbox(resources=Resources(disk_mb=1024)),
    Capability.TEMPLATES: lambda s, f: f.sandbox(template="psdk-no-template"),
    Capability.TEMPLATES_BUILD: lambda s, f: f.provider.build_template(
        TemplateSpec(name="psdk-contract", dockerfile="FROM scratch\n")),
    Capability.PORTS_EXPOSE: lambda s, f: s.expose(8000),
    Capability.CODE_INTERPRETER: lambda s, f: s.code.run("1"),
}

# What a call needs before it reaches the capability it shows missing.
FIRST: dict[Capability, Capability] = {
    Capability.SHELL_STDIN: Capability.SHELL_PERSISTENT,
    Capability.VOLUMES_READ_ONLY: Capability.VOLUMES,
    Capability.NETWORK_INTERNET: Capability.NETWORK_POLICY,
    Capability.NETWORK_ALLOW_OUT: Capability.NETWORK_POLICY,
    Capability.NETWORK_DENY_OUT: Capability.NETWORK_POLICY,
}


def _marks(capability: Capability) -> list[pytest.MarkDecorator]:
    first = FIRST.get(capability)
    return [lacks(capability), *([requires(first)] if first is not None else [])]


class UnsupportedContract(ContractBase):
    """Undeclared capabilities raise one typed error, never a silent no-op."""

    @pytest.mark.parametrize(
        "capability", [pytest.param(c, marks=_marks(c), id=str(c)) for c in CALLS])
    async def test_undeclared_capability_raises_unsupported_capability(
            self, sandbox: Sandbox, factory: Factory, capability: Capability) -> None:
        """The call needing a capability the provider lacks raises UnsupportedCapability
        naming it, with the provider set."""
        with pytest.raises(UnsupportedCapability) as caught:
            await CALLS[capability](sandbox, factory)
        assert caught.value.capability == str(capability)
        assert caught.value.provider == sandbox.provider.name
