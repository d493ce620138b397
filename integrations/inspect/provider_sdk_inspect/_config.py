"""``PsdkConfig``: what ``sandbox=("psdk", config)`` carries, as the pydantic model
Inspect expects; or a path to a ``psdk.toml``.

The model holds the provider's name, its non-secret options and the
:class:`~provider_sdk.models.SandboxSpec` fields of each sandbox a sample gets. Inspect
records the config in every eval log, so credentials never belong here: providers read
them from their own environment settings (``E2B_API_KEY``, ``DAYTONA_API_KEY``, ...),
and an option whose name says it holds one is refused. This module must not open a
provider or create anything.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from provider_sdk.errors import ConfigError, InvalidInput
from provider_sdk.models import (
    Lifecycle,
    NetworkPolicy,
    Resources,
    SandboxSpec,
    VolumeMount,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["DEFAULT_NAME", "PsdkConfig", "PsdkLifecycle", "PsdkNetwork", "PsdkResources",
           "PsdkSandbox", "PsdkVolume", "load_config"]

DEFAULT_NAME = "default"
"""The name of the sandbox ``sandbox()`` returns; it is always the first."""

_SECRET_WORDS = ("key", "token", "secret", "password", "credential")


class _Model(BaseModel):
    """Frozen, closed to unknown fields, hashable by content (Inspect keeps configs in
    sets)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __hash__(self) -> int:
        return hash(self.model_dump_json())


class PsdkResources(_Model):
    """:class:`~provider_sdk.models.Resources`: ``None`` leaves the provider's default."""

    cpu: float | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None


class PsdkLifecycle(_Model):
    """:class:`~provider_sdk.models.Lifecycle`: what happens to an idle sandbox."""

    idle_timeout: float | None = None
    on_idle: Literal["pause", "kill"] = "kill"
    auto_resume: bool = False


class PsdkNetwork(_Model):
    """:class:`~provider_sdk.models.NetworkPolicy`; the default is loopback only."""

    allow_internet: bool = False
    allow_out: tuple[str, ...] = ()
    deny_out: tuple[str, ...] = ()


class PsdkVolume(_Model):
    """:class:`~provider_sdk.models.VolumeMount`: a named volume mounted at create."""

    volume: str
    path: str
    read_only: bool = False


class PsdkSandbox(_Model):
    """One sandbox of a sample: the fields of :class:`~provider_sdk.models.SandboxSpec`.

    Every field has the SDK's default; :meth:`spec` builds the neutral spec, and
    building the model already checks it the way the SDK does.
    """

    template: str | None = None
    """Template (image, template id, snapshot name); ``None``: the provider's default."""
    snapshot: str | None = None
    """Start from this snapshot id instead of a template."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of every command the sample runs (recorded in the eval log)."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """Labels, besides the ``inspect-*`` ones the environment adds."""
    cwd: str | None = None
    """Working directory of commands and relative paths; ``None``: the provider's."""
    resources: PsdkResources = Field(default_factory=PsdkResources)
    lifecycle: PsdkLifecycle = Field(default_factory=PsdkLifecycle)
    network: PsdkNetwork = Field(default_factory=PsdkNetwork)
    volumes: tuple[PsdkVolume, ...] = ()
    extensions: dict[str, Any] = Field(default_factory=dict)
    """Vendor-only options, named ``<provider>.<option>``."""

    def spec(self) -> SandboxSpec:
        """The neutral :class:`~provider_sdk.models.SandboxSpec` this model describes."""
        mounts: list[VolumeMount] = [VolumeMount(volume=v.volume, path=v.path,
                                                 read_only=v.read_only) for v in self.volumes]
        spec = SandboxSpec(
            template=self.template, snapshot=self.snapshot, env=self.env,
            metadata=self.metadata, cwd=self.cwd,
            resources=Resources(**self.resources.model_dump()),
            lifecycle=Lifecycle(**self.lifecycle.model_dump()),
            network=NetworkPolicy(**self.network.model_dump()),
            extensions=self.extensions)
        # attrs' tuple converter on volumes types its argument as a bare Iterable[_T_co],
        # which nothing matches; the converter itself takes the list.
        changes: dict[str, Any] = {"volumes": mounts}
        return attrs.evolve(spec, **changes) if mounts else spec

    @model_validator(mode="after")
    def _check_spec(self) -> PsdkSandbox:
        try:
            self.spec()
        except InvalidInput as exc:  # the SDK's own checks, as a pydantic error
            raise ValueError(exc.message) from None
        return self


