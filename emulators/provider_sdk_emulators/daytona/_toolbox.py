"""The toolbox (``/toolbox/{sandboxId}/...``): what Daytona's in-sandbox daemon serves.

Commands, sessions and files are translated to the neutral backend sandbox's ``exec``,
``shell`` and ``files``. Wire formats follow the daemon: one-shot commands answer with
stdout and stderr combined in ``result``; session logs are JSON; bulk upload and download
are ``multipart/form-data`` (a download part echoes the requested path as its filename,
a failure is a part named ``error`` holding a JSON error, and the closing boundary is
always written).

What the emulator holds of a command's output is bounded: ``process/execute`` and session
logs answer with the first :data:`OUTPUT_LIMIT` bytes of each stream (the rest is
dropped, as the backend's ``exec`` drops it); ``follow=true`` log streams send the same
bytes as they arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import posixpath
import re
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import anyio

from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    CommandTimeout,
    Conflict,
    FileNotFound,
    InvalidInput,
    PermissionDenied,
    SandboxError,
)
from provider_sdk.limits import DEFAULT_OUTPUT_LIMIT, OutputBuffer
from provider_sdk.models import FileInfo, FileType
from provider_sdk.sandbox import Sandbox
from provider_sdk_emulators.daytona._http import (
    UPGRADED,
    HttpError,
    context,
    json_response,
    websocket,
)
from provider_sdk_emulators.daytona._sessions import SESSION_DRIVER, CommandRecord, open_shell
from provider_sdk_emulators.daytona._store import USER, SandboxRecord, SessionRecord, new_id
from provider_sdk_emulators.kit import multipart
from provider_sdk_emulators.kit.bodies import BodyTooLarge
from provider_sdk_emulators.kit.http import Request, Response
from provider_sdk_emulators.kit.websocket import MessageType

OUTPUT_LIMIT = DEFAULT_OUTPUT_LIMIT
"""Bytes of each output stream of a command the emulator keeps and answers with."""

BOUNDARY = "DAYTONA-FILE-BOUNDARY"
STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"
# The daemon pipes a command to the first shell it finds, stderr merged into stdout.
# The first command under a given PATH looks the shell up, and says on its stderr, which
# no command can reach once merged, which one it found; later ones start it directly.
_FIND_SHELL = ('if command -v bash >/dev/null 2>&1; then s=bash; else s=sh; fi; '
               'echo "$s" >&2; exec 2>&1; exec "$s" -c "$1"')
# On the script's first line, so that line numbers stay as they are. Only a script that
# does not parse writes to the stderr it had: nothing ran, so nothing comes before it.
_MERGE = "exec 2>&1; "


def running(request: Request) -> tuple[SandboxRecord, Sandbox]:
    """The sandbox the path names, which must be started."""
    ctx = context(request)
    key = request.params["sandbox"]
    record = ctx.store.sandboxes.get(key)
    if record is None:
        raise HttpError(404, f"sandbox {key} not found", "SANDBOX_NOT_FOUND")
    if record.toolbox_502 > 0:
        record.toolbox_502 -= 1
        ctx.faults.served("toolbox_502_after_start")
        raise HttpError(502, "Bad Gateway: failed to resolve container IP", "BAD_GATEWAY")
    if record.handle is None or record.state != "started":
        raise HttpError(409, f"sandbox {key} is {record.state}, not started",
                        "SANDBOX_NOT_STARTED")
    record.active_at = asyncio.get_running_loop().time()
    return record, record.handle


def file_error(exc: SandboxError) -> HttpError:
    """The daemon's answer for a neutral file error."""
    if isinstance(exc, FileNotFound):
        return HttpError(404, f"file not found: {exc.message}", "FILE_NOT_FOUND")
    if isinstance(exc, PermissionDenied):
        return HttpError(403, f"permission denied: {exc.message}", "FILE_ACCESS_DENIED")
    if isinstance(exc, InvalidInput):
        return HttpError(400, exc.message, "INVALID_FILE_PATH")
    if isinstance(exc, Conflict):
        return HttpError(409, exc.message, "CONFLICT")
    return HttpError(500, exc.message, "INTERNAL_ERROR")


