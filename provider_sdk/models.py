"""Neutral value types: frozen, keyword-only attrs classes.

Providers build these from vendor payloads in one ``_to_<type>()`` function per type;
whatever has no neutral field goes into the read-only ``extra`` mapping. Specs validate
themselves when constructed: a malformed field raises
:class:`~provider_sdk.errors.InvalidInput` naming it.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from provider_sdk.errors import InvalidInput
from provider_sdk.labels import check_labels
from provider_sdk.results import ExecResult
from provider_sdk.secret import Secret

__all__ = [
    "ExecResult",
    "ExposedPort",
    "FileInfo",
    "FileType",
    "Lifecycle",
    "Metrics",
    "NetworkPolicy",
    "Resources",
    "SandboxInfo",
    "SandboxSpec",
    "SandboxState",
    "Snapshot",
    "Template",
    "TemplateSpec",
    "Volume",
    "VolumeMount",
    "broken_reason",
]

# \A and \Z, not ^ and $: "$" would accept a trailing newline.
_TEMPLATE_NAME = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,127}\Z")
_ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


def _frozen_map(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value or {}))


def _check_str_map(field: str, value: Mapping[str, str] | None) -> Mapping[str, str]:
    if value is not None and not isinstance(value, Mapping):
        raise InvalidInput(f"{field}: expected a mapping of strings, got {type(value).__name__}")
    items = dict(value or {})
    for k, v in items.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidInput(f"{field}: keys and values must be strings, got {k!r}")
        if not k or "\0" in k or "\0" in v:
            raise InvalidInput(f"{field}: empty key or NUL byte in {k!r}")
    return types.MappingProxyType(items)


def _str_set(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _metadata_map(value: Mapping[str, str] | None) -> Mapping[str, str]:
    if value is not None and not isinstance(value, Mapping):
        raise InvalidInput(f"metadata: expected a mapping of strings, got {type(value).__name__}")
    labels = dict(value or {})
    check_labels(labels)
    return types.MappingProxyType(labels)


def _env_map(value: Mapping[str, str] | None) -> Mapping[str, str]:
    env = _check_str_map("env", value)
    for name in env:
        if not _ENV_NAME.match(name):
            raise InvalidInput(f"env: {name!r} is not a valid environment variable name")
    return env


def _host_list(field: str, value: Any) -> tuple[str, ...]:
    # A bare string CIDR for allow_out would silently become a tuple of characters.
    if isinstance(value, str):
        raise InvalidInput(f"{field}: expected a list of CIDRs or host names, "
                           f"got the string {value!r}")
    return tuple(value)


def _allow_out(value: Any) -> tuple[str, ...]:
    return _host_list("allow_out", value)


def _deny_out(value: Any) -> tuple[str, ...]:
    return _host_list("deny_out", value)


def _keys_only(value: Mapping[str, str]) -> str:
    # Environment values often hold credentials: reprs show names only.
    return "{" + ", ".join(f"{k!r}: '***'" for k in value) + "}"


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise InvalidInput(f"{attribute.name} must be a number, got {value!r}")
    if value is not None and value <= 0:
        raise InvalidInput(f"{attribute.name} must be > 0, got {value!r}")


def _absolute_path(_inst: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.startswith("/")
                              or "\0" in value):
        raise InvalidInput(f"{attribute.name} must be an absolute path, got {value!r}")


class SandboxState(str, enum.Enum):
    """Where a sandbox is in its lifecycle. ``UNKNOWN`` when a backend's state has no match."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"
    STOPPED = "stopped"
    KILLED = "killed"
    ERROR = "error"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class FileType(str, enum.Enum):
    """Kind of a filesystem entry."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


@attrs.frozen(kw_only=True)
class Resources:
    """Requested resources; ``None`` leaves the provider's default."""

    cpu: float | None = attrs.field(default=None, validator=_positive)
    """CPU cores (fractions allowed where the backend allows)."""
    memory_mb: int | None = attrs.field(default=None, validator=_positive)
    """Memory limit in MiB."""
    disk_mb: int | None = attrs.field(default=None, validator=_positive)
    """Disk size in MiB, where the backend sets one."""


