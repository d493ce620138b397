"""E2B's template build API (the ``e2b`` SDK's ``Template.build``), served by the emulator.

The flow is the SDK's: ``POST /v3/templates`` names a template and opens a build; each
``COPY`` step asks ``GET /templates/{id}/files/{hash}`` whether its files are there and,
when they are not, PUTs a tar of them to the upload URL answered (a one-time path on the
emulator itself, like a presigned URL: it carries no API key); ``POST
/v2/templates/{id}/builds/{build}`` starts the build from its steps; ``GET
.../status`` pages the build's log and says ``building``, ``ready`` or ``error`` (with
the failing step). ``GET /templates``, ``GET /templates/aliases/{alias}`` answer what the
SDK's ``exists`` and a template listing ask.

A build turns the steps into a Dockerfile whose context holds the uploaded files and
runs it through the backend's ``templates.build`` (the Docker backend builds it, with
networking off, so its ``FROM`` image must already be in the Docker Engine). Like E2B's
builder, the Dockerfile first makes sure the image has E2B's ``user`` account (home
``/home/user``), creating it when the base image lacks one, and runs steps as ``user``
in ``/home/user`` unless they say otherwise. ``startCmd`` and ``readyCmd`` are kept with
the template but not run. On a backend that cannot build, a build ends in ``error``
saying so. This module serves routes only; the World keeps the templates.
"""

from __future__ import annotations

import glob
import json
import posixpath
import re
import secrets
import shlex
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.distributions import install_hint
from provider_sdk.errors import SandboxError, TemplateBuildError
from provider_sdk.models import TemplateSpec
from provider_sdk.settings import Settings
from provider_sdk_emulators.e2b._records import TemplateRecord
from provider_sdk_emulators.e2b._world import ApiError, World, iso, json_body, now
from provider_sdk_emulators.e2b.flavors import ENVD_VERSION
from provider_sdk_emulators.kit.http import Request, Response, json_response

__all__ = ["UPLOAD_PREFIX", "TemplateBuilds"]

UPLOAD_PREFIX = "/_uploads/"
"""Upload URLs start with this; the token in them is the authorization, as a presigned
URL's signature is, so the app lets them through without an API key."""

E2B_USER = "user"
E2B_HOME = "/home/user"
_STEP_TYPES = frozenset({"RUN", "COPY", "ENV", "WORKDIR", "USER"})
_DOCKER_STEP = re.compile(r"Step (\d+)/\d+")
_LOG_PAGE = 100
# Creates E2B's account when the image lacks it: useradd (Debian, Fedora), else
# BusyBox's adduser (Alpine).
_PROVISION = (f"id -u {E2B_USER} >/dev/null 2>&1 || useradd -m -s /bin/sh {E2B_USER} "
              f"2>/dev/null || adduser -D -s /bin/sh {E2B_USER}")


@attrs.define(eq=False)
class _Build:
    """One build of a template: its log and outcome."""

    id: str
    template_id: str
    status: str = "waiting"
    entries: list[dict[str, Any]] = attrs.Factory(list)
    reason: dict[str, Any] | None = None

    def log(self, message: str, *, level: str = "info", step: str | None = None) -> None:
        entry: dict[str, Any] = {"timestamp": iso(now()), "level": level,
                                 "message": message}
        if step is not None:
            entry["step"] = step
        self.entries.append(entry)


