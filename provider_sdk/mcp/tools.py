"""The MCP tools over the neutral interface: sandboxes, commands, code, files and ports.

:class:`SandboxTools` holds what every tool needs (the :class:`~provider_sdk.mcp.reach.Reach`
that decides which sandboxes a client may use, and the bounds) and one method per tool;
:func:`add_tools` registers them on an MCP server, ``code_run`` only where the provider
declares ``code.interpreter`` and ``port_expose`` only where it declares
``ports.expose``. Every argument is typed, so each tool publishes its input schema;
every result is a model of :mod:`provider_sdk.mcp.payloads`, its output schema. What a
tool holds from a sandbox is bounded by the output limit, as ``exec``'s result is. An
SDK error becomes a tool error (``is_error``) carrying its type and message; the server
goes on.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import attrs
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import Field

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CodeTimeout, CommandTimeout, InvalidInput, SandboxError
from provider_sdk.limits import OutputBuffer
from provider_sdk.mcp.payloads import (
    CodeOutput,
    Encoding,
    ExecOutput,
    ExposedPortOutput,
    FileContent,
    FileListing,
    KillOutput,
    SandboxList,
    SandboxSummary,
    WriteOutput,
    code_output,
    decode_content,
    encode_content,
    entry_of,
    summary_of,
)
from provider_sdk.mcp.reach import ClientReach, Reach
from provider_sdk.models import FileType
from provider_sdk.provider import SandboxProvider
from provider_sdk.results import ExecResult

__all__ = ["CLIENT_STATE", "DEFAULT_EXEC_TIMEOUT", "LISTING_LIMIT", "SandboxTools", "add_tools",
           "client_of", "sdk_errors"]

DEFAULT_EXEC_TIMEOUT = 300.0
"""Seconds a command may run when the server is given no other bound."""
LISTING_LIMIT = 1000
"""Most sandboxes or directory entries one listing shows."""
CLIENT_STATE = "psdk.mcp.client"
"""Where in an HTTP request's state the authenticated client's name is."""

OptionalSandboxId = Annotated[str | None, Field(
    description="The sandbox's id (sandbox_create, sandbox_list); on a server bound to an "
                "owner it may be left out: the owner's sandbox is the one.")]
Path = Annotated[str, Field(description="A path in the sandbox: absolute, or relative to "
                                        "its working directory.")]
Labels = Annotated[dict[str, str] | None, Field(
    description="Labels (metadata) to find it by; keys starting with 'psdk.' are reserved.")]
Env = Annotated[dict[str, str] | None, Field(
    description="Environment variables, name to value.")]


def client_of(ctx: Context) -> str | None:
    """The client of the request ``ctx`` serves, as its transport authenticated it: the
    name the HTTP server's authentication put in the request's state under
    :data:`CLIENT_STATE`; ``None`` on stdio, or when the token names no client."""
    request = ctx.request_context.request
    state = getattr(request, "scope", {}).get("state", {})
    client = state.get(CLIENT_STATE) if isinstance(state, dict) else None
    return client if isinstance(client, str) else None


@contextlib.contextmanager
def sdk_errors() -> Iterator[None]:
    """Turn an SDK error into a tool error carrying its type and message."""
    try:
        yield
    except SandboxError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


def _text(output: ExecOutput | CodeOutput, headline: str | None = None) -> list[ContentBlock]:
    body = output.model_dump_json(indent=2)
    return [TextContent(type="text", text=body if headline is None else f"{headline}\n{body}")]


def _exec_output(result: ExecResult, *, timed_out: bool) -> ExecOutput:
    return ExecOutput(exit_code=None if timed_out else result.exit_code,
                      stdout=result.stdout, stderr=result.stderr,
                      stdout_truncated_bytes=result.stdout_truncated,
                      stderr_truncated_bytes=result.stderr_truncated,
                      timed_out=timed_out, oom_killed=result.oom_killed,
                      duration_seconds=result.duration)


@attrs.define
class SandboxTools:
    """The tools of one MCP server, over ``reach``.

    ``output_limit`` bounds each of a command's stdout and stderr, a file read and
    nothing else (as ``exec``'s ``output_limit``); ``exec_timeout`` is a command's
    timeout when the client gives none, and the longest it may ask for.
    """

    provider: SandboxProvider
    reach: Reach
    output_limit: int
    exec_timeout: float = DEFAULT_EXEC_TIMEOUT

    async def sandbox_create(
        self,
        template: Annotated[str | None, Field(
            description="Template to start from; default: the provider's.")] = None,
        labels: Labels = None,
        env: Annotated[dict[str, str] | None, Field(
            description="Environment variables of every command run in it.")] = None,
        *, ctx: Context,
    ) -> SandboxSummary:
        """Create a sandbox (on a server bound to an owner: the owner's resident sandbox,
        made on first use) and return it. It lives until sandbox_kill."""
        with sdk_errors():
            sandbox = await self._reach(ctx).create(template=template,
                                                    labels=labels or {}, env=env or {})
            return summary_of(sandbox.info)

    async def sandbox_exec(
        self,
        command: Annotated[str | list[str], Field(
            description="A shell command line (run by /bin/bash -c), or an argv list run "
                        "as it is.")],
        sandbox_id: OptionalSandboxId = None,
        cwd: Annotated[str | None, Field(
            description="Working directory; default: the sandbox's.")] = None,
        env: Env = None,
        timeout: Annotated[float | None, Field(
            description="Seconds before the command and every process it started are "
                        "killed; default and most allowed: the server's.", gt=0)] = None,
        stdin: Annotated[str | None, Field(
            description="Text fed to the command's standard input.")] = None,
        *, ctx: Context,
    ) -> Annotated[CallToolResult, ExecOutput]:
        """Run a command in a sandbox and return its exit code and output. Each of stdout
        and stderr is cut at the server's output limit (the result counts the bytes
        cut). A command that times out is a tool error whose result holds the output it
        wrote until then."""
        with sdk_errors():
            if not command:
                raise InvalidInput("command is empty: give a shell command line or an "
                                   "argv list", provider=self.provider.name)
            limit = self._timeout(timeout)
            sandbox = await self._reach(ctx).open(sandbox_id)
            try:
                result = await sandbox.exec(command, cwd=cwd, env=env, timeout=limit,
                                            stdin=stdin, output_limit=self.output_limit)
            except CommandTimeout as exc:
                output = _exec_output(exc.result, timed_out=True)
                return CallToolResult(content=_text(output, f"CommandTimeout: {exc}"),
                                      structured_content=output.model_dump(mode="json"),
                                      is_error=True)
        output = _exec_output(result, timed_out=False)
        return CallToolResult(content=_text(output),
                              structured_content=output.model_dump(mode="json"))

    def _reach(self, ctx: Context) -> ClientReach:
        """What the client of the request ``ctx`` serves reaches."""
        return self.reach.for_client(client_of(ctx))

    def _timeout(self, asked: float | None) -> float:
        if asked is None:
            return self.exec_timeout
        if not math.isfinite(asked) or asked > self.exec_timeout:
            raise InvalidInput(f"timeout: {asked:g}s is longer than this server allows "
                               f"({self.exec_timeout:g}s)", provider=self.provider.name)
        return asked

    async def sandbox_read_file(self, path: Path, sandbox_id: OptionalSandboxId = None, *,
                                ctx: Context) -> FileContent:
        """Read a file: text when it is UTF-8, else base64 (the result says which). A file
        larger than the server's output limit is cut there; the result counts the bytes
        not read."""
        with sdk_errors():
            sandbox = await self._reach(ctx).open(sandbox_id)
            info = await sandbox.files.stat(path)
            if info.type == FileType.DIRECTORY:
                raise InvalidInput(f"{path}: is a directory (sandbox_list_files lists it)",
                                   provider=self.provider.name, sandbox_id=sandbox.id)
            kept = OutputBuffer(self.output_limit)
            chunks = sandbox.files.stream(path)
            try:
                async for chunk in chunks:
                    kept.append(chunk)
                    if kept.dropped:
                        break
            finally:
                await chunks.aclose()  # type: ignore[attr-defined]
        size = max(info.size, len(kept) + kept.dropped)
        truncated = size - len(kept)
        content, encoding = encode_content(kept.value(), truncated=truncated > 0)
        return FileContent(path=path, content=content, encoding=encoding, size=size,
                           truncated_bytes=truncated)

    async def sandbox_write_file(
        self,
        path: Path,
        content: Annotated[str, Field(description="What to write, as text or base64 "
                                                  "(see encoding).")],
        encoding: Annotated[Encoding, Field(
            description="utf-8: content is text; base64: content is bytes in base64.")]
        = "utf-8",
        sandbox_id: OptionalSandboxId = None,
        *, ctx: Context,
    ) -> WriteOutput:
        """Write a file, replacing it and creating its parent directories."""
        with sdk_errors():
            data = decode_content(content, encoding)
            sandbox = await self._reach(ctx).open(sandbox_id)
            await sandbox.files.write(path, data)
        return WriteOutput(path=path, size=len(data))

    async def sandbox_list_files(
        self,
        path: Annotated[str, Field(description="The directory; default: the sandbox's "
                                               "working directory.")] = ".",
        sandbox_id: OptionalSandboxId = None,
        *, ctx: Context,
    ) -> FileListing:
        """List a directory's entries, sorted by name (at most 1000; the result counts
        the others)."""
        with sdk_errors():
            sandbox = await self._reach(ctx).open(sandbox_id)
            entries = await sandbox.files.list(path)
        shown = entries[:LISTING_LIMIT]
        return FileListing(path=path, entries=[entry_of(e) for e in shown],
                           omitted=len(entries) - len(shown))

    async def sandbox_kill(self, sandbox_id: OptionalSandboxId = None, *,
                           ctx: Context) -> KillOutput:
        """Kill a sandbox and everything in it (on a server bound to an owner: release
        the owner's sandbox; the next sandbox_create makes a new one)."""
        with sdk_errors():
            killed = await self._reach(ctx).kill(sandbox_id)
        return KillOutput(id=killed, killed=True)

    async def sandbox_list(self, *, ctx: Context) -> SandboxList:
        """List the sandboxes this server's clients can reach (at most 1000; the result
        counts the others)."""
        with sdk_errors():
            infos = await self._reach(ctx).list()
        infos.sort(key=lambda i: (i.created_at is None, i.created_at, i.id))
        shown = infos[:LISTING_LIMIT]
        return SandboxList(sandboxes=[summary_of(i) for i in shown],
                           omitted=len(infos) - len(shown))

    async def code_run(
        self,
        code: Annotated[str, Field(description="Python source: statements, ending in an "
                                               "expression whose value is wanted, if "
                                               "any.")],
        sandbox_id: OptionalSandboxId = None,
        timeout: Annotated[float | None, Field(
            description="Seconds before the run is interrupted; default and most "
                        "allowed: the server's.", gt=0)] = None,
        *, ctx: Context,
    ) -> Annotated[CallToolResult, CodeOutput]:
        """Run Python in the sandbox's interpreter, which keeps its state from one run to
        the next (names, imports, functions) for as long as this server runs, and return
        the last expression's value, what the code printed, and the exception it raised,
        if any. Each of text, stdout and stderr is cut at the server's output limit. A
        run that times out is interrupted and is a tool error whose result holds its
        output until then; the interpreter keeps what earlier runs defined."""
        with sdk_errors():
            limit = self._timeout(timeout)
            sandbox = await self._reach(ctx).open(sandbox_id)
            try:
                result = await sandbox.code.run(code, timeout=limit,
                                                output_limit=self.output_limit)
            except CodeTimeout as exc:
                output = code_output(exc.result, timed_out=True,
                                     state_kept=exc.context_kept)
                return CallToolResult(content=_text(output, f"CodeTimeout: {exc}"),
                                      structured_content=output.model_dump(mode="json"),
                                      is_error=True)
        output = code_output(result)
        return CallToolResult(content=_text(output),
                              structured_content=output.model_dump(mode="json"))

    async def port_expose(
        self,
        port: Annotated[int, Field(description="The port a server listens on inside the "
                                               "sandbox.", ge=1, le=65535)],
        sandbox_id: OptionalSandboxId = None,
        *, ctx: Context,
    ) -> ExposedPortOutput:
        """Make a port of the sandbox reachable from the server's machine: the URL carries
        an access token, and anything without it is refused. It stays reachable until the
        sandbox is killed or the server stops."""
        with sdk_errors():
            sandbox = await self._reach(ctx).open(sandbox_id)
            exposed = await sandbox.expose(port)
        return ExposedPortOutput(port=exposed.port, url=exposed.url,
                                 base_url=exposed.base_url, token=exposed.token.reveal(),
                                 token_header=exposed.token_header)


_READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                          open_world_hint=False)


def add_tools(server: MCPServer, tools: SandboxTools) -> list[str]:
    """Register ``tools`` on ``server``; return the names registered."""
    table: list[tuple[Callable[..., Any], ToolAnnotations]] = [
        (tools.sandbox_create, _WRITES),
        (tools.sandbox_exec, ToolAnnotations(destructive_hint=True, open_world_hint=False)),
        (tools.sandbox_read_file, _READS),
        (tools.sandbox_write_file, ToolAnnotations(destructive_hint=True, idempotent_hint=True,
                                                   open_world_hint=False)),
        (tools.sandbox_list_files, _READS),
        (tools.sandbox_kill, ToolAnnotations(destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False)),
        (tools.sandbox_list, _READS),
    ]
    if tools.provider.supports(Capability.CODE_INTERPRETER):
        table.append((tools.code_run, ToolAnnotations(destructive_hint=True,
                                                      open_world_hint=False)))
    if tools.provider.supports(Capability.PORTS_EXPOSE):
        table.append((tools.port_expose, ToolAnnotations(idempotent_hint=True,
                                                         open_world_hint=False)))
    for method, hints in table:
        server.add_tool(method, name=method.__name__, annotations=hints)
    return [method.__name__ for method, _ in table]
