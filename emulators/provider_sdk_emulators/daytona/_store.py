"""The emulator's state: Daytona's records (sandboxes, volumes, snapshots, sessions) and
the JSON the SDK's generated models read for each.

A sandbox's sessions, interpreter contexts and PTY sessions are kept here as the
modules that run them (``_sessions``, ``_interpreter_context``, ``_pty_session``) define
them; those import nothing of this one.

Records hold only what Daytona's API knows; the sandboxes themselves live in the neutral
backend provider, named by ``backend_id``. Nothing here talks HTTP.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import secrets
import uuid
from typing import Any

import anyio
import attrs
from anyio.streams.memory import MemoryObjectSendStream

from provider_sdk.config import Secret
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk.tasks import TaskOwner
from provider_sdk_emulators.daytona._interpreter_context import InterpreterContext
from provider_sdk_emulators.daytona._pty_session import PtySession
from provider_sdk_emulators.daytona._sessions import CommandRecord, SessionShell
from provider_sdk_emulators.kit.usage import UsageMeter

ORGANIZATION = "00000000-0000-4000-8000-00000000e1e1"
"""The one organisation every record belongs to."""
LANGUAGE_LABEL = "code-toolbox-language"
USER = "daytona"
"""The user Daytona's images run commands as."""
HOME = "/home/daytona"
"""That user's home, the working directory of Daytona's images."""
DEFAULT_SNAPSHOT = "daytonaio/sandbox:0.6.0-slim"
"""The snapshot a sandbox is made from when it names none (a general snapshot, listed
to every organisation)."""
ADMIN_ORGANIZATION = "00000000-0000-4000-8000-0000000000ad"
"""The organisation general snapshots belong to."""


def now() -> str:
    """An ISO timestamp as Daytona's API writes them."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def new_id() -> str:
    """A fresh UUID, Daytona's id format."""
    return str(uuid.uuid4())


@attrs.define(kw_only=True)
class SessionRecord:
    """A session: one persistent shell in the sandbox, commands run one at a time."""

    id: str
    shell: SessionShell
    commands: dict[str, CommandRecord] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"sessionId": self.id, "commands": [c.to_json() for c in self.commands.values()]}