class TemplateBuilds:
    """The template build routes, over one :class:`World` (its ``templates``)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self._builds: dict[str, _Build] = {}
        self._uploads: dict[str, tuple[str, str]] = {}
        """Upload token -> (template id, files hash)."""
        self._files = tempfile.TemporaryDirectory(prefix="psdk-e2b-uploads-")

    def routes(self) -> list[tuple[str, str, Any]]:
        """``(method, pattern, handler)`` for the control plane's router."""
        return [
            ("POST", "/v3/templates", self.request_build),
            ("GET", "/templates", self.list_templates),
            ("GET", "/templates/aliases/{alias}", self.alias),
            ("GET", "/templates/{id}/files/{hash}", self.file_link),
            ("PUT", UPLOAD_PREFIX + "{token}", self.upload),
            ("POST", "/v2/templates/{id}/builds/{build}", self.start_build),
            ("GET", "/templates/{id}/builds/{build}/status", self.build_status),
        ]

    # ------------------------------------------------------------------ routes

    async def request_build(self, request: Request) -> Response:
        """``POST /v3/templates``: a template (new, or the one of that name) and a new
        build of it, waiting for its steps."""
        body = await json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "name is required")
        alias, _, tag = name.partition(":")
        tags = body.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ApiError(400, "tags must be a list of strings")
        record = self.world.find_template(alias)
        if record is None:
            record = TemplateRecord(id=secrets.token_hex(10), names=[alias], created_at=now())
            self.world.templates[record.id] = record
        build = _Build(id=secrets.token_hex(12), template_id=record.id)
        self._builds[build.id] = build
        record.extra.update({
            "build_id": build.id, "cpu_count": body.get("cpuCount"),
            "memory_mb": body.get("memoryMB"), "updated_at": now(),
            "build_count": int(record.extra.get("build_count", 0)) + 1})
        if record.backend_template is None:
            record.status = "building"
        return json_response(202, {
            "templateID": record.id, "buildID": build.id, "public": False,
            "names": [alias], "tags": [tag or "default", *tags], "aliases": [alias]})

    async def list_templates(self, request: Request) -> Response:
        """``GET /templates``: every template built here."""
        return json_response(200, [self._template_json(t)
                                   for t in self.world.templates.values()])

    async def alias(self, request: Request) -> Response:
        """``GET /templates/aliases/{alias}``: 200 when a template has that name; E2B's
        own ``base`` is a public template every team finds."""
        if request.params["alias"] in self.world.flavor.default_templates:
            return json_response(200, {"templateID": request.params["alias"],
                                       "public": True})
        record = self.world.find_template(request.params["alias"])
        if record is None:
            raise ApiError(404, f"template alias {request.params['alias']} not found")
        return json_response(200, {"templateID": record.id, "public": False})

    async def file_link(self, request: Request) -> Response:
        """``GET /templates/{id}/files/{hash}``: present, or where to upload them."""
        record = self._record(request.params["id"])
        files_hash = request.params["hash"]
        if not re.fullmatch(r"[0-9a-f]{64}", files_hash):
            raise ApiError(400, "the files hash must be a SHA-256 in hex")
        if self._tar(record.id, files_hash).exists():
            return json_response(201, {"present": True})
        token = secrets.token_urlsafe(24)
        self._uploads[token] = (record.id, files_hash)
        host = request.headers.get("host", "127.0.0.1")
        return json_response(201, {"present": False,
                                   "url": f"http://{host}{UPLOAD_PREFIX}{token}"})

    async def upload(self, request: Request) -> Response:
        """``PUT /_uploads/{token}``: the tar of one ``COPY`` step's files."""
        target = self._uploads.pop(request.params["token"], None)
        if target is None:
            raise ApiError(403, "this upload URL is unknown or was used already")
        path = self._tar(*target)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        with partial.open("wb") as out:
            async for chunk in request.stream():
                out.write(chunk)
        partial.replace(path)
        return Response(200)

    async def start_build(self, request: Request) -> Response:
        """``POST /v2/templates/{id}/builds/{build}``: check the steps, then build in the
        background."""
        record = self._record(request.params["id"])
        build = self._builds.get(request.params["build"])
        if build is None or build.template_id != record.id:
            raise ApiError(404, f"build {request.params['build']} not found")
        if build.status != "waiting":
            raise ApiError(400, f"build {build.id} was started already")
        body = await json_body(request)
        steps = body.get("steps") or []
        if not isinstance(steps, list):
            raise ApiError(400, "steps must be a list")
        for index, step in enumerate(steps, 1):
            if not isinstance(step, dict) or step.get("type") not in _STEP_TYPES or \
                    not isinstance(step.get("args"), list):
                raise ApiError(400, f"step {index}: type must be one of "
                                    f"{', '.join(sorted(_STEP_TYPES))}, with args")
        base = body.get("fromImage")
        from_template = body.get("fromTemplate")
        if body.get("fromImageRegistry") is not None:
            raise ApiError(400, "fromImageRegistry: this emulator pulls no image")
        if from_template in self.world.flavor.default_templates:
            base = _base_image()
        elif from_template is not None:
            parent = self.world.find_template(str(from_template))
            if parent is None or parent.backend_template is None:
                raise ApiError(400, f"fromTemplate: template {from_template} is not ready")
            base = parent.backend_template
        if not isinstance(base, str) or not base:
            raise ApiError(400, "fromImage or fromTemplate is required")
        record.extra.update({"start_cmd": body.get("startCmd"),
                             "ready_cmd": body.get("readyCmd"), "from": base})
        build.status = "building"
        self.world.tg.start_soon(self._build, record, build, base, steps,
                                 bool(body.get("force")))
        return Response(202)

    async def build_status(self, request: Request) -> Response:
        """``GET /templates/{id}/builds/{build}/status``: a page of the log from
        ``logsOffset``, the status, and why it failed."""
        record = self._record(request.params["id"])
        build = self._builds.get(request.params["build"])
        if build is None or build.template_id != record.id:
            raise ApiError(404, f"build {request.params['build']} not found")
        try:
            offset = max(int(request.query.get("logsOffset", 0)), 0)
            limit = min(max(int(request.query.get("limit", _LOG_PAGE)), 0), _LOG_PAGE)
        except ValueError:
            raise ApiError(400, "logsOffset and limit must be integers") from None
        page = build.entries[offset:offset + limit]
        data: dict[str, Any] = {
            "templateID": record.id, "buildID": build.id, "status": build.status,
            "logs": [e["message"] for e in page], "logEntries": page}
        if build.reason is not None:
            data["reason"] = build.reason
        return json_response(200, data)

    # --------------------------------------------------------------- the build

    async def _build(self, record: TemplateRecord, build: _Build, base: str,
                     steps: list[dict[str, Any]], force: bool) -> None:
        backend = self.world.provider
        if not backend.supports(Capability.TEMPLATES_BUILD):
            # A build's steps cannot be faked: say so, as a failed build.
            self._fail(record, build, f"this emulator's backend ({backend.name}) cannot "
                                      "build images; run it with --backend docker", "base")
            return
        context = Path(tempfile.mkdtemp(prefix="psdk-e2b-build-"))
        try:
            dockerfile, labels = self._dockerfile(record.id, base, steps, context)
            build.log(f"Building from {base} ({len(steps)} steps)")
            spec = TemplateSpec(name=f"e2b-{record.id}", dockerfile=dockerfile,
                                context=str(context))
            built = await backend.build_template(
                spec, force=force, on_progress=lambda line: build.log(line))
        except ApiError as exc:
            step = re.match(r"step (\d+):", exc.message)
            self._fail(record, build, exc.message, step.group(1) if step else "base")
            return
        except TemplateBuildError as exc:
            match = _DOCKER_STEP.search(exc.step or "")
            number = int(match.group(1)) if match else 0
            label = labels[number - 1] if 0 < number <= len(labels) else "base"
            # The backend's last line is the builder's own error ("... returned a
            # non-zero code: 3"); the lines before it were streamed already.
            tail = exc.log_tail.strip().splitlines() if exc.log_tail else []
            self._fail(record, build, tail[-1] if tail else exc.message, label)
            return
        except (SandboxError, OSError, tarfile.TarError) as exc:
            # Never let a build's failure end the emulator's task group.
            self._fail(record, build, f"the build failed: {exc}", "base")
            return
        finally:
            shutil.rmtree(context, ignore_errors=True)
        record.backend_template = built.id
        record.status = "ready"
        record.error = None
        record.logs = [e["message"] for e in build.entries]
        build.log("Build finished")
        build.status = "ready"

    def _fail(self, record: TemplateRecord, build: _Build, message: str, step: str) -> None:
        build.log(message, level="error", step=step)
        build.reason = {"message": message, "step": step, "logEntries": build.entries[-1:]}
        build.status = "error"
        record.error = message
        record.logs = [e["message"] for e in build.entries]
        if record.backend_template is None:
            record.status = "error"

    def _dockerfile(self, template_id: str, base: str, steps: list[dict[str, Any]],
                    context: Path) -> tuple[str, list[str]]:
        """The Dockerfile for ``steps`` (COPY sources extracted into ``context``), and
        for each of its instructions the E2B step it comes from (``base`` or its
        1-based index)."""
        lines = [f"FROM {base}", "USER root", f"RUN {_json(['/bin/sh', '-c', _PROVISION])}",
                 f"USER {E2B_USER}", f"WORKDIR {E2B_HOME}"]
        labels = ["base"] * len(lines)
        user = E2B_USER
        for index, step in enumerate(steps, 1):
            kind, args = step["type"], [str(a) for a in step["args"]]
            made = self._step(template_id, index, step, user, context)
            if kind == "USER" and args:
                user = args[0]
            lines += made
            labels += [str(index)] * len(made)
        return "\n".join(lines) + "\n", labels

    def _step(self, template_id: str, index: int, step: dict[str, Any], user: str,
              context: Path) -> list[str]:
        kind, args = step["type"], [str(a) for a in step["args"]]
        if kind == "RUN":
            if not args:
                raise ApiError(400, f"step {index}: RUN needs a command")
            run = f"RUN {_json(['/bin/sh', '-c', args[0]])}"
            if len(args) > 1 and args[1] and args[1] != user:
                return [f"USER {args[1]}", run, f"USER {user}"]
            return [run]
        if kind in ("WORKDIR", "USER"):
            if len(args) != 1 or not args[0]:
                raise ApiError(400, f"step {index}: {kind} needs one argument")
            return [f"{kind} {args[0]}"]
        if kind == "ENV":
            if not args or len(args) % 2:
                raise ApiError(400, f"step {index}: ENV needs names and values")
            return [f"ENV {k}={_json(v)}" for k, v in zip(args[::2], args[1::2], strict=True)]
        return self._copy(template_id, index, args, step.get("filesHash"), user, context)

    def _copy(self, template_id: str, index: int, args: list[str], files_hash: Any,
              user: str, context: Path) -> list[str]:
        """``COPY src dest [owner] [mode]`` from the files uploaded for the step."""
        if len(args) < 2:
            raise ApiError(400, f"step {index}: COPY needs a source and a destination")
        src, dest = args[0], args[1]
        owner = args[2] if len(args) > 2 else ""
        mode = args[3] if len(args) > 3 else ""
        tar = self._tar(template_id, files_hash) if isinstance(files_hash, str) and \
            re.fullmatch(r"[0-9a-f]{64}", files_hash) else None
        if tar is None or not tar.exists():
            raise ApiError(400, f"step {index}: the files of COPY {src} were not uploaded")
        root = context / f"s{index}"
        root.mkdir()
        with tarfile.open(tar, "r:*") as archive:
            archive.extractall(root, filter=_keep_absolute_links)
        source = posixpath.normpath(src)
        flags = f"--chown={owner} " if owner else ""
        lines = [f"COPY {flags}{_json([f's{index}/{source}', dest])}"]
        if mode:
            if not re.fullmatch(r"[0-7]{3,4}", mode):
                raise ApiError(400, f"step {index}: mode {mode!r} is not octal")
            targets = _copied(root, source, dest)
            if targets:
                chmod = f"chmod {mode} {shlex.join(targets)}"
                lines += ["USER root", f"RUN {_json(['/bin/sh', '-c', chmod])}",
                          f"USER {user}"]
        return lines

    def _tar(self, template_id: str, files_hash: str) -> Path:
        return Path(self._files.name) / template_id / f"{files_hash}.tar"

    def _record(self, ref: str) -> TemplateRecord:
        record = self.world.find_template(ref)
        if record is None:
            raise ApiError(404, f"template {ref} not found")
        return record

    def _template_json(self, record: TemplateRecord) -> dict[str, Any]:
        extra = record.extra
        updated = extra.get("updated_at", record.created_at)
        return {
            "templateID": record.id, "buildID": extra.get("build_id", ""),
            "cpuCount": extra.get("cpu_count") or 2, "memoryMB": extra.get("memory_mb") or 512,
            "diskSizeMB": 1024, "public": False, "aliases": list(record.names),
            "names": list(record.names), "createdAt": iso(record.created_at),
            "updatedAt": iso(updated), "createdBy": None, "lastSpawnedAt": None,
            "spawnCount": 0, "buildCount": int(extra.get("build_count", 1)),
            "envdVersion": ENVD_VERSION,
            "buildStatus": {"building": "building", "ready": "ready"}.get(record.status,
                                                                          "error"),
        }


