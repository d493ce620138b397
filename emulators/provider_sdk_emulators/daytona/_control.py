"""The control plane (``/api``): sandboxes, their lifecycle, volumes and snapshots.

Each handler translates one Daytona call into calls on the neutral backend provider;
sandboxes are never reimplemented here. Daytona's stop keeps files but not processes, so
a stop snapshots the backend sandbox's files and kills it, and a start creates a new
backend sandbox from those files. State changes finish before the answer is sent (the
SDK then never waits), except for fault ``start_delay``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from provider_sdk.capabilities import Capability
from provider_sdk.emulators import backing_labels
from provider_sdk.errors import Conflict, NotFound, SandboxError, TemplateBuildError
from provider_sdk.models import SandboxSpec, TemplateSpec, VolumeMount
from provider_sdk_emulators.daytona._http import (
    Context,
    HttpError,
    context,
    json_response,
    state_change,
    state_changed,
)
from provider_sdk_emulators.daytona._interpreter import close_contexts
from provider_sdk_emulators.daytona._pty import close_ptys
from provider_sdk_emulators.daytona._store import (
    DEFAULT_SNAPSHOT,
    HOME,
    USER,
    SandboxRecord,
    SnapshotRecord,
    Store,
    VolumeRecord,
    new_id,
    now,
)
from provider_sdk_emulators.kit.http import Request, Response

_PAGE = 100
_BIN = f"{HOME}/.local/bin"
DEFAULT_ENV = {"HOME": HOME, "USER": USER, "LOGNAME": USER,
               "PATH": f"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:{_BIN}"}
"""What Daytona's default image sets for its user, under the sandbox's own ``env``."""
# Daytona's default image has ``python`` as well as ``python3``: where the backend's
# template has only the latter, ``python`` leads to it (last on PATH: it never hides
# the template's own tools).
_PROVISION = (f'mkdir -p "{_BIN}" && if ! command -v python >/dev/null 2>&1 && '
              f'p=$(command -v python3); then ln -sf "$p" "{_BIN}/python"; fi; ')


def _dto(request: Request, record: SandboxRecord, *, listing: bool = False) -> dict[str, Any]:
    return record.to_json(context(request).toolbox_url, state=record.shown_state(),
                          listing=listing)


def _sandbox(request: Request) -> SandboxRecord:
    key = request.params["sandbox"]
    record = context(request).store.sandbox(key)
    if record is None:
        raise HttpError(404, f"Sandbox with ID or name {key} not found")
    return record


async def _body(request: Request) -> dict[str, Any]:
    if not request.has_body:
        return {}
    try:
        body = await request.json()
    except json.JSONDecodeError:
        raise HttpError(400, "request body is not JSON") from None
    if not isinstance(body, dict):
        raise HttpError(400, "request body must be a JSON object")
    return body


def _int(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HttpError(400, f"{key} must be a number")
    return int(value)


# ---------------------------------------------------------------- backend helpers

async def boot(request: Request, record: SandboxRecord) -> None:
    """Start the backend sandbox serving ``record`` (from its files if it was stopped)."""
    ctx = context(request)
    store = ctx.store
    mounts = []
    for mount in record.volumes:
        volume = store.volumes.get(mount["volumeId"])
        if volume is None:
            raise HttpError(404, f"Volume {mount['volumeId']} not found")
        mounts.append(VolumeMount(volume=volume.backend_name, path=mount["mountPath"]))
    snapshot = record.stopped_snapshot or record.backend_snapshot
    # A sandbox of Daytona's default image (or of a snapshot of one) runs as its user, in
    # its home; one built from a Dockerfile keeps what its image says.
    default = record.daytona_image
    spec = SandboxSpec(env={**DEFAULT_ENV, **record.env} if default else record.env,
                       cwd=HOME if default else None, metadata=backing_labels("daytona", record.id),
                       snapshot=snapshot,
                       template=record.backend_template if snapshot is None else None,
                       volumes=mounts)  # type: ignore[arg-type]  # attrs converter
    try:
        handle = await store.backend.create(spec)
        if record.workdir == "/":
            script = (_PROVISION if default else "") + 'pwd; echo "$HOME"'
            where = (await handle.exec(["sh", "-c", script])).stdout.split("\n")
            record.workdir = where[0].strip() or "/"
            record.home = where[1].strip() if len(where) > 1 and where[1].strip() else "/"
    except NotFound as exc:
        raise HttpError(404, exc.message) from exc
    except SandboxError as exc:
        raise HttpError(500, f"the backend failed to start the sandbox: {exc.message}") from exc
    old = record.shown_state()
    record.backend_id = handle.id
    record.handle = handle
    record.state = "started"
    record.updated_at = now()
    record.started_at = asyncio.get_running_loop().time() + ctx.faults.value("start_delay")
    record.active_at = record.started_at
    if ctx.faults.value("start_delay") > 0:
        ctx.faults.served("start_delay")
    record.toolbox_502 = ctx.faults.count("toolbox_502_after_start")
    if record.id in store.sandboxes:  # a new one is announced once it is created
        store.notifications.changed(record, old)


async def _close_sessions(record: SandboxRecord) -> None:
    """End what runs in the sandbox on the emulator's behalf: sessions, interpreters,
    terminals."""
    for session in record.sessions.values():
        with contextlib.suppress(SandboxError):
            await session.shell.close()
    record.sessions.clear()
    await close_contexts(record)
    await close_ptys(record)
    record.daemon_env.clear()  # the daemon starts afresh
    record.daemon_unset.clear()
    record.shells.clear()


async def shut_down(store: Store, record: SandboxRecord) -> None:
    """Kill the backend sandbox and forget its files: the sandbox is destroyed."""
    await _close_sessions(record)
    if record.backend_id is not None:
        await store.backend.kill(record.backend_id)
    if record.stopped_snapshot is not None:
        with contextlib.suppress(NotFound):
            await store.backend.delete_snapshot(record.stopped_snapshot)
    record.backend_id = record.handle = record.stopped_snapshot = None
    old, record.state = record.shown_state(), "destroyed"
    store.sandboxes.pop(record.id, None)
    store.notifications.changed(record, old)


async def _stop(store: Store, record: SandboxRecord) -> None:
    """Keep the files, end the processes: snapshot, then kill the backend sandbox."""
    assert record.handle is not None
    assert record.backend_id is not None
    await _close_sessions(record)
    snap = await record.handle.snapshot()
    await store.backend.kill(record.backend_id)
    record.stopped_snapshot = snap.id
    record.backend_id = record.handle = None
    old, record.state = record.shown_state(), "stopped"
    record.updated_at = now()
    record.stopped_at = asyncio.get_running_loop().time()
    store.notifications.changed(record, old)


async def reap(ctx: Context) -> None:
    """Daytona's lifecycle timers, checked forever: a started sandbox idle for its
    auto-stop interval is stopped; a stopped one is deleted after its auto-delete
    interval (0: at once). Only toolbox requests count as activity, as on Daytona."""
    store = ctx.store
    while True:
        minute = ctx.faults.value("minute_seconds") or 60.0
        clock = asyncio.get_running_loop().time()
        for record in list(store.sandboxes.values()):
            with contextlib.suppress(SandboxError):
                if (record.state == "started" and record.auto_stop_interval > 0
                        and clock - record.active_at >= record.auto_stop_interval * minute):
                    await _stop(store, record)
                if (record.state == "stopped" and record.auto_delete_interval >= 0
                        and clock - record.stopped_at >= record.auto_delete_interval * minute):
                    await shut_down(store, record)
        await asyncio.sleep(min(minute / 20, 1.0))


# ---------------------------------------------------------------------- sandboxes

async def create_sandbox(request: Request) -> Response:
    """``POST /sandbox``."""
    state_change(request)
    store = context(request).store
    body = await _body(request)
    sandbox_id = new_id()
    name = body.get("name") or sandbox_id
    if store.sandbox(name) is not None:
        raise HttpError(409, f"Sandbox with name {name} already exists")
    snapshot_name = body.get("snapshot")
    if not isinstance(snapshot_name, str) or not snapshot_name.strip():
        # No snapshot named: Daytona's default one, unless an image is to be built.
        snapshot_name = None if body.get("buildInfo") else DEFAULT_SNAPSHOT
    snapshot: SnapshotRecord | None = None
    if snapshot_name:
        snapshot = store.snapshot(snapshot_name)
        if snapshot is None:
            raise HttpError(404, f"Snapshot {snapshot_name} not found")
        if snapshot.state != "active":
            raise HttpError(400, f"Snapshot {snapshot_name} is {snapshot.state}")
    volumes = []
    for mount in body.get("volumes") or []:
        volume = store.volume(mount.get("volumeId", ""))
        if volume is None:
            raise HttpError(404, f"Volume {mount.get('volumeId')} not found")
        if mount.get("subpath"):
            raise HttpError(400, "volume subpaths are not supported by this emulator")
        volumes.append({"volumeId": volume.id, "mountPath": mount.get("mountPath", "")})
    block_all = body.get("networkBlockAll")
    stamp = now()
    record = SandboxRecord(
        id=sandbox_id, name=name, state="creating", labels=dict(body.get("labels") or {}),
        env=dict(body.get("env") or {}), created_at=stamp, updated_at=stamp,
        snapshot=snapshot.name if snapshot else None,
        target=body.get("target") or "local",
        cpu=_int(body, "cpu", snapshot.cpu if snapshot else 1),
        memory=_int(body, "memory", snapshot.memory if snapshot else 1),
        disk=_int(body, "disk", snapshot.disk if snapshot else 3),
        public=bool(body.get("public", False)), network_block_all=bool(block_all),
        network_allow_list=body.get("networkAllowList"),
        auto_stop_interval=_int(body, "autoStopInterval", 15),
        auto_archive_interval=_int(body, "autoArchiveInterval", 10080),
        auto_delete_interval=_int(body, "autoDeleteInterval", -1),
        volumes=volumes, backend_snapshot=snapshot.backend_snapshot if snapshot else None,
        backend_template=snapshot.backend_template if snapshot else None,
        daytona_image=snapshot.daytona_image if snapshot else True,
        build_info=_build_info(body.get("buildInfo"), stamp),
    )
    await boot(request, record)
    store.sandboxes[record.id] = record
    store.notifications.created(record)
    state_changed(request)
    return json_response(_dto(request, record))


def _build_info(given: Any, stamp: str) -> dict[str, Any] | None:
    if not isinstance(given, dict):
        return None
    return {"dockerfileContent": given.get("dockerfileContent"),
            "contextHashes": given.get("contextHashes") or [], "createdAt": stamp,
            "updatedAt": stamp, "snapshotRef": f"emulated-{new_id()}"}


async def get_sandbox(request: Request) -> Response:
    """``GET /sandbox/{sandbox}``."""
    return json_response(_dto(request, _sandbox(request)))


async def list_sandboxes(request: Request) -> Response:
    """``GET /sandbox``: filtered by labels (a JSON object) and states, cursor-paginated."""
    store = context(request).store
    query = request.query
    try:
        labels = json.loads(query["labels"]) if query.get("labels") else {}
        limit = int(query.get("limit", _PAGE))
        start = int(query.get("cursor") or 0)
    except (ValueError, json.JSONDecodeError):
        raise HttpError(400, "labels must be a JSON object; limit and cursor integers") from None
    if not isinstance(labels, dict) or limit < 1:
        raise HttpError(400, "labels must be a JSON object and limit positive")
    states = set(request.query_all("states"))
    found = [r for r in store.sandboxes.values()
             if all(r.labels.get(k) == v for k, v in labels.items())
             and (not states or _dto(request, r)["state"] in states)
             and r.id.startswith(query.get("id", "")) and r.name.startswith(query.get("name", ""))]
    page = found[start:start + limit]
    more = start + limit < len(found)
    return json_response({"items": [_dto(request, r, listing=True) for r in page],
                          "nextCursor": str(start + limit) if more else None})


async def delete_sandbox(request: Request) -> Response:
    """``DELETE /sandbox/{sandbox}``: the sandbox is destroyed before the answer."""
    state_change(request)
    record = _sandbox(request)
    await shut_down(context(request).store, record)
    state_changed(request)
    return json_response(_dto(request, record))


async def start_sandbox(request: Request) -> Response:
    """``POST /sandbox/{sandbox}/start``: from stopped or archived."""
    state_change(request)
    record = _sandbox(request)
    if record.state in ("stopped", "archived"):
        old = record.stopped_snapshot
        await boot(request, record)
        record.stopped_snapshot = None
        if old is not None:
            with contextlib.suppress(NotFound):
                await context(request).store.backend.delete_snapshot(old)
    elif record.state != "started":
        raise HttpError(400, f"Sandbox is {record.state}: only a stopped or archived sandbox "
                             "can be started")
    state_changed(request)
    return json_response(_dto(request, record))


async def stop_sandbox(request: Request) -> Response:
    """``POST /sandbox/{sandbox}/stop``: files kept, processes ended; an ephemeral
    sandbox (auto-delete 0) is destroyed."""
    state_change(request)
    store = context(request).store
    record = _sandbox(request)
    if record.state == "started":
        await _stop(store, record)
    elif record.state not in ("stopped", "archived"):
        raise HttpError(400, f"Sandbox is {record.state}: it cannot be stopped")
    if record.auto_delete_interval == 0:
        await shut_down(store, record)
    state_changed(request)
    return json_response(_dto(request, record))


async def archive_sandbox(request: Request) -> Response:
    """``POST /sandbox/{sandbox}/archive``: only a stopped sandbox."""
    state_change(request)
    record = _sandbox(request)
    if record.state not in ("stopped", "archived"):
        raise HttpError(400, "Sandbox must be stopped before it is archived")
    old, record.state = record.state, "archived"
    record.updated_at = now()
    context(request).store.notifications.changed(record, old)
    state_changed(request)
    return json_response(_dto(request, record))


async def recover_sandbox(request: Request) -> Response:
    """``POST /sandbox/{sandbox}/recover``: sandboxes here never enter an error state."""
    state_change(request)
    record = _sandbox(request)
    raise HttpError(400, f"Sandbox is {record.state}, not in a recoverable error state")


async def replace_labels(request: Request) -> Response:
    """``PUT /sandbox/{sandbox}/labels``: the labels are replaced whole."""
    record = _sandbox(request)
    labels = (await _body(request)).get("labels")
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise HttpError(400, "labels must be an object of strings")
    record.labels = dict(labels)
    return json_response({"labels": record.labels})


async def set_interval(request: Request) -> Response:
    """``POST /sandbox/{sandbox}/{autostop|autoarchive|autodelete}/{minutes}``."""
    record = _sandbox(request)
    try:
        minutes = int(request.params["minutes"])
    except ValueError:
        raise HttpError(400, "the interval must be an integer") from None
    field = {"autostop": "auto_stop_interval", "autoarchive": "auto_archive_interval",
             "autodelete": "auto_delete_interval"}[request.params["which"]]
    setattr(record, field, minutes)
    return json_response(_dto(request, record))


async def toolbox_proxy_url(request: Request) -> Response:
    """``GET /sandbox/{sandbox}/toolbox-proxy-url``."""
    _sandbox(request)
    return json_response({"url": context(request).toolbox_url})


async def snapshot_sandbox(request: Request) -> Response:
    """``POST /sandbox/{sandbox}/snapshot``: a reusable snapshot of its files."""
    state_change(request)
    store = context(request).store
    record = _sandbox(request)
    name = (await _body(request)).get("name")
    if not isinstance(name, str) or not name:
        raise HttpError(400, "name is required")
    if store.snapshot(name) is not None:
        raise HttpError(409, f"Snapshot with name {name} already exists")
    if record.handle is None:
        raise HttpError(400, f"Sandbox is {record.state}: only a started sandbox can be "
                             "snapshotted")
    snap = await record.handle.snapshot()
    snapshot = SnapshotRecord(id=new_id(), name=name, created_at=now(),
                              backend_snapshot=snap.id, source_sandbox_id=record.id,
                              daytona_image=record.daytona_image,
                              cpu=record.cpu, memory=record.memory, disk=record.disk)
    store.snapshots[snapshot.id] = snapshot
    state_changed(request)
    return json_response(_dto(request, record))


# ------------------------------------------------------------------------ volumes

def _volume(request: Request) -> VolumeRecord:
    key = request.params["volume"]
    volume = context(request).store.volume(key)
    if volume is None:
        raise HttpError(404, f"Volume {key} not found")
    return volume


async def create_volume(request: Request) -> Response:
    """``POST /volumes``."""
    store = context(request).store
    name = (await _body(request)).get("name")
    if not isinstance(name, str) or not name:
        raise HttpError(400, "name is required")
    if store.volume(name) is not None:
        raise HttpError(409, f"Volume with name {name} already exists")
    volume = VolumeRecord(id=new_id(), name=name, backend_name="", created_at=now())
    volume.backend_name = f"daytona-{volume.id}"
    await store.backend.create_volume(volume.backend_name)
    store.volumes[volume.id] = volume
    return json_response(volume.to_json())


async def list_volumes(request: Request) -> Response:
    """``GET /volumes``."""
    return json_response([v.to_json() for v in context(request).store.volumes.values()])


async def get_volume(request: Request) -> Response:
    """``GET /volumes/{volume}`` and ``GET /volumes/by-name/{volume}``."""
    return json_response(_volume(request).to_json())


async def delete_volume(request: Request) -> Response:
    """``DELETE /volumes/{volume}``: 409 while a started sandbox mounts it."""
    store = context(request).store
    volume = _volume(request)
    users = [r.id for r in store.sandboxes.values()
             if r.state == "started" and any(m["volumeId"] == volume.id for m in r.volumes)]
    if users:
        raise HttpError(409, f"Volume {volume.name} is in use by sandbox {users[0]}")
    try:
        await store.backend.delete_volume(volume.backend_name)
    except Conflict as exc:
        raise HttpError(409, exc.message) from exc
    except NotFound:
        pass
    del store.volumes[volume.id]
    return Response(200)


# ---------------------------------------------------------------------- snapshots

def _snapshot(request: Request) -> SnapshotRecord:
    key = request.params["snapshot"]
    snapshot = context(request).store.snapshot(key)
    if snapshot is None:
        raise HttpError(404, f"Snapshot {key} not found")
    return snapshot


async def create_snapshot(request: Request) -> Response:
    """``POST /snapshots``: from an image name or a Dockerfile. A Dockerfile is built,
    before the answer, by a backend that builds templates (``docker``); on another the
    build fails, saying why. An image name is not pulled: sandboxes created from it run
    on the backend's default template."""
    store = context(request).store
    body = await _body(request)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise HttpError(400, "name is required")
    if store.snapshot(name) is not None:
        raise HttpError(409, f"Snapshot with name {name} already exists")
    stamp = now()
    snapshot = SnapshotRecord(id=new_id(), name=name, created_at=stamp,
                              image_name=body.get("imageName"),
                              build_info=_build_info(body.get("buildInfo"), stamp),
                              cpu=_int(body, "cpu", 1), memory=_int(body, "memory", 1),
                              disk=_int(body, "disk", 3))
    dockerfile = (snapshot.build_info or {}).get("dockerfileContent")
    if dockerfile and not store.backend.supports(Capability.TEMPLATES_BUILD):
        # A build's steps cannot be faked: say so, as a failed build.
        snapshot.state = "build_failed"
        snapshot.error_reason = (f"this emulator's backend ({store.backend.name}) cannot "
                                 "build images; run it with --backend docker")
    elif dockerfile:
        if snapshot.build_info and snapshot.build_info["contextHashes"]:
            raise HttpError(400, "build contexts (COPY sources) are not supported here")
        try:
            built = await store.backend.build_template(
                TemplateSpec(name=f"daytona-{snapshot.id}", dockerfile=dockerfile))
            snapshot.backend_template = built.id
            snapshot.daytona_image = False
        except TemplateBuildError as exc:
            snapshot.state = "build_failed"
            # The builder's own output, as Daytona reports it: the steps, then the error.
            snapshot.error_reason = exc.log_tail or exc.message
    store.snapshots[snapshot.id] = snapshot
    return json_response(snapshot.to_json())


