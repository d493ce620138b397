"""Configuration: one field picks the backend; each provider reads its own settings.

The provider is chosen by, in order: the ``name`` argument, the ``PSDK_PROVIDER``
variable, ``provider = "..."`` in a ``psdk.toml`` file, else ``"local"``. The file is
``$PSDK_CONFIG`` if set, else ``./psdk.toml``, else ``$XDG_CONFIG_HOME/psdk/psdk.toml``.
Its ``[providers.<name>]`` table gives the provider's options; keyword arguments win::

    provider = "local"

    [providers.local]
    home = "/var/lib/psdk"

Options are checked against the constructor's type hints, never coerced from strings;
any mistake is a :class:`~provider_sdk.errors.ConfigError` naming the key, the provider
and the file. A provider reads each option it was not given from the environment through
:class:`~provider_sdk.settings.Settings`, with the same strictness; :func:`env_setting`,
:func:`int_setting`, :func:`float_setting` and :func:`bool_setting` (from
:mod:`provider_sdk.settings`) read a lone variable.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provider_sdk import registry
from provider_sdk.errors import ConfigError
from provider_sdk.secret import Secret
from provider_sdk.settings import (
    bool_setting,
    env_setting,
    float_setting,
    given_in,
    int_setting,
)

if typing.TYPE_CHECKING:
    from provider_sdk.provider import SandboxProvider

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["DEFAULT_PROVIDER", "KNOWN_KEYS", "Secret", "bool_setting", "config_path",
           "default_home", "env_setting", "float_setting", "int_setting", "open_provider",
           "provider_name"]

DEFAULT_PROVIDER = "local"


def default_home() -> Path:
    """psdk's own data directory: ``PSDK_HOME``, else ``psdk`` in the per-user data
    directory (``XDG_DATA_HOME``, else ``~/.local/share``). The local provider keeps its
    sandboxes there, the Docker provider its bounded directories, the CLI what it made."""
    if env := os.environ.get("PSDK_HOME"):
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "psdk"


# --------------------------------------------------------------------- the file

#: The top-level keys psdk.toml may hold.
KNOWN_KEYS = ("provider", "providers")


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


# A provider's table written with the singular key: [provider.local].
_SINGULAR_TABLE = re.compile(r"^[ \t]*\[[ \t]*provider[ \t]*\.[ \t]*([^\]\s]+)[ \t]*\]",
                             re.MULTILINE)


def _read_config() -> tuple[Path | None, dict[str, Any]]:
    path = config_path()
    if path is None:
        return None, {}
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _refuse_singular_table(path, text)
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if isinstance(data.get("provider"), dict):
        _refuse_singular_table(path, text)
    for key in data:
        if key not in KNOWN_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r}; the known keys are: "
                              f"{', '.join(KNOWN_KEYS)}")
    return path, data


def _refuse_singular_table(path: Path, text: str) -> None:
    """Raise the error that names a ``[provider.NAME]`` table, if the file has one."""
    typo = _SINGULAR_TABLE.search(text)
    if typo is not None:
        line = text.count("\n", 0, typo.start()) + 1
        raise ConfigError(f"{path}, line {line}: [provider.{typo.group(1)}] should be "
                          f"[providers.{typo.group(1)}]: a provider's options go in a "
                          "[providers.NAME] table; provider = \"NAME\" picks the provider")


def provider_name(name: str | None = None) -> str:
    """The provider name in effect (argument, ``PSDK_PROVIDER``, file, ``local``)."""
    chosen: object = name or os.environ.get("PSDK_PROVIDER")
    if not chosen:
        path, data = _read_config()
        chosen = data.get("provider")
        if chosen is not None and not isinstance(chosen, str):
            raise ConfigError(f"{path}: provider must be a string, got {_describe(chosen)}")
    assert chosen is None or isinstance(chosen, str)
    return chosen or DEFAULT_PROVIDER


def open_provider(name: str | None = None, /, **options: Any) -> SandboxProvider:
    """Create the configured provider: the one call business code needs.

    ``options`` are passed to the provider's constructor over its ``[providers.<name>]``
    table. Each is checked against the constructor's type hints, never converted from a
    string: ``unisolated = "false"`` is an error, not a truthy string. Use the result
    with ``async with``.

    Raises:
        ProviderNotFound: the named provider is not installed.
        ConfigError: an option is unknown or of the wrong type, a number is not finite,
            or a setting is missing; the message names the option, the provider and the
            file (or keyword) it came from.
    """
    chosen = provider_name(name)
    cls = registry.load(chosen)
    path, data = _read_config()
    providers = data.get("providers", {})
    if not isinstance(providers, Mapping):
        raise ConfigError(f"{path}: [providers] must be a table of provider tables",
                          provider=chosen)
    table = providers.get(chosen, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: [providers.{chosen}] must be a table", provider=chosen)
    params = _options_of(cls)
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, given in ((f"{path}: [providers.{chosen}]", table),
                          (f"open_provider({chosen!r}) keyword", options)):
        for key, value in given.items():
            if key not in params:
                raise ConfigError(f"{source} {key}: provider {chosen!r} has no option "
                                  f"{key!r}; its options are: {', '.join(params) or 'none'}",
                                  provider=chosen)
            merged[key] = _checked(value, params[key], f"{source} {key}", key, chosen)
            sources[key] = source
    with given_in(sources):  # a value the provider refuses is blamed on where it was given
        return cls(**merged)


def _options_of(cls: type[SandboxProvider]) -> dict[str, Any]:
    """The constructor's keyword-only options and their type hints (``Any`` if none)."""
    params = inspect.signature(cls).parameters
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # unresolvable hints (TYPE_CHECKING imports) stay unchecked
        hints = {}
    return {name: hints.get(name, Any) for name, p in params.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


# ------------------------------------------------------------------ option types

_SECRET_WORDS = ("key", "token", "secret", "password", "credential")


class _Mismatch(Exception):
    """A value that does not fit a type hint; ``expected`` says what would."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def _checked(value: object, hint: Any, where: str, key: str, provider: str) -> object:
    try:
        return _fit(value, hint)
    except _Mismatch as exc:
        shown = "a value" if any(w in key.lower() for w in _SECRET_WORDS) else \
            _describe(value)
        raise ConfigError(f"{where}: expected {exc.expected}, got {shown}",
                          provider=provider) from None


def _fit(value: object, hint: Any) -> object:
    """``value`` as ``hint`` asks (an int widened to float, a str wrapped as Secret).

    Raises:
        _Mismatch: it does not fit.
    """
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        expected = []
        for member in typing.get_args(hint):
            try:
                return _fit(value, member)
            except _Mismatch as exc:
                expected.append(exc.expected)
        raise _Mismatch(" or ".join(dict.fromkeys(expected)))
    if origin is typing.Literal:
        choices = typing.get_args(hint)
        if value in choices and not isinstance(value, bool):
            return value
        raise _Mismatch("one of " + ", ".join(repr(c) for c in choices))
    if hint is type(None):
        if value is None:
            return None
        raise _Mismatch("nothing (None)")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch("a boolean (true or false)")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch("an integer")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise _Mismatch("a finite number")
            return float(value)
        raise _Mismatch("a number")
    if isinstance(hint, type) and issubclass(hint, str):
        if isinstance(value, str):
            return hint(value) if hint is not str and not isinstance(value, hint) else value
        raise _Mismatch("a string")
    if (origin or hint) is os.PathLike:
        if isinstance(value, os.PathLike):
            return value
        raise _Mismatch("a path")
    check = origin or hint
    if isinstance(check, type):
        if isinstance(value, check):
            return value
        raise _Mismatch(f"a {check.__name__}")
    return value  # a hint this does not model is left to the provider


def _describe(value: object) -> str:
    """A value as a config error quotes it, in the file's words."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if value is None:
        return "None"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"
