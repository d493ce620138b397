"""``psdk mcp``'s command line and the server built in-process: what is offered where,
and what the command says when it cannot serve."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from engines import require_bwrap
from mcp import Client
from memory_provider import MemoryProvider, Store
from psdk_fixtures import (
    Psdk,
    anyio_backend,
    clean_config,
    memory,
    psdk,
    unconfigured_structlog,
)

from provider_sdk.capabilities import Capability
from provider_sdk.distributions import CORE, install_hint
from provider_sdk.local import LocalProvider
from provider_sdk.manager import SandboxManager, open_store
from provider_sdk.mcp import ScopeReach, TenantReach, build_server
from provider_sdk.models import SandboxInfo

__all__ = ["anyio_backend", "clean_config", "memory", "psdk", "unconfigured_structlog"]


_BASIC = {"sandbox_create", "sandbox_exec", "sandbox_read_file", "sandbox_write_file",
          "sandbox_list_files", "sandbox_kill", "sandbox_list"}


class NoInterpreter(MemoryProvider):
    """The memory provider without its code interpreter."""

    capabilities = MemoryProvider.capabilities - {Capability.CODE_INTERPRETER}


@pytest.mark.anyio
@pytest.mark.parametrize(("provider_type", "extra"), [(MemoryProvider, {"code_run"}),
                                                      (NoInterpreter, set())],
                         ids=["interpreter", "none"])
async def test_code_run_and_port_expose_are_offered_only_where_declared(
        memory: Store, provider_type: type[MemoryProvider], extra: set[str]) -> None:
    async with provider_type() as provider:
        assert not provider.supports("ports.expose")
        async with Client(build_server(provider, ScopeReach(provider, "t"))) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
    assert names == _BASIC | extra


class BrokenReach(ScopeReach):
    """A reach whose listing fails the way a bug would, with a message of its own."""

    async def list(self) -> list[SandboxInfo]:
        raise RuntimeError("internal detail: /srv/secret/path")


@pytest.mark.anyio
async def test_an_unexpected_failure_is_a_tool_error_and_the_server_goes_on(
        memory: Store) -> None:
    async with MemoryProvider() as provider:
        server = build_server(provider, BrokenReach(provider, "t"))
        async with Client(server) as client:
            failed = await client.call_tool("sandbox_list", {})
            made = await client.call_tool("sandbox_create", {})
    assert failed.is_error
    text = " ".join(getattr(block, "text", "") for block in failed.content)
    assert "sandbox_list" in text
    assert "/srv/secret/path" not in text  # a bug's own text stays on the server
    assert not made.is_error
    assert made.structured_content is not None
    assert made.structured_content["provider"] == "memory"


DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
_ROW = re.compile(r"^\| `(\w+)` \|(.*?)\| `\{(.*)\}` \|$", re.MULTILINE)


def documented_tools() -> dict[str, tuple[dict[str, bool], set[str]]]:
    """The tools docs/mcp.md's table shows: each one's arguments (name to whether it is
    optional) and its result's fields."""
    rows = {}
    for name, arguments, result in _ROW.findall(DOCS.read_text()):
        plain = re.sub(r"\([^)]*\)", "", arguments)  # what parentheses say of an argument
        args = {arg: bool(optional) for arg, optional in re.findall(r"`(\w+)(\??)`", plain)}
        fields = re.sub(r"\[[^\]]*\]", "", result)  # a list's items
        rows[name] = (args, {f.split(":")[0].strip() for f in fields.split(",")})
    return rows


@pytest.mark.anyio
async def test_the_docs_table_shows_every_tool_its_arguments_and_its_result(
        tmp_path: Path) -> None:
    require_bwrap()
    async with LocalProvider(home=tmp_path / "home") as provider, \
            Client(build_server(provider, ScopeReach(provider, "t"))) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    documented = documented_tools()
    assert documented.keys() == tools.keys()
    for name, (arguments, fields) in documented.items():
        schema = tools[name].input_schema
        assert set(arguments) == set(schema.get("properties", {})), name
        required = set(schema.get("required", []))
        for argument, optional in arguments.items():
            if argument != "sandbox_id":  # optional on an owner's server alone
                assert optional == (argument not in required), (name, argument)
        output = tools[name].output_schema
        assert output is not None
        assert fields == set(output["properties"]), name


def test_without_the_mcp_package_it_says_what_to_install(
        psdk: Psdk, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp raises ImportError
    outcome = psdk("mcp")
    assert outcome.code == 1
    assert "needs the 'mcp' package" in outcome.err
    assert install_hint(CORE, extra="mcp") in outcome.err  # from a checkout: pip install -e
    assert outcome.out == ""


@pytest.mark.parametrize(("argv", "says"), [
    (["--store", "memory:"], "--store is for --owner"),
    (["--token", "t"], "are for --http"),
    (["--owner", "alice", "--scope", "s"], "--scope is for a server without owners"),
    (["--owners-file", "owners"], "are for --http"),
    (["--http", "0", "--owners-file", "owners", "--owner", "alice"], "give one of them"),
    (["--http", "0", "--owners-file", "owners", "--token", "t"], "not allowed with"),
    (["--http", "0", "--owners-file", "/no/such/file"], "--owners-file /no/such/file"),
    (["--http", "0", "--output-limit", "0"], "--output-limit must be a positive"),
    (["--owner", "bad\nowner"], "owner"),
    (["--token-file", "/no/such/file", "--http", "0"], "--token-file /no/such/file"),
])
def test_bad_options_are_refused_before_serving(psdk: Psdk, argv: list[str],
                                                says: str) -> None:
    outcome = psdk("mcp", *argv)
    assert outcome.code in (1, 2)
    assert says in outcome.err
    assert outcome.out == ""


@pytest.mark.anyio
async def test_a_tenant_server_gives_a_request_naming_no_owner_nothing(
        memory: Store) -> None:
    async with MemoryProvider() as provider, \
            SandboxManager(provider, open_store("memory:")) as manager:
        server = build_server(provider, TenantReach(manager, ["alice"]))
        async with Client(server) as client:  # in memory: the request names no client
            results = [await client.call_tool(tool, arguments) for tool, arguments in
                       (("sandbox_create", {}), ("sandbox_list", {}),
                        ("sandbox_exec", {"command": "true"}))]
        assert await provider.list() == []
    for result in results:
        assert result.is_error
        text = " ".join(getattr(block, "text", "") for block in result.content)
        assert "PermissionDenied: " in text
