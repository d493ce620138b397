"""Checking a local sandbox's state record (``meta.json``) before anything trusts it.

A record can be damaged: truncated by a full disk or a crash, emptied, edited by hand,
written by another version, or never finished because its creator was killed. Such a
record is *broken*: listing reports it (state ``ERROR``, ``extra["broken"]`` saying
why) beside the good ones, and ``kill`` removes it. A record its creator is still
making holds the directory's lock and is not broken (see ``Home.claim``).

A good sandbox record is a :class:`SandboxRecord`, a good template record a
:class:`TemplateRecord` (:func:`read_template`), a snapshot's a :class:`SnapshotRecord`
(:func:`read_snapshot`) and a volume's a :class:`VolumeRecord` (:func:`read_volume`),
each checked like a sandbox's: a broken one is named with why (never with its values);
what each holds on disk is what its ``to_json`` gives, the same keys as every earlier
version wrote, so a home's existing records keep loading. This module reads and judges
records; it changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import attrs

from provider_sdk._warnings import warn_caller
from provider_sdk.local._home import Home
from provider_sdk.local._launch import Launched
from provider_sdk.models import Resources, SandboxInfo, SandboxState


class BrokenRecordWarning(RuntimeWarning):
    """A sandbox's, template's, snapshot's or volume's record in the local provider's
    home is unreadable or incomplete: the sandbox is listed as broken
    (``SandboxState.ERROR``) until killed; the template is left out of listings, and
    refused, until deleted or built again; the snapshot or volume is left out of
    listings, and refused, until deleted."""


@attrs.frozen
class VolumeBinding:
    """A volume mounted into a sandbox: ``[volume, path, read_only]`` on disk."""

    volume: str
    path: str
    read_only: bool


@attrs.define(kw_only=True)
class SandboxRecord:
    """A local sandbox's state record (``meta.json``), as read and checked by
    :func:`read`. ``launch`` is set once the sandbox has started."""

    id: str
    created_at: dt.datetime
    template: str
    """``default`` (the host's system, read-only) or a local template's id."""
    metadata: dict[str, str]
    env: dict[str, str]
    cwd: str
    resources: Resources
    idle_timeout: float | None
    volumes: list[VolumeBinding]
    snapshot: str | None
    """The snapshot the sandbox was made from."""
    unisolated: bool
    image_env: dict[str, str] = attrs.field(factory=dict)
    """The template image's environment, under the spec's."""
    start_cmd: str | None = None
    ready_cmd: str | None = None
    launch: Launched | None = None
    ids: int | None = None
    """The first host id of the sandbox's slot (``_ids``), where the provider runs as
    root: its uid 0 on the host, which its files' ids are counted from. ``None``: the
    sandbox was made by a process not root, or by a version that mapped its user to the
    host's root (its files are moved to a slot when it next starts)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SandboxRecord:
        """The record of a parsed ``meta.json`` that :func:`problem` found good."""
        launch = data.get("launch")
        return cls(
            id=data["id"], created_at=dt.datetime.fromisoformat(data["created_at"]),
            template=data["template"], metadata=dict(data["metadata"]), env=dict(data["env"]),
            cwd=data["cwd"], resources=Resources(**data["resources"]),
            idle_timeout=data["idle_timeout"],
            volumes=[VolumeBinding(name, path, ro) for name, path, ro in data["volumes"]],
            snapshot=data["snapshot"], unisolated=data["unisolated"],
            image_env=dict(data.get("image_env") or {}), start_cmd=data.get("start_cmd"),
            ready_cmd=data.get("ready_cmd"),
            launch=Launched(**launch) if launch is not None else None, ids=data.get("ids"))

    def to_json(self) -> dict[str, Any]:
        """What ``meta.json`` holds: the keys and shapes every version reads."""
        data: dict[str, Any] = {
            "id": self.id,
            "created_at": self.created_at.isoformat(),
            "template": self.template,
            "metadata": dict(self.metadata),
            "image_env": dict(self.image_env),
            "env": dict(self.env),
            "cwd": self.cwd,
            "resources": attrs.asdict(self.resources),
            "start_cmd": self.start_cmd,
            "ready_cmd": self.ready_cmd,
            "idle_timeout": self.idle_timeout,
            "volumes": [[v.volume, v.path, v.read_only] for v in self.volumes],
            "snapshot": self.snapshot,
            "unisolated": self.unisolated,
        }
        if self.launch is not None:
            data["launch"] = attrs.asdict(self.launch)
        if self.ids is not None:
            data["ids"] = self.ids
        return data


@attrs.frozen(kw_only=True)
class SnapshotRecord:
    """A local snapshot's record: its id, the sandbox it was taken of, and that sandbox's
    template (a snapshot of a template sandbox is its overlay layer over the template)."""

    id: str
    sandbox_id: str
    created_at: dt.datetime
    template: str
    ids: int | None = None
    """The sandbox's ``SandboxRecord.ids`` when the snapshot was taken: its files are
    owned by that slot's ids, moved to the new sandbox's when one is made from it."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotRecord:
        """The record of a parsed ``meta.json`` that :func:`read_snapshot` found good."""
        return cls(id=data["id"], sandbox_id=data["sandbox_id"],
                   created_at=dt.datetime.fromisoformat(data["created_at"]),
                   template=data["template"], ids=data.get("ids"))

    def to_json(self) -> dict[str, Any]:
        """What ``meta.json`` holds: the keys and shapes every version reads."""
        data: dict[str, Any] = {"id": self.id, "sandbox_id": self.sandbox_id,
                                "created_at": self.created_at.isoformat(),
                                "template": self.template}
        if self.ids is not None:
            data["ids"] = self.ids
        return data


@attrs.define(kw_only=True)
class VolumeRecord:
    """A local volume's record; ``disk_mb`` is its quota, where volumes have one."""

    name: str
    created_at: dt.datetime
    disk_mb: int | None = None
    ids: int | None = None
    """The host id its files' uid 0 is stored as (the shared slot's first id, see
    ``_ids``), where the provider runs as root. ``None``: made by a process not root,
    or by a version that stored the sandbox user's files as the host's root (moved to
    the shared slot when a sandbox next mounts it)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VolumeRecord:
        """The record of a parsed ``meta.json`` that :func:`read_volume` found good."""
        return cls(name=data["name"], created_at=dt.datetime.fromisoformat(data["created_at"]),
                   disk_mb=data.get("disk_mb"), ids=data.get("ids"))

    def to_json(self) -> dict[str, Any]:
        """What ``meta.json`` holds: the keys and shapes every version reads."""
        data: dict[str, Any] = {"name": self.name, "created_at": self.created_at.isoformat()}
        if self.disk_mb is not None:
            data["disk_mb"] = self.disk_mb
        if self.ids is not None:
            data["ids"] = self.ids
        return data


@attrs.frozen(kw_only=True)
class TemplateRecord:
    """A built local template's record (``templates/<id>/meta.json``), as read and
    checked by :func:`read_template`: the spec's name and content hash, and what the
    image's configuration and the spec say about how its sandboxes run."""

    id: str
    name: str
    content_hash: str
    created_at: dt.datetime
    image: str
    """The image the filesystem was exported from (``""``: none named)."""
    env: dict[str, str]
    """The image's ``ENV``."""
    workdir: str | None
    user: str | None
    cpu: float | None = None
    memory_mb: int | None = None
    start_cmd: str | None = None
    ready_cmd: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TemplateRecord:
        """The record of a parsed ``meta.json`` that :func:`template_problem` found good."""
        return cls(id=data["id"], name=data["name"], content_hash=data["content_hash"],
                   created_at=dt.datetime.fromisoformat(data["created_at"]),
                   image=data["image"], env=dict(data["env"]), workdir=data["workdir"],
                   user=data["user"], cpu=data.get("cpu"), memory_mb=data.get("memory_mb"),
                   start_cmd=data.get("start_cmd"), ready_cmd=data.get("ready_cmd"))

    def to_json(self) -> dict[str, Any]:
        """What ``meta.json`` holds: the keys and shapes every version reads."""
        return {"id": self.id, "name": self.name, "content_hash": self.content_hash,
                "created_at": self.created_at.isoformat(), "image": self.image,
                "env": dict(self.env), "workdir": self.workdir, "user": self.user,
                "cpu": self.cpu, "memory_mb": self.memory_mb,
                "start_cmd": self.start_cmd, "ready_cmd": self.ready_cmd}


_REQUIRED: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "created_at": (str,),
    "template": (str,),
    "metadata": (dict,),
    "env": (dict,),
    "cwd": (str,),
    "resources": (dict,),
    "idle_timeout": (int, float, type(None)),
    "volumes": (list,),
    "snapshot": (str, type(None)),
    "unisolated": (bool,),
}
# Added by later versions: a record without them is still good.
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "image_env": (dict,), "start_cmd": (str, type(None)), "ready_cmd": (str, type(None)),
    "ids": (int, type(None)),
}
_TEMPLATE_REQUIRED: dict[str, tuple[type, ...]] = {
    "id": (str,), "name": (str,), "content_hash": (str,), "created_at": (str,),
    "image": (str,), "env": (dict,), "workdir": (str, type(None)), "user": (str, type(None)),
}
# Written by every version, but read as optional by the first ones: a record without
# them is still good.
_TEMPLATE_OPTIONAL: dict[str, tuple[type, ...]] = {
    "cpu": (int, float, type(None)), "memory_mb": (int, type(None)),
    "start_cmd": (str, type(None)), "ready_cmd": (str, type(None)),
}
_SNAPSHOT_REQUIRED: dict[str, tuple[type, ...]] = {
    "id": (str,), "sandbox_id": (str,), "created_at": (str,), "template": (str,),
}
_SNAPSHOT_OPTIONAL: dict[str, tuple[type, ...]] = {"ids": (int, type(None))}
_VOLUME_REQUIRED: dict[str, tuple[type, ...]] = {"name": (str,), "created_at": (str,)}
_VOLUME_OPTIONAL: dict[str, tuple[type, ...]] = {"disk_mb": (int, type(None)),
                                                  "ids": (int, type(None))}