@attrs.frozen(kw_only=True)
class Lifecycle:
    """What happens to an idle sandbox.

    The default never expires and never pauses by itself: no vendor default silently
    ends a long agent run. Providers map this onto their own notion (an idle window on
    Cube, an absolute deadline renewed on use on E2B, auto-stop on Daytona); each
    provider's docs say how.
    """

    idle_timeout: float | None = attrs.field(default=None, validator=_positive)
    """Seconds without activity before ``on_idle`` applies; ``None``: never."""
    on_idle: Literal["pause", "kill"] = attrs.field(default="kill")
    """What to do with an idle sandbox."""
    auto_resume: bool = False
    """Resume a paused sandbox automatically on the next request."""

    @on_idle.validator
    def _check_on_idle(self, _attribute: attrs.Attribute[str], value: str) -> None:
        if value not in ("pause", "kill"):
            raise InvalidInput(f"on_idle must be 'pause' or 'kill', got {value!r}")


@attrs.frozen(kw_only=True)
class NetworkPolicy:
    """Outbound network access. The default is none: the sandbox has only loopback."""

    allow_internet: bool = False
    """Allow outbound traffic (subject to the lists below)."""
    allow_out: tuple[str, ...] = attrs.field(default=(), converter=_allow_out)
    """CIDRs or host names that stay reachable when internet is off."""
    deny_out: tuple[str, ...] = attrs.field(default=(), converter=_deny_out)
    """CIDRs or host names blocked even when internet is on."""


@attrs.frozen(kw_only=True)
class VolumeMount:
    """Mount a named volume into a sandbox at create."""

    volume: str
    """The volume's name (or id)."""
    path: str = attrs.field(validator=_absolute_path)
    """Absolute mount point inside the sandbox."""
    read_only: bool = False
    """Writes through this mount fail."""


@attrs.frozen(kw_only=True)
class SandboxSpec:
    """Everything needed to create a sandbox. Every field has a safe default."""

    template: str | None = None
    """Template (image, template id, snapshot name); ``None``: the provider's default."""
    snapshot: str | None = None
    """Start from this snapshot id instead of a template."""
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_env_map, repr=_keys_only)
    """Environment for every command, under what each call passes (values never shown)."""
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=_metadata_map)
    """Labels to find the sandbox by (``list(metadata=...)``)."""
    cwd: str | None = attrs.field(default=None, validator=_absolute_path)
    """Working directory for commands and relative paths; ``None``: the provider's."""
    resources: Resources = attrs.field(factory=Resources)
    lifecycle: Lifecycle = attrs.field(factory=Lifecycle)
    network: NetworkPolicy = attrs.field(factory=NetworkPolicy)
    volumes: tuple[VolumeMount, ...] = attrs.field(default=(), converter=tuple)
    extensions: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map)
    """Vendor-only options, named ``<provider>.<option>``; ignored by other providers."""

    @volumes.validator
    def _check_volumes(self, _attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        paths = [m.path for m in value if isinstance(m, VolumeMount)]
        if len(paths) != len(value):
            raise InvalidInput("volumes: each entry must be a VolumeMount")
        if len(set(paths)) != len(paths):
            raise InvalidInput(f"volumes: two mounts at the same path in {paths}")


@attrs.frozen(kw_only=True)
class SandboxInfo:
    """What a provider knows about a sandbox."""

    id: str
    provider: str
    state: SandboxState
    template: str | None = None
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    created_at: dt.datetime | None = None
    expires_at: dt.datetime | None = None
    """When the sandbox will be stopped or paused; ``None``: never."""
    resources: Resources = attrs.field(factory=Resources)
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map, eq=False)
    """Provider-specific leftovers, read-only."""


def broken_reason(info: SandboxInfo) -> str | None:
    """Why the provider reports ``info`` as a broken record (on one line), or ``None``.

    A provider reports a state record it cannot make sense of (corrupt, half created)
    as a sandbox in state ``error`` with ``extra["broken"]`` set to the reason; killing
    it removes what is left of it.
    """
    reason = info.extra.get("broken")
    if info.state != SandboxState.ERROR or not reason:
        return None
    return " ".join(str(reason).split())