@attrs.define(kw_only=True)
class SandboxRecord:
    """A Daytona sandbox. While stopped its files are kept in ``stopped_snapshot``."""

    id: str
    name: str
    state: str
    labels: dict[str, str]
    env: dict[str, str]
    created_at: str
    updated_at: str
    snapshot: str | None
    target: str
    cpu: int
    memory: int
    disk: int
    public: bool
    network_block_all: bool
    network_allow_list: str | None
    auto_stop_interval: int
    auto_archive_interval: int
    auto_delete_interval: int
    volumes: list[dict[str, Any]]
    build_info: dict[str, Any] | None = None
    backend_id: str | None = None
    backend_snapshot: str | None = None
    """The backend snapshot to start from (its creation snapshot, or its stopped files)."""
    backend_template: str | None = None
    """The backend template to start from, when its snapshot was built from a Dockerfile."""
    stopped_snapshot: str | None = None
    daytona_image: bool = True
    """It runs Daytona's default image (as its user, in its home), not one built from a
    Dockerfile (which says its own user and working directory)."""
    handle: Sandbox | None = None
    workdir: str = "/"
    home: str = "/"
    started_at: float = 0.0
    """Loop time before which GET still reports ``starting`` (fault ``start_delay``)."""
    active_at: float = 0.0
    """Loop time of the last toolbox request, create or start: what auto-stop counts."""
    stopped_at: float = 0.0
    """Loop time of the last stop: what auto-delete counts."""
    sessions: dict[str, SessionRecord] = attrs.field(factory=dict)
    interpreters: dict[str, InterpreterContext] = attrs.field(factory=dict)
    """Its code interpreter's contexts, by id (``default`` among them once used)."""
    ptys: dict[str, PtySession] = attrs.field(factory=dict)
    """Its PTY sessions, by id."""
    toolbox_502: int = 0
    """Toolbox requests still to fail with 502 (fault ``toolbox_502_after_start``)."""
    preview_token: Secret = attrs.field(factory=lambda: Secret(secrets.token_urlsafe(24)))
    """Its access token: what opens its preview URLs (``_preview``)."""
    signing_key: Secret = attrs.field(factory=lambda: Secret(secrets.token_urlsafe(32)))
    """What its signed file URLs are signed with (``_signed``)."""
    daemon_env: dict[str, str] = attrs.field(factory=dict)
    """What ``POST /env`` set for processes spawned from now on (until it stops)."""
    daemon_unset: set[str] = attrs.field(factory=set)
    """What ``POST /env`` removed from the environment they get."""
    shells: dict[str | None, str] = attrs.field(factory=dict)
    """The shell its daemon found for commands, by the ``PATH`` it looked under (until it
    stops)."""
    usage: UsageMeter = attrs.field(factory=UsageMeter)
    """Its resource-use samples: what its telemetry answers."""

    def spawn(self, argv: list[str], env: dict[str, str] | None = None
              ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment to start a process with, as the daemon spawns one:
        its own environment, as ``POST /env`` left it, under the call's ``env``."""
        unset = sorted(self.daemon_unset - set(env or ()))
        prefix = ["env", *(a for name in unset for a in ("-u", name)), "--"] if unset else []
        return prefix + argv, {**self.daemon_env, **(env or {})}

    def shown_state(self) -> str:
        """The state a client sees now: ``starting`` while fault ``start_delay`` holds
        a started sandbox back."""
        if self.state == "started" and asyncio.get_running_loop().time() < self.started_at:
            return "starting"
        return self.state

    def to_json(self, toolbox_url: str, *, state: str | None = None,
                listing: bool = False) -> dict[str, Any]:
        """The ``Sandbox`` DTO (or, with ``listing``, a ``SandboxListItem``)."""
        dto: dict[str, Any] = {
            "id": self.id, "organizationId": ORGANIZATION, "name": self.name,
            "snapshot": self.snapshot, "user": USER, "labels": dict(self.labels),
            "public": self.public, "networkBlockAll": self.network_block_all,
            "networkAllowList": self.network_allow_list, "target": self.target,
            "cpu": self.cpu, "gpu": 0, "memory": self.memory, "disk": self.disk,
            "state": state or self.state, "desiredState": _desired(self.state),
            "errorReason": None, "recoverable": False, "backupState": "None",
            "autoStopInterval": self.auto_stop_interval,
            "autoArchiveInterval": self.auto_archive_interval,
            "autoDeleteInterval": self.auto_delete_interval,
            "createdAt": self.created_at, "updatedAt": self.updated_at,
            "lastActivityAt": self.updated_at, "sandboxClass": "container",
            "daemonVersion": "emulated", "toolboxProxyUrl": toolbox_url,
        }
        if not listing:
            dto.update({"env": dict(self.env), "kvm": False, "volumes": list(self.volumes),
                        "buildInfo": self.build_info})
        return dto


def _desired(state: str) -> str:
    return {"stopped": "stopped", "stopping": "stopped", "archived": "archived",
            "destroyed": "destroyed", "destroying": "destroyed"}.get(state, "started")


EVENT_BACKLOG = 256
"""Events a connected client may fall behind by before the gateway drops it."""


@attrs.define(eq=False)
class Notifications:
    """The organisation's event stream, as Daytona's notification gateway sends it:
    every connected client (``_events``) gets every event, as the Engine.IO message that
    carries it, in a bounded queue of its own."""

    toolbox_url: str = ""
    """What the sandbox DTOs in events carry as ``toolboxProxyUrl``."""
    clients: set[MemoryObjectSendStream[str]] = attrs.field(factory=set)

    def emit(self, event: str, payload: dict[str, Any]) -> None:
        """Queue ``event`` for every client; one that fell :data:`EVENT_BACKLOG` events
        behind is cut off (its stream closes, and its connection with it)."""
        message = "42" + json.dumps([event, payload])  # Engine.IO message, Socket.IO event
        for client in list(self.clients):
            try:
                client.send_nowait(message)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                client.close()
                self.clients.discard(client)

    def created(self, record: SandboxRecord) -> None:
        """``sandbox.created``, with the sandbox's DTO."""
        self.emit("sandbox.created", record.to_json(self.toolbox_url,
                                                    state=record.shown_state()))

    def changed(self, record: SandboxRecord, old: str) -> None:
        """``sandbox.state.updated`` from ``old`` to the state shown now (nothing if it
        is the same)."""
        new = record.shown_state()
        if new != old:
            self.emit("sandbox.state.updated", {
                "sandbox": record.to_json(self.toolbox_url, state=new),
                "oldState": old, "newState": new})


@attrs.define(kw_only=True)
class VolumeRecord:
    """A Daytona volume; its data is the backend volume ``backend_name``."""

    id: str
    name: str
    backend_name: str
    created_at: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "organizationId": ORGANIZATION,
                "state": "ready", "createdAt": self.created_at, "updatedAt": self.created_at,
                "lastUsedAt": None, "errorReason": None}