def _path(request: Request, name: str = "path") -> str:
    value = request.query.get(name)
    if not value:
        raise HttpError(400, f"query parameter {name} is required", "INVALID_FILE_PATH")
    return value


# ------------------------------------------------------------------------ process

async def run_merged(record: SandboxRecord, handle: Sandbox, script: str, *,
                     env: dict[str, str],
                     cwd: str | None = None, timeout: float | None = None,
                     stdin: str | None = None) -> tuple[int, bytes]:
    """Run ``script`` as the daemon runs a command (its first shell, stderr merged into
    stdout): the exit code (-1 when a signal ended it, as Go's ``ExitCode()``) and the
    first :data:`OUTPUT_LIMIT` bytes of the output.

    Raises:
        HttpError: the daemon's 408 ``REQUEST_TIMEOUT`` when ``timeout`` ends it,
            whatever it wrote; 400 when the backend refuses it.
    """
    # The first OUTPUT_LIMIT bytes are kept here as they arrive, whatever the backend
    # keeps of the rest.
    kept = OutputBuffer(OUTPUT_LIMIT)
    streams = handle.provider.supports(Capability.EXEC_STREAM)
    prefix, env = record.spawn([], env)
    path = env.get("PATH")
    shell = record.shells.get(path)
    argv = [shell, "-c", _MERGE + script] if shell else \
        ["/bin/sh", "-c", _FIND_SHELL, "sh", script]
    try:
        result = await handle.exec(prefix + argv, env=env, cwd=cwd, timeout=timeout,
                                   stdin=stdin, output_limit=OUTPUT_LIMIT,
                                   on_stdout=kept.append if streams else None)
    except CommandTimeout:
        raise HttpError(408, "request timeout: command execution timeout",
                        "REQUEST_TIMEOUT") from None
    except SandboxError as exc:
        raise HttpError(400, exc.message, "BAD_REQUEST") from exc
    code = result.exit_code if result.exit_code >= 0 else -1
    output = kept.value() if streams else result.stdout_bytes[:OUTPUT_LIMIT]
    if shell:
        return code, (result.stderr_bytes + output)[:OUTPUT_LIMIT]
    found = result.stderr_bytes.decode("ascii", "replace").strip()
    if found in ("bash", "sh"):
        record.shells[path] = found
    return code, output


async def execute(request: Request) -> Response:
    """``POST /process/execute``: run to completion; when the timeout kills it, the
    daemon's 408 (``REQUEST_TIMEOUT``), whatever the command wrote."""
    record, handle = running(request)
    body = await request.json()
    command = body.get("command")
    if not isinstance(command, str):
        raise HttpError(400, "command is required", "BAD_REQUEST")
    code, output = await run_merged(record, handle, command, env=body.get("envs") or {},
                                    cwd=body.get("cwd") or None,
                                    timeout=body.get("timeout") or None)
    return json_response({"exitCode": code, "result": output.decode("utf-8", "replace")})


# ----------------------------------------------------------------------- sessions

def _session(request: Request, record: SandboxRecord) -> SessionRecord:
    key = request.params["session"]
    session = record.sessions.get(key)
    if session is None:
        raise HttpError(404, f"session {key} not found", "SESSION_NOT_FOUND")
    return session


async def create_session(request: Request) -> Response:
    """``POST /process/session``: a persistent shell."""
    record, handle = running(request)
    session_id = (await request.json()).get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        raise HttpError(400, "sessionId is required", "BAD_REQUEST")
    if session_id in record.sessions:
        raise HttpError(409, f"session {session_id} already exists", "CONFLICT")
    try:
        shell = await open_shell(context(request).store.tasks, handle, *record.spawn(
            ["bash", "--noprofile", "--norc", "-c", SESSION_DRIVER]))
    except SandboxError as exc:
        raise HttpError(500, f"cannot start the session's shell: {exc.message}") from exc
    record.sessions[session_id] = SessionRecord(id=session_id, shell=shell)
    return Response(201)


