"""What the emulator does not serve, in one table: each of Daytona's routes it leaves out,
with the feature it belongs to.

Such a route answers as Daytona answers a route it does not know (the API: 404, ``Cannot
METHOD PATH``; the toolbox daemon: 404, ``404 page not found``), with the feature named,
so a client sees the same failure it would against a service without the route, and its
user reads why. docs/daytona.md lists the same table.
"""

from __future__ import annotations

from provider_sdk_emulators.daytona._http import Handler, unknown_route
from provider_sdk_emulators.kit.http import Request, Response

_SANDBOX = "/api/sandbox/{sandbox}"
_TOOLBOX = "/toolbox/{sandbox}"

#: (method, route, feature): what is not served.
UNSUPPORTED: tuple[tuple[str, str, str], ...] = (
    # control plane
    ("POST", f"{_SANDBOX}/fork", "sandbox forks"),
    ("POST", f"{_SANDBOX}/pause", "pausing a sandbox with its memory"),
    ("POST", f"{_SANDBOX}/resize", "resizing a sandbox"),
    ("POST", f"{_SANDBOX}/backup", "sandbox backups"),
    ("POST", _SANDBOX + "/autopause/{minutes}", "auto-pause"),
    ("POST", _SANDBOX + "/ttl/{minutes}", "sandbox time to live"),
    ("POST", _SANDBOX + "/public/{public}", "public sandboxes"),
    ("POST", f"{_SANDBOX}/network-settings", "network settings"),
    ("PUT", f"{_SANDBOX}/secrets", "sandbox secrets"),
    ("POST", f"{_SANDBOX}/last-activity", "refreshing a sandbox's activity"),
    ("POST", f"{_SANDBOX}/ssh-access", "SSH access"),
    ("DELETE", f"{_SANDBOX}/ssh-access", "SSH access"),
    ("GET", "/api/sandbox/ssh-access/validate", "SSH access"),
    ("GET", f"{_SANDBOX}/build-logs-url", "build logs"),
    ("GET", "/api/snapshots/{snapshot}/build-logs-url", "build logs"),
    ("GET", "/api/object-storage/push-access", "build contexts (object storage)"),
    # toolbox
    ("GET", f"{_TOOLBOX}/process/session/entrypoint", "the entrypoint session"),
    ("GET", f"{_TOOLBOX}/process/session/entrypoint/logs", "the entrypoint session"),
    ("*", _TOOLBOX + "/git{tail:.*}", "git"),
    ("*", _TOOLBOX + "/lsp{tail:.*}", "LSP"),
    ("*", _TOOLBOX + "/computeruse{tail:.*}", "computer use"),
    ("POST", f"{_TOOLBOX}/files/upload", "single-file upload (the route before upload-v2)"),
    ("GET", f"{_TOOLBOX}/port", "port listing"),
    ("GET", _TOOLBOX + "/port/{port}/in-use", "port listing"),
    ("GET", f"{_TOOLBOX}/version", "the daemon's version"),
)


def _not_served(feature: str) -> Handler:
    async def handler(request: Request) -> Response:
        return unknown_route(request, feature)
    return handler


def routes() -> list[tuple[str, str, Handler]]:
    """One route per row of :data:`UNSUPPORTED`, each answering as an unknown route."""
    return [(method, path, _not_served(feature)) for method, path, feature in UNSUPPORTED]
