"""The Docker provider runs the shared contract suite on a real Docker Engine, on asyncio
and again on trio."""

from __future__ import annotations

from provider_sdk_contract import ProviderContract
from provider_sdk_docker import DEFAULT_TEMPLATE


class TestDockerContract(ProviderContract):
    provider_name = "docker"
    template_base = DEFAULT_TEMPLATE


class TestDockerContractOnTrio(TestDockerContract):
    """The provider is anyio throughout (the Docker SDK's blocking calls run in worker
    threads)."""

    async_backend = "trio"