async def list_snapshots(request: Request) -> Response:
    """``GET /snapshots``: page-numbered, optionally by source sandbox or name."""
    store = context(request).store
    try:
        page = max(int(request.query.get("page", 1)), 1)
        limit = max(int(request.query.get("limit", _PAGE)), 1)
    except ValueError:
        raise HttpError(400, "page and limit must be integers") from None
    source = request.query.get("sourceSandboxId")
    name = request.query.get("name", "")
    found = [s for s in store.snapshots.values()
             if (source is None or s.source_sandbox_id == source) and name in s.name]
    found.sort(key=lambda s: s.general)  # general snapshots last, as Daytona lists them
    items = found[(page - 1) * limit:page * limit]
    return json_response({"items": [s.to_json() for s in items], "total": len(found),
                          "page": page, "totalPages": max(-(-len(found) // limit), 1)})


async def get_snapshot(request: Request) -> Response:
    """``GET /snapshots/{snapshot}`` (id or name)."""
    return json_response(_snapshot(request).to_json())


async def delete_snapshot(request: Request) -> Response:
    """``DELETE /snapshots/{snapshot}``."""
    store = context(request).store
    snapshot = _snapshot(request)
    if snapshot.general:
        raise HttpError(403, "Request organization ID does not match resource organization ID")
    if snapshot.backend_snapshot is not None:
        with contextlib.suppress(NotFound):
            await store.backend.delete_snapshot(snapshot.backend_snapshot)
    if snapshot.backend_template is not None:
        with contextlib.suppress(NotFound):
            await store.backend.delete_template(snapshot.backend_template)
    del store.snapshots[snapshot.id]
    return Response(200)


async def activate_snapshot(request: Request) -> Response:
    """``POST /snapshots/{snapshot}/activate``: snapshots here are always active."""
    return json_response(_snapshot(request).to_json())
