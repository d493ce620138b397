"""Providers' settings, read and checked one way: :class:`Settings`.

Each setting of a provider is an option of its constructor that, when not given, is read
from an environment variable, else takes a default. :class:`Settings` does that for
every provider, with one set of types (text, secret, URL, path, number, integer,
switch) and one form of error: a :class:`~provider_sdk.errors.ConfigError` carrying the
provider's name, naming the option and its variable, saying what was expected and what
was found, except for a secret, whose value is never shown::

    settings = Settings("acme", {"api_key": "ACME_API_KEY", "timeout": "ACME_TIMEOUT"})
    self._key = settings.secret("api_key", api_key)            # required by default
    self._timeout = settings.number("timeout", timeout, default=60.0)

Values read from the environment are parsed strictly (``yes`` is not a switch, ``1.5``
is not an integer); values given to the constructor must already have the type (a
string is never taken for a number). An error about a value read from the environment
names the variable; one about a value given names the option alone, and where it was
given when the caller said so with :func:`given_in` (``psdk.toml: [providers.e2b]
ready_timeout``), as :func:`provider_sdk.config.open_provider` does. A check of a
provider's own (a registry address, an existing file) refuses a value with
:meth:`Settings.refuse`, in the same words.
:func:`env_setting`, :func:`int_setting`, :func:`float_setting` and :func:`bool_setting`
read a lone variable the same way.

A leaf module: it imports only the errors and :class:`~provider_sdk.secret.Secret`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import overload

from provider_sdk.errors import ConfigError
from provider_sdk.secret import Secret

__all__ = ["Settings", "bool_setting", "env_setting", "float_setting", "given_in",
           "int_setting"]

_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


class _Invalid(Exception):
    """A value that is not what a setting takes; ``expected`` says what is."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def _parse_int(raw: str, minimum: int) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d+", text) or int(text) < minimum:
        raise _Invalid(f"an integer of at least {minimum}")
    return int(text)


def _parse_float(raw: str, positive: bool) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (positive and value <= 0):
        raise _Invalid("a positive finite number" if positive else "a finite number")
    return value


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _Invalid("true or false (or 1 or 0)")


# Where each option passed to the provider being constructed came from (see given_in).
_SOURCES: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "psdk_settings_sources", default=None)


@contextlib.contextmanager
def given_in(sources: Mapping[str, str]) -> Iterator[None]:
    """Say, while a provider is constructed in this block, where each option passed to it
    came from (``{"ready_timeout": "psdk.toml: [providers.e2b]"}``): an error about a
    given value then names its source instead of calling it the option's variable."""
    token = _SOURCES.set(dict(sources))
    try:
        yield
    finally:
        _SOURCES.reset(token)


def _refuse(name: str, expected: str, value: object, *, secret: bool,
            provider: str | None) -> ConfigError:
    shown = "a value" if secret else repr(value)
    return ConfigError(f"the setting {name} must be {expected}, got {shown}", provider=provider)


# ------------------------------------------------------------- lone variables

