"""Configuration: one field picks the backend; each provider reads its own settings.

The provider is chosen by, in order: the ``name`` argument, the ``PSDK_PROVIDER``
variable, ``provider = "..."`` in a ``psdk.toml`` file, else ``"local"``. The file is
``$PSDK_CONFIG`` if set, else ``./psdk.toml``, else ``$XDG_CONFIG_HOME/psdk/psdk.toml``.
Its ``[providers.<name>]`` table gives the provider's options; keyword arguments win::

    provider = "local"

    [providers.local]
    home = "/var/lib/psdk"
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provider_sdk import registry
from provider_sdk.errors import ConfigError
from provider_sdk.provider import SandboxProvider

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["DEFAULT_PROVIDER", "Secret", "config_path", "env_setting", "open_provider",
           "provider_name"]

DEFAULT_PROVIDER = "local"


class Secret(str):
    """A string holding a credential: its ``repr`` and ``str`` are masked.

    Use :meth:`reveal` where the real value must be sent.
    """

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def reveal(self) -> str:
        """The real value."""
        return str.__str__(self)


def env_setting(var: str, *, default: str | None = None, required: bool = False,
                secret: bool = False, provider: str | None = None) -> str | None:
    """Read a setting from the environment.

    Raises:
        ConfigError: ``required`` and unset (or empty); the message names ``var``.
    """
    value = os.environ.get(var) or default
    if value is None and required:
        raise ConfigError(f"the setting {var} is required: set it in the environment",
                          provider=provider)
    if value is not None and secret:
        return Secret(value)
    return value


def config_path() -> Path | None:
    """The config file in effect, or ``None`` if there is none."""
    if env := os.environ.get("PSDK_CONFIG"):
        path = Path(env)
        if not path.is_file():
            raise ConfigError(f"PSDK_CONFIG names {env!r}, which is not a file")
        return path
    local = Path("psdk.toml")
    if local.is_file():
        return local
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    user = base / "psdk" / "psdk.toml"
    return user if user.is_file() else None


def _read_config() -> dict[str, Any]:
    path = config_path()
    if path is None:
        return {}
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    return data


def provider_name(name: str | None = None) -> str:
    """The provider name in effect (argument, ``PSDK_PROVIDER``, file, ``local``)."""
    chosen = name or os.environ.get("PSDK_PROVIDER") or _read_config().get("provider")
    if chosen is not None and not isinstance(chosen, str):
        raise ConfigError(f"provider must be a string, got {chosen!r}")
    return chosen or DEFAULT_PROVIDER


def open_provider(name: str | None = None, /, **options: Any) -> SandboxProvider:
    """Create the configured provider: the one call business code needs.

    ``options`` are passed to the provider's constructor over its ``[providers.<name>]``
    table. Use the result with ``async with``.

    Raises:
        ProviderNotFound: the named provider is not installed.
        ConfigError: an option is unknown or malformed, or a setting is missing.
    """
    chosen = provider_name(name)
    cls = registry.load(chosen)
    providers = _read_config().get("providers", {})
    if not isinstance(providers, Mapping):
        raise ConfigError("[providers] must be a table of provider tables")
    table = providers.get(chosen, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"[providers.{chosen}] must be a table")
    merged = {**table, **options}
    params = inspect.signature(cls).parameters
    known = [p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY]
    for key in merged:
        if key not in known:
            raise ConfigError(f"provider {chosen!r} has no option {key!r}; "
                              f"its options are: {', '.join(known) or 'none'}", provider=chosen)
    return cls(**merged)
