"""Contract: changing a running sandbox's network policy (``network.update``).

As in :mod:`provider_sdk_contract.network`, isolation is checked by what the sandbox
has, never by reaching for an address: a closed sandbox has only loopback, and its
loopback still answers (a connection to a port nothing listens on is refused by the
sandbox's own stack, not unreachable).
"""

from __future__ import annotations

from provider_sdk.capabilities import Capability
from provider_sdk.models import NetworkPolicy
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import net_interfaces

__all__ = ["NetworkUpdateContract"]

# Port 9 (discard) on the sandbox's own loopback: nothing listens there.
_LOOPBACK_PROBE = "exec 3<>/dev/tcp/127.0.0.1/9"


async def _assert_only_loopback(sandbox: Sandbox) -> None:
    devices = await sandbox.exec(["cat", "/proc/net/dev"])
    assert devices.exit_code == 0, devices.stderr
    assert net_interfaces(devices.stdout) == {"lo"}
    probe = await sandbox.exec(["bash", "-c", _LOOPBACK_PROBE], env={"LC_ALL": "C"})
    assert probe.exit_code != 0
    assert "Connection refused" in probe.stderr, probe.stderr


class NetworkUpdateContract(ContractBase):
    """Network updates: a policy given to a running sandbox replaces the one it had."""

    @requires(Capability.NETWORK_UPDATE, Capability.NETWORK_INTERNET)
    async def test_update_network_closes_an_open_sandbox(self, factory: Factory) -> None:
        """A sandbox created with internet access, updated to the default policy, has
        only loopback, which still works."""
        sandbox = await factory.sandbox(network=NetworkPolicy(allow_internet=True))
        await sandbox.update_network(NetworkPolicy())
        await _assert_only_loopback(sandbox)

    @requires(Capability.NETWORK_UPDATE, Capability.NETWORK_ALLOW_OUT)
    async def test_update_network_to_a_loopback_allow_list_opens_nothing_else(
            self, sandbox: Sandbox) -> None:
        """An update to an allow list naming loopback alone, then back to the default,
        leaves the sandbox answering with only loopback each time."""
        await sandbox.update_network(NetworkPolicy(allow_out=("127.0.0.1/32",)))
        await _assert_only_loopback(sandbox)
        await sandbox.update_network(NetworkPolicy())
        await _assert_only_loopback(sandbox)
