"""The daemon's file searches and replacements (``fs.find_files``, ``fs.search_files``,
``fs.replace_in_files``), over the neutral backend sandbox's files.

The daemon walks a tree as Go's ``filepath.Walk`` does: names in order, depth first,
symlinks not followed, an entry it cannot read skipped (with what is under it). The
walk here reads the same entries through the backend's ``files``, so the answers are
the daemon's: content matches by line (a file whose first 512 bytes hold a NUL is
binary and skipped; a line past 64 KiB ends its file's scan, as Go's scanner does),
names matched by Go's glob rules. Replacements read each file whole and write it back in
the sandbox (``>``: in place, through a symlink, its mode kept), answering each file's
success or Go's error text.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import AsyncIterator
from typing import Any

from provider_sdk.errors import FileNotFound, PermissionDenied, SandboxError
from provider_sdk.models import FileInfo, FileType
from provider_sdk.sandbox import Sandbox
from provider_sdk_emulators.daytona._http import json_response
from provider_sdk_emulators.daytona._toolbox import running
from provider_sdk_emulators.kit.http import Request, Response

_BINARY_CHECK = 512  # bytes the daemon looks at for a NUL
_LINE_LIMIT = 64 * 1024  # Go's bufio.MaxScanTokenSize


def _where(workdir: str, path: str) -> str:
    """Where a path the daemon would resolve against its working directory is."""
    return posixpath.normpath(posixpath.join(workdir, path))


def _base(path: str) -> str:
    """Go's ``filepath.Base``: what ``Lstat(path).Name()`` is."""
    stripped = path.rstrip("/")
    if not stripped:
        return "/" if path else "."
    return stripped.rsplit("/", 1)[-1]


def _join(parent: str, name: str) -> str:
    """Go's ``filepath.Join``: joined, then cleaned."""
    joined = posixpath.normpath(f"{parent}/{name}")
    return "/" + joined.lstrip("/") if joined.startswith("/") else joined


async def _walk(handle: Sandbox, workdir: str,
                root: str) -> AsyncIterator[tuple[str, FileInfo]]:
    """``filepath.Walk``: each entry as the daemon names it, with its own description."""
    try:
        info = await handle.files.stat(_where(workdir, root))
    except SandboxError:
        return  # Walk's function skips a root it cannot describe
    async for found in _walk_from(handle, workdir, root, info):
        yield found


async def _walk_from(handle: Sandbox, workdir: str, path: str,
                     info: FileInfo) -> AsyncIterator[tuple[str, FileInfo]]:
    if info.type != FileType.DIRECTORY:
        yield path, info
        return
    try:
        entries = await handle.files.list(_where(workdir, path))
    except SandboxError:
        return  # an unreadable directory is skipped, itself included
    yield path, info
    for entry in sorted(entries, key=lambda e: e.name):
        async for found in _walk_from(handle, workdir, _join(path, entry.name), entry):
            yield found


async def _matching_lines(handle: Sandbox, path: str,
                          pattern: bytes) -> AsyncIterator[tuple[int, bytes]]:
    """The lines of a text file holding ``pattern``, numbered from 1 (a line's ``\r``
    before its newline dropped, as Go's ScanLines drops it)."""
    stream = handle.files.stream(path)
    number = 0
    pending = b""
    checked = False
    try:
        async for chunk in stream:
            pending += chunk
            if not checked:
                if len(pending) < _BINARY_CHECK:
                    continue
                if b"\0" in pending[:_BINARY_CHECK]:
                    return
                checked = True
            *lines, pending = pending.split(b"\n")
            for line in lines:
                number += 1
                if pattern in line.removesuffix(b"\r"):
                    yield number, line.removesuffix(b"\r")
            if len(pending) >= _LINE_LIMIT:
                return  # Go's scanner gives up on a line this long
        if not checked and (not pending or b"\0" in pending):
            return  # empty (the daemon's first read fails) or binary
        *lines, last = pending.split(b"\n")
        for line in [*lines, last] if last else lines:
            number += 1
            if pattern in line.removesuffix(b"\r"):
                yield number, line.removesuffix(b"\r")
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def find_in_files(request: Request) -> Response:
    """``GET /files/find?path=&pattern=``: ``[{file, line, content}]``."""
    record, handle = running(request)
    path, pattern = request.query.get("path", ""), request.query.get("pattern", "")
    if not path or not pattern:
        return Response(400)
    matches: list[dict[str, Any]] = []
    async for shown, info in _walk(handle, record.workdir, path):
        if info.type != FileType.FILE:
            continue
        try:
            async for number, line in _matching_lines(
                    handle, _where(record.workdir, shown), pattern.encode()):
                matches.append({"file": shown, "line": number,
                                "content": line.decode("utf-8", "replace")})
        except SandboxError:
            continue  # a file the daemon cannot open is skipped
    return json_response(matches)


