"""Labels (sandbox metadata): what a key and a value may hold, checked once for every
provider, and which labels are internal.

A label key is 1 to :data:`MAX_KEY` characters with no ``=`` (``psdk ls --label k=v``
and several backends' filters split on it) and no control character; a value is at most
:data:`MAX_VALUE` characters with no control character; a sandbox has at most
:data:`MAX_LABELS` labels. Anything else is :class:`~provider_sdk.errors.InvalidInput`
naming the key.

Internal labels are those a provider sets for its own bookkeeping (its
:attr:`~provider_sdk.provider.SandboxProvider.internal_labels`): the core refuses them in
what a caller passes and removes them from every
:attr:`~provider_sdk.models.SandboxInfo.metadata` it hands out.

This module owns the rules; it must not know any provider.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Mapping

from provider_sdk.errors import InvalidInput

__all__ = ["MAX_KEY", "MAX_LABELS", "MAX_VALUE", "check_labels", "visible"]

MAX_KEY = 128
"""Longest label key, in characters."""
MAX_VALUE = 1024
"""Longest label value, in characters."""
MAX_LABELS = 64
"""Most labels on one sandbox (or in one ``list`` filter)."""

_SHOWN = 40  # characters of an offending key an error message quotes


def check_labels(labels: Mapping[str, str], *, field: str = "metadata",
                 internal: Collection[str] = (), provider: str | None = None) -> None:
    """Raise :class:`~provider_sdk.errors.InvalidInput` naming the first key that breaks
    the rules above, or that is one of ``internal`` (reserved by the provider)."""
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"{field}: {len(labels)} labels, at most {MAX_LABELS} allowed",
                           provider=provider)
    for key, value in labels.items():
        problem = _key_problem(key) or _value_problem(value)
        if problem is None and key in internal:
            problem = f"is reserved by the {provider} provider"
        if problem is not None:
            raise InvalidInput(f"{field}: label {_quote(key)} {problem}", provider=provider)


def visible(labels: Mapping[str, str], internal: Collection[str]) -> dict[str, str]:
    """``labels`` without the ``internal`` ones."""
    return {k: v for k, v in labels.items() if k not in internal}


def _key_problem(key: object) -> str | None:
    if not isinstance(key, str):
        return f"has a key of type {type(key).__name__}, not str"
    if not key:
        return "has an empty key"
    if "=" in key:
        return "has '=' in its key"
    if _has_control(key):
        return "has a control character in its key"
    if len(key) > MAX_KEY:
        return f"has a key of {len(key)} characters, at most {MAX_KEY} allowed"
    return None


def _value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"has a value of type {type(value).__name__}, not str"
    if _has_control(value):
        return "has a control character in its value"
    if len(value) > MAX_VALUE:
        return f"has a value of {len(value)} characters, at most {MAX_VALUE} allowed"
    return None


def _has_control(text: str) -> bool:
    # Line and paragraph separators break lines in a terminal as a newline does. A
    # printable string has none of them (nor any other character of Unicode's Other or
    # Separator classes but the space): the common case, without a look at each one.
    return not text.isprintable() and any(
        unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)


def _quote(key: object) -> str:
    """The key for an error message: escaped, and shortened if long."""
    text = repr(key)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "...'"