_LAUNCH: dict[str, tuple[type, ...]] = {  # the fields of _launch.Launched
    "init_pid": (int,), "init_start": (int,), "pid_namespace": (int, type(None)),
    "agent_pid": (int, type(None)), "agent_start": (int,), "token": (str,),
}


_UNFINISHED = "it has no meta.json (its creator stopped before finishing it)"


def _load(directory: Path) -> tuple[Any, str | None, bool]:
    """A directory's parsed ``meta.json``, or why it cannot be parsed; and whether the
    directory exists at all."""
    try:
        text = (directory / "meta.json").read_text()
    except (FileNotFoundError, NotADirectoryError):
        if not directory.is_dir():
            return None, None, False
        return None, _UNFINISHED, True
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"its meta.json cannot be read ({type(exc).__name__})", True
    try:
        return json.loads(text), None, True
    except ValueError:
        return None, ("its meta.json is empty" if not text.strip()
                      else "its meta.json is not valid JSON (truncated?)"), True


def read(directory: Path, sandbox_id: str) -> tuple[SandboxRecord | None, str | None]:
    """A record and, if it is broken, why (``(None, None)``: there is no such record)."""
    meta, reason, exists = _load(directory)
    if not exists or reason is not None:
        return None, reason
    reason = problem(meta, sandbox_id)
    return (None, reason) if reason else (SandboxRecord.from_json(meta), None)