@attrs.frozen(kw_only=True)
class FileInfo:
    """An entry in a sandbox's filesystem."""

    path: str
    """Absolute path inside the sandbox."""
    type: FileType
    size: int = 0
    mode: int = 0
    """Permission bits (``0o644``)."""
    modified_at: dt.datetime | None = None
    symlink_target: str | None = None

    @property
    def name(self) -> str:
        """The last path component."""
        return self.path.rstrip("/").rsplit("/", 1)[-1] or "/"


@attrs.frozen(kw_only=True)
class Volume:
    """A named volume that outlives the sandboxes that mount it."""

    id: str
    name: str
    provider: str
    created_at: dt.datetime | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map, eq=False)


@attrs.frozen(kw_only=True)
class Snapshot:
    """A saved state of a sandbox, from which new sandboxes can start."""

    id: str
    provider: str
    sandbox_id: str | None = None
    """The sandbox it was taken from."""
    captures: frozenset[str] = attrs.field(factory=frozenset, converter=_str_set)
    """What it holds: ``"filesystem"``, and ``"memory"`` where the backend keeps it."""
    created_at: dt.datetime | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map, eq=False)


def _secret(value: str) -> Secret:
    return Secret(value)


@attrs.frozen(kw_only=True)
class ExposedPort:
    """A port of a sandbox reachable from this machine (``ports.expose``).

    Where the provider declares ``ports.url_token``, ``url`` works as it is, in a
    browser or with curl: it carries the access token. Where ``token_header`` is set,
    the address without it, ``base_url``, takes the token in that header instead (the
    host-side proxy of local and docker also takes ``Authorization: Bearer <token>``).
    Anything without the token is refused before it reaches the sandbox. ``url`` and
    ``token`` never appear in ``repr``.
    """

    port: int
    """The port inside the sandbox."""
    url: str = attrs.field(repr=False)
    """The address to open, token included."""
    base_url: str
    """The address without the token, for clients that send it in a header."""
    token: Secret = attrs.field(converter=_secret)
    """The access token (a :class:`~provider_sdk.config.Secret`: ``reveal()`` gives it)."""
    token_header: str | None = None
    """The request header in which ``base_url`` takes the token (``X-Psdk-Token`` on the
    host-side proxy, ``e2b-traffic-access-token`` on E2B); ``None`` where the token works
    only as part of ``url``."""


@attrs.frozen(kw_only=True)
class Metrics:
    """A point-in-time resource reading; ``None`` where the backend has no figure."""

    cpu_seconds: float | None = None
    """CPU time used since the sandbox started."""
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None
    disk_bytes: int | None = None
    """Bytes used by the sandbox's own writable filesystem."""
    timestamp: dt.datetime | None = None


@attrs.frozen(kw_only=True)
class TemplateSpec:
    """How to build a template: a Dockerfile and its context, as plain data.

    Make one with :func:`provider_sdk.templates.from_dockerfile`, which reads and
    checks the file; what is derived from a spec (its parsed Dockerfile, content hash,
    problems for a builder) is in :mod:`provider_sdk.templates`. Building
    (:meth:`~provider_sdk.provider.SandboxProvider.build_template`) refuses, before
    anything runs, what the target cannot do.
    """

    name: str = attrs.field()
    dockerfile: str = ""
    """The Dockerfile's text."""
    context: str | None = None
    """Directory holding the build context, if the Dockerfile copies files."""
    cpu: float | None = attrs.field(default=None, validator=_positive)
    memory_mb: int | None = attrs.field(default=None, validator=_positive)
    start_cmd: str | None = None
    """Command started when a sandbox starts from the template."""
    ready_cmd: str | None = None
    """Command that exits 0 once the started command is ready."""

    @name.validator
    def _check_name(self, _attribute: attrs.Attribute[str], value: str) -> None:
        if not _TEMPLATE_NAME.match(value):
            raise InvalidInput(f"name: {value!r} must be lowercase letters, digits, '.', '_', '-'")


@attrs.frozen(kw_only=True)
class Template:
    """A built template that sandboxes can be created from."""

    id: str
    name: str
    provider: str
    content_hash: str | None = None
    created_at: dt.datetime | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map, eq=False)