async def list_sessions(request: Request) -> Response:
    """``GET /process/session``."""
    record, _handle = running(request)
    return json_response([s.to_json() for s in record.sessions.values()])


async def get_session(request: Request) -> Response:
    """``GET /process/session/{session}``."""
    record, _handle = running(request)
    return json_response(_session(request, record).to_json())


async def delete_session(request: Request) -> Response:
    """``DELETE /process/session/{session}``: ends the shell and what it runs."""
    record, _handle = running(request)
    session = _session(request, record)
    del record.sessions[session.id]
    await session.shell.close()
    return Response(204)


async def session_exec(request: Request) -> Response:
    """``POST /process/session/{session}/exec``: sync (200 with output) or async (202).
    Commands run one after another; a session whose shell exited answers 410."""
    record, _handle = running(request)
    session = _session(request, record)
    body = await request.json()
    command = body.get("command")
    if not isinstance(command, str):
        raise HttpError(400, "command is required", "BAD_REQUEST")
    if session.shell.ended:
        raise HttpError(410, f"session {session.id} has ended", "SESSION_ENDED")
    cmd = CommandRecord(id=new_id(), command=command,
                        run_async=bool(body.get("runAsync") or body.get("async")),
                        suppress_input_echo=bool(body.get("suppressInputEcho")))
    session.commands[cmd.id] = cmd
    try:
        await session.shell.submit(cmd)
    except SandboxError as exc:
        raise HttpError(410, f"session {session.id}: {exc.message}", "SESSION_ENDED") from exc
    if cmd.run_async:
        return json_response({"cmdId": cmd.id}, status=202)
    await cmd.done.wait()
    return json_response({"cmdId": cmd.id, "output": _text(cmd.output),
                          "stdout": _text(cmd.stdout), "stderr": _text(cmd.stderr),
                          "exitCode": cmd.exit_code})


def _text(data: bytearray) -> str:
    return bytes(data).decode("utf-8", "replace")


async def _command(request: Request) -> CommandRecord:
    """The command the path names, its logs brought up to date."""
    record, _handle = running(request)
    session = _session(request, record)
    key = request.params["command"]
    cmd = session.commands.get(key)
    if cmd is None:
        raise HttpError(404, f"command {key} not found", "COMMAND_NOT_FOUND")
    with contextlib.suppress(SandboxError):
        await session.shell.refresh(cmd)
    return cmd


async def get_command(request: Request) -> Response:
    """``GET /process/session/{session}/command/{command}``: exit code null while running."""
    return json_response((await _command(request)).to_json())


async def update_env(request: Request) -> Response:
    """``POST /env`` with ``{set, unset}``: the environment of processes spawned from now
    on (commands, sessions, terminals, interpreter contexts); running ones keep theirs.
    ``unset`` goes first. A stop ends it, as it restarts the daemon."""
    record, _handle = running(request)
    body = await request.json()
    values = body.get("set") or {} if isinstance(body, dict) else None
    names = body.get("unset") or [] if isinstance(body, dict) else None
    if (not isinstance(values, dict) or not isinstance(names, list)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
            or not all(isinstance(n, str) for n in names)):
        raise HttpError(400, "set must map names to strings and unset list names",
                        "BAD_REQUEST")
    for name in [*names, *values]:
        if not _ENV_NAME.fullmatch(name):
            raise HttpError(400, f"invalid environment variable name: '{name}'", "BAD_REQUEST")
    for name in names:
        record.daemon_env.pop(name, None)
        record.daemon_unset.add(name)
    for name, value in values.items():
        record.daemon_env[name] = value
        record.daemon_unset.discard(name)
    return json_response({"message": "environment updated"})


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