def read_template(directory: Path, template_id: str
                  ) -> tuple[TemplateRecord | None, str | None]:
    """A template's record and, if it is broken, why (``(None, None)``: there is no
    such template)."""
    meta, reason, exists = _load(directory)
    if not exists or reason is not None:
        return None, reason
    reason = template_problem(meta, template_id)
    return (None, reason) if reason else (TemplateRecord.from_json(meta), None)


def read_snapshot(directory: Path, snapshot_id: str
                  ) -> tuple[SnapshotRecord | None, str | None]:
    """A snapshot's record and, if it is broken, why (``(None, None)``: there is no
    such snapshot, or it is still being taken: its record is written last)."""
    meta, reason, exists = _load(directory)
    if not exists or reason == _UNFINISHED:
        return None, None
    reason = reason or _typed(meta, _SNAPSHOT_REQUIRED, _SNAPSHOT_OPTIONAL)
    if reason is None and meta["id"] != snapshot_id:
        reason = "its meta.json names another snapshot"
    return (None, reason) if reason else (SnapshotRecord.from_json(meta), None)


def read_volume(directory: Path, name: str) -> tuple[VolumeRecord | None, str | None]:
    """A volume's record and, if it is broken, why (``(None, None)``: there is no such
    volume, or it is still being made: its record is written last)."""
    meta, reason, exists = _load(directory)
    if not exists or reason == _UNFINISHED:
        return None, None
    reason = reason or _typed(meta, _VOLUME_REQUIRED, _VOLUME_OPTIONAL)
    if reason is None and meta["name"] != name:
        reason = "its meta.json names another volume"
    return (None, reason) if reason else (VolumeRecord.from_json(meta), None)


