"""``psdk mcp``: an MCP server over the configured provider, on stdio or streamable HTTP.

On stdio (the default) an MCP host starts it and talks over its standard input and
output; nothing else is written to stdout. With ``--http PORT`` it serves
``http://127.0.0.1:PORT/mcp`` and every request must bear the token: ``--token-file
PATH`` (or ``--token``, readable by every local user in ``ps``), else
``$PSDK_MCP_TOKEN``, else one generated and printed on stderr once. The token is never
logged.

What a client reaches (see :mod:`provider_sdk.mcp.reach`): with ``--owner NAME``, only
that owner's resident sandbox, through a sandbox manager on ``--store`` (default:
``$PSDK_MANAGER_STORE``, then the default SQLite file); with ``--http`` and
``--owners-file PATH`` (one ``OWNER TOKEN`` per line, instead of one token), the
resident sandbox of the owner whose token the request bears, through that manager;
otherwise only the sandboxes labelled with the server's scope (``--scope``, default
``default``), those it creates among them. Ctrl-C, SIGTERM or SIGHUP stops it with
status 0; the sandboxes stay.

The server is built on the ``mcp`` package, an optional extra of the distribution:
without it the command says what to install and exits with status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from provider_sdk.cli.console import CliError, Console
from provider_sdk.cli.secret_file import read_owner_tokens, read_secret_file
from provider_sdk.secret import Secret

if TYPE_CHECKING:
    from provider_sdk.mcp.reach import Reach
    from provider_sdk.provider import SandboxProvider

__all__ = ["TOKEN_SETTING", "cmd_mcp", "token_from"]

TOKEN_SETTING = "PSDK_MCP_TOKEN"
"""The environment variable ``psdk mcp --http`` reads its bearer token from."""


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        from provider_sdk.distributions import CORE, install_hint

        raise CliError("psdk mcp needs the 'mcp' package, the extra 'mcp' of "
                       f"{CORE}: {install_hint(CORE, extra='mcp')}") from None


def token_from(args: argparse.Namespace) -> tuple[Secret, bool]:
    """The bearer token for ``--http``, and whether it was generated here.

    Raises:
        ConfigError: the token file cannot be read or does not hold one token.
    """
    if getattr(args, "token", None):
        return Secret(args.token), False
    if getattr(args, "token_file", None):
        return read_secret_file(args.token_file, "--token-file", "token"), False
    from_env = os.environ.get(TOKEN_SETTING, "").strip()
    if from_env:
        return Secret(from_env), False
    return Secret(secrets.token_urlsafe(32)), True


async def cmd_mcp(args: argparse.Namespace, console: Console) -> int:
    """Serve MCP until the client goes away (stdio) or until stopped (HTTP)."""
    _require_mcp()
    import anyio

    from provider_sdk.mcp import build_server, http, serve_stdio

    if args.output_limit is not None and args.output_limit <= 0:
        raise CliError(f"--output-limit must be a positive number of bytes, got "
                       f"{args.output_limit}", code=2)
    owned = args.owner is not None or args.owners_file is not None
    if not owned and args.store is not None:
        raise CliError("--store is for --owner or --owners-file: without an owner the "
                       "server keeps no bindings", code=2)
    if owned and args.scope is not None:
        raise CliError("--scope is for a server without owners: an owner's server reaches "
                       "the owner's sandbox alone", code=2)
    if args.owner is not None and args.owners_file is not None:
        raise CliError("--owner binds every client to one owner, --owners-file each to "
                       "the owner its token names: give one of them", code=2)
    if args.http is None and (args.token or args.token_file or args.owners_file):
        raise CliError("--token, --token-file and --owners-file are for --http: on stdio "
                       "the MCP host that starts the server is its only client", code=2)
    sock = None
    tokens: list[tuple[Secret, str | None]] = []
    generated = False
    if args.http is not None:
        if args.owners_file is not None:
            tokens.extend(read_owner_tokens(args.owners_file, "--owners-file"))
        else:
            token, generated = token_from(args)
            tokens.append((token, None))
        try:
            sock = http.listen(args.http)
        except OSError as exc:
            raise CliError(f"cannot listen on {http.HOST}:{args.http}: "
                           f"{exc.strerror or exc}") from None
    try:
        owners = [owner for _, owner in tokens if owner is not None]
        async with _reach(args, owners) as (provider, reach):
            server = build_server(provider, reach, output_limit=args.output_limit,
                                  exec_timeout=args.exec_timeout)
            if sock is None:
                await serve_stdio(server)
                return 0
            port = sock.getsockname()[1]
            console.note(f"psdk mcp: serving {reach.description} on "
                         f"http://{http.HOST}:{port}{http.ENDPOINT} (bearer token required; "
                         "Ctrl-C stops it)")
            if generated:
                console.note(f"psdk mcp: generated bearer token (shown once; set "
                             f"{TOKEN_SETTING} or --token-file to choose one): "
                             f"{tokens[0][0].reveal()}")
            try:
                await http.serve_http(server, sock, tokens)
            except anyio.get_cancelled_exc_class():
                console.done("psdk mcp stopped; the sandboxes stay")
                raise
            return 0
    finally:
        if sock is not None:
            sock.close()


@contextlib.asynccontextmanager
async def _reach(args: argparse.Namespace, owners: list[str]
                 ) -> AsyncIterator[tuple[SandboxProvider, Reach]]:
    """The provider, and what the server's clients reach on it (``owners``: those the
    tokens of ``--owners-file`` name)."""
    from provider_sdk import config
    from provider_sdk.mcp import DEFAULT_SCOPE, OwnerReach, ScopeReach, TenantReach
    from provider_sdk.models import SandboxSpec

    async with config.open_provider(config.provider_name(args.provider)) as provider:
        if args.owner is None and not owners:
            yield provider, ScopeReach(provider, args.scope or DEFAULT_SCOPE,
                                       template=args.template)
            return
        from provider_sdk.manager import SandboxManager, check_owner, open_store

        if args.owner is not None:
            check_owner(args.owner)
        spec = SandboxSpec(template=args.template)
        async with SandboxManager(provider, open_store(args.store), spec=spec) as manager:
            yield provider, (OwnerReach(manager, args.owner) if args.owner is not None
                             else TenantReach(manager, owners))
