"""An MCP server over any provider: the front door ``psdk mcp`` serves.

Its tools (``sandbox_create``, ``sandbox_exec``, ``sandbox_read_file``,
``sandbox_write_file``, ``sandbox_list_files``, ``sandbox_kill``, ``sandbox_list``, and
``code_run`` and ``port_expose`` where the provider declares ``code.interpreter`` and
``ports.expose``) reach only what a :class:`~provider_sdk.mcp.reach.Reach` allows: the
sandboxes of the server's scope (:class:`ScopeReach`), one owner's resident sandbox
(:class:`OwnerReach`), or each client its own owner's (:class:`TenantReach`). ::

    from provider_sdk import open_provider
    from provider_sdk.mcp import ScopeReach, build_server, serve_stdio

    async with open_provider() as provider:
        await serve_stdio(build_server(provider, ScopeReach(provider, "default")))

It needs the ``mcp`` package (the ``mcp`` extra); the rest of the SDK does not.
"""

from provider_sdk.mcp.reach import (
    DEFAULT_SCOPE,
    SCOPE_LABEL,
    ClientReach,
    OwnerReach,
    Reach,
    ScopeReach,
    TenantReach,
)
from provider_sdk.mcp.server import build_server, serve_stdio
from provider_sdk.mcp.tools import SandboxTools, add_tools

__all__ = ["DEFAULT_SCOPE", "SCOPE_LABEL", "ClientReach", "OwnerReach", "Reach",
           "SandboxTools", "ScopeReach", "TenantReach", "add_tools", "build_server",
           "serve_stdio"]
