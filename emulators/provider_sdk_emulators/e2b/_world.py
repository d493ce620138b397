"""The emulator's state: its sandboxes, their lifecycle and their processes.

Each emulated sandbox is backed by one sandbox of a real neutral provider; this module
keeps what the vendor's API shows on top of it (ids, tokens, timeouts, the vendor's
state names) and performs lifecycle changes through the neutral API. It knows the wire
formats of neither plane: ``control`` and ``envd`` translate.

:class:`World` holds the sandboxes, snapshots and templates and changes their lifecycle;
the records it keeps are ``_records``', a process's streams ``_process_entry``'s, and
its process operations come from ``_world_processes``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import attrs

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.emulators import backing_labels
from provider_sdk.models import SandboxSpec, SandboxState, VolumeMount
from provider_sdk.provider import SandboxProvider
from provider_sdk_emulators.e2b._inside import prepare_helper
from provider_sdk_emulators.e2b._process_entry import ProcessEntry
from provider_sdk_emulators.e2b._records import SandboxRecord, SnapshotRecord, TemplateRecord
from provider_sdk_emulators.e2b._world_processes import SCRIPT, Processes, end_event
from provider_sdk_emulators.e2b.flavors import Flavor
from provider_sdk_emulators.kit.faults import Faults
from provider_sdk_emulators.kit.http import Request

__all__ = ["FAULTS", "SCRIPT", "ApiError", "ProcessEntry", "SandboxRecord", "SnapshotRecord",
           "TemplateRecord", "World", "end_event"]

FAULTS = {
    "resume_504": "after each resume (connect, resume, auto-resume, rollback), this many "
                  "data-plane requests to that sandbox answer 504",
    "create_429": "the next N creates answer 429 with a Retry-After header (re-armed each "
                  "time it is set)",
    "retry_after": "seconds in the Retry-After header of those 429s (default 1)",
    "latency": "seconds added before every request is handled",
    "pause_delay": "extra seconds a pause takes (Cube: the sandbox stays 'pausing')",
}
"""Every fault the emulator knows, with what its value means."""
FAULT_DEFAULTS = {"retry_after": "1"}

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A control-plane error: an HTTP status, a message and extra headers."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso(moment: dt.datetime) -> str:
    """``moment`` as the control plane writes times: UTC, microseconds, ``Z``."""
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object; anything else is a 400."""
    try:
        body = await request.json()
    except ValueError as exc:
        raise ApiError(400, f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


class World:
    """Every sandbox of one emulator, and the operations both planes share."""

    def __init__(self, flavor: Flavor, provider: SandboxProvider, faults: Faults,
                 task_group: anyio.abc.TaskGroup) -> None:
        self.flavor = flavor
        self.provider = provider
        self.faults = faults
        self.tg = task_group
        self.sandboxes: dict[str, SandboxRecord] = {}
        self.killed: set[str] = set()
        self.snapshots: dict[str, SnapshotRecord] = {}
        self.templates: dict[str, TemplateRecord] = {}
        self.create_429_left = faults.count("create_429")
        self.idempotent: dict[str, str] = {}
        """Idempotency-Key -> the sandbox its first create made."""
        self._idempotency_locks: dict[str, anyio.Lock] = {}
        self.processes = Processes(provider, self.sandboxes, self.background)
        """The processes started through envd's API."""

    def set_fault(self, name: str, value: str | float) -> None:
        """Set a fault; setting ``create_429`` re-arms it."""
        self.faults.set(name, value)
        if name == "create_429":
            self.create_429_left = self.faults.count(name)

    def idempotency_lock(self, key: str) -> anyio.Lock:
        """One lock per Idempotency-Key, so two creates with it make one sandbox."""
        return self._idempotency_locks.setdefault(key, anyio.Lock())

    def new_id(self) -> str:
        while True:
            new = self.flavor.id_prefix + secrets.token_hex(10)[:19]
            if new not in self.sandboxes and new not in self.killed:
                return new

    def get(self, sandbox_id: str) -> SandboxRecord:
        record = self.sandboxes.get(sandbox_id)
        if record is None:
            raise ApiError(404, f"sandbox {sandbox_id} not found")
        return record

    # ---------------------------------------------------------------- timeouts

    def deadline(self, seconds: float | None) -> dt.datetime | None:
        return None if seconds is None else now() + dt.timedelta(seconds=seconds)

    def touch(self, record: SandboxRecord) -> None:
        """A request reached the sandbox: an idle window starts again."""
        if self.flavor.idle_timeout and record.state == "running" and record.timeout is not None:
            record.end_at = self.deadline(record.timeout)

    async def reap(self) -> None:
        """Forever: end (or pause) running sandboxes whose time is up."""
        while True:
            await anyio.sleep(0.2)
            moment = now()
            for record in list(self.sandboxes.values()):
                if record.state != "running" or record.end_at is None or record.end_at > moment:
                    continue
                if record.lock.locked():
                    continue
                if record.auto_pause:
                    self.background(self.pause, record)
                else:
                    self.background(self.kill, record)

    def background(self, func: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run a task that the server outlives: a failure is logged, never raised."""
        async def guarded() -> None:
            try:
                await func(*args)
            except ApiError:
                pass  # a lifecycle change that no longer applies (e.g. already paused)
            except Exception:
                log.warning("emulator: %s failed", func.__name__, exc_info=True)

        self.tg.start_soon(guarded)

    # --------------------------------------------------------------- lifecycle

    async def create(self, *, spec: SandboxSpec, template_id: str, timeout: float | None,
                     auto_pause: bool, auto_resume: bool, pause_memory: bool,
                     network: dict[str, Any], allow_internet: bool | None,
                     volume_mounts: list[dict[str, Any]]) -> SandboxRecord:
        record_id = self.new_id()
        sandbox = await self.provider.create(self.backing(spec, record_id))
        record = SandboxRecord(
            id=record_id, sandbox=sandbox, spec=spec, template_id=template_id,
            access_token=secrets.token_hex(16) if self.flavor.envd_access_token else None,
            started_at=now(), timeout=timeout, end_at=self.deadline(timeout),
            auto_pause=auto_pause, auto_resume=auto_resume, pause_memory=pause_memory,
            network=network, allow_internet=allow_internet, volume_mounts=volume_mounts)
        self.sandboxes[record.id] = record
        self.background(prepare_helper, sandbox)
        return record

    def backing(self, spec: SandboxSpec, record_id: str) -> SandboxSpec:
        """The backend's spec for the sandbox ``record_id``: the client's labels stay in
        the record (the emulator serves them), the backend's sandbox carries only the
        label that says which emulated sandbox it runs."""
        return attrs.evolve(spec, metadata=backing_labels(self.flavor.name, record_id))

    async def kill(self, record: SandboxRecord) -> None:
        if self.sandboxes.pop(record.id, None) is None:
            return
        self.killed.add(record.id)
        record.state = "killed"
        self._end_processes(record)
        with anyio.CancelScope(shield=True):
            if record.files_only is not None:  # paused without memory: only files remain
                with contextlib.suppress(errors.SandboxError):
                    await self.provider.delete_snapshot(record.files_only.id)
                return
            if record.sandbox.info.state == SandboxState.PAUSED:
                # The local backend kills a frozen tree only after a grace period;
                # thawing it just before the kill makes the kill prompt.
                with contextlib.suppress(errors.SandboxError):
                    await record.sandbox.resume()
            await record.sandbox.kill()

    async def pause(self, record: SandboxRecord, memory: bool | None = None) -> None:
        """Pause a running sandbox, keeping its memory unless ``memory`` is false (or,
        when ``None``, its create said ``autoPauseMemory: false``) and the flavor can
        drop it. A flavor with a ``pausing`` state returns at once and finishes in the
        background."""
        if record.state != "running":
            raise ApiError(409, f"sandbox {record.id} is already {record.state}")
        keep = True
        if self.flavor.filesystem_pause:
            keep = record.pause_memory if memory is None else memory
        if not self.flavor.pausing_state:
            async with record.lock:
                await self._do_pause(record, keep_memory=keep)
            return
        record.state = "pausing"
        record.pausing = anyio.Event()
        self.background(self._pause_in_background, record, record.pausing, keep)

    async def _pause_in_background(self, record: SandboxRecord, done: anyio.Event,
                                   keep_memory: bool) -> None:
        try:
            async with record.lock:
                await self._do_pause(record, keep_memory=keep_memory,
                                     minimum=self.flavor.pausing_seconds)
        except errors.SandboxError:
            if record.id in self.sandboxes:
                record.state = "running"
        finally:
            done.set()

    async def settled(self, record: SandboxRecord) -> None:
        """Wait until a pause in progress has finished."""
        if record.pausing is not None:
            await record.pausing.wait()

    async def _do_pause(self, record: SandboxRecord, *, keep_memory: bool,
                        minimum: float = 0.0) -> None:
        started = anyio.current_time()
        if keep_memory:
            await record.sandbox.pause()
        else:
            # E2B's filesystem-only pause: the files are kept, the processes end.
            snapshot = await record.sandbox.snapshot()
            self._end_processes(record)
            await record.sandbox.kill()
            record.files_only = snapshot
        record.paused_with_memory = keep_memory
        extra = self.faults.value("pause_delay")
        if extra:
            self.faults.served("pause_delay")
        await anyio.sleep(max(0.0, minimum + extra - (anyio.current_time() - started)))
        if record.id in self.sandboxes:
            record.state = "paused"

    async def resume(self, record: SandboxRecord, timeout: float | None, *,
                     memory: bool = True) -> bool:
        """Resume if paused (waiting out a ``pausing``); extend the timeout. Returns
        whether it resumed. ``memory=False`` (where the flavor can drop memory) starts
        it afresh from its files, as E2B's reboot on resume does."""
        await self.settled(record)
        async with record.lock:
            if record.id not in self.sandboxes:
                raise ApiError(404, f"sandbox {record.id} not found")
            resumed = record.state == "paused"
            if resumed and not memory and self.flavor.filesystem_pause and \
                    record.files_only is None:
                record.files_only = await record.sandbox.snapshot()
                self._end_processes(record)
                await record.sandbox.resume()  # a thawed sandbox is killed at once
                await record.sandbox.kill()
            if resumed and record.files_only is not None:
                snapshot, record.files_only = record.files_only, None
                record.sandbox = await self.provider.create(self.backing(
                    attrs.evolve(record.spec, template=None, snapshot=snapshot.id), record.id))
                with contextlib.suppress(errors.SandboxError):
                    await self.provider.delete_snapshot(snapshot.id)
            elif resumed:
                await record.sandbox.resume()
            if resumed:
                record.state = "running"
                self.arm_unavailable(record)
            self.extend(record, timeout, reset=resumed)
            return resumed

    def extend(self, record: SandboxRecord, timeout: float | None, *, reset: bool) -> None:
        """Apply a connect's timeout: it only ever extends the current one."""
        if timeout is None:
            if reset:  # a resumed sandbox runs for its whole window again
                record.end_at = self.deadline(record.timeout)
            return
        wanted = self.deadline(timeout)
        if record.end_at is not None and wanted is not None and (reset or wanted > record.end_at):
            record.end_at = wanted

    def _end_processes(self, record: SandboxRecord) -> None:
        for entry in list(record.processes.values()):
            if entry.scope is not None:
                entry.scope.cancel()

    def arm_unavailable(self, record: SandboxRecord) -> None:
        record.unavailable_left = self.faults.count("resume_504")

    async def rollback(self, record: SandboxRecord, snapshot: SnapshotRecord) -> None:
        """Restore in place: a new backend sandbox from the snapshot under the same id;
        memory and processes start afresh."""
        async with record.lock:
            spec = attrs.evolve(record.spec, template=None, snapshot=snapshot.snapshot.id)
            fresh = await self.provider.create(self.backing(spec, record.id))
            old, record.sandbox = record.sandbox, fresh
            self._end_processes(record)
            record.state = "running"
            self.arm_unavailable(record)
            with anyio.CancelScope(shield=True):
                await old.kill()

    async def fork(self, record: SandboxRecord, count: int,
                   timeout: float | None) -> list[SandboxRecord | ApiError]:
        """``count`` new sandboxes from a snapshot of this one; each fails alone."""
        self.provider.require(Capability.SNAPSHOT_FILESYSTEM, sandbox_id=record.id)
        snap = await record.sandbox.snapshot()
        results: list[SandboxRecord | ApiError] = []
        try:
            for _ in range(count):
                try:
                    results.append(await self.create(
                        spec=attrs.evolve(record.spec, template=None, snapshot=snap.id),
                        template_id=record.template_id, timeout=timeout,
                        auto_pause=record.auto_pause, auto_resume=record.auto_resume,
                        pause_memory=record.pause_memory, network=dict(record.network),
                        allow_internet=record.allow_internet,
                        volume_mounts=list(record.volume_mounts)))
                except errors.SandboxError as exc:
                    results.append(ApiError(500, f"fork failed: {exc}"))
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                await self.provider.delete_snapshot(snap.id)
        return results

    async def snapshot(self, record: SandboxRecord, name: str | None) -> SnapshotRecord:
        self.provider.require(Capability.SNAPSHOT_FILESYSTEM, sandbox_id=record.id)
        snap = await record.sandbox.snapshot()
        snapshot_id = ("snap-" if self.flavor.cube_extras else "") + snap.id
        made = SnapshotRecord(id=snapshot_id, snapshot=snap, names=[name] if name else [],
                              sandbox_id=record.id, created_at=now())
        self.snapshots[snapshot_id] = made
        return made

    def find_snapshot(self, ref: str) -> SnapshotRecord | None:
        if ref in self.snapshots:
            return self.snapshots[ref]
        return next((s for s in self.snapshots.values() if ref in s.names), None)

    async def delete_snapshot(self, snapshot: SnapshotRecord) -> None:
        await self.provider.delete_snapshot(snapshot.snapshot.id)
        self.snapshots.pop(snapshot.id, None)

    def find_template(self, ref: str) -> TemplateRecord | None:
        """A built template by id or by one of its names."""
        if ref in self.templates:
            return self.templates[ref]
        return next((t for t in self.templates.values() if ref in t.names), None)

    async def delete_template(self, template: TemplateRecord) -> None:
        """Forget a template and remove its backend template (kept while sandboxes use
        it: the backend removes an image once its last sandbox is gone)."""
        self.templates.pop(template.id, None)
        if template.backend_template is not None:
            with contextlib.suppress(errors.TemplateNotFound, errors.Conflict):
                await self.provider.delete_template(template.backend_template)

    def volume_mount(self, raw: Mapping[str, Any]) -> VolumeMount:
        try:
            return VolumeMount(volume=str(raw["name"]), path=str(raw["path"]),
                               read_only=bool(raw.get("readOnly", raw.get("read_only", False))))
        except (KeyError, TypeError, errors.InvalidInput) as exc:
            raise ApiError(400, f"volumeMounts: {exc}") from None
