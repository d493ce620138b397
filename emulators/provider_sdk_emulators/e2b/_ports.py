"""A sandbox's own ports, reached by host routing (``<port>-<id>.<domain>``), as E2B's
edge and CubeProxy reach them.

A data-plane request for a port other than envd's and the code interpreter's goes to
the server listening on that port inside the sandbox. The emulator exposes the port on
its backend (``ports.expose``: on local and docker, a proxy on 127.0.0.1 whose
connections the backend's own channel carries into the sandbox, which keeps loopback
only), and hands the client's connection to :mod:`provider_sdk_emulators.kit.port_relay`: the
request's head goes on with the backend's token put in its header and none of the
vendor's credentials (:func:`credentials`), then bytes flow both ways until either side
ends, which carries WebSockets and streamed answers. Nothing listening on the port is
the backend proxy's own 502.

A sandbox created with ``allowPublicTraffic: false`` has a traffic access token, which
every request to such a port must carry in ``e2b-traffic-access-token`` (Cube also takes
``cube-traffic-access-token``); without it, or with a wrong one, the answer is a 403
with an empty body, before anything reaches the sandbox.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

import anyio.abc

from provider_sdk import errors
from provider_sdk.port_credentials import Credentials
from provider_sdk.secret import Secret
from provider_sdk_emulators.e2b._records import SandboxRecord
from provider_sdk_emulators.kit import port_relay
from provider_sdk_emulators.kit.http import Request, Response, Takeover, json_response

__all__ = ["CREDENTIAL_HEADERS", "TRAFFIC_HEADERS", "credentials", "relay",
           "traffic_denied"]

TRAFFIC_HEADERS = ("e2b-traffic-access-token", "cube-traffic-access-token")
"""The headers a traffic access token is taken from."""
CREDENTIAL_HEADERS = frozenset({*TRAFFIC_HEADERS, "x-api-key", "x-access-token"})
"""The vendor's credential headers: the API key (Cube's data plane asks for it), envd's
access token and the traffic token. None of them reaches a sandbox's port."""


def credentials(api_key: Secret, records: Iterable[SandboxRecord]) -> Credentials:
    """What a request relayed to a sandbox's port loses: the credential headers, and
    the API key and every sandbox's access and traffic tokens wherever they are (a
    bearer, a cookie, a ``Referer``, a parameter), so no sandbox gets a credential of
    the emulator's, its own or another's."""
    tokens = [api_key.reveal()]
    for record in records:
        tokens += [token for token in (record.access_token, record.traffic_token) if token]
    return Credentials(headers=CREDENTIAL_HEADERS, values=tokens)


def traffic_denied(record: SandboxRecord, request: Request) -> Response | None:
    """The 403 for a request to a sandbox with private traffic that lacks its token."""
    if record.traffic_token is None:
        return None
    want = record.traffic_token.encode()
    for name in TRAFFIC_HEADERS:
        given = request.headers.get(name)
        if given is not None and hmac.compare_digest(given.encode("latin-1"), want):
            return None
    return Response(403)


async def relay(record: SandboxRecord, port: int, request: Request,
                taken_off: Credentials) -> Response | Takeover:
    """Hand the request to the server on ``port`` inside the sandbox, without
    ``taken_off``."""
    try:
        exposed = await port_relay.backend_port(record.sandbox, port)
    except errors.SandboxError as exc:
        return json_response(502, {"sandboxId": record.id, "port": port, "code": 502,
                                   "message": "The sandbox is running but port is not open "
                                              f"({exc.message})"})
    target = request.path + (f"?{request.query_string}" if request.query_string else "")

    async def take_over(client: anyio.abc.ByteStream, rest: bytes) -> None:
        # (the target drops CubeProxy's path form, /sandbox/<id>/<port>)
        await port_relay.relay(client, exposed, method=request.method, target=target,
                               headers=request.raw_headers, credentials=taken_off,
                               rest=rest)

    return Takeover(take_over)
