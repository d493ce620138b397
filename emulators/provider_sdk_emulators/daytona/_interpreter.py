"""The stateful code interpreter (toolbox ``/process/interpreter/...``), as Daytona's
daemon serves it.

Contexts: ``POST /context`` makes one (Python only; ``cwd`` defaults to the work
directory), ``GET /context`` lists them (not the ``default`` context, which the first
execution without a context makes), ``DELETE /context/{id}`` ends one (``default``
cannot be deleted: 400; an unknown id: 404). Each context is a Python worker of its own
in the sandbox (``provider_sdk_emulators.kit.kernel``), in its directory, so names, imports
and functions defined in one execution are there in the next, and nowhere else.

``GET /execute`` is a WebSocket: the client sends ``{code, contextId?, envs?, timeout?}``
(seconds; 10 minutes by default, 0: none) and receives one JSON text frame per chunk,
``{type, text, name, value, traceback}``: ``stdout`` and ``stderr`` (sent at each
newline, or once 1024 characters wait), ``error`` (the exception's name, value and a
traceback of the code's own frames), and ``control`` (``completed``, or ``interrupted``);
then a close, 1000 when it completed, 4008 when the timeout ended it. At the timeout
the worker is interrupted (SIGINT); one that does not stop within 2 s is killed, and
the context starts a new worker, empty, next time. A request it cannot take is a close
with the daemon's code and reason (1002, 1008, 1011). Executions in one context run one
after another. A stopped sandbox's contexts are gone, as its processes are.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
from typing import Any

import anyio

from provider_sdk.errors import SandboxError
from provider_sdk.sandbox import Sandbox
from provider_sdk_emulators.daytona._http import UPGRADED, HttpError, json_response, websocket
from provider_sdk_emulators.daytona._interpreter_context import InterpreterContext
from provider_sdk_emulators.daytona._store import SandboxRecord, new_id
from provider_sdk_emulators.daytona._toolbox import running
from provider_sdk_emulators.kit.http import Request, Response
from provider_sdk_emulators.kit.kernel import Kernel, KernelDied, KernelOutputTooLarge
from provider_sdk_emulators.kit.websocket import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_OK,
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    MessageType,
    WebSocket,
)

DEFAULT = "default"
_TIMEOUT_CLOSE = 4008
_DEFAULT_TIMEOUT = 600.0
_GRACE = 2.0
_FIRST_MESSAGE_TIMEOUT = 60.0
"""Seconds a client may take to send its request once the WebSocket is open."""
_FIELDS = ("type", "text", "name", "value", "traceback")

async def close_contexts(record: SandboxRecord) -> None:
    """End every context of a sandbox (it is stopping)."""
    for ctx in record.interpreters.values():
        with contextlib.suppress(SandboxError):
            await ctx.close()
    record.interpreters.clear()


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


async def create_context(request: Request) -> Response:
    """``POST /process/interpreter/context`` with ``{cwd?, language?}``."""
    record, handle = running(request)
    body = await request.json() if request.has_body else {}
    if not isinstance(body, dict):
        raise HttpError(400, "invalid request payload", "BAD_REQUEST")
    language = body.get("language") or "python"
    if language != "python":
        raise HttpError(400, f"unsupported language: {language} (only 'python' is "
                             "supported currently)", "BAD_REQUEST")
    cwd = body.get("cwd") or record.workdir
    if not isinstance(cwd, str):
        raise HttpError(400, "invalid request payload: cwd must be a string", "BAD_REQUEST")
    ctx = InterpreterContext(id=new_id(), cwd=cwd, created_at=_now())
    try:
        await ctx.worker(record.spawn, handle)
    except SandboxError as exc:
        raise HttpError(500, f"failed to start context: {exc.message}") from exc
    record.interpreters[ctx.id] = ctx
    return json_response(ctx.to_json())


async def list_contexts(request: Request) -> Response:
    """``GET /process/interpreter/context``: every context but the default one."""
    record, _handle = running(request)
    return json_response({"contexts": [c.to_json() for c in record.interpreters.values()
                                       if c.id != DEFAULT]})


async def delete_context(request: Request) -> Response:
    """``DELETE /process/interpreter/context/{id}``."""
    record, _handle = running(request)
    key = request.params["context"]
    if key == DEFAULT:
        raise HttpError(400, "cannot delete default context", "BAD_REQUEST")
    ctx = record.interpreters.pop(key, None)
    if ctx is None:
        raise HttpError(404, f"context with ID '{key}' not found", "NOT_FOUND")
    await ctx.close()
    return json_response({"message": "Context deleted successfully"})


async def execute(request: Request) -> Response:
    """``GET /process/interpreter/execute``: the WebSocket described above."""
    record, handle = running(request)
    async with websocket(request) as ws:
        refusal = await _serve(ws, record, handle)
        if refusal is not None:
            await ws.close(*refusal)
    return UPGRADED


async def _serve(ws: WebSocket, record: SandboxRecord, handle: Sandbox) -> tuple[int, str] | None:
    """Run the execution the client asks for; the close code (and reason) to end with."""
    first = None
    with anyio.move_on_after(_FIRST_MESSAGE_TIMEOUT):
        first = await ws.receive()
    if first is None or first.type is MessageType.CLOSE:
        return CLOSE_PROTOCOL_ERROR, "failed to read first message"
    try:
        body = json.loads(first.data)
    except ValueError:
        return CLOSE_PROTOCOL_ERROR, "invalid JSON payload"
    if not isinstance(body, dict) or not body.get("code"):
        return CLOSE_POLICY_VIOLATION, "code is required"
    timeout = body.get("timeout")
    if timeout is not None and (not isinstance(timeout, int) or timeout < 0):
        return CLOSE_POLICY_VIOLATION, "timeout must be greater than or equal to 0"
    envs = body.get("envs") or {}
    key = body.get("contextId")
    if key is None:
        ctx = record.interpreters.get(DEFAULT)
        if ctx is None:
            ctx = record.interpreters[DEFAULT] = InterpreterContext(
                id=DEFAULT, cwd=record.workdir, created_at=_now())
    else:
        ctx = record.interpreters.get(key)
        if ctx is None:
            return CLOSE_POLICY_VIOLATION, f"context not found: {key}"
    limit = _DEFAULT_TIMEOUT if timeout is None else (float(timeout) or None)
    async with ctx.lock:
        try:
            kernel = await ctx.worker(record.spawn, handle)
        except SandboxError as exc:
            return CLOSE_INTERNAL_ERROR, f"failed to get default context: {exc.message}"
        async with kernel.lock:
            code = await _run(ws, handle, ctx, kernel,
                              {"code": body["code"], "envs": envs}, limit)
    return code, ""


async def _run(ws: WebSocket, handle: Sandbox, ctx: InterpreterContext,
               kernel: Kernel, request: dict[str, Any], limit: float | None) -> int:
    """Stream one execution's chunks to ``ws``; the close code to end with.

    The kernel's events are read by a task of their own, so a deadline that passes (the
    execution is interrupted, then given :data:`_GRACE`) cancels only the wait for the
    next one, never the read.
    """
    chunks, received = anyio.create_memory_object_stream[
        dict[str, Any] | KernelDied | KernelOutputTooLarge]()

    async def read() -> None:
        async with chunks, contextlib.aclosing(kernel.execute(request)) as events:
            try:
                async for event in events:
                    await chunks.send(event)
            except (KernelDied, KernelOutputTooLarge) as exc:
                await chunks.send(exc)

    deadline = math.inf if limit is None else anyio.current_time() + limit
    interrupted = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        while True:
            chunk = None
            with anyio.CancelScope(deadline=deadline):
                try:
                    chunk = await received.receive()
                except anyio.EndOfStream:
                    code = _TIMEOUT_CLOSE if interrupted else CLOSE_OK
                    break
            if chunk is None:  # the deadline passed
                if interrupted:  # it did not stop within the grace: end the worker
                    await ctx.close()
                    code = _TIMEOUT_CLOSE
                    break
                interrupted = True
                deadline = anyio.current_time() + _GRACE
                with contextlib.suppress(SandboxError):
                    await handle.exec(["kill", "-INT", str(kernel.process.pid)])
                continue
            if isinstance(chunk, (KernelDied, KernelOutputTooLarge)):
                await ctx.close()  # the next execution starts a new worker
                code = CLOSE_GOING_AWAY
                break
            if chunk.get("type") == "control" and chunk.get("text") == "interrupted":
                interrupted = True
            await _send(ws, chunk)
        tg.cancel_scope.cancel()
    return code


async def _send(ws: WebSocket, chunk: dict[str, Any]) -> None:
    if not ws.closed:
        await ws.send_text(json.dumps({f: str(chunk.get(f) or "") for f in _FIELDS}))
