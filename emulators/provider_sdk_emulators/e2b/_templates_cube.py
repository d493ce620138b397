"""CubeAPI's template API: templates made from OCI images pulled from a registry.

``POST /templates`` answers 202 with a build job and builds in the background, through
Cube's phases ``PULLING -> BUILDING -> DISTRIBUTING -> READY`` (or ``FAILED``, the
reason in ``lastError`` and the job's ``errorMessage``):

- PULLING: the image's manifest is read from the registry the reference names (registry
  API v2, with the request's ``registryUsername``/``registryPassword`` as basic
  credentials, or for a bearer token). As on Cube v0.7, an ``http://`` prefix means a
  plain-HTTP registry; any other reference is fetched over HTTPS. Then the image is
  pulled into the Docker Engine with the same credentials. Only the ``docker`` backend
  runs images: on another one the build fails saying so.
- BUILDING: Cube boots the image and waits for its readiness probe, envd on port
  ``49983`` answering ``/health``. The emulator cannot run a real envd, so its stand-in
  for that probe is that the image carries an executable ``/usr/bin/envd`` (where
  Cube's envd injection puts it); the check creates a container (never started,
  network ``none``) and reads that path through the Engine's archive API.
- DISTRIBUTING: one host, nothing to copy. READY: sandboxes created with the template's
  id or alias run the pulled image (pinned by image id).

This module owns these routes and the build; ``control`` resolves a ready template when
a sandbox is created and serves ``DELETE /templates/{id}``. Registry passwords are kept
as :class:`~provider_sdk.config.Secret` and never appear in answers, logs or errors.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import logging
import re
import secrets
import ssl
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import attrs
import httpx

from provider_sdk.secret import Secret
from provider_sdk.settings import Settings
from provider_sdk_emulators.e2b._records import TemplateRecord
from provider_sdk_emulators.e2b._world import ApiError, World, iso, json_body, now
from provider_sdk_emulators.e2b.flavors import ENVD_PORT
from provider_sdk_emulators.kit.http import Handler, Request, Response, json_response

__all__ = ["CubeTemplates", "ENVD_PATH"]

log = logging.getLogger(__name__)

T = TypeVar("T")

ENVD_PATH = "/usr/bin/envd"
"""Where the image must carry envd (the emulator's stand-in for Cube's probe)."""
_ALIAS = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_MANIFESTS = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])
_REGISTRY_TIMEOUT = 30.0
_DOCKER_HOST = "unix:///var/run/docker.sock"
_SECRET_FIELDS = frozenset({"registryPassword"})


class BuildFailed(Exception):
    """A build step failed; the message is what ``lastError`` says."""


@attrs.define(eq=False)
class Build:
    """One build job of a template (a create or a rebuild)."""

    id: str
    template_id: str
    created_at: dt.datetime
    status: str = "PENDING"
    phase: str = "PULLING"
    progress: int = 0
    message: str = ""
    error: str = ""
    finished_at: dt.datetime | None = None
    logs: list[str] = attrs.Factory(list)

    @property
    def running(self) -> bool:
        return self.status not in ("READY", "FAILED")

    def step(self, phase: str, progress: int, message: str) -> None:
        self.status = "PENDING" if phase == "PULLING" and progress == 0 else "BUILDING"
        self.phase, self.progress, self.message = phase, progress, message
        self.logs.append(f"{iso(now())} [{phase}] {message}")

    def job_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"jobID": self.id, "buildID": self.id,
                                "templateID": self.template_id, "status": self.status,
                                "phase": self.phase, "progress": self.progress,
                                "message": self.message, "createdAt": iso(self.created_at)}
        if self.error:
            data["errorMessage"] = self.error
        if self.finished_at is not None:
            data["finishedAt"] = iso(self.finished_at)
        return data


@attrs.frozen(kw_only=True)
class ImageRef:
    """An image reference split up: ``[http://]host[:port]/repository[:tag|@digest]``."""

    given: str
    plain_http: bool
    registry: str
    repository: str
    reference: str
    """The tag, or ``sha256:...`` digest."""

    @property
    def engine_name(self) -> str:
        """How the Docker Engine names it (no scheme)."""
        sep = "@" if self.reference.startswith("sha256:") else ":"
        return f"{self.registry}/{self.repository}{sep}{self.reference}"

    @classmethod
    def parse(cls, given: str) -> ImageRef:
        rest, plain = given, False
        if rest.startswith("http://"):
            rest, plain = rest[len("http://"):], True
        elif rest.startswith("https://"):
            rest = rest[len("https://"):]
        host, _, path = rest.partition("/")
        if not path or not ("." in host or ":" in host or host == "localhost"):
            raise BuildFailed(
                f"pull: {given!r} names no registry host: this emulator pulls only from "
                "the registry an image reference names (host[:port]/repository[:tag])")
        if "@" in path:
            path, _, reference = path.partition("@")
        else:
            slash = path.rfind("/")
            colon = path.rfind(":")
            if colon > slash:
                path, reference = path[:colon], path[colon + 1:]
            else:
                reference = "latest"
        if not path or not reference:
            raise BuildFailed(f"pull: {given!r} is not an image reference")
        return cls(given=given, plain_http=plain, registry=host, repository=path,
                   reference=reference)


def _wire_status(template: TemplateRecord) -> str:
    builds: dict[str, Build] = template.extra["cube_jobs"]
    latest = builds[template.extra["job_id"]]
    return latest.status


class CubeTemplates:
    """The template routes of CubeAPI, over one :class:`World`."""

    def __init__(self, world: World) -> None:
        self.world = world

    def routes(self) -> list[tuple[str, str, Handler]]:
        """The routes, as ``control.routes()`` lists them."""
        return [
            ("POST", "/templates", self.create),
            ("GET", "/templates", self.list_templates),
            ("GET", "/templates/aliases/{alias}", self.by_alias),
            ("GET", "/templates/{id}", self.get_template),
            ("POST", "/templates/{id}", self.rebuild),
            ("PATCH", "/templates/{id}", self.update),
            ("PUT", "/templates/{id}/alias", self.set_alias),
            ("GET", "/templates/{id}/builds/{build}/status", self.build_status),
            ("GET", "/templates/{id}/builds/{build}/logs", self.build_logs),
        ]

    # ------------------------------------------------------------------ shapes

    def summary_json(self, template: TemplateRecord) -> dict[str, Any]:
        """A template as ``GET /templates`` lists it."""
        request: dict[str, Any] = template.extra["request"]
        data: dict[str, Any] = {
            "templateID": template.id, "public": False, "status": _wire_status(template),
            "lastError": template.error or "", "createdAt": iso(template.created_at),
            "imageInfo": request["image"], "jobID": template.extra["job_id"],
            "aliases": list(template.names), "names": list(template.names)}
        if isinstance(request.get("cpu"), int):
            data["cpuCount"] = max(1, request["cpu"] // 1000)
        if isinstance(request.get("memory"), int):
            data["memoryMB"] = request["memory"]
        return data

    def detail_json(self, template: TemplateRecord) -> dict[str, Any]:
        """A template as ``GET /templates/{id}`` shows it (never a registry password)."""
        request: dict[str, Any] = template.extra["request"]
        builds: dict[str, Build] = template.extra["cube_jobs"]
        ready = template.status == "ready"
        return {
            **self.summary_json(template),
            "createRequest": {k: v for k, v in request.items() if k not in _SECRET_FIELDS},
            "replicas": [{"nodeID": "emulator", "status": "READY"}] if ready else [],
            "networkType": request.get("networkType", "tap"),
            "allowInternetAccess": request.get("allowInternetAccess", True),
            "builds": [b.job_json() for b in builds.values()],
        }

    # ----------------------------------------------------------------- helpers

    def _find(self, ref: str) -> TemplateRecord:
        template = self.world.find_template(ref)
        if template is None or "cube_jobs" not in template.extra:
            raise ApiError(404, f"template {ref} not found")
        return template

    def _check_alias(self, alias: str, template: TemplateRecord | None) -> None:
        if not _ALIAS.fullmatch(alias) or alias.startswith(("tpl-", "snap-")):
            raise ApiError(400, f"invalid alias {alias!r}: it must match "
                                "^[a-z0-9][a-z0-9-]{0,63}$ and not start with tpl- or snap-")
        holder = self.world.find_template(alias)
        if alias in self.world.flavor.default_templates or (
                holder is not None and holder is not template):
            raise ApiError(409, f"alias {alias!r} is already in use")

    def _start(self, template: TemplateRecord) -> Build:
        build = Build(id=str(uuid.uuid4()), template_id=template.id, created_at=now())
        template.extra["cube_jobs"][build.id] = build
        template.extra["job_id"] = build.id
        template.status, template.error, template.logs = "building", None, build.logs
        build.step("PULLING", 0, f"accepted: image {template.extra['request']['image']}")
        self.world.background(self._build, template, build)
        return build

    # ----------------------------------------------------------------- handlers

    async def create(self, request: Request) -> Response:
        body = await json_body(request)
        image = body.get("image")
        if not isinstance(image, str) or not image.strip():
            raise ApiError(400, "image is required")
        image = image.strip()
        name = body.get("name") or body.get("alias")
        aliases: list[str] = []
        if name is not None:
            if not isinstance(name, str):
                raise ApiError(400, "name must be a string")
            alias = name.strip().rsplit(":", 1)[0] if ":" in name else name.strip()
            if alias:
                self._check_alias(alias, None)
                aliases.append(alias)
        for key, kind in (("registryUsername", str), ("registryPassword", str),
                          ("cpu", int), ("memory", int), ("probePort", int),
                          ("probePath", str), ("writableLayerSize", str)):
            value = body.get(key)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise ApiError(400, f"{key} must be a{'n integer' if kind is int else ' string'}")
        for key in ("env", "command", "args", "exposedPorts"):
            value = body.get(key)
            if value is not None and not isinstance(value, list):
                raise ApiError(400, f"{key} must be a list")
        password = body.get("registryPassword")
        stored = {k: v for k, v in body.items()
                  if k not in _SECRET_FIELDS and k not in ("templateID", "alias")}
        stored["image"] = image
        while True:
            template_id = "tpl-" + secrets.token_hex(12)
            if template_id not in self.world.templates:
                break
        template = TemplateRecord(id=template_id, names=aliases, created_at=now(), extra={
            "request": stored, "cube_jobs": {}, "job_id": "",
            "password": Secret(password) if password else None})
        self.world.templates[template_id] = template
        build = self._start(template)
        return json_response(202, build.job_json())

    async def list_templates(self, request: Request) -> Response:
        found = [t for t in self.world.templates.values() if "cube_jobs" in t.extra]
        return json_response(200, [self.summary_json(t) for t in found])

    async def get_template(self, request: Request) -> Response:
        return json_response(200, self.detail_json(self._find(request.params["id"])))

    async def by_alias(self, request: Request) -> Response:
        alias = request.params["alias"]
        template = self.world.find_template(alias)
        if template is None or alias not in template.names or "cube_jobs" not in template.extra:
            raise ApiError(404, f"alias {alias} not found")
        return json_response(200, {"templateID": template.id, "public": False})

    async def rebuild(self, request: Request) -> Response:
        template = self._find(request.params["id"])
        builds: dict[str, Build] = template.extra["cube_jobs"]
        if builds[template.extra["job_id"]].running:
            raise ApiError(409, f"template {template.id} is already being built")
        return json_response(202, self._start(template).job_json())

    async def update(self, request: Request) -> Response:
        raise ApiError(501, "template metadata updates are not implemented; rebuild the "
                            "template, or delete and recreate it")

    async def set_alias(self, request: Request) -> Response:
        template = self._find(request.params["id"])
        body = await json_body(request)
        alias = body.get("alias") or ""
        if not isinstance(alias, str):
            raise ApiError(400, "alias must be a string")
        if alias:
            self._check_alias(alias, template)
            template.names[:] = [alias]
        else:
            template.names.clear()
        return json_response(200, self.detail_json(template))

    def _build_of(self, request: Request) -> Build:
        template = self._find(request.params["id"])
        build = template.extra["cube_jobs"].get(request.params["build"])
        if build is None:
            raise ApiError(404, f"build {request.params['build']} of template "
                                f"{template.id} not found")
        assert isinstance(build, Build)
        return build

    async def build_status(self, request: Request) -> Response:
        build = self._build_of(request)
        data = {"buildID": build.id, "templateID": build.template_id,
                "status": build.status, "phase": build.phase, "progress": build.progress,
                "message": build.error or build.message}
        if build.error:
            data["errorMessage"] = build.error
        return json_response(200, data)

    async def build_logs(self, request: Request) -> Response:
        build = self._build_of(request)
        return json_response(200, {"buildID": build.id, "templateID": build.template_id,
                                   "status": build.status, "logs": list(build.logs)})

    # -------------------------------------------------------------------- build

    async def _build(self, template: TemplateRecord, build: Build) -> None:
        request: dict[str, Any] = template.extra["request"]
        password: Secret | None = template.extra["password"]
        username = request.get("registryUsername")
        credentials = (username, password.reveal()) if username and password else None
        try:
            image = ImageRef.parse(request["image"])
            if self.world.provider.name != "docker":
                raise BuildFailed(
                    f"pull: this emulator's backend ({self.world.provider.name}) cannot "
                    "run images; run it with --backend docker")
            build.step("PULLING", 10, f"reading the manifest of {image.given}")
            await _read_manifest(image, credentials)
            build.step("PULLING", 30, f"pulling {image.engine_name} into the Docker Engine")
            engine = _Engine()
            try:
                image_id = await engine.pull(image, credentials, build)
                build.step("BUILDING", 70, f"probing for envd ({ENVD_PATH}, port "
                                           f"{ENVD_PORT} /health)")
                await engine.probe(image_id)
            finally:
                engine.close()
            build.step("DISTRIBUTING", 90, "one node: nothing to distribute")
        except BuildFailed as exc:
            self._fail(template, build, _scrub(str(exc), password))
            return
        except Exception as exc:
            log.warning("emulator: template build %s failed", build.id, exc_info=True)
            self._fail(template, build, _scrub(f"build: {type(exc).__name__}: {exc}", password))
            return
        template.backend_template = image_id
        template.status = "ready"
        build.step("READY", 100, f"ready: {image.engine_name} ({image_id[:19]})")
        build.status, build.finished_at = "READY", now()

    def _fail(self, template: TemplateRecord, build: Build, reason: str) -> None:
        build.logs.append(f"{iso(now())} [{build.phase}] FAILED: {reason}")
        build.status, build.error, build.message = "FAILED", reason, reason
        build.finished_at = now()
        template.status, template.error = "error", reason


def _scrub(text: str, password: Secret | None) -> str:
    if password is not None and password.reveal():
        return text.replace(password.reveal(), "***")
    return text


# ------------------------------------------------------------------ registry

async def _read_manifest(image: ImageRef, credentials: tuple[str, str] | None) -> None:
    """Read the image's manifest, as a pull starts; raise :class:`BuildFailed` saying
    why the registry would not give it."""
    scheme = "http" if image.plain_http else "https"
    url = f"{scheme}://{image.registry}/v2/{image.repository}/manifests/{image.reference}"
    headers = {"Accept": _MANIFESTS}
    where = f"registry {image.registry}"
    async with httpx.AsyncClient(timeout=_REGISTRY_TIMEOUT, trust_env=False) as client:
        try:
            answer = await client.get(url, headers=headers)
            if answer.status_code == 401:
                challenge = answer.headers.get("www-authenticate", "")
                if credentials is None:
                    raise BuildFailed(f"pull: unauthorized: {where} requires credentials "
                                      f"for {image.repository} (registryUsername and "
                                      "registryPassword)")
                auth = await _authorize(client, challenge, credentials, image)
                answer = await client.get(url, headers={**headers, **auth})
        except httpx.ConnectError as exc:
            if _is_tls(exc):
                raise BuildFailed(
                    f"pull: {where} does not answer HTTPS ({_cause(exc)}); a plain-HTTP "
                    f"registry needs the image prefixed http:// (http://{image.given})") \
                    from None
            raise BuildFailed(f"pull: registry unreachable: cannot connect to "
                              f"{image.registry} ({_cause(exc)})") from None
        except httpx.TimeoutException:
            raise BuildFailed(f"pull: registry unreachable: {image.registry} did not "
                              f"answer in {_REGISTRY_TIMEOUT:.0f} s") from None
        except httpx.HTTPError as exc:
            raise BuildFailed(f"pull: {where}: {type(exc).__name__}") from None
    if answer.status_code in (401, 403):
        raise BuildFailed(f"pull: unauthorized: {where} refused the credentials of user "
                          f"{credentials[0] if credentials else '(none)'!r} for "
                          f"{image.repository} (HTTP {answer.status_code})")
    if answer.status_code == 404:
        raise BuildFailed(f"pull: manifest unknown: {image.engine_name} is not in {where}")
    if answer.status_code != 200:
        raise BuildFailed(f"pull: {where} answered HTTP {answer.status_code} for "
                          f"{image.engine_name}")


async def _authorize(client: httpx.AsyncClient, challenge: str,
                     credentials: tuple[str, str], image: ImageRef) -> dict[str, str]:
    """The header that answers a registry's 401 challenge: basic credentials, or a
    bearer token fetched from the realm it names with them."""
    scheme, _, params = challenge.partition(" ")
    if scheme.lower() != "bearer":
        basic = base64.b64encode(":".join(credentials).encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
    realm = fields.pop("realm", "")
    if not realm:
        raise BuildFailed(f"pull: registry {image.registry} sent a bearer challenge "
                          "without a realm")
    fields.setdefault("scope", f"repository:{image.repository}:pull")
    token = await client.get(realm, params=fields, auth=credentials)
    if token.status_code in (401, 403):
        raise BuildFailed(f"pull: unauthorized: registry {image.registry}'s token service "
                          f"refused the credentials of user {credentials[0]!r}")
    data = token.json() if token.status_code == 200 else {}
    value = data.get("token") or data.get("access_token")
    if not isinstance(value, str):
        raise BuildFailed(f"pull: registry {image.registry}'s token service answered "
                          f"HTTP {token.status_code} without a token")
    return {"Authorization": f"Bearer {value}"}


def _is_tls(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "SSL" in type(seen).__name__:
            return True
        seen = seen.__cause__ or seen.__context__
    return "ssl" in str(exc).lower() or "tls" in str(exc).lower()


def _cause(exc: BaseException) -> str:
    root: BaseException = exc
    while root.__cause__ is not None or root.__context__ is not None:
        nxt = root.__cause__ or root.__context__
        assert nxt is not None
        root = nxt
    return str(root) or type(root).__name__


# -------------------------------------------------------------- Docker Engine

class _Engine:
    """The Docker Engine the docker backend runs on (``DOCKER_HOST``, as that provider
    reads it), through the ``docker`` package in worker threads."""

    def __init__(self) -> None:
        import docker  # only the docker backend's path needs it

        self._docker = docker
        settings = Settings("docker", {"base_url": "DOCKER_HOST"})  # as the provider's
        url = settings.url("base_url", None, default=_DOCKER_HOST,
                           schemes=("unix", "http+unix", "tcp", "http"))
        self.client = docker.APIClient(base_url=url, version="auto", timeout=120)

    def close(self) -> None:
        self.client.close()

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    async def pull(self, image: ImageRef, credentials: tuple[str, str] | None,
                   build: Build) -> str:
        """Pull the image with the request's credentials; return its image id."""
        auth = {"username": credentials[0], "password": credentials[1]} if credentials \
            else None
        repository = f"{image.registry}/{image.repository}"

        def pull() -> list[str]:
            problems: list[str] = []
            seen: set[str] = set()
            for event in self.client.pull(repository, tag=image.reference, auth_config=auth,
                                          stream=True, decode=True):
                if "error" in event:
                    problems.append(str(event["error"]))
                status = str(event.get("status", ""))
                if status and "Downloading" not in status and "Extracting" not in status \
                        and status not in seen:
                    seen.add(status)
                    build.logs.append(f"{iso(now())} [PULLING] {status}")
            return problems

        try:
            problems = await self._call(pull)
        except self._docker.errors.APIError as exc:
            raise BuildFailed(f"pull: the Docker Engine could not pull {image.engine_name}: "
                              f"{exc.explanation or exc}") from None
        if problems:
            raise BuildFailed(f"pull: the Docker Engine could not pull {image.engine_name}: "
                              f"{problems[-1]}")
        build.progress = 60
        inspected = await self._call(self.client.inspect_image, image.engine_name)
        return str(inspected["Id"])

    async def probe(self, image_id: str) -> None:
        """Raise :class:`BuildFailed` unless the image carries an executable envd."""
        stat = await self._call(self._stat_envd, image_id)
        mode = int(stat.get("mode", 0)) if stat is not None else 0
        is_dir = bool(mode & (1 << 31))
        symlink = bool(mode & (1 << 27))
        if stat is None or is_dir or not (symlink or mode & 0o111):
            what = "has no" if stat is None else "has a non-executable"
            raise BuildFailed(
                f"probe: nothing answers on {ENVD_PORT}/health: the image {what} "
                f"{ENVD_PATH} (build it with envd, or inject it)")

    def _stat_envd(self, image_id: str) -> dict[str, Any] | None:
        """The Engine's stat of envd in a created (never started) container of the
        image, or ``None`` when the path is missing."""
        container = self.client.create_container(
            image_id, entrypoint=[ENVD_PATH], command=[], network_disabled=True,
            host_config=self.client.create_host_config(network_mode="none"))
        try:
            try:
                chunks, stat = self.client.get_archive(container["Id"], ENVD_PATH)
            except self._docker.errors.NotFound:
                return None
            for _chunk in chunks:  # drain, so the connection can be reused
                pass
            return dict(stat)
        finally:
            self.client.remove_container(container["Id"], force=True)
