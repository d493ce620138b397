"""The Docker provider runs the shared contract suite on a real Docker Engine, on asyncio,
and the sections that lean on the event loop again on trio."""

from __future__ import annotations

from provider_sdk_contract import EventLoopContract, ProviderContract
from provider_sdk_docker import DEFAULT_TEMPLATE


class TestDockerContract(ProviderContract):
    provider_name = "docker"
    template_base = DEFAULT_TEMPLATE


class TestDockerContractOnTrio(EventLoopContract):
    """The provider is anyio throughout; the whole suite twice would cost too much."""

    provider_name = "docker"
    async_backend = "trio"
