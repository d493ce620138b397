"""Daytona's payloads as neutral values, and neutral specs as Daytona's fields: one
function per type, no I/O. What a sandbox's state means (:data:`STATES`) and the labels
the provider keeps for itself are here too, since every role reads them."""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
import os
import tempfile
from typing import Any

from daytona import Image, Resources

from provider_sdk.models import (
    FileInfo,
    FileType,
    NetworkPolicy,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    Volume,
)
from provider_sdk.models import Resources as NeutralResources
from provider_sdk_daytona._errors import PROVIDER

__all__ = ["CREATE_LABEL", "CWD_LABEL", "LANGUAGE_LABEL", "RESERVED_LABELS", "STATES",
           "image_from_dockerfile", "network_fields", "resources", "sandbox_state",
           "state_name", "state_of", "timestamp", "to_file_info", "to_info", "to_snapshot",
           "to_template", "to_volume"]

LANGUAGE_LABEL = "code-toolbox-language"
CWD_LABEL = "provider-sdk.cwd"
CREATE_LABEL = "provider-sdk.create"
"""A token per create: a create retried after a 502 first looks for what it made."""
RESERVED_LABELS = frozenset({LANGUAGE_LABEL, CWD_LABEL, CREATE_LABEL})

STATES = {
    "started": SandboxState.RUNNING, "snapshotting": SandboxState.RUNNING,
    "forking": SandboxState.RUNNING, "resizing": SandboxState.RUNNING,
    "creating": SandboxState.STARTING, "starting": SandboxState.STARTING,
    "restoring": SandboxState.STARTING, "resuming": SandboxState.STARTING,
    "pending_build": SandboxState.STARTING, "building_snapshot": SandboxState.STARTING,
    "pulling_snapshot": SandboxState.STARTING,
    "stopping": SandboxState.PAUSING, "archiving": SandboxState.PAUSING,
    "pausing": SandboxState.PAUSING,
    "stopped": SandboxState.PAUSED, "archived": SandboxState.PAUSED,
    "paused": SandboxState.PAUSED,
    "destroying": SandboxState.KILLED, "destroyed": SandboxState.KILLED,
    "error": SandboxState.ERROR, "build_failed": SandboxState.ERROR,
}
"""Daytona's sandbox states as neutral ones."""


def state_name(sandbox: Any) -> str:
    """Daytona's name for a sandbox's state."""
    state = sandbox.state
    return str(getattr(state, "value", state) or "unknown")


def sandbox_state(sandbox: Any) -> SandboxState:
    """A sandbox's neutral state."""
    return STATES.get(state_name(sandbox), SandboxState.UNKNOWN)


def to_info(sandbox: Any) -> SandboxInfo:
    labels = dict(sandbox.labels or {})
    state = state_name(sandbox)
    return SandboxInfo(
        id=sandbox.id, provider=PROVIDER,
        state=STATES.get(state, SandboxState.UNKNOWN), template=sandbox.snapshot,
        metadata=labels,
        created_at=timestamp(sandbox.created_at), expires_at=None,
        resources=NeutralResources(cpu=sandbox.cpu or None,
                                   memory_mb=(sandbox.memory or 0) * 1024 or None,
                                   disk_mb=(sandbox.disk or 0) * 1024 or None),
        extra={"daytona_state": state, "name": sandbox.name, "target": sandbox.target,
               "auto_stop_interval": sandbox.auto_stop_interval,
               "auto_archive_interval": sandbox.auto_archive_interval,
               "auto_delete_interval": sandbox.auto_delete_interval,
               "cwd": labels.get(CWD_LABEL)},
    )


def timestamp(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def network_fields(policy: NetworkPolicy) -> dict[str, Any]:
    """The create fields for a network policy. Default: nothing gets out. Daytona has
    allow lists only (``network.deny_out`` is not declared)."""
    if policy.allow_internet:
        return {"network_block_all": False}
    cidrs: list[str] = []
    domains: list[str] = []
    for entry in policy.allow_out:
        try:
            cidrs.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError:
            domains.append(entry)
    if not cidrs and not domains:
        return {"network_block_all": True}
    fields: dict[str, Any] = {"network_block_all": False}
    if cidrs:
        fields["network_allow_list"] = ",".join(cidrs)
    if domains:
        fields["domain_allow_list"] = ",".join(domains)
    return fields


def resources(spec: SandboxSpec) -> Resources | None:
    r = spec.resources
    if r == NeutralResources():
        return None
    return Resources(cpu=math.ceil(r.cpu) if r.cpu else None,
                     memory=math.ceil(r.memory_mb / 1024) if r.memory_mb else None,
                     disk=math.ceil(r.disk_mb / 1024) if r.disk_mb else None)


def to_file_info(path: str, entry: Any) -> FileInfo:
    mode_text = str(entry.mode or "")
    kind = (FileType.DIRECTORY if entry.is_dir else
            FileType.SYMLINK if mode_text.startswith("L") else FileType.FILE)
    try:
        mode = int(str(entry.permissions), 8)
    except ValueError:
        mode = 0
    return FileInfo(path=path, type=kind, size=int(entry.size or 0), mode=mode,
                    modified_at=timestamp(getattr(entry, "modified_at", None)
                                           or entry.mod_time))


def to_snapshot(snapshot: Any) -> Snapshot:
    return Snapshot(id=snapshot.name, provider=PROVIDER, sandbox_id=snapshot.source_sandbox_id,
                    captures=frozenset({"filesystem"}),
                    created_at=timestamp(str(snapshot.created_at) if snapshot.created_at
                                          else None),
                    extra={"daytona_id": snapshot.id, "image_name": snapshot.image_name,
                           "state": state_of(snapshot)})


def image_from_dockerfile(dockerfile: str) -> Image:
    """``Image.from_dockerfile`` on a Dockerfile's text (a small temporary file)."""
    with tempfile.TemporaryDirectory(prefix="psdk-daytona-") as directory:
        path = os.path.join(directory, "Dockerfile")
        with open(path, "w", encoding="utf-8") as f:
            f.write(dockerfile)
        return Image.from_dockerfile(path)


def state_of(snapshot: Any) -> str:
    return str(getattr(snapshot.state, "value", snapshot.state))


def to_template(name: str, digest: str | None, snapshot: Any) -> Template:
    return Template(id=snapshot.name, name=name, provider=PROVIDER, content_hash=digest,
                    created_at=timestamp(str(snapshot.created_at) if snapshot.created_at
                                          else None),
                    extra={"daytona_id": snapshot.id, "state": state_of(snapshot)})


def to_volume(volume: Any) -> Volume:
    return Volume(id=volume.id, name=volume.name, provider=PROVIDER,
                  created_at=timestamp(str(volume.created_at) if volume.created_at else None),
                  extra={"state": str(getattr(volume.state, "value", volume.state))})
