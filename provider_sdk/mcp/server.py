"""One MCP server over a provider: the tools on an ``MCPServer``, served on stdio.

:func:`build_server` assembles it; :func:`serve_stdio` runs it on this process's
standard input and output (:mod:`provider_sdk.mcp.http` serves it over HTTP). Standard
output is the protocol's channel then: nothing else may write to it.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from provider_sdk import __version__
from provider_sdk.mcp.reach import Reach
from provider_sdk.mcp.tools import DEFAULT_EXEC_TIMEOUT, SandboxTools, add_tools
from provider_sdk.provider import SandboxProvider

__all__ = ["build_server", "serve_stdio"]


def build_server(provider: SandboxProvider, reach: Reach, *, output_limit: int | None = None,
                 exec_timeout: float = DEFAULT_EXEC_TIMEOUT) -> MCPServer:
    """An MCP server whose tools use ``provider``'s sandboxes that ``reach`` allows.

    ``output_limit`` (default: the provider's ``output_limit``) bounds what one tool
    result holds from a sandbox; ``exec_timeout`` is a command's default and longest
    timeout.
    """
    tools = SandboxTools(provider=provider, reach=reach,
                         output_limit=output_limit or provider.output_limit,
                         exec_timeout=exec_timeout)
    server: MCPServer = MCPServer(
        "psdk", version=__version__, log_level="WARNING",
        instructions=(f"Code-execution sandboxes. This server reaches {reach.description}. "
                      "Create a sandbox with sandbox_create (or find one with "
                      "sandbox_list), then run commands and move files in it by its id; "
                      "sandbox_kill ends it."))
    add_tools(server, tools)
    return server


async def serve_stdio(server: MCPServer) -> None:
    """Serve ``server`` on standard input and output until the client closes them."""
    await server.run_stdio_async()
