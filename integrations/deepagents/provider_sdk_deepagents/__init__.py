"""deepagents sandbox backends over provider-sdk.

:class:`ProviderSandbox` is a deepagents ``BaseSandbox`` on any installed provider
(``local``, ``docker``, ``e2b``, ``cube``, ``daytona``, or a third party's), chosen by one
argument. :class:`CodeSandboxProvider` is the same for deepagents-code, found through its
``deepagents_code.sandbox_providers`` entry point as ``psdk``, with a
:class:`~provider_sdk.manager.SandboxManager` behind it when an owner is given.
"""

from provider_sdk_deepagents.code import CodeSandboxProvider
from provider_sdk_deepagents.sandbox import DEFAULT_TIMEOUT, ProviderSandbox

__all__ = ["DEFAULT_TIMEOUT", "CodeSandboxProvider", "ProviderSandbox"]
