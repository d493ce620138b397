"""sandbox-provider-sdk-contract: the contract every provider-sdk provider passes.

A provider opts in with a few lines. In a top-level ``conftest.py``::

    pytest_plugins = ["provider_sdk_contract.plugin"]

and in a test module::

    from provider_sdk_contract import ProviderContract

    class TestLocalContract(ProviderContract):
        provider_name = "local"

        def provider_options(self, tmp_path_factory):
            return {"home": str(tmp_path_factory.mktemp("psdk"))}

        known_failures = {"test_some_name": "why, with a link"}

The suite runs on asyncio; ``async_backend = "trio"`` in a test class runs it on trio
(``EventLoopContract`` holds the sections that lean on the event loop, where the whole
suite twice would cost too much).

Tests needing a capability the provider does not declare are skipped, with a reason, at
collection; ``known_failures`` are strict expected failures; a key naming no test is a
usage error. Every sandbox is tagged ``{"psdk-contract": <run id>}`` and killed after its
test, and anything left is swept when the session ends.

The hostile section (``hostile_*`` modules) runs what code written to attack would:
output floods, reads of devices and FIFOs, escapes from a timeout, fork bombs, memory
and disk floods, nested namespaces, reaching for the host. The promises every provider
makes run ungated; the rest are gated on the containment capabilities
(``exec.contained``, ``limits.*``, ``seal.*``), so a provider that declares one is held
to it.

This package owns the suite and its plugin; it must not know any backend.
"""

from provider_sdk_contract.base import TAG_KEY, ContractBase, Factory
from provider_sdk_contract.contract import EventLoopContract, ProviderContract
from provider_sdk_contract.markers import lacks, requires

__all__ = ["TAG_KEY", "ContractBase", "EventLoopContract", "Factory", "ProviderContract", "lacks",
           "requires"]