def _typed(meta: Any, required: dict[str, tuple[type, ...]],
           optional: dict[str, tuple[type, ...]]) -> str | None:
    """Why a parsed record is not an object with the keys and JSON types it needs."""
    if not isinstance(meta, dict):
        return f"its meta.json holds a {type(meta).__name__}, not an object"
    missing = [key for key in required if key not in meta]
    if missing:
        return f"its meta.json lacks {', '.join(missing)}"
    for key, types in [*required.items(), *optional.items()]:
        if key in meta and (not isinstance(meta[key], types) or (
                isinstance(meta[key], bool) and bool not in types)):
            return f"its meta.json has a {type(meta[key]).__name__} for {key!r}"
    if "env" in required and not all(isinstance(v, str) for v in meta["env"].values()):
        return "its meta.json has non-string env values"
    try:
        dt.datetime.fromisoformat(meta["created_at"])
    except ValueError:
        return "its meta.json has an invalid 'created_at'"
    return None


def template_problem(meta: Any, template_id: str) -> str | None:
    """Why a parsed template record cannot be used, or ``None`` if it can."""
    reason = _typed(meta, _TEMPLATE_REQUIRED, _TEMPLATE_OPTIONAL)
    if reason is None and meta["id"] != template_id:
        reason = "its meta.json names another template"
    return reason


def problem(meta: Any, sandbox_id: str) -> str | None:
    """Why a parsed record cannot be used, or ``None`` if it can."""
    reason = _typed(meta, _REQUIRED, _OPTIONAL)
    if reason is not None:
        return reason
    if meta["id"] != sandbox_id:
        return "its meta.json names another sandbox"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta["metadata"].items()):
        return "its meta.json has non-string metadata"
    try:
        Resources(**meta["resources"])
    except (TypeError, ValueError):
        return "its meta.json has invalid 'resources'"
    if not all(isinstance(v, list) and len(v) == 3 and isinstance(v[0], str)
               and isinstance(v[1], str) and isinstance(v[2], bool) for v in meta["volumes"]):
        return "its meta.json has invalid 'volumes'"
    launch = meta.get("launch")
    if launch is not None and not _valid_launch(launch):
        return "its meta.json has an invalid 'launch'"
    return None


def _valid_launch(launch: Any) -> bool:
    return isinstance(launch, dict) and set(launch) == set(_LAUNCH) and all(
        isinstance(launch[k], t) and not isinstance(launch[k], bool)
        for k, t in _LAUNCH.items())


def broken_info(home: Home, sandbox_id: str, *, provider: str,
                warn: bool = False) -> SandboxInfo | None:
    """A broken record's info (state ``ERROR``, ``extra["broken"]``), else ``None``.

    A record whose lock someone holds is being made (or removed), not broken: its
    creator holds the lock until the sandbox has started, so a record written but
    never started is broken only once its creator is gone.
    """
    directory = home.sandbox(sandbox_id)
    meta, reason = read(directory, sandbox_id)
    if reason is None and meta is not None and meta.launch is None:
        reason = "its creator stopped before starting it"
    if reason is None or home.busy(directory):
        return None
    try:
        created = dt.datetime.fromtimestamp(directory.stat().st_mtime, dt.timezone.utc)
    except FileNotFoundError:  # removed meanwhile
        return None
    if warn:
        _warn(sandbox_id, reason, home.path)
    return SandboxInfo(id=sandbox_id, provider=provider, state=SandboxState.ERROR,
                       template=None, metadata={}, created_at=created, expires_at=None,
                       resources=Resources(), extra={"home": str(home.path), "broken": reason})


def _warn(sandbox_id: str, reason: str, home: Path) -> None:
    """Say once per listing that a record is broken (never the record's contents), at
    the line that called ``provider.list``."""
    warn_caller(f"local sandbox {sandbox_id} in {home} is broken: {reason}; "
                "kill it (psdk kill, or provider.kill) to remove it", BrokenRecordWarning)


def warn_template(template_id: str, reason: str, home: Path) -> None:
    """Say, as a listing passes it, that a template's record is broken."""
    warn_caller(f"local template {template_id} in {home} is broken: {reason}; delete it "
                "(psdk template rm, or provider.delete_template) or build it again",
                BrokenRecordWarning)


def warn_stored(kind: str, ident: str, reason: str, home: Path) -> None:
    """Say, as a listing passes it, that a snapshot's or a volume's record is broken,
    at the line that called the provider's listing."""
    warn_caller(f"local {kind} {ident} in {home} is broken: {reason}; delete it "
                f"(psdk {kind} rm, or provider.delete_{kind})", BrokenRecordWarning)


def template_of(directory: Path) -> str | None:
    """The template a sandbox's or a snapshot's record names, even where the record is
    otherwise broken (its files may still be a layer over the template's)."""
    meta, _reason, _exists = _load(directory)
    name = meta.get("template") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None