def _base_image() -> str:
    """The image E2B's ``base`` template stands for in a build: the one Docker Engine
    sandboxes start from (``PSDK_DOCKER_TEMPLATE``), which is the Docker backend's
    default template and what every build here runs on."""
    try:
        from provider_sdk_docker import DEFAULT_TEMPLATE
    except ImportError:
        raise ApiError(400, "fromTemplate: building from the base template needs the "
                            "distribution sandbox-provider-sdk-docker: "
                            f"{install_hint('sandbox-provider-sdk-docker')}") from None
    settings = Settings("docker", {"template": "PSDK_DOCKER_TEMPLATE"})  # as the provider's
    return settings.text("template", None, default=DEFAULT_TEMPLATE)


def _keep_absolute_links(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, except that a symlink may name an absolute target, as
    E2B's builder copies such a link into the image as it is. The link is made in the
    context, never followed there: a later member that would pass through it is still
    refused (it resolves outside the context), and hard links stay inside."""
    if member.issym() and member.linkname.startswith("/"):
        checked = tarfile.data_filter(member.replace(linkname=".", deep=False), path)
        return checked.replace(linkname=member.linkname, deep=False)
    return tarfile.data_filter(member, path)


def _json(value: Any) -> str:
    return json.dumps(value)


def _copied(root: Path, source: str, dest: str) -> list[str]:
    """The paths a ``COPY source dest`` writes, as Docker's classic builder copies: a
    directory's contents go into ``dest``; a file goes to ``dest`` or, when ``dest``
    ends with ``/`` or several sources match, into it."""
    matches = sorted(glob.glob(str(root / source)))
    into = dest.endswith("/") or len(matches) > 1
    found: list[str] = []
    for match in matches:
        path = Path(match)
        if path.is_dir():
            found.append(dest.rstrip("/") or "/")
            for inner in sorted(path.rglob("*")):
                found.append(posixpath.join(dest, inner.relative_to(path).as_posix()))
        else:
            found.append(posixpath.join(dest, path.name) if into else dest)
    return found