def glob_regex(pattern: str) -> re.Pattern[str] | None:
    """Go's ``filepath.Match`` pattern as a regular expression (``None``: malformed,
    which matches nothing): ``*``, ``?``, ``[...]`` with ``^`` and ranges, ``\\``."""
    out: list[str] = []
    i = 0

    def escaped(at: int) -> tuple[str, int] | None:
        if at >= len(pattern) or pattern[at] in "-]":
            return None
        if pattern[at] == "\\":
            at += 1
            if at >= len(pattern):
                return None
        return pattern[at], at + 1

    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "\\":
            if i + 1 >= len(pattern):
                return None
            out.append(re.escape(pattern[i + 1]))
            i += 2
        elif char == "[":
            i += 1
            negate = i < len(pattern) and pattern[i] == "^"
            i += negate
            ranges: list[tuple[str, str]] = []
            while True:
                if i < len(pattern) and pattern[i] == "]" and ranges:
                    i += 1
                    break
                low = escaped(i)
                if low is None:
                    return None
                high, i = low
                lo = high
                if i < len(pattern) and pattern[i] == "-":
                    end = escaped(i + 1)
                    if end is None:
                        return None
                    high, i = end
                ranges.append((lo, high))
            kept = "".join(f"{re.escape(lo)}-{re.escape(hi)}" for lo, hi in ranges if lo <= hi)
            if negate:
                out.append(f"[^{kept}]" if kept else "(?s:.)")
            else:
                out.append(f"[{kept}]" if kept else "(?!)")
        else:
            out.append(re.escape(char))
            i += 1
    return re.compile("".join(out), re.DOTALL)


async def search_files(request: Request) -> Response:
    """``GET /files/search?path=&pattern=``: ``{files}``, each entry whose name the glob
    matches, the root included."""
    record, handle = running(request)
    path, pattern = request.query.get("path", ""), request.query.get("pattern", "")
    if not path or not pattern:
        return Response(400)
    glob = glob_regex(pattern)
    files: list[str] = []
    async for shown, _info in _walk(handle, record.workdir, path):
        if glob is not None and glob.fullmatch(_base(shown)):
            files.append(shown)
    return json_response({"files": files})


def _go_error(op: str, path: str, exc: SandboxError) -> str:
    if isinstance(exc, FileNotFound):
        return f"{op} {path}: no such file or directory"
    if isinstance(exc, PermissionDenied):
        return f"{op} {path}: permission denied"
    return f"{op} {path}: {exc.message}"


def _replaced(content: bytes, pattern: str, new_value: str) -> bytes:
    """Go's ``strings.ReplaceAll``; an empty pattern matches before each character
    (each UTF-8 sequence, or each byte that is none) and at the end."""
    if pattern:
        return content.replace(pattern.encode(), new_value.encode())
    text = content.decode("utf-8", "surrogateescape")
    return text.replace("", new_value).encode("utf-8", "surrogateescape")


async def _replace_one(handle: Sandbox, workdir: str, path: str, pattern: str,
                       new_value: str) -> dict[str, Any]:
    where = _where(workdir, path)
    try:
        content = await handle.files.read(where)
    except SandboxError as exc:
        try:
            directory = (await handle.files.stat(where)).type == FileType.DIRECTORY
        except SandboxError:
            directory = False
        error = f"read {path}: is a directory" if directory else _go_error("open", path, exc)
        return {"file": path, "success": False, "error": error}
    try:
        written = await handle.exec(["sh", "-c", 'cat > "$1"', "sh", where],
                                    stdin=_replaced(content, pattern, new_value))
    except SandboxError as exc:
        return {"file": path, "success": False, "error": _go_error("open", path, exc)}
    if written.exit_code != 0:
        said = written.stderr_bytes.decode(errors="replace")
        why = "permission denied" if "Permission denied" in said else said.strip()
        return {"file": path, "success": False, "error": f"open {path}: {why}"}
    return {"file": path, "success": True}


async def replace_in_files(request: Request) -> Response:
    """``POST /files/replace`` with ``{files, pattern, newValue}``: each file's result."""
    record, handle = running(request)
    try:
        body = json.loads(await request.read())
    except ValueError:
        return Response(400)
    if not isinstance(body, dict):
        return Response(400)  # what Go cannot unmarshal: a bare 400
    files = body.get("files") or []
    pattern = body.get("pattern")
    new_value = body.get("newValue")
    if (not isinstance(files, list) or not all(isinstance(f, str) for f in files)
            or not isinstance(pattern, (str, type(None)))
            or not isinstance(new_value, (str, type(None)))):
        return Response(400)
    results = [await _replace_one(handle, record.workdir, path, pattern or "",
                                  new_value or "") for path in files]
    return json_response(results)
