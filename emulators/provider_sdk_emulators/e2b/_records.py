"""What the vendor's API knows of each sandbox, snapshot and built template.

Records only: the world (``_world``) creates them and changes them; each flavor's
routes read them and fill in their own fields. Nothing here calls the backend.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import anyio
import attrs

from provider_sdk.models import SandboxSpec, Snapshot
from provider_sdk.sandbox import Sandbox
from provider_sdk_emulators.e2b._process_entry import ProcessEntry
from provider_sdk_emulators.kit.usage import UsageMeter

__all__ = ["SandboxRecord", "SnapshotRecord", "TemplateRecord"]

_ATTRIBUTE_PATHS_KEPT = 4096
"""Paths whose extended attributes changed, kept per sandbox (the oldest go first)."""


@attrs.define(eq=False)
class SandboxRecord:
    """What the vendor's API knows about one sandbox."""

    id: str
    sandbox: Sandbox
    """The backend's sandbox (replaced by a rollback)."""
    spec: SandboxSpec
    template_id: str
    access_token: str | None = attrs.field(repr=False)
    started_at: dt.datetime
    timeout: float | None
    """Seconds of the deadline (E2B) or idle window (Cube); ``None``: never."""
    end_at: dt.datetime | None
    auto_pause: bool
    auto_resume: bool
    pause_memory: bool
    network: dict[str, Any]
    allow_internet: bool | None
    volume_mounts: list[dict[str, Any]]
    state: str = "running"
    traffic_token: str | None = attrs.field(default=None, repr=False)
    """With ``allowPublicTraffic: false``: the token every request to the sandbox's own
    ports carries (``e2b-traffic-access-token``)."""
    unavailable_left: int = 0
    """Data-plane requests still to answer 504 (fault ``resume_504``)."""
    processes: dict[int, ProcessEntry] = attrs.Factory(dict)
    lock: anyio.Lock = attrs.Factory(anyio.Lock)
    usage: UsageMeter = attrs.Factory(UsageMeter)
    """The metrics readings taken so far."""
    files_only: Snapshot | None = None
    """While paused without memory: the snapshot its files are kept in."""
    paused_with_memory: bool = True
    pausing: anyio.Event | None = None
    """Set when the last pause finished (flavors with a ``pausing`` state)."""
    attribute_changes: dict[str, int] = attrs.Factory(dict)
    """Per absolute path, how many attribute changes ``/files`` uploads made to it so
    far (envd's chown of each file it writes, and its metadata write), which a watch
    tells as chmods; the most recently written paths only."""

    def note_attribute_changes(self, path: str, count: int) -> None:
        """Count ``count`` attribute changes of ``path`` by an upload."""
        self.attribute_changes[path] = self.attribute_changes.pop(path, 0) + count
        while len(self.attribute_changes) > _ATTRIBUTE_PATHS_KEPT:
            del self.attribute_changes[next(iter(self.attribute_changes))]


@attrs.define(eq=False)
class SnapshotRecord:
    id: str
    snapshot: Snapshot
    names: list[str]
    sandbox_id: str
    created_at: dt.datetime


@attrs.define(eq=False)
class TemplateRecord:
    """A template built through the vendor's template API (E2B's builds, Cube's
    templates from images). Each flavor's template routes fill in their own fields."""

    id: str
    names: list[str]
    """Names and aliases that resolve to it."""
    created_at: dt.datetime
    status: str = "building"
    """``building``, ``ready`` or ``error`` (each API spells these its own way)."""
    backend_template: str | None = None
    """The backend's template (an image) that sandboxes from it start from, once ready."""
    error: str | None = None
    logs: list[str] = attrs.Factory(list)
    extra: dict[str, Any] = attrs.Factory(dict)
    """Whatever the flavor's API reports back (build ids, image, request, progress)."""