async def command_input(request: Request) -> Response:
    """``POST .../command/{command}/input`` with ``{"data"}``: to the running command's
    stdin, a newline added if it has none, and echoed into its stdout unless the command
    asked otherwise; 410 once the command has ended."""
    record, _handle = running(request)
    session = _session(request, record)
    body = await request.json()
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, str):
        raise HttpError(400, "data is required", "BAD_REQUEST")
    key = request.params["command"]
    cmd = session.commands.get(key)
    if cmd is None:
        raise HttpError(404, "command not found", "COMMAND_NOT_FOUND")
    if session.shell.ended:
        raise HttpError(410, "session process has exited", "SESSION_ENDED")
    if cmd.exit_code is not None:
        raise HttpError(410, f"command has already completed with exit code {cmd.exit_code}",
                        "COMMAND_ALREADY_COMPLETED")
    if not data.endswith("\n"):
        data += "\n"
    try:
        await session.shell.send_input(cmd, data.encode(), echo=not cmd.suppress_input_echo)
    except SandboxError as exc:
        raise HttpError(500, exc.message, "INTERNAL_ERROR") from exc
    return Response(204)


async def command_logs(request: Request) -> Response:
    """``GET .../command/{command}/logs``: JSON, or with ``follow=true`` a WebSocket of
    output frames (stdout prefixed ``\\x01\\x01\\x01``, stderr ``\\x02\\x02\\x02``)."""
    cmd = await _command(request)
    if request.query.get("follow") != "true":
        return json_response({"output": _text(cmd.output), "stdout": _text(cmd.stdout),
                              "stderr": _text(cmd.stderr)})
    record, _handle = running(request)
    shell = _session(request, record).shell
    async with websocket(request) as ws:
        sent_out = sent_err = 0
        while True:
            finished = cmd.done.is_set()
            if not finished:
                with contextlib.suppress(SandboxError):
                    await shell.refresh(cmd)
            if len(cmd.stdout) > sent_out:
                await ws.send_bytes(STDOUT_PREFIX + bytes(cmd.stdout[sent_out:]))
                sent_out = len(cmd.stdout)
            if len(cmd.stderr) > sent_err:
                await ws.send_bytes(STDERR_PREFIX + bytes(cmd.stderr[sent_err:]))
                sent_err = len(cmd.stderr)
            if finished or ws.closed:
                break
            with anyio.move_on_after(0.05):
                if (await ws.receive()).type is MessageType.CLOSE:
                    break
    return UPGRADED


# -------------------------------------------------------------------------- files

def _file_info(info: FileInfo) -> dict[str, Any]:
    kind = {FileType.DIRECTORY: "d", FileType.SYMLINK: "L"}.get(info.type, "-")
    bits = "".join(ch if info.mode & (1 << (8 - i)) else "-"
                   for i, ch in enumerate("rwxrwxrwx"))
    modified = (info.modified_at or dt.datetime.now(dt.timezone.utc)).isoformat()
    return {"name": info.name, "path": info.path, "isDir": info.type == FileType.DIRECTORY,
            "size": info.size, "mode": kind + bits, "permissions": f"{info.mode & 0o7777:04o}",
            "modTime": modified, "modifiedAt": modified, "owner": USER, "group": USER}


async def work_dir(request: Request) -> Response:
    """``GET /work-dir``: where commands start."""
    record, _handle = running(request)
    return json_response({"dir": record.workdir})


async def home_dir(request: Request) -> Response:
    """``GET /user-home-dir``: the sandbox user's ``$HOME``."""
    record, _handle = running(request)
    return json_response({"dir": record.home})


async def list_files(request: Request) -> Response:
    """``GET /files?path=``."""
    _record, handle = running(request)
    try:
        entries = await handle.files.list(_path(request))
    except SandboxError as exc:
        raise file_error(exc) from exc
    return json_response([_file_info(e) for e in entries])


async def file_info(request: Request) -> Response:
    """``GET /files/info?path=``: the entry itself, a symlink not followed."""
    _record, handle = running(request)
    try:
        return json_response(_file_info(await handle.files.stat(_path(request))))
    except SandboxError as exc:
        raise file_error(exc) from exc


async def create_folder(request: Request) -> Response:
    """``POST /files/folder?path=&mode=``: with its parents; existing is fine."""
    _record, handle = running(request)
    try:
        await handle.files.mkdir(_path(request), parents=True, exist_ok=True)
    except SandboxError as exc:
        raise file_error(exc) from exc
    return Response(201)


