"""A Daytona-compatible emulator: the control plane under ``/api`` and the toolbox under
``/toolbox``, on 127.0.0.1 only (preview URLs on a listener of their own), backed by a
real neutral provider (``local`` by default).

The unmodified ``daytona`` SDK, sync and async, talks to it with
``DaytonaConfig(api_url="http://127.0.0.1:PORT/api", api_key=KEY)``. Every request must
carry ``Authorization: Bearer KEY``, except a signed file URL, whose signature is checked
instead (``_signed``), and the Socket.IO notification gateway, whose clients give the
key in their ``CONNECT`` packet (``_events``); preview URLs are served by the preview
proxy, which takes the sandbox's access token or a signed token (``_preview``,
``_preview_proxy``). Faults
(see :data:`FAULTS`) are set with ``--fault NAME=VALUE`` or, while it runs, ``POST
/_emulator/faults`` with ``{"NAME": VALUE}``; ``GET /_emulator/faults`` reports what
was set and served. Sessions are a real long-lived shell in the sandbox (see ``_sessions``).

What it does not do: pull images (a sandbox or snapshot made from an image name, or a
sandbox made from an image definition, runs on the backend's default template, and the
DTO records what was asked); build snapshots from a Dockerfile except on a backend that
builds templates (``docker``; elsewhere the build fails and says why); give sandboxes a
network (they have loopback only, whatever ``networkBlockAll`` says); enforce resources;
or archive stopped sandboxes by itself (auto-stop and auto-delete are kept, on a clock
whose minute fault ``minute_seconds`` can shorten). The routes of what is not served
(git, LSP, SSH access...) are in one table, ``_unsupported``;
each answers as Daytona answers a route it does not know, naming the feature.

As a service it holds bounded memory: a JSON body is read to
:data:`~provider_sdk_emulators.kit.bodies.BODY_LIMIT` (16 MiB) after decompression (413 past it; a
compressed body is inflated step by step, never whole); bulk uploads stream into the
sandbox part by part, a compressed one refused (413) once it inflates past
:data:`~provider_sdk_emulators.kit.bodies.INFLATE_LIMIT`; and the output it answers with whole
(``process/execute``, session command logs) is the first 16 MiB of each stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio

from provider_sdk.config import open_provider
from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.errors import SandboxError
from provider_sdk.settings import Settings
from provider_sdk_emulators.daytona import _coderun as coderun
from provider_sdk_emulators.daytona import _control as api
from provider_sdk_emulators.daytona import _events as events
from provider_sdk_emulators.daytona import _interpreter as interpreter
from provider_sdk_emulators.daytona import _metrics as metrics
from provider_sdk_emulators.daytona import _preview as preview
from provider_sdk_emulators.daytona import _preview_proxy as preview_proxy
from provider_sdk_emulators.daytona import _pty as pty
from provider_sdk_emulators.daytona import _search as search
from provider_sdk_emulators.daytona import _signed as signed
from provider_sdk_emulators.daytona import _toolbox as toolbox
from provider_sdk_emulators.daytona import _unsupported as unsupported
from provider_sdk_emulators.daytona._http import EVENTS_ROUTE, FAULTS, Context, Handler, front_door
from provider_sdk_emulators.daytona._store import Store
from provider_sdk_emulators.kit import http
from provider_sdk_emulators.kit.faults import Faults
from provider_sdk_emulators.kit.routing import Router

__all__ = ["FAULTS", "daytona_emulator", "routes"]

_SANDBOX = "/api/sandbox/{sandbox}"
_TOOLBOX = "/toolbox/{sandbox}"


def routes() -> list[tuple[str, str, Handler]]:
    """The routing table: one handler per route, after what is not served (see
    ``_unsupported``)."""
    return [
        *unsupported.routes(),
        # control plane: sandboxes
        ("POST", "/api/sandbox", api.create_sandbox),
        ("GET", "/api/sandbox", api.list_sandboxes),
        ("GET", _SANDBOX, api.get_sandbox),
        ("DELETE", _SANDBOX, api.delete_sandbox),
        ("POST", f"{_SANDBOX}/start", api.start_sandbox),
        ("POST", f"{_SANDBOX}/stop", api.stop_sandbox),
        ("POST", f"{_SANDBOX}/archive", api.archive_sandbox),
        ("POST", f"{_SANDBOX}/recover", api.recover_sandbox),
        ("PUT", f"{_SANDBOX}/labels", api.replace_labels),
        ("POST", _SANDBOX + "/{which:autostop|autoarchive|autodelete}/{minutes}",
         api.set_interval),
        ("GET", f"{_SANDBOX}/toolbox-proxy-url", api.toolbox_proxy_url),
        ("POST", f"{_SANDBOX}/snapshot", api.snapshot_sandbox),
        ("GET", f"{_SANDBOX}/telemetry/metrics", metrics.telemetry_metrics),
        ("GET", "/api/config", metrics.config),
        ("GET", EVENTS_ROUTE, events.gateway),
        ("GET", f"{_SANDBOX}/signing-key", signed.signing_key),
        ("POST", f"{_SANDBOX}/signing-key/rotate", signed.rotate_signing_key),
        ("GET", _SANDBOX + "/ports/{port}/preview-url", preview.preview_url),
        ("GET", _SANDBOX + "/ports/{port}/signed-preview-url", preview.signed_preview_url),
        ("POST", _SANDBOX + "/ports/{port}/signed-preview-url/{token}/expire",
         preview.expire_signed_preview_url),
        # control plane: volumes
        ("POST", "/api/volumes", api.create_volume),
        ("GET", "/api/volumes", api.list_volumes),
        ("GET", "/api/volumes/by-name/{volume}", api.get_volume),
        ("GET", "/api/volumes/{volume}", api.get_volume),
        ("DELETE", "/api/volumes/{volume}", api.delete_volume),
        # control plane: snapshots
        ("POST", "/api/snapshots", api.create_snapshot),
        ("GET", "/api/snapshots", api.list_snapshots),
        # (a name may hold slashes: the default snapshot's is an image name)
        ("GET", "/api/snapshots/{snapshot:.+}", api.get_snapshot),
        ("DELETE", "/api/snapshots/{snapshot:.+}", api.delete_snapshot),
        ("POST", "/api/snapshots/{snapshot:.+}/activate", api.activate_snapshot),
        # toolbox: info, process, sessions
        ("GET", f"{_TOOLBOX}/work-dir", toolbox.work_dir),
        ("GET", f"{_TOOLBOX}/user-home-dir", toolbox.home_dir),
        ("POST", f"{_TOOLBOX}/process/execute", toolbox.execute),
        ("POST", f"{_TOOLBOX}/process/code-run", coderun.code_run),
        ("POST", f"{_TOOLBOX}/env", toolbox.update_env),
        ("GET", f"{_TOOLBOX}/system/metrics", metrics.system_metrics),
        ("POST", f"{_TOOLBOX}/process/interpreter/context", interpreter.create_context),
        ("GET", f"{_TOOLBOX}/process/interpreter/context", interpreter.list_contexts),
        ("DELETE", _TOOLBOX + "/process/interpreter/context/{context}",
         interpreter.delete_context),
        ("GET", f"{_TOOLBOX}/process/interpreter/execute", interpreter.execute),
        ("GET", f"{_TOOLBOX}/process/pty/create-connect", pty.create_connect),
        ("GET", f"{_TOOLBOX}/process/pty", pty.list_ptys),
        ("GET", _TOOLBOX + "/process/pty/{pty}", pty.get_pty),
        ("DELETE", _TOOLBOX + "/process/pty/{pty}", pty.delete_pty),
        ("GET", _TOOLBOX + "/process/pty/{pty}/connect", pty.connect),
        ("POST", _TOOLBOX + "/process/pty/{pty}/resize", pty.resize_pty),
        ("POST", f"{_TOOLBOX}/process/session", toolbox.create_session),
        ("GET", f"{_TOOLBOX}/process/session", toolbox.list_sessions),
        ("GET", _TOOLBOX + "/process/session/{session}", toolbox.get_session),
        ("DELETE", _TOOLBOX + "/process/session/{session}", toolbox.delete_session),
        ("POST", _TOOLBOX + "/process/session/{session}/exec", toolbox.session_exec),
        ("GET", _TOOLBOX + "/process/session/{session}/command/{command}",
         toolbox.get_command),
        ("GET", _TOOLBOX + "/process/session/{session}/command/{command}/logs",
         toolbox.command_logs),
        ("POST", _TOOLBOX + "/process/session/{session}/command/{command}/input",
         toolbox.command_input),
        # toolbox: files
        ("GET", f"{_TOOLBOX}/files", toolbox.list_files),
        ("DELETE", f"{_TOOLBOX}/files", toolbox.delete_file),
        ("GET", f"{_TOOLBOX}/files/info", toolbox.file_info),
        ("POST", f"{_TOOLBOX}/files/folder", toolbox.create_folder),
        ("POST", f"{_TOOLBOX}/files/move", toolbox.move_file),
        ("POST", f"{_TOOLBOX}/files/permissions", toolbox.set_permissions),
        ("GET", f"{_TOOLBOX}/files/find", search.find_in_files),
        ("GET", f"{_TOOLBOX}/files/search", search.search_files),
        ("POST", f"{_TOOLBOX}/files/replace", search.replace_in_files),
        ("POST", f"{_TOOLBOX}/files/bulk-upload", toolbox.bulk_upload),
        ("POST", f"{_TOOLBOX}/files/bulk-download", toolbox.bulk_download),
        ("GET", f"{_TOOLBOX}/files/download", signed.download_file),
        ("POST", f"{_TOOLBOX}/files/upload-v2", signed.upload_file),
    ]


@contextlib.asynccontextmanager
async def daytona_emulator(options: EmulatorOptions) -> AsyncIterator[RunningEmulator]:
    """Serve the Daytona API on 127.0.0.1 until the block exits.

    The key is ``options.api_key``, else the ``DAYTONA_API_KEY`` setting. On exit every
    sandbox, snapshot and volume it made on the backend is removed.

    Raises:
        ConfigError: no key, an unknown fault, or a backend that cannot be opened.
    """
    key = Settings("daytona", {"api_key": "DAYTONA_API_KEY"}).secret("api_key", options.api_key)
    assert key is not None  # required
    faults = Faults(FAULTS, options.faults)
    async with open_provider(options.backend) as backend:
        ctx = Context(store=Store(backend=backend), faults=faults, api_key=key)
        try:
            async with anyio.create_task_group() as tg, \
                    http.serve(front_door(ctx, Router(routes())), port=options.port) as port, \
                    preview_proxy.serve(ctx) as preview_url:
                ctx.base_url = f"http://127.0.0.1:{port}"  # loopback only, always
                ctx.store.notifications.toolbox_url = ctx.toolbox_url
                ctx.preview_url = preview_url
                tg.start_soon(api.reap, ctx)
                yield RunningEmulator(
                    name="daytona", url=ctx.base_url,
                    settings={"DAYTONA_API_URL": f"{ctx.base_url}/api",  # type: ignore[arg-type]
                              "DAYTONA_TARGET": "local"},
                    api_key_settings=("DAYTONA_API_KEY",), api_key=ctx.api_key)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await _clean_backend(ctx.store)
                await ctx.store.tasks.aclose()


async def _clean_backend(store: Store) -> None:
    """Remove what the emulator made on the backend; its records die with it."""
    for record in list(store.sandboxes.values()):
        with contextlib.suppress(SandboxError):
            await api.shut_down(store, record)
    for snapshot in store.snapshots.values():
        if snapshot.backend_snapshot is not None:
            with contextlib.suppress(SandboxError):
                await store.backend.delete_snapshot(snapshot.backend_snapshot)
        if snapshot.backend_template is not None:
            with contextlib.suppress(SandboxError):
                await store.backend.delete_template(snapshot.backend_template)
    for volume in store.volumes.values():
        with contextlib.suppress(SandboxError):
            await store.backend.delete_volume(volume.backend_name)

