"""Contract: network policy (``network.policy``).

Isolation is checked by what the sandbox has, never by trying to reach an address.
"""

from __future__ import annotations

from provider_sdk.capabilities import Capability
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import net_interfaces


class NetworkContract(ContractBase):
    """Network: without ``allow_internet`` a sandbox has only loopback."""

    @requires(Capability.NETWORK_POLICY)
    async def test_default_policy_leaves_only_loopback(self, factory: Factory) -> None:
        """With the default policy, /proc/net/dev lists only ``lo``."""
        sandbox = await factory.sandbox()
        result = await sandbox.exec(["cat", "/proc/net/dev"])
        assert result.exit_code == 0, result.stderr
        assert net_interfaces(result.stdout) == {"lo"}