@attrs.define(kw_only=True)
class SnapshotRecord:
    """A Daytona snapshot: from an image (no files of its own) or from a sandbox."""

    id: str
    name: str
    created_at: str
    image_name: str | None = None
    build_info: dict[str, Any] | None = None
    backend_snapshot: str | None = None
    backend_template: str | None = None
    """The backend template built from ``build_info`` (backends that build images)."""
    state: str = "active"
    error_reason: str | None = None
    source_sandbox_id: str | None = None
    general: bool = False
    """Daytona's own (the default snapshot): every organisation sees it, none owns it."""
    daytona_image: bool = True
    """Its sandboxes run Daytona's default image: it was not built from a Dockerfile,
    nor taken from a sandbox of one that was."""
    cpu: int = 1
    memory: int = 1
    disk: int = 3

    def to_json(self) -> dict[str, Any]:
        owner = ADMIN_ORGANIZATION if self.general else ORGANIZATION
        return {"id": self.id, "organizationId": owner, "general": self.general,
                "name": self.name, "imageName": self.image_name, "state": self.state,
                "size": None, "entrypoint": None, "cpu": self.cpu, "gpu": 0,
                "mem": self.memory, "disk": self.disk, "errorReason": self.error_reason,
                "createdAt": self.created_at, "updatedAt": self.created_at,
                "lastUsedAt": None, "buildInfo": self.build_info, "regionIds": [],
                "sourceSandboxId": self.source_sandbox_id}


@attrs.define(kw_only=True)
class Store:
    """Everything the emulator knows, and the backend provider holding the sandboxes."""

    backend: SandboxProvider
    sandboxes: dict[str, SandboxRecord] = attrs.field(factory=dict)
    volumes: dict[str, VolumeRecord] = attrs.field(factory=dict)
    snapshots: dict[str, SnapshotRecord] = attrs.field(factory=dict)
    notifications: Notifications = attrs.field(factory=Notifications)
    """What the notification gateway sends its clients."""
    tasks: TaskOwner = attrs.field(factory=lambda: TaskOwner("daytona-emulator"))
    """What runs beyond the request that started it (sessions' and terminals' readers);
    closed with the emulator."""
    signed_previews: dict[tuple[int, str], tuple[str, float]] = attrs.field(
        factory=dict, repr=False)
    """(port, signed preview token) to (sandbox id, the unix time it expires)."""
    preview_relays: dict[tuple[int, str], set[anyio.CancelScope]] = attrs.field(
        factory=dict, repr=False)
    """(port, signed preview token) to its connections being relayed, which end when
    the token is revoked."""

    def __attrs_post_init__(self) -> None:
        # Daytona's default image: here, the backend's default template.
        default = SnapshotRecord(id=new_id(), name=DEFAULT_SNAPSHOT, created_at=now(),
                                 image_name=DEFAULT_SNAPSHOT, general=True)
        self.snapshots.setdefault(default.id, default)

    def sandbox(self, id_or_name: str) -> SandboxRecord | None:
        """A sandbox by id, else by name."""
        found = self.sandboxes.get(id_or_name)
        if found is None:
            found = next((s for s in self.sandboxes.values() if s.name == id_or_name), None)
        return found

    def volume(self, id_or_name: str) -> VolumeRecord | None:
        """A volume by id, else by name."""
        found = self.volumes.get(id_or_name)
        if found is None:
            found = next((v for v in self.volumes.values() if v.name == id_or_name), None)
        return found

    def snapshot(self, id_or_name: str) -> SnapshotRecord | None:
        """A snapshot by id, else by name."""
        found = self.snapshots.get(id_or_name)
        if found is None:
            found = next((s for s in self.snapshots.values() if s.name == id_or_name), None)
        return found