async def delete_file(request: Request) -> Response:
    """``DELETE /files?path=&recursive=``."""
    _record, handle = running(request)
    try:
        await handle.files.remove(_path(request),
                                  recursive=request.query.get("recursive") == "true")
    except SandboxError as exc:
        raise file_error(exc) from exc
    return Response(204)


async def move_file(request: Request) -> Response:
    """``POST /files/move?source=&destination=``."""
    _record, handle = running(request)
    try:
        await handle.files.rename(_path(request, "source"), _path(request, "destination"))
    except SandboxError as exc:
        raise file_error(exc) from exc
    return Response(200)


async def bulk_upload(request: Request) -> Response:
    """``POST /files/bulk-upload``: parts ``files[i].path`` then ``files[i].file``, each
    file streamed into the sandbox as it arrives."""
    _record, handle = running(request)
    try:
        boundary = multipart.boundary_of(request.headers.get("content-type", ""))
    except multipart.MultipartError as exc:
        raise HttpError(400, str(exc), "BAD_REQUEST") from None
    paths: dict[str, str] = {}
    written: list[dict[str, Any]] = []
    try:
        async for part in multipart.parts(request.stream(), boundary):
            index, _, field = part.name.rpartition(".")
            if field == "path":
                paths[index] = b"".join([c async for c in part.chunks()]).decode(
                    errors="replace")
                continue
            if field != "file":
                raise HttpError(400, f"unexpected form field {part.name!r}", "BAD_REQUEST")
            destination = paths.get(index) or part.filename
            if not destination:
                raise HttpError(400, f"no destination for {part.name}", "INVALID_FILE_PATH")
            size = 0

            async def chunks(p: multipart.Part = part) -> AsyncIterator[bytes]:
                nonlocal size
                async for chunk in p.chunks():
                    size += len(chunk)
                    yield chunk

            try:
                await handle.files.write(destination, chunks())
            except BodyTooLarge:
                raise
            except SandboxError as exc:
                raise file_error(exc) from exc
            written.append({"path": destination, "bytes": size})
    except multipart.MultipartError as exc:
        raise HttpError(400, f"malformed multipart body: {exc}", "BAD_REQUEST") from None
    return json_response({"files": written})


# Run in the sandbox, as the daemon's steps run there: stat (following links), the mode,
# then the owner and group (names looked up in the sandbox's own /etc). Exit 2: no such
# path, 13: not allowed, anything else: a bad request.
_PERMISSIONS = r"""p=$1 mode=$2 owner=$3 group=$4
err=$(LC_ALL=C stat -L -- "$p" 2>&1 >/dev/null) || case $err in
    *"Permission denied"*) exit 13;; *"No such file"*) exit 2;; *) exit 3;; esac
if [ "$mode" = bad ]; then exit 3; fi
if [ -n "$mode" ]; then chmod "$mode" -- "$p" || exit 3; fi
case $owner in ''|[0-9]*) ;; *) owner=$(id -u -- "${owner#:}" 2>/dev/null) || exit 3;; esac
case $group in
    ''|[0-9]*) ;;
    *) group=$(getent group -- "${group#:}" | cut -d: -f3); [ -n "$group" ] || exit 3;;
esac
if [ -n "$owner$group" ]; then chown "$owner${group:+:$group}" -- "$p" || exit 3; fi
"""
_NUMBER = re.compile(r"[+-]?[0-9]+")


def _go_mode(mode: str) -> str:
    """The mode the daemon sets for ``mode`` (octal, as Go's ParseUint(mode, 8, 32)
    reads it; Go keeps the permission bits and its own setuid, setgid and sticky bits):
    octal digits, or ``bad``."""
    if not re.fullmatch(r"[0-7]+", mode) or int(mode, 8) >= 1 << 32:
        return "bad"
    value = int(mode, 8)
    bits = value & 0o777
    for go_bit, unix_bit in ((1 << 23, 0o4000), (1 << 22, 0o2000), (1 << 20, 0o1000)):
        if value & go_bit:
            bits |= unix_bit
    return f"{bits:o}"


