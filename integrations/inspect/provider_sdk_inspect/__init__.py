"""provider-sdk for Inspect: the ``psdk`` sandbox environment.

Installing this distribution registers ``psdk`` with Inspect through its ``inspect_ai``
entry point, so ``sandbox="psdk"`` or ``sandbox=("psdk", PsdkConfig(...))`` works with
nothing imported by hand::

    from inspect_ai import Task
    from provider_sdk_inspect import PsdkConfig

    Task(dataset=..., solver=..., sandbox=("psdk", PsdkConfig(provider="docker")))

Switching the backend is the one field ``provider`` (or ``PSDK_PROVIDER``).
"""

from provider_sdk_inspect._config import (
    PsdkConfig,
    PsdkLifecycle,
    PsdkNetwork,
    PsdkResources,
    PsdkSandbox,
    PsdkVolume,
)
from provider_sdk_inspect._remote import PsdkRemoteProcess
from provider_sdk_inspect.environment import PsdkSandboxEnvironment

__all__ = [
    "PsdkConfig",
    "PsdkLifecycle",
    "PsdkNetwork",
    "PsdkRemoteProcess",
    "PsdkResources",
    "PsdkSandbox",
    "PsdkSandboxEnvironment",
    "PsdkVolume",
]
