"""Contract: calling an undeclared capability raises UnsupportedCapability.

Each capability backed by a call is checked on its own, and only for a provider that
does not declare it (the plugin skips the others with a reason), so every provider is
checked on every capability it lacks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import UnsupportedCapability
from provider_sdk.models import Lifecycle, NetworkPolicy, TemplateSpec
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import lacks

Call = Callable[[Sandbox, Factory], Awaitable[Any]]


def _ignore(_chunk: bytes) -> None:
    return None


# The call that needs each capability; none of them may create anything.
CALLS: dict[Capability, Call] = {
    Capability.EXEC_STREAM: lambda s, f: s.exec(["true"], on_stdout=_ignore),
    Capability.EXEC_USER: lambda s, f: s.exec(["true"], user="nobody"),
    Capability.PROCESS_BACKGROUND: lambda s, f: s.start(["true"]),
    Capability.SHELL_PERSISTENT: lambda s, f: s.shell(),
    Capability.PAUSE: lambda s, f: s.pause(),
    Capability.LIFECYCLE_AUTO_PAUSE: lambda s, f: f.sandbox(
        lifecycle=Lifecycle(idle_timeout=600, on_idle="pause")),
    Capability.LIFECYCLE_AUTO_RESUME: lambda s, f: f.sandbox(
        lifecycle=Lifecycle(auto_resume=True)),
    Capability.SNAPSHOT_FILESYSTEM: lambda s, f: s.snapshot(),
    Capability.SNAPSHOT_ROLLBACK: lambda s, f: s.rollback("psdk-no-snapshot"),
    Capability.VOLUMES: lambda s, f: f.provider.list_volumes(),
    Capability.NETWORK_POLICY: lambda s, f: f.sandbox(
        network=NetworkPolicy(allow_internet=True)),
    Capability.NETWORK_UPDATE: lambda s, f: s.update_network(NetworkPolicy()),
    Capability.METRICS: lambda s, f: s.metrics(),
    Capability.TEMPLATES_BUILD: lambda s, f: f.provider.build_template(
        TemplateSpec(name="psdk-contract", dockerfile="FROM scratch\n")),
    Capability.PORTS_EXPOSE: lambda s, f: s.expose(8000),
}


class UnsupportedContract(ContractBase):
    """Undeclared capabilities raise one typed error, never a silent no-op."""

    @pytest.mark.parametrize(
        "capability", [pytest.param(c, marks=lacks(c), id=str(c)) for c in CALLS])
    async def test_undeclared_capability_raises_unsupported_capability(
            self, sandbox: Sandbox, factory: Factory, capability: Capability) -> None:
        """The call needing a capability the provider lacks raises UnsupportedCapability
        naming it, with the provider set."""
        with pytest.raises(UnsupportedCapability) as caught:
            await CALLS[capability](sandbox, factory)
        assert caught.value.capability == str(capability)
        assert caught.value.provider == sandbox.provider.name