def _go_id(given: str) -> str:
    """An owner or group as the script takes it: a number (Go's Atoi: -1 leaves it
    unchanged), else ``:name`` to look up."""
    if not given:
        return ""
    if _NUMBER.fullmatch(given):
        number = int(given)
        if number == -1:
            return ""
        # (a negative id is refused by chown; ``bad:`` is no name, so the lookup fails)
        return str(number) if number >= 0 else "bad:"
    return f":{given}"


async def set_permissions(request: Request) -> Response:
    """``POST /files/permissions?path=&mode=&owner=&group=``: as the daemon, a refusal is
    a bare status (404 no such path, 403 not allowed, 400 anything else)."""
    _record, handle = running(request)
    query = request.query
    path = query.get("path", "")
    if not path:
        return Response(400)
    mode = _go_mode(query["mode"]) if query.get("mode") else ""
    try:
        result = await handle.exec(["sh", "-c", _PERMISSIONS, "sh", path, mode,
                                    _go_id(query.get("owner", "")),
                                    _go_id(query.get("group", ""))])
    except SandboxError as exc:
        raise HttpError(500, exc.message) from exc
    status = {0: 200, 2: 404, 13: 403}.get(result.exit_code, 400)
    return Response(status)


def _disposition(name: str, path: str) -> str:
    # The SDK reads the plain filename as Latin-1 text; a path it cannot hold (or one
    # with control characters) is sent percent-encoded there, whole in filename*.
    plain = all(32 <= ord(c) < 256 and c != "\x7f" for c in path)
    shown = path if plain else urllib.parse.quote(path, safe="/")
    quoted = shown.replace("\\", "\\\\").replace('"', '\\"')
    return (f'form-data; name="{name}"; filename="{quoted}"; '
            f"filename*=utf-8''{urllib.parse.quote(path, safe='')}")


async def file_size(handle: Sandbox, path: str) -> int:
    """The size of the file ``path`` leads to (symlinks followed, as ``open`` does)."""
    for _hop in range(40):  # the kernel's own bound on a chain of links
        info = await handle.files.stat(path)
        if info.type != FileType.SYMLINK or info.symlink_target is None:
            return info.size
        path = posixpath.join(posixpath.dirname(path), info.symlink_target)
    raise InvalidInput(f"too many levels of symbolic links: {path}")


async def _file_part(handle: Sandbox, path: str,
                     stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The part for ``path``: the file, or an ``error`` part saying why not."""
    try:
        first = await anext(stream, b"")  # errors surface before the part starts
        size = await file_size(handle, path)
    except SandboxError as exc:
        error = file_error(exc)
        body = json.dumps({"message": error.message, "statusCode": error.status,
                           "code": error.code, "source": "DAYTONA_DAEMON"}).encode()
        yield (f"--{BOUNDARY}\r\nContent-Disposition: {_disposition('error', path)}\r\n"
               f"Content-Type: application/json\r\n\r\n".encode() + body + b"\r\n")
        return
    # As the daemon's, the length is the size when the file was opened; the part holds
    # what is read (the boundary, not the length, ends it).
    yield (f"--{BOUNDARY}\r\nContent-Disposition: {_disposition('file', path)}\r\n"
           "Content-Type: application/octet-stream\r\n"
           f"Content-Length: {size}\r\n\r\n".encode() + first)
    async for chunk in stream:
        yield chunk
    yield b"\r\n"


async def bulk_download(request: Request) -> Response:
    """``POST /files/bulk-download``: one part per requested path, in order, each with
    the file's size as its ``Content-Length`` (what the SDK reports progress against)."""
    _record, handle = running(request)
    paths = (await request.json()).get("paths")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise HttpError(400, "paths must be a list of strings", "BAD_REQUEST")

    async def body() -> AsyncIterator[bytes]:
        for path in paths:
            stream = handle.files.stream(path)
            try:
                async for piece in _file_part(handle, path, stream):
                    yield piece
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(SandboxError):
                        await aclose()
        yield f"--{BOUNDARY}--\r\n".encode()

    return Response(200, (("content-type", f"multipart/form-data; boundary={BOUNDARY}"),),
                    body())
