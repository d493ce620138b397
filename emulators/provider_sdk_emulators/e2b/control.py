"""The control plane: E2B's REST API, and CubeAPI's variant of it.

One handler per route; :func:`routes` lists the routes a flavor serves, so a route
Cube lacks is simply absent (the router answers 404, or 405 when the path exists for
another method, as CubeAPI's router does for ``POST /v2/sandboxes``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.models import Resources, SandboxSpec, VolumeMount
from provider_sdk_emulators.e2b._records import SandboxRecord
from provider_sdk_emulators.e2b._templates_cube import CubeTemplates
from provider_sdk_emulators.e2b._templates_e2b import TemplateBuilds
from provider_sdk_emulators.e2b._world import ApiError, World, iso, json_body, now
from provider_sdk_emulators.e2b.flavors import ENVD_VERSION
from provider_sdk_emulators.kit.http import Request, Response, json_response

__all__ = ["ControlPlane", "Route"]

Route = tuple[str, str, Callable[[Request], Awaitable[Response]]]

HOME = "/home/user"
"""The working directory of E2B's templates (and Cube's images), whatever the backend."""
_LIST_LIMIT = 100
_IDEMPOTENCY_KEY = re.compile(r"[a-z0-9-]{1,255}")
_CPU_COUNT = 2
_MEMORY_MB = 512
_DISK_MB = 1024


def _no_content() -> Response:
    return Response(204)


def _str_map(body: dict[str, Any], *keys: str) -> dict[str, str]:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ApiError(400, f"{key} must be an object of strings")
        return dict(value)
    return {}


def _flag(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value.get("enabled", False))
    return bool(value)


def _check_network(allow_internet: bool | None, network: dict[str, Any]) -> None:
    """E2B's and Cube's rules: deny lists hold addresses only; a host name in the allow
    list needs all other traffic denied."""
    allow = network.get("allowOut", network.get("allow_out")) or []
    deny = network.get("denyOut", network.get("deny_out")) or []
    if not isinstance(allow, list) or not isinstance(deny, list):
        raise ApiError(400, "allowOut and denyOut must be lists")
    for entry in deny:
        if not _is_address(entry):
            raise ApiError(400, f"denyOut entry {entry!r} is not an IP address or CIDR")
    denies_all = allow_internet is False or "0.0.0.0/0" in deny
    for entry in allow:
        if not isinstance(entry, str) or not entry:
            raise ApiError(400, f"allowOut entry {entry!r} is not a host or CIDR")
        if not _is_address(entry) and not denies_all:
            raise ApiError(400, "allowOut may name hosts only when all other traffic is "
                                "denied (allow_internet_access=false or denyOut 0.0.0.0/0)")


def _is_address(entry: Any) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
    except (TypeError, ValueError):
        return False
    return True


def _metadata_query(raw: str) -> dict[str, str]:
    """Decode the ``metadata`` list filter as E2B's API does: unescape the whole value,
    split on ``&`` and ``=``, unescape each key and value."""
    pairs: dict[str, str] = {}
    for part in unquote(raw.replace("+", " ")).split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        pairs[unquote(key.replace("+", " "))] = unquote(value.replace("+", " "))
    return pairs


class ControlPlane:
    """The REST handlers, over one :class:`World`."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.flavor = world.flavor

    def routes(self) -> list[Route]:
        """The routes this flavor serves."""
        routes: list[Route] = [
            ("GET", "/health", self.health),
            ("POST", "/sandboxes", self.create),
            ("GET", "/sandboxes", self.list_v1),
            ("GET", "/v2/sandboxes", self.list_v2),
            ("GET", "/sandboxes/{id}", self.info),
            ("DELETE", "/sandboxes/{id}", self.kill),
            ("POST", "/sandboxes/{id}/pause", self.pause),
            ("POST", "/sandboxes/{id}/resume", self.resume),
            ("POST", "/sandboxes/{id}/connect", self.connect),
            ("POST", "/sandboxes/{id}/timeout", self.set_timeout),
            ("POST", "/sandboxes/{id}/refreshes", self.refresh),
            ("PUT", "/sandboxes/{id}/network", self.update_network),
            ("POST", "/sandboxes/{id}/snapshots", self.create_snapshot),
            ("GET", "/snapshots", self.list_snapshots),
            ("DELETE", "/templates/{id}", self.delete_template),
        ]
        if self.flavor.v2_create:
            routes += [("POST", "/v2/sandboxes", self.create),
                       ("POST", "/v2/sandboxes/{id}/connect", self.connect),
                       ("POST", "/sandboxes/{id}/fork", self.fork)]
        if self.flavor.metrics:
            routes.append(("GET", "/sandboxes/{id}/metrics", self.metrics))
        if self.flavor.cube_extras:
            routes += [("POST", "/sandboxes/{id}/rollback", self.rollback),
                       ("POST", "/volumes", self.create_volume),
                       ("GET", "/volumes", self.list_volumes),
                       ("GET", "/volumes/{id}", self.get_volume),
                       ("DELETE", "/volumes/{id}", self.delete_volume)]
        if self.flavor.image_templates:
            routes += CubeTemplates(self.world).routes()
        if self.flavor.template_builds:
            routes += TemplateBuilds(self.world).routes()
        return routes

    # ------------------------------------------------------------------ shapes

    def sandbox_json(self, record: SandboxRecord) -> dict[str, Any]:
        """The ``Sandbox`` model: what create and connect return."""
        data: dict[str, Any] = {
            "templateID": record.template_id,
            "sandboxID": record.id,
            "clientID": "emulator",
            "envdVersion": ENVD_VERSION,
            "alias": record.template_id,
            "domain": self.flavor.domain if self.flavor.cube_extras else None,
        }
        if record.access_token is not None:
            data["envdAccessToken"] = record.access_token
        return data

    def created_json(self, record: SandboxRecord) -> dict[str, Any]:
        """What create (and, where the flavor says so, connect) returns: the ``Sandbox``
        model with the traffic access token of a sandbox with private traffic."""
        data = self.sandbox_json(record)
        if record.traffic_token is not None:
            data["trafficAccessToken"] = record.traffic_token
        return data

    def detail_json(self, record: SandboxRecord, *, listed: bool = False) -> dict[str, Any]:
        """``SandboxDetail`` (or ``ListedSandbox``), in the flavor's spelling."""
        resources = record.spec.resources
        cpu = int(resources.cpu) if resources.cpu else _CPU_COUNT
        data = self.sandbox_json(record)
        if listed:
            data.pop("envdAccessToken", None)
            data.pop("domain", None)
        data.update({
            "startedAt": iso(record.started_at),
            "cpuCount": cpu,
            "memoryMB": resources.memory_mb or _MEMORY_MB,
            "diskSizeMB": resources.disk_mb or _DISK_MB,
            "metadata": dict(record.spec.metadata),
            "state": record.state,
            "volumeMounts": [{"name": m["name"], "path": m["path"]} for m in
                             record.volume_mounts],
        })
        if record.end_at is not None:
            data["endAt"] = iso(record.end_at)
        elif not self.flavor.never_timeout:  # E2B always has a deadline
            data["endAt"] = iso(now())
        if not listed:
            data["lifecycle"] = {"autoResume": record.auto_resume,
                                 "onTimeout": "pause" if record.auto_pause else "kill"}
            data["network"] = record.network
            if record.allow_internet is not None:
                data["allowInternetAccess"] = record.allow_internet
            if record.state == "paused":
                data["pauseMode"] = "full" if record.paused_with_memory else "filesystem"
        if self.flavor.snake_case_info:
            data["cpuMilli"] = cpu * 1000
            data.update({
                "sandbox_id": record.id, "template_id": record.template_id,
                "started_at": data["startedAt"], "cpu_count": cpu, "cpu_milli": cpu * 1000,
                "memory_mb": data["memoryMB"],
                "disk_size_mb": data["diskSizeMB"], "envd_version": ENVD_VERSION,
            })
            if "endAt" in data:
                data["end_at"] = data["endAt"]
        return data

    # ----------------------------------------------------------------- handlers

    async def health(self, request: Request) -> Response:
        return json_response(200, {"status": "ok", "sandboxes": len(self.world.sandboxes)})

    async def create(self, request: Request) -> Response:
        world = self.world
        if world.create_429_left > 0:
            world.create_429_left -= 1
            world.faults.served("create_429")
            after = world.faults.value("retry_after")
            raise ApiError(429, "rate limit exceeded: too many concurrent sandboxes "
                                "(emulated fault create_429)",
                           {"Retry-After": str(int(after) if after == int(after) else after)})
        body = await json_body(request)
        template_id = body.get("templateID")
        if not isinstance(template_id, str) or not template_id:
            raise ApiError(400, "templateID is required")
        timeout = self._timeout(body.get("timeout"), default=self.flavor.default_timeout)
        raw_lifecycle = body.get("lifecycle")
        lifecycle: dict[str, Any] = raw_lifecycle if isinstance(raw_lifecycle, dict) else {}
        on_timeout = lifecycle.get("onTimeout", lifecycle.get("on_timeout"))
        auto_pause = on_timeout == "pause" if on_timeout else bool(
            body.get("autoPause", body.get("auto_pause", False)))
        auto_resume = _flag(lifecycle.get("autoResume", lifecycle.get(
            "auto_resume", body.get("autoResume", body.get("auto_resume", False)))))
        pause_memory = body.get("autoPauseMemory") is not False
        allow_internet = body.get("allow_internet_access")
        if allow_internet is not None and not isinstance(allow_internet, bool):
            raise ApiError(400, "allow_internet_access must be a boolean")
        network = body.get("network") or {}
        if not isinstance(network, dict):
            raise ApiError(400, "network must be an object")
        _check_network(allow_internet, network)
        mounts = body.get("volumeMounts") or []
        if not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts):
            raise ApiError(400, "volumeMounts must be a list of objects")
        key = request.headers.get("idempotency-key")
        if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise ApiError(400, "Idempotency-Key takes 1-255 of a-z, 0-9 and '-'")
        options: dict[str, Any] = {
            "timeout": timeout, "auto_pause": auto_pause, "auto_resume": auto_resume,
            "pause_memory": pause_memory, "network": network,
            "allow_internet": allow_internet, "mounts": mounts}
        if key is None:
            return json_response(201, self.created_json(
                await self._create(body, template_id, **options)))
        # A create retried with the same key gets the sandbox the first one made.
        async with self.world.idempotency_lock(key):
            record = self.world.sandboxes.get(self.world.idempotent.get(key, ""))
            if record is None:
                record = await self._create(body, template_id, **options)
                self.world.idempotent[key] = record.id
            return json_response(201, self.created_json(record))

    async def _create(self, body: dict[str, Any], template_id: str, *, timeout: float | None,
                      auto_pause: bool, auto_resume: bool, pause_memory: bool,
                      network: dict[str, Any], allow_internet: bool | None,
                      mounts: list[dict[str, Any]]) -> SandboxRecord:
        world = self.world
        template, snapshot = self._template(template_id)
        volumes: tuple[VolumeMount, ...] = tuple([world.volume_mount(m) for m in mounts])
        try:
            spec = SandboxSpec(
                template=template, snapshot=snapshot, cwd=HOME,
                env=_str_map(body, "envVars", "envs"), metadata=_str_map(body, "metadata"),
                # (mypy reads attrs' tuple converter as a generic it cannot solve)
                volumes=volumes,  # type: ignore[arg-type]
                resources=Resources())
        except errors.InvalidInput as exc:
            raise ApiError(400, str(exc)) from None
        try:
            record = await world.create(
                spec=spec, template_id=template_id, timeout=timeout, auto_pause=auto_pause,
                auto_resume=auto_resume, pause_memory=pause_memory, network=network,
                allow_internet=allow_internet,
                volume_mounts=[{"name": m["name"], "path": m["path"],
                                **({"readOnly": True} if m.get("readOnly") else {})}
                               for m in mounts])
        except errors.TemplateNotFound:
            raise ApiError(404, f"template '{template_id}' not found") from None
        if network.get("allowPublicTraffic", network.get("allow_public_traffic")) is False:
            record.traffic_token = secrets.token_hex(16)
        return record

    def _template(self, template_id: str) -> tuple[str | None, str | None]:
        """The backend template, or snapshot, a vendor template id names."""
        if template_id in self.flavor.default_templates:
            return None, None
        built = self.world.find_template(template_id)
        if built is not None:
            if built.status != "ready" or built.backend_template is None:
                raise ApiError(400, f"template '{template_id}' is not ready ({built.status})")
            return built.backend_template, None
        snapshot = self.world.find_snapshot(template_id)
        if snapshot is not None:
            return None, snapshot.snapshot.id
        return template_id, None

    def _timeout(self, value: Any, *, default: float | None) -> float | None:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ApiError(400, f"timeout must be a number of seconds, got {value!r}")
        if value == -1 and self.flavor.never_timeout:
            return None
        if value < 0:
            raise ApiError(400, f"timeout must be >= 0, got {value}")
        return float(value)

    async def list_v1(self, request: Request) -> Response:
        return await self._list(request, paged=False, order="desc")

    async def list_v2(self, request: Request) -> Response:
        return await self._list(request, paged=self.flavor.list_next_token,
                                order=request.query.get("order", "desc"))

    async def _list(self, request: Request, *, paged: bool, order: str) -> Response:
        wanted = _metadata_query(request.query.get("metadata", ""))
        states = {s for s in request.query.get("state", "").split(",") if s}
        template = request.query.get("template")
        # At or after (on the microsecond grid start times are reported on), so a
        # sandbox's own startedAt, fed back, finds it.
        after = self._moment(request.query.get("startedAfter"))
        # E2B's API lists newest first unless v2 is asked for ``order=asc``; a tie on
        # the start time is broken by the sandbox id.
        if order not in ("asc", "desc"):
            raise ApiError(400, f"Invalid order parameter: unknown order {order!r}")
        records = sorted(self.world.sandboxes.values(), key=lambda r: (r.started_at, r.id),
                         reverse=order == "desc")
        found = [r for r in records
                 if all(r.spec.metadata.get(k) == v for k, v in wanted.items())
                 and (not states or r.state in states)
                 and template in (None, r.template_id)
                 and (after is None or r.started_at >= after)]
        headers = {}
        if paged:
            try:
                limit = min(int(request.query.get("limit", _LIST_LIMIT)), _LIST_LIMIT)
                start = int(request.query.get("nextToken") or 0)
            except ValueError:
                raise ApiError(400, "limit and nextToken must be integers") from None
            if limit < 1 or start < 0:
                raise ApiError(400, "limit must be >= 1")
            if start + limit < len(found):
                headers["x-next-token"] = str(start + limit)
            found = found[start:start + limit]
        return json_response(200, [self.detail_json(r, listed=True) for r in found], headers)

    def _moment(self, value: str | None) -> dt.datetime | None:
        if not value:
            return None
        try:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ApiError(400, f"startedAfter must be an RFC 3339 time, got {value!r}") \
                from None
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)

    async def info(self, request: Request) -> Response:
        record = self._record(request)
        return json_response(200, self.detail_json(record))

    def _record(self, request: Request) -> SandboxRecord:
        record = self.world.get(request.params["id"])
        self.world.touch(record)
        return record

    async def kill(self, request: Request) -> Response:
        record = self.world.get(request.params["id"])
        if record.state == "pausing":
            raise ApiError(503, f"sandbox {record.id} is pausing; retry later",
                           {"Retry-After": "2"})
        await self.world.kill(record)
        return _no_content()

    async def pause(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        memory = body.get("memory")
        if memory is not None and not isinstance(memory, bool):
            raise ApiError(400, "memory must be a boolean")
        await self.world.pause(record, memory)
        return _no_content()

    async def resume(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        await self.world.settled(record)
        if record.state != "paused":
            raise ApiError(409, f"sandbox {record.id} is already running")
        timeout = self._timeout(body.get("timeout"), default=None)
        await self.world.resume(record, timeout)
        return json_response(201, self.sandbox_json(record))

    async def connect(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        value = body.get("timeout")
        if self.flavor.never_timeout and value is not None and (value == 0 or (
                isinstance(value, (int, float)) and value < -1)):
            raise ApiError(400, "timeout must be > 0, or -1 for never")
        timeout = self._timeout(value, default=None)
        resumed = await self.world.resume(record, timeout, memory=body.get("memory") is not False)
        status = self.flavor.connect_resumed_status if resumed else 200
        return json_response(status, self.created_json(record) if
                             self.flavor.traffic_token_on_connect else self.sandbox_json(record))

    async def set_timeout(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        if "timeout" not in body:
            raise ApiError(400, "timeout is required")
        record.timeout = self._timeout(body["timeout"], default=None)
        record.end_at = self.world.deadline(record.timeout)
        return _no_content()

    async def refresh(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        duration = body.get("duration", self.flavor.default_timeout or 300)
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or \
                not 0 < duration <= 3600:
            raise ApiError(400, "duration must be between 1 and 3600 seconds")
        if record.end_at is not None:
            record.end_at = max(record.end_at, now() + dt.timedelta(seconds=duration))
        return _no_content()

    async def update_network(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        if record.state != "running":
            raise ApiError(409, f"sandbox {record.id} is {record.state}, not running")
        allow = body.get("allowInternetAccess", body.get("allow_internet_access"))
        network = {k: v for k, v in body.items()
                   if k not in ("allowInternetAccess", "allow_internet_access")}
        _check_network(allow, network)
        record.network = network  # a full replacement: omitted fields are cleared
        record.allow_internet = allow
        return _no_content()

    async def metrics(self, request: Request) -> Response:
        """The readings in ``start``..``end`` (unix seconds, both ends included; by
        default the sandbox's whole life), as E2B's API answers from the readings it
        keeps. A running sandbox is read now, and the reading kept with the rest."""
        record = self._record(request)
        first = self._unix(request, "start",
                           default=int(record.started_at.timestamp())) or 0
        last = self._unix(request, "end", default=None)
        if last is not None and first > last:
            raise ApiError(400, "Invalid time range for metrics")
        if record.state == "running" and self.world.provider.supports(Capability.METRICS):
            await record.usage.read(record.sandbox, cpu_count=_CPU_COUNT,
                                    memory_total=_MEMORY_MB << 20, disk_total=_DISK_MB << 20)
        if last is None:  # now, once the reading is taken: it may be a second later
            last = int(now().timestamp())
        return json_response(200, record.usage.between(first, last))

    def _unix(self, request: Request, name: str, *, default: int | None) -> int | None:
        raw = request.query.get(name)
        if raw is None or raw == "":
            return default
        if not raw.isdigit():
            raise ApiError(400, f"{name} must be a unix time in seconds, got {raw!r}")
        return int(raw)

    async def fork(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 20:
            raise ApiError(400, "count must be between 1 and 20")
        timeout = self._timeout(body.get("timeout"), default=self.flavor.default_timeout)
        results = await self.world.fork(record, count, timeout)
        return json_response(201, [
            {"error": {"code": r.status, "message": r.message}} if isinstance(r, ApiError)
            else {"sandbox": self.sandbox_json(r)} for r in results])

    async def create_snapshot(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        name = body.get("name")
        if name is not None and not isinstance(name, str):
            raise ApiError(400, "name must be a string")
        snapshot = await self.world.snapshot(record, name)
        return json_response(201, {"snapshotID": snapshot.id, "names": snapshot.names})

    async def list_snapshots(self, request: Request) -> Response:
        wanted = request.query.get("sandboxID")
        name = request.query.get("name")
        found = [s for s in self.world.snapshots.values()
                 if wanted in (None, s.sandbox_id) and name in (None, *s.names)]
        try:
            limit = min(int(request.query.get("limit", _LIST_LIMIT)), _LIST_LIMIT)
            start = int(request.query.get("nextToken") or 0)
        except ValueError:
            raise ApiError(400, "limit and nextToken must be integers") from None
        headers = {"x-next-token": str(start + limit)} if start + limit < len(found) else {}
        page = found[start:start + limit]
        return json_response(200, [{"snapshotID": s.id, "names": s.names,
                                    "originSandboxID": s.sandbox_id,
                                    "createdAt": iso(s.created_at)} for s in page], headers)

    async def delete_template(self, request: Request) -> Response:
        """``DELETE /templates/{id}``: a built template, or a snapshot (which both APIs
        keep as templates)."""
        built = self.world.find_template(request.params["id"])
        if built is not None:
            await self.world.delete_template(built)
            return _no_content()
        snapshot = self.world.snapshots.get(request.params["id"])
        if snapshot is None:
            raise ApiError(404, f"template {request.params['id']} not found")
        await self.world.delete_snapshot(snapshot)
        return _no_content()

    async def rollback(self, request: Request) -> Response:
        record = self._record(request)
        body = await json_body(request)
        snapshot = self.world.find_snapshot(str(body.get("snapshotID", "")))
        if snapshot is None:
            raise ApiError(404, f"snapshot {body.get('snapshotID')!r} not found")
        await self.world.settled(record)
        await self.world.rollback(record, snapshot)
        return json_response(200, {"sandboxID": record.id, "snapshotID": snapshot.id,
                                   "operationID": str(uuid.uuid4()), "status": "success"})

    async def create_volume(self, request: Request) -> Response:
        body = await json_body(request)
        name = body.get("name") or str(uuid.uuid4())
        if not isinstance(name, str):
            raise ApiError(400, "name must be a string")
        volume = await self.world.provider.create_volume(name)
        return json_response(201, {"volumeID": volume.name, "name": volume.name,
                                   "token": "emulator"})

    async def list_volumes(self, request: Request) -> Response:
        volumes = await self.world.provider.list_volumes()
        return json_response(200, [{"volumeID": v.name, "name": v.name} for v in volumes])

    async def get_volume(self, request: Request) -> Response:
        volume = await self.world.provider.get_volume(request.params["id"])
        return json_response(200, {"volumeID": volume.name, "name": volume.name,
                                   "token": "emulator"})

    async def delete_volume(self, request: Request) -> Response:
        await self.world.provider.delete_volume(request.params["id"])
        return _no_content()
