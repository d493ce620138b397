"""The Docker provider runs the shared contract suite on a real Docker Engine, on asyncio,
and the sections that lean on the event loop again on trio."""

from __future__ import annotations

from provider_sdk_contract import EventLoopContract, ProviderContract
from provider_sdk_docker import DEFAULT_TEMPLATE


class TestDockerContract(ProviderContract):
    provider_name = "docker"
    template_base = DEFAULT_TEMPLATE


class TestDockerContractOnTrio(EventLoopContract):
    """The provider is anyio throughout (the Docker SDK's blocking calls run in worker
    threads): its commands, processes, sessions and ports work on trio too."""

    provider_name = "docker"
    template_base = DEFAULT_TEMPLATE
    async_backend = "trio"