class PsdkConfig(PsdkSandbox):
    """The ``psdk`` sandbox environment's config: ``sandbox=("psdk", PsdkConfig(...))``.

    ``provider`` is the one field that picks the backend; ``None`` takes
    ``PSDK_PROVIDER``, then ``psdk.toml``, then ``local``, as
    :func:`~provider_sdk.open_provider` does. The spec fields describe the sample's
    default sandbox; ``sandboxes`` names more, each taking from the default's the
    fields it leaves at their defaults.
    """

    provider: str | None = None
    """The provider's registry name (``local``, ``docker``, ``e2b``, ``cube``,
    ``daytona``, ...)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Constructor options of the provider, over its ``[providers.<name>]`` table; never
    credentials (the eval log records them): those come from the environment."""
    sandboxes: dict[str, PsdkSandbox] = Field(default_factory=dict)
    """Further sandboxes of each sample, by name (``sandbox("name")``)."""

    @field_validator("options")
    @classmethod
    def _no_credentials(cls, options: dict[str, Any]) -> dict[str, Any]:
        for key in options:
            if any(word in key.lower() for word in _SECRET_WORDS):
                raise ValueError(
                    f"options: {key!r} holds a credential, and Inspect records the config "
                    "in every eval log: set it in the provider's environment setting "
                    "instead (E2B_API_KEY, DAYTONA_API_KEY, ...)")
        return options

    @field_validator("sandboxes")
    @classmethod
    def _names(cls, sandboxes: dict[str, PsdkSandbox]) -> dict[str, PsdkSandbox]:
        if DEFAULT_NAME in sandboxes:
            raise ValueError(f"sandboxes: {DEFAULT_NAME!r} is the sandbox the top-level "
                             "fields describe; name the others differently")
        return sandboxes

    def specs(self) -> dict[str, SandboxSpec]:
        """Each sandbox of a sample by name, the default first."""
        base = self.spec()
        specs = {DEFAULT_NAME: base}
        defaults = SandboxSpec()
        for name, other in self.sandboxes.items():
            own = other.spec()
            specs[name] = attrs.evolve(base, **{
                field.name: getattr(own, field.name) for field in attrs.fields(SandboxSpec)
                if getattr(own, field.name) != getattr(defaults, field.name)})
        return specs


def load_config(config: PsdkConfig | str | Path | Mapping[str, Any] | None) -> PsdkConfig:
    """The config Inspect hands over, as a :class:`PsdkConfig`.

    ``None`` is the defaults (the provider in effect, its default template). A string
    is the path of a ``psdk.toml``: its ``provider`` and that provider's
    ``[providers.<name>]`` table become ``provider`` and ``options``. A file may hold
    credentials (the log records only its path), so its options are not checked for
    them.

    Raises:
        ConfigError: the file cannot be read or is malformed; the message names it.
    """
    if config is None:
        return PsdkConfig()
    if isinstance(config, PsdkConfig):
        return config
    if isinstance(config, Mapping):
        return PsdkConfig.model_validate(dict(config))
    path = Path(config)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read the psdk sandbox config {path}: {exc}") from exc
    provider = data.get("provider")
    if provider is not None and not isinstance(provider, str):
        raise ConfigError(f"{path}: provider must be a string")
    tables = data.get("providers", {})
    table = tables.get(provider, {}) if isinstance(tables, Mapping) and provider else {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: [providers.{provider}] must be a table", provider=provider)
    # model_construct: a file's options are not recorded, so they may hold credentials.
    return PsdkConfig.model_construct(provider=provider, options=dict(table))
