"""An MCP client driving ``psdk mcp``: what an agent host does with the server's tools.

It starts ``psdk mcp`` on stdio, as an MCP host (Claude Desktop, an IDE, an agent
framework) would from its configuration, with the ``mcp`` package's own client, then:

1. lists the tools and creates a sandbox;
2. writes a script into it, runs it, and reads the file it wrote back;
3. where the provider has a code interpreter, loads that file in it and, in a second
   call, computes with what the first defined;
4. runs a command that outlives its timeout, and shows the tool error with the output
   it wrote until then;
5. kills the sandbox.

The provider is the usual configuration's (``PSDK_PROVIDER``, ``psdk.toml``, else
``local``); ``--provider NAME`` names another. It needs the ``mcp`` extra:
``pip install 'sandbox-provider-sdk[mcp]'``. Run it: ``python examples/mcp_client.py``.
It prints one JSON object describing what happened.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

SCRIPT = """\
import json, sys
words = open("input.txt").read().split()
json.dump({"words": len(words), "python": sys.version_info[0]}, open("out.json", "w"))
print(f"counted {len(words)} words")
"""


def structured(result: CallToolResult) -> dict[str, Any]:
    """A tool's structured result; a tool error becomes an exception with its text."""
    if result.is_error or result.structured_content is None:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        raise RuntimeError(f"tool error: {text}")
    return result.structured_content


async def main(provider: str | None) -> dict[str, Any]:
    # The client hands the server only a few variables of its environment unless told:
    # pass it all, so psdk's configuration (PSDK_PROVIDER, the providers' settings)
    # reaches the server.
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "provider_sdk.cli", "mcp", *(["--provider", provider] if provider else [])],
        env=dict(os.environ))
    async with Client(server) as client:
        tools = sorted(tool.name for tool in (await client.list_tools()).tools)
        sandbox = structured(await client.call_tool("sandbox_create", {}))
        sid = sandbox["id"]
        try:
            for path, content in (("input.txt", "one two three four"), ("count.py", SCRIPT)):
                structured(await client.call_tool(
                    "sandbox_write_file", {"sandbox_id": sid, "path": path,
                                           "content": content}))
            ran = structured(await client.call_tool(
                "sandbox_exec", {"sandbox_id": sid, "command": "python3 count.py"}))
            out = structured(await client.call_tool(
                "sandbox_read_file", {"sandbox_id": sid, "path": "out.json"}))
            # Where the provider has a code interpreter, its state lasts between calls.
            interpreted = None
            if "code_run" in tools:
                structured(await client.call_tool("code_run", {
                    "sandbox_id": sid,
                    "code": "import json\ncounted = json.load(open('out.json'))"}))
                interpreted = structured(await client.call_tool(
                    "code_run", {"sandbox_id": sid, "code": "counted['words'] * 10"}))["text"]
            slow = await client.call_tool(
                "sandbox_exec", {"sandbox_id": sid, "timeout": 1,
                                 "command": "echo started; sleep 30; echo never"})
        finally:
            structured(await client.call_tool("sandbox_kill", {"sandbox_id": sid}))
    return {"provider": sandbox["provider"], "tools": tools, "exit_code": ran["exit_code"],
            "stdout": ran["stdout"], "result": json.loads(out["content"]),
            "interpreter": interpreted, "timeout_is_error": slow.is_error,
            "partial_output": (slow.structured_content or {}).get("stdout")}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", help="the provider psdk mcp runs sandboxes on")
    print(json.dumps(anyio.run(main, parser.parse_args().provider)))
