"""provider-sdk for the OpenAI Agents SDK: a sandbox client, ``backend_id`` ``"psdk"``,
that runs a ``SandboxAgent`` on any provider::

    from agents import RunConfig, Runner
    from agents.sandbox import SandboxAgent, SandboxRunConfig
    from provider_sdk_openai_agents import ProviderSandboxClient, ProviderSandboxClientOptions

    client = ProviderSandboxClient(provider="docker")      # or "local", "e2b", "cube", ...
    run_config = RunConfig(sandbox=SandboxRunConfig(
        client=client, options=ProviderSandboxClientOptions(timeout=120)))
    result = await Runner.run(agent, "...", run_config=run_config)

Switching the backend is the one field ``provider`` (or ``PSDK_PROVIDER``).
"""

from provider_sdk_openai_agents.client import TAG, ProviderSandboxClient
from provider_sdk_openai_agents.options import (
    DEFAULT_COMMAND_TIMEOUT,
    NetworkOptions,
    ProviderSandboxClientOptions,
    ProviderSandboxSessionState,
)
from provider_sdk_openai_agents.session import ProviderSandboxSession

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "TAG",
    "NetworkOptions",
    "ProviderSandboxClient",
    "ProviderSandboxClientOptions",
    "ProviderSandboxSession",
    "ProviderSandboxSessionState",
]
