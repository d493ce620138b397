"""``POST /process/code-run``: a program in the sandbox's language, run once, as the
daemon runs it.

The daemon hands the code to the language's runtime on its stdin (``python3 -u -``,
``node -``; TypeScript through a temporary file and ``npx ts-node``), the request's
``argv`` joined with spaces after it (so the shell splits them), in its first shell with
stderr merged into stdout, and answers ``{exitCode, result, artifacts}``. A line of the
output that starts with the artifact marker is taken out of ``result``; when it holds a
chart (``{"type": "chart", "value": {...}}``) the chart goes to ``artifacts.charts``.
Daytona's images also wrap code that imports matplotlib so that its figures print such
lines; the emulator's sandboxes have no matplotlib, and it wraps nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from provider_sdk_emulators.daytona._http import HttpError, json_response
from provider_sdk_emulators.daytona._toolbox import run_merged, running
from provider_sdk_emulators.kit.http import Request, Response

ARTIFACT_MARKER = "dtn_artifact_k39fd2:"
"""What starts an output line that carries an artifact instead of output."""

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The code is the runtime's stdin; node's argv gets the daemon's own fix-up first (it
# drops the "-" that names stdin as the script, so argv[2] is the first argument).
_NODE_ARGV = "process.argv.splice(1, 1);\n"
_RUNNERS = {
    "python": ("", "python3 -u - {argv}"),
    "javascript": (_NODE_ARGV, "node - {argv}"),
    "typescript": (_NODE_ARGV,
                   '_f=/tmp/dtn_$$.ts; cat > "$_f"; npm_config_loglevel=error npx ts-node -T '
                   "--ignore-diagnostics 5107 -O '{{\"module\":\"CommonJS\"}}' \"$_f\" {argv}; "
                   '_dtn_ec=$?; rm -f "$_f"; exit $_dtn_ec'),
}


def parse_artifacts(output: str) -> tuple[str, dict[str, Any] | None]:
    """The output without its artifact lines, and the charts they held (``None`` when
    there are none, as the daemon omits ``artifacts`` then)."""
    charts: list[Any] = []
    kept: list[str] = []
    for line in output.split("\n"):
        if not line.startswith(ARTIFACT_MARKER):
            kept.append(line)
            continue
        try:
            artifact = json.loads(line[len(ARTIFACT_MARKER):].strip() or "null")
        except ValueError:
            continue
        if (isinstance(artifact, dict) and artifact.get("type") == "chart"
                and isinstance(artifact.get("value"), dict)):
            charts.append(artifact["value"])
    return "\n".join(kept), ({"charts": charts} if charts else None)


async def code_run(request: Request) -> Response:
    """``POST /process/code-run``: 200 with the exit code whatever the program did; 400
    for a language the daemon has no runtime for or a bad environment name; 408 when
    the timeout ends it."""
    record, handle = running(request)
    body = await request.json()
    if not isinstance(body, dict):
        raise HttpError(400, "invalid request body", "BAD_REQUEST")
    code, language = body.get("code") or "", body.get("language") or ""
    argv, envs = body.get("argv") or [], body.get("envs") or {}
    if (not isinstance(code, str) or not isinstance(language, str)
            or not isinstance(argv, list) or not all(isinstance(a, str) for a in argv)
            or not isinstance(envs, dict)
            or not all(isinstance(v, str) for v in envs.values())):
        raise HttpError(400, "invalid request body", "BAD_REQUEST")
    runner = _RUNNERS.get(language)
    if runner is None:
        raise HttpError(400, f"unsupported language: {language}", "BAD_REQUEST")
    for key in envs:
        if not _ENV_KEY.fullmatch(key):
            raise HttpError(400, f"invalid environment variable name: '{key}'", "BAD_REQUEST")
    prefix, command = runner
    timeout = body.get("timeout")
    exit_code, output = await run_merged(
        record, handle, command.format(argv=" ".join(argv)), env=envs, stdin=prefix + code,
        timeout=timeout if isinstance(timeout, int) and timeout > 0 else None)
    result, artifacts = parse_artifacts(output.decode("utf-8", "replace"))
    answer: dict[str, Any] = {"exitCode": exit_code, "result": result}
    if artifacts is not None:
        answer["artifacts"] = artifacts
    return json_response(answer)