def env_setting(var: str, *, default: str | None = None, required: bool = False,
                secret: bool = False, provider: str | None = None) -> str | None:
    """Read a setting from the environment (unset or empty: ``default``).

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


@overload
def int_setting(var: str, default: int, *, minimum: int = ...,
                provider: str | None = ...) -> int: ...
@overload
def int_setting(var: str, default: None = ..., *, minimum: int = ...,
                provider: str | None = ...) -> int | None: ...
def int_setting(var: str, default: int | None = None, *, minimum: int = 1,
                provider: str | None = None) -> int | None:
    """An integer setting from the environment (unset or empty: ``default``).

    Raises:
        ConfigError: the value is not a whole number of at least ``minimum`` (``1.5``,
            ``ten``, ``0`` by default); the message names ``var``.
    """
    raw = os.environ.get(var)
    if not raw:
        return default
    try:
        return _parse_int(raw, minimum)
    except _Invalid as exc:
        raise _refuse(var, exc.expected, raw, secret=False, provider=provider) from None


@overload
def float_setting(var: str, default: float, *, positive: bool = ...,
                  provider: str | None = ...) -> float: ...
@overload
def float_setting(var: str, default: None = ..., *, positive: bool = ...,
                  provider: str | None = ...) -> float | None: ...
def float_setting(var: str, default: float | None = None, *, positive: bool = True,
                  provider: str | None = None) -> float | None:
    """A finite number from the environment, e.g. a timeout in seconds.

    Raises:
        ConfigError: the value is not a finite number (``inf``, ``nan``, ``soon``), or
            ``positive`` and it is not above zero; the message names ``var``.
    """
    raw = os.environ.get(var)
    if not raw:
        return default
    try:
        return _parse_float(raw, positive)
    except _Invalid as exc:
        raise _refuse(var, exc.expected, raw, secret=False, provider=provider) from None


@overload
def bool_setting(var: str, default: bool, *, provider: str | None = ...) -> bool: ...
@overload
def bool_setting(var: str, default: None = ..., *,
                 provider: str | None = ...) -> bool | None: ...
def bool_setting(var: str, default: bool | None = None, *,
                 provider: str | None = None) -> bool | None:
    """A boolean from the environment: ``true``/``1`` or ``false``/``0`` (any case).

    Anything else (``yes``, ``off``, ``maybe``) is refused rather than guessed at, as a
    misread switch may turn a protection off.

    Raises:
        ConfigError: the value is not one of those; the message names ``var``.
    """
    raw = os.environ.get(var)
    if not raw:
        return default
    try:
        return _parse_bool(raw)
    except _Invalid as exc:
        raise _refuse(var, exc.expected, raw, secret=False, provider=provider) from None


# ------------------------------------------------------------------ Settings

class Settings:
    """One provider's settings: each option as given, else from its variable, else the
    default, checked and converted as its type says.

    Args:
        provider: the provider's name, carried by every error.
        variables: the environment variable of each option that has one.

    Each reader takes the option's name and the value given to the constructor
    (``None``: not given). An empty variable counts as unset.

    Raises (every reader):
        ConfigError: the value is not of the setting's type or range, or a required
            setting is missing. The message names the option and its variable and says
            what was expected; a secret's value is never in it.
    """

    def __init__(self, provider: str, variables: Mapping[str, str] | None = None) -> None:
        self.provider = provider
        self.variables: Mapping[str, str] = dict(variables or {})

    def __repr__(self) -> str:
        return f"<Settings of {self.provider!r}>"

    # -- the one way a setting is found and refused

    def _name(self, option: str) -> str:
        var = self.variables.get(option)
        return f"{option} ({var})" if var else option

    def _raw(self, option: str) -> str | None:
        var = self.variables.get(option)
        return (os.environ.get(var) or None) if var else None

    def _refuse(self, option: str, expected: str, value: object, *,
                secret: bool = False, given: bool = False) -> ConfigError:
        """The error for ``value``; a ``given`` one (not read from the environment) is
        named by the option and where it was given, never by the option's variable."""
        if not given:
            return _refuse(self._name(option), expected, value, secret=secret,
                           provider=self.provider)
        source = (_SOURCES.get() or {}).get(option)
        shown = "a value" if secret else repr(value)
        if source is None:
            return _refuse(option, expected, value, secret=secret, provider=self.provider)
        return ConfigError(f"{source} {option} must be {expected}, got {shown}",
                           provider=self.provider)

    def refuse(self, option: str, expected: str, value: object, *,
               secret: bool = False) -> ConfigError:
        """The error for a value of ``option`` that a check of the caller's own found
        wrong (raise it): the same shape as every reader's, saying what was
        ``expected``; with ``secret``, the value is never shown."""
        return self._refuse(option, expected, value, secret=secret)

    def _missing(self, option: str) -> ConfigError:
        var = self.variables.get(option)
        how = f"pass {option} or set {var} in the environment" if var else f"pass {option}"
        return ConfigError(f"the setting {self._name(option)} is required: {how}",
                           provider=self.provider)

    # -- the types

    @overload
    def text(self, option: str, given: str | None, *, default: str,
             required: bool = ...) -> str: ...
    @overload
    def text(self, option: str, given: str | None, *, default: None = ...,
             required: bool = ...) -> str | None: ...
    def text(self, option: str, given: str | None, *, default: str | None = None,
             required: bool = False) -> str | None:
        """A string (an empty one given counts as not given)."""
        if given is not None and not isinstance(given, str):
            raise self._refuse(option, "a string", given, given=True)
        value = given or self._raw(option) or default
        if value is None and required:
            raise self._missing(option)
        return value

    def secret(self, option: str, given: str | None, *, required: bool = True
               ) -> Secret | None:
        """A credential, held as a :class:`~provider_sdk.secret.Secret`."""
        if given is not None and not isinstance(given, str):
            raise self._refuse(option, "a string", given, secret=True, given=True)
        value = given or self._raw(option)
        if value is None:
            if required:
                raise self._missing(option)
            return None
        return Secret(value)

    def url(self, option: str, given: str | None, *, default: str | None = None,
            required: bool = False, schemes: tuple[str, ...] = ("http", "https"),
            hint: str = "") -> str | None:
        """A URL of one of ``schemes``; ``hint`` adds what else it must be."""
        value = self.text(option, given, default=default, required=required)
        if value is not None and not value.startswith(tuple(f"{s}://" for s in schemes)):
            kinds = "/".join(schemes)
            raise self._refuse(option, f"a {kinds} URL{hint}", value, given=bool(given))
        return value

    def path(self, option: str, given: str | os.PathLike[str] | None, *,
             default: Path | None = None) -> Path | None:
        """A filesystem path."""
        if given is not None and not isinstance(given, (str, os.PathLike)):
            raise self._refuse(option, "a path", given, given=True)
        if given is not None and str(given):
            return Path(given)
        raw = self._raw(option)
        return Path(raw) if raw else default

    def number(self, option: str, given: float | None, *, default: float,
               maximum: float = math.inf, unit: str = "") -> float:
        """A finite number above zero (and at most ``maximum``), e.g. seconds."""
        expected = f"a positive finite number{unit}" + \
            (f" of at most {maximum:g}" if maximum != math.inf else "")
        if given is not None:
            if isinstance(given, bool) or not isinstance(given, (int, float)):
                raise self._refuse(option, expected, given, given=True)
            value = float(given)
        elif (raw := self._raw(option)) is not None:
            try:
                value = _parse_float(raw, positive=True)
            except _Invalid:
                raise self._refuse(option, expected, raw) from None
        else:
            return default
        if not (math.isfinite(value) and 0 < value <= maximum):
            raise self._refuse(option, expected, given if given is not None else value,
                               given=given is not None)
        return value

    def integer(self, option: str, given: int | None, *, default: int,
                minimum: int = 1) -> int:
        """A whole number of at least ``minimum``."""
        expected = f"an integer of at least {minimum}"
        if given is not None:
            if isinstance(given, bool) or not isinstance(given, int) or given < minimum:
                raise self._refuse(option, expected, given, given=True)
            return given
        raw = self._raw(option)
        if raw is None:
            return default
        try:
            return _parse_int(raw, minimum)
        except _Invalid:
            raise self._refuse(option, expected, raw) from None

    def switch(self, option: str, given: bool | None, *, default: bool) -> bool:
        """``True`` or ``False`` (from the environment: ``true``/``1``, ``false``/``0``)."""
        if given is not None:
            if not isinstance(given, bool):
                raise self._refuse(option, "true or false", given, given=True)
            return given
        raw = self._raw(option)
        if raw is None:
            return default
        try:
            return _parse_bool(raw)
        except _Invalid as exc:
            raise self._refuse(option, exc.expected, raw) from None
