"""``psdk mcp`` as a client sees it: the server started as a user's MCP host starts it (a
subprocess, on stdio or on 127.0.0.1), driven by the ``mcp`` package's own client.

A :class:`Session` runs the client in a thread with its own event loop, so a module's
tests can share one server and one session and call tools from plain test functions.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx2
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Tool

PSDK = [sys.executable, "-m", "provider_sdk.cli"]
_URL = re.compile(r"on (http://127\.0\.0\.1:\d+/mcp) ")
_TOKEN = re.compile(r"generated bearer token .*: (\S+)$")


def environment(home: Path, **extra: str) -> dict[str, str]:
    """What ``psdk mcp`` needs to run on the local provider in ``home`` and nothing of
    this machine's own configuration."""
    return {"PSDK_HOME": str(home / "psdk"), "XDG_DATA_HOME": str(home / "data"),
            "XDG_CONFIG_HOME": str(home / "config"), "PATH": os.environ["PATH"], **extra}


class Session:
    """One MCP client session, usable from synchronous tests."""

    def __init__(self, portal: BlockingPortal, client: Client) -> None:
        self._portal = portal
        self._client = client

    def tools(self) -> dict[str, Tool]:
        """The tools the server lists, by name."""
        listed = self._portal.call(self._client.list_tools)
        return {tool.name: tool for tool in listed.tools}

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> CallToolResult:
        """Call a tool; its result, error or not."""
        async def call() -> CallToolResult:
            with anyio.fail_after(60):
                return await self._client.call_tool(name, dict(arguments or {}))
        return self._portal.call(call)

    def ok(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool that must succeed; its structured result."""
        result = self.call(name, arguments)
        assert not result.is_error, error_text(result)
        assert result.structured_content is not None
        return result.structured_content

    def error(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Call a tool that must fail; the error's text."""
        result = self.call(name, arguments)
        assert result.is_error, result.structured_content
        return error_text(result)


def error_text(result: CallToolResult) -> str:
    """The text of a tool result's content."""
    return "\n".join(getattr(block, "text", "") for block in result.content)


@contextlib.contextmanager
def _session(client: Client) -> Iterator[Session]:
    with start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(client) as entered:
        yield Session(portal, entered)


@contextlib.contextmanager
def stdio_session(args: list[str], env: Mapping[str, str]) -> Iterator[Session]:
    """``psdk mcp ARGS`` spawned on stdio, and a client session with it."""
    params = StdioServerParameters(command=PSDK[0], args=[*PSDK[1:], "mcp", *args],
                                   env=dict(env))
    with _session(Client(params)) as session:
        yield session


@contextlib.contextmanager
def http_session(url: str, token: str | None,
                 statuses: list[int] | None = None) -> Iterator[Session]:
    """A client session with the server at ``url``, bearing ``token``; the status of
    each response goes to ``statuses``."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    seen = [] if statuses is None else statuses

    async def record(response: httpx2.Response) -> None:
        seen.append(response.status_code)

    http = httpx2.AsyncClient(headers=headers, timeout=30,
                              event_hooks={"response": [record]})
    with _session(Client(streamable_http_client(url, http_client=http))) as session:
        yield session


class HttpServer:
    """``psdk mcp --http 0 ...`` running in a subprocess."""

    def __init__(self, process: subprocess.Popen[str], url: str,
                 generated_token: str | None, stderr: list[str]) -> None:
        self.process = process
        self.url = url
        self.generated_token = generated_token
        self.stderr = stderr
        """Every line the server wrote on stderr so far (read in a thread)."""

    def stop(self) -> int:
        """Stop it as Ctrl-C does; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(2)
        return self.process.wait(timeout=30)


@contextlib.contextmanager
def http_server(args: list[str], env: Mapping[str, str]) -> Iterator[HttpServer]:
    """``psdk mcp --http 0 ARGS``, once it says where it serves."""
    process = subprocess.Popen([*PSDK, "mcp", "--http", "0", *args], env=dict(env),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        url = token = None
        while time.monotonic() < deadline and process.poll() is None:
            for line in list(lines):
                url = url or _group(_URL, line)
                token = token or _group(_TOKEN, line.rstrip("\n"))
            given = " ".join(args)
            if url is not None and (token is not None or "--token" in given
                                    or "--owners-file" in given or "PSDK_MCP_TOKEN" in env):
                break
            time.sleep(0.05)
        assert url is not None, f"psdk mcp did not start: {''.join(lines)}"
        server = HttpServer(process, url, token, lines)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(2)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(timeout=5)


def _group(pattern: re.Pattern[str], line: str) -> str | None:
    match = pattern.search(line)
    return None if match is None else match.group(1)
