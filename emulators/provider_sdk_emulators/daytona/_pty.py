"""PTY sessions (toolbox ``/process/pty...``), as Daytona's daemon serves them.

``GET /process/pty/create-connect?id=&cols=&rows=&cwd=`` opens a WebSocket on a new
session (its environment in the subprotocol ``X-Daytona-Pty-Envs~<base64url JSON>``);
``GET /process/pty/{id}/connect`` attaches to a running one. The server first sends the
text frame ``{"type": "control", "status": "connected"}``, then the terminal's output in
binary frames, as it comes (output while no client is attached is not kept, as on
Daytona); what the client sends is typed into the terminal. When the shell exits, a
client that offered ``X-Daytona-Pty-Exit-Control`` gets ``{"type": "control", "status":
"exited", "exitCode": N}`` and a 1000 close; others a close whose reason holds the exit
code (1000 for 0, else 1011). ``GET /process/pty`` lists sessions, ``GET .../{id}``
describes one, ``POST .../{id}/resize`` sets its size, ``DELETE .../{id}`` kills it.

Each session is a background process in the sandbox: a small Python relay that starts
``bash`` on a pseudo-terminal (``TERM=xterm-256color``) and copies its output to stdout;
its stdin carries framed messages (``d`` data, ``r`` a resize). A stopped sandbox's
sessions are gone, as its processes are.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import struct

from provider_sdk.errors import SandboxError
from provider_sdk_emulators.daytona._http import (
    UPGRADED,
    HttpError,
    context,
    json_response,
    websocket,
)
from provider_sdk_emulators.daytona._pty_session import RELAY, PtySession, exited, frame
from provider_sdk_emulators.daytona._store import SandboxRecord
from provider_sdk_emulators.daytona._toolbox import running
from provider_sdk_emulators.kit.http import Request, Response
from provider_sdk_emulators.kit.websocket import CLOSE_INTERNAL_ERROR

EXIT_CONTROL = "X-Daytona-Pty-Exit-Control"
_ENVS = "X-Daytona-Pty-Envs~"

async def close_ptys(record: SandboxRecord) -> None:
    """End every terminal of a sandbox (it is stopping)."""
    for session in record.ptys.values():
        await session.close()
    record.ptys.clear()


def _session(request: Request, record: SandboxRecord) -> PtySession:
    key = request.params["pty"]
    session = record.ptys.get(key)
    if session is None:
        raise HttpError(404, f"PTY session {key} not found", "NOT_FOUND")
    return session


def _size(value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    if not value.isdigit() or not 1 <= int(value) <= 1000:
        raise HttpError(400, "cols and rows must be between 1 and 1000", "BAD_REQUEST")
    return int(value)


def _envs(request: Request) -> dict[str, str]:
    for offered in request.headers.get("sec-websocket-protocol", "").split(","):
        offered = offered.strip()
        if offered.startswith(_ENVS):
            raw = offered[len(_ENVS):]
            try:
                envs = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
            except (binascii.Error, ValueError):
                raise HttpError(400, "invalid PTY environment", "BAD_REQUEST") from None
            if not isinstance(envs, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in envs.items()):
                raise HttpError(400, "invalid PTY environment", "BAD_REQUEST")
            return envs
    return {}


async def _attach(request: Request, session: PtySession) -> Response:
    control = EXIT_CONTROL in request.offered_protocols()
    async with websocket(request, EXIT_CONTROL if control else None) as ws:
        await ws.send_text(json.dumps({"type": "control", "status": "connected"}))
        if session.exit_code is not None:
            await exited(ws, session.exit_code, control=control)
            return UPGRADED
        session.clients[ws] = control
        try:
            async for message in ws:
                data = message.data if isinstance(message.data, bytes) else \
                    message.data.encode()
                try:
                    await session.process.write_stdin(frame(b"d", data))
                except SandboxError:
                    await ws.close(CLOSE_INTERNAL_ERROR, "PTY session unavailable")
                    break
        finally:
            session.clients.pop(ws, None)
    return UPGRADED


async def create_connect(request: Request) -> Response:
    """``GET /process/pty/create-connect?id=&cols=&rows=&cwd=`` (WebSocket)."""
    record, handle = running(request)
    key = request.query.get("id", "")
    if not key:
        raise HttpError(400, "session ID is required", "BAD_REQUEST")
    if key in record.ptys:
        raise HttpError(409, f"PTY session {key} already exists", "CONFLICT")
    cols, rows = _size(request.query.get("cols"), 80), _size(request.query.get("rows"), 24)
    cwd = request.query.get("cwd") or record.workdir
    envs = _envs(request)
    try:
        argv, env = record.spawn(["python3", "-c", RELAY, str(cols), str(rows)], envs)
        process = await handle.start(argv, cwd=cwd, env=env)
    except SandboxError as exc:
        raise HttpError(500, f"failed to start PTY session: {exc.message}") from exc
    session = PtySession(id=key, cwd=cwd, envs=envs, cols=cols, rows=rows, process=process,
                         created_at=dt.datetime.now(dt.timezone.utc).isoformat())
    session.reader = await context(request).store.tasks.start(session.follow)
    record.ptys[key] = session
    return await _attach(request, session)


async def connect(request: Request) -> Response:
    """``GET /process/pty/{id}/connect`` (WebSocket)."""
    record, _handle = running(request)
    return await _attach(request, _session(request, record))


async def list_ptys(request: Request) -> Response:
    """``GET /process/pty``."""
    record, _handle = running(request)
    return json_response({"sessions": [s.to_json() for s in record.ptys.values()]})


async def get_pty(request: Request) -> Response:
    """``GET /process/pty/{id}``."""
    record, _handle = running(request)
    return json_response(_session(request, record).to_json())


async def resize_pty(request: Request) -> Response:
    """``POST /process/pty/{id}/resize`` with ``{cols, rows}``."""
    record, _handle = running(request)
    session = _session(request, record)
    body = await request.json()
    if not isinstance(body, dict):
        raise HttpError(400, "invalid request body", "BAD_REQUEST")
    cols = _size(str(body.get("cols", "")), session.cols)
    rows = _size(str(body.get("rows", "")), session.rows)
    if session.exit_code is not None:
        raise HttpError(410, f"PTY session {session.id} has exited", "SESSION_ENDED")
    try:
        await session.process.write_stdin(frame(b"r", struct.pack(">HH", cols, rows)))
    except SandboxError as exc:
        raise HttpError(500, exc.message) from exc
    session.cols, session.rows = cols, rows
    return json_response(session.to_json())


async def delete_pty(request: Request) -> Response:
    """``DELETE /process/pty/{id}``: the terminal is killed."""
    record, _handle = running(request)
    session = _session(request, record)
    del record.ptys[session.id]
    await session.close()
    return json_response({"message": "PTY session deleted"})
