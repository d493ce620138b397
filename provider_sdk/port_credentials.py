"""What of a request head is a credential, and the head without it: what every relay to
a sandbox's port takes off before the server in the sandbox sees the request.

A relay checks a credential of its own (the port proxy's token, an emulated vendor's
API key, access or traffic token, or preview token) and forwards the rest of the
request. A client echoes credentials in more places than the one it was asked to send
them in: a browser that opened a URL carrying a token sends that URL again as the
``Referer`` of every page and subresource it loads, a parameter's name may come
percent-encoded, a cookie may hold a token. :class:`Credentials` says, for one relay,
what to take off: header names, cookie name prefixes, query parameter names (compared
once percent-decoded, in the target and in ``Referer``), and the credentials' values
themselves. :func:`scrub` applies it: after the named places are gone, a header that
still carries a value, as it is or percent-encoded, is dropped (a ``Referer`` is cut to
its origin first, a cookie loses only its pair), and a target that still carries one
is refused (:class:`CredentialInTarget`), since no part of it can be dropped safely.

This module knows no vendor and no connection; it never logs, reprs or raises a value.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Sequence

import attrs

from provider_sdk.secret import Secret

__all__ = ["CredentialInTarget", "Credentials", "carries", "scrub"]

_DECODINGS = 4
"""Rounds of percent-decoding a value is looked for through (``%2541`` is ``%41`` is
``A``): more than any client echoes."""


def _secrets(values: Iterable[str]) -> tuple[Secret, ...]:
    return tuple(Secret(value) for value in values if value)


def _names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)


def _exact(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


def _prefixes(prefixes: Iterable[str]) -> tuple[str, ...]:
    return tuple(prefix.lower() for prefix in prefixes)


@attrs.frozen(kw_only=True)
class Credentials:
    """The credentials one relay takes off a request before it forwards it."""

    headers: frozenset[str] = attrs.field(default=frozenset(), converter=_names)
    """Header names (any case) dropped whatever their value."""
    cookies: tuple[str, ...] = attrs.field(default=(), converter=_prefixes)
    """Prefixes (any case) of the cookie names dropped from ``Cookie``."""
    params: frozenset[str] = attrs.field(default=frozenset(), converter=_exact)
    """Query parameter names, compared percent-decoded, dropped from the target and
    from ``Referer``."""
    values: tuple[Secret, ...] = attrs.field(default=(), converter=_secrets)
    """The credentials themselves: no header, cookie, parameter or target that carries
    one, as it is or percent-encoded, is forwarded."""


class CredentialInTarget(ValueError):
    """The request's target carries a credential outside a parameter that can be taken
    off (in its path, say): it cannot be forwarded at all."""


def _decodings(text: str) -> list[str]:
    """``text`` and its percent-decodings, until one changes nothing."""
    seen = [text]
    for _ in range(_DECODINGS):
        decoded = urllib.parse.unquote(seen[-1], encoding="latin-1")
        if decoded == seen[-1]:
            break
        seen.append(decoded)
    return seen


def carries(text: str, values: Sequence[Secret]) -> bool:
    """Whether ``text`` holds any of ``values``, as it is or percent-encoded."""
    if not values:
        return False
    forms = _decodings(text)
    return any(value.reveal() in form for value in values for form in forms)


def _param_name(piece: str) -> str:
    return urllib.parse.unquote_plus(piece.partition("=")[0], encoding="latin-1")


def _without_params(query: str, credentials: Credentials) -> str:
    """``query`` (no ``?``) without the parameters that are credentials: named in
    ``credentials.params`` once decoded, or whose value carries a credential. The
    others are kept as they came."""
    kept = [piece for piece in query.split("&")
            if not piece or (_param_name(piece) not in credentials.params
                             and not carries(piece, credentials.values))]
    return "&".join(kept)


def _target(target: str, credentials: Credentials) -> str:
    path, sep, query = target.partition("?")
    if sep:
        query = _without_params(query, credentials)
        target = path + (f"?{query}" if query else "")
    if carries(target, credentials.values):
        raise CredentialInTarget("the request's target carries a credential")
    return target


def _referer(value: str, credentials: Credentials) -> str | None:
    """A ``Referer`` without its credentials: their parameters taken off; cut to its
    origin if it still carries one; ``None`` if even that does."""
    try:
        split = urllib.parse.urlsplit(value)
    except ValueError:  # not a URL: where a credential would sit in it cannot be told
        return None
    query = _without_params(split.query, credentials)
    kept = value if query == split.query else urllib.parse.urlunsplit(
        (split.scheme, split.netloc, split.path, query, ""))
    if not carries(kept, credentials.values):
        return kept
    origin = f"{split.scheme}://{split.netloc}/"
    return None if carries(origin, credentials.values) else origin


def _cookie(value: str, credentials: Credentials) -> str | None:
    pairs = [pair.strip() for pair in value.split(";")]
    kept = [pair for pair in pairs if pair
            and not pair.partition("=")[0].strip().lower().startswith(credentials.cookies)
            and not carries(pair, credentials.values)]
    return "; ".join(kept) if kept else None


def scrub(target: str, headers: Sequence[tuple[str, str]], credentials: Credentials
          ) -> tuple[str, list[tuple[str, str]]]:
    """The request's target and headers as the sandbox may get them.

    Args:
        target: the request target (origin form, or absolute form).
        headers: the request's headers, names as spelled, in order.
        credentials: what to take off.

    Raises:
        CredentialInTarget: the target carries a credential outside a parameter.
    """
    kept: list[tuple[str, str]] = []
    for name, value in headers:
        lower = name.lower()
        if lower in credentials.headers:
            continue
        edited: str | None = value
        if lower == "cookie":
            edited = _cookie(value, credentials)
        elif lower == "referer":
            edited = _referer(value, credentials)
        if edited is not None and not carries(f"{name}: {edited}", credentials.values):
            kept.append((name, edited))
    return _target(target, credentials), kept
