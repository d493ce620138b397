"""A request head on the port proxy (:mod:`provider_sdk.ports`): parsed, its token found,
its origin checked, and the head the sandbox gets instead.

The token may come in the query (``psdk_token``, its name compared percent-decoded), in
``X-Psdk-Token``, as ``Authorization: Bearer`` or in a ``psdk_token*`` cookie. The head
forwarded has none of them, nor the token anywhere else a client echoes it (``Referer``
above all): :mod:`provider_sdk.port_credentials` takes them off.

Every exposed port is on 127.0.0.1, one site for a browser whatever the port, so the
cookie (``SameSite=Strict``) goes with any request a page of another port makes. The
proxy refuses what a page of another origin sends, as far as a browser says where a
request comes from: a request whose ``Origin`` is not the origin it is sent to (its
``Host``, scheme aside), and a request that ``Sec-Fetch-Site`` says comes from another
origin, unless it is a navigation (a link followed, a frame loaded) with ``GET`` or
``HEAD``. A request that says neither (curl, a script) is not a page's, and passes.

This module never logs, reprs or raises a token.
"""

from __future__ import annotations

import hmac
import urllib.parse
from collections.abc import Sequence

import attrs

from provider_sdk._chunked import RequestBody
from provider_sdk._port_exchange import COOKIE_PREFIX, framing_problem
from provider_sdk.port_credentials import Credentials, scrub

__all__ = ["TOKEN_HEADER", "TOKEN_PARAM", "Request", "credentials", "shows_token"]

TOKEN_PARAM = "psdk_token"
TOKEN_HEADER = b"x-psdk-token"
_NAVIGATION_METHODS = (b"GET", b"HEAD")
_NOT_NAVIGATIONS = (b"object", b"embed")
"""Destinations of a navigation mode that load into the page that asks (a plugin)."""


def credentials(tokens: Sequence[str]) -> Credentials:
    """What the proxy takes off every request it forwards: its header, its cookies, its
    query parameter, and ``tokens`` (every token of the proxy) wherever they are."""
    return Credentials(headers={TOKEN_HEADER.decode()}, cookies=(COOKIE_PREFIX,),
                       params={TOKEN_PARAM}, values=tokens)


def _query_token(target: bytes, want: bytes) -> bool:
    query = target.partition(b"?")[2].decode("latin-1")
    return any(param == TOKEN_PARAM and hmac.compare_digest(given.encode("latin-1"), want)
               for param, given in urllib.parse.parse_qsl(query, keep_blank_values=True,
                                                          encoding="latin-1"))


def _header_token(name: bytes, value: bytes, want: bytes) -> bool:
    lower = name.lower()
    if lower == TOKEN_HEADER:
        return hmac.compare_digest(value, want)
    if lower == b"authorization":
        scheme, _, credential = value.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), want)
    if lower == b"cookie":
        for pair in value.split(b";"):
            cookie, _, credential = pair.strip().partition(b"=")
            if cookie.startswith(COOKIE_PREFIX.encode()) and \
                    hmac.compare_digest(credential, want):
                return True
    return False


def shows_token(line: bytes, request_line: bool, token: str) -> bool:
    """Whether one line of a head (the request line, or a header line) carries the
    token where the proxy takes it."""
    want = token.encode()
    if request_line:
        parts = line.split(b" ")
        return len(parts) == 3 and _query_token(parts[1], want)
    name, sep, value = line.partition(b":")
    return bool(sep) and _header_token(name, value.strip(), want)


def _same_origin(origin: bytes, host: bytes) -> bool:
    """Whether ``origin`` (``scheme://host[:port]``) names the host and port of a
    ``Host`` header, for a scheme a browser may speak to the proxy in."""
    try:
        seen = urllib.parse.urlsplit(origin.decode("latin-1").strip())
        sent = urllib.parse.urlsplit("//" + host.decode("latin-1").strip())
        if seen.scheme not in ("http", "https") or not seen.hostname or seen.path:
            return False
        default = 443 if seen.scheme == "https" else 80
        return (seen.hostname, seen.port or default) == (sent.hostname, sent.port or default)
    except ValueError:  # a port that is not a number, a bracket left open
        return False


@attrs.define
class Request:
    """A request head as the proxy reads it."""

    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]

    @classmethod
    def parse(cls, head: bytes) -> Request | None:
        """The head's parts, or ``None`` if it is not HTTP/1's."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return None
        headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
                return None
            headers.append((name, value.strip()))
        return cls(parts[0], parts[1], parts[2], headers)

    @property
    def upgrade(self) -> bool:
        """Whether the request asks to switch protocols (a WebSocket)."""
        return bool(self.values(b"upgrade"))

    def values(self, name: bytes) -> list[bytes]:
        """Every value of the header ``name`` (lower case), in order."""
        return [v for n, v in self.headers if n.lower() == name]

    def body(self) -> RequestBody | str:
        """The body that follows the head (after it, an upgrade's bytes), or why its
        framing is refused: a body framed two ways, or with codings that do not end in
        ``chunked``, is how a second request is smuggled past a proxy."""
        problem = framing_problem(self.headers)
        if problem is not None:
            return f"ambiguous request body: {problem}"
        codings = [coding.strip().lower() for value in self.values(b"transfer-encoding")
                   for coding in value.split(b",")]
        if codings:
            if codings[-1] != b"chunked" or codings.count(b"chunked") > 1:
                return "ambiguous request body: a Transfer-Encoding not ending in chunked"
            return RequestBody(chunked=True)
        lengths = self.values(b"content-length")
        return RequestBody(int(lengths[0].split(b",")[0]) if lengths else 0)

    def authenticate(self, token: str) -> bool | None:
        """``True`` if the token came in the query, ``False`` if in a header or
        cookie, ``None`` if it did not come (or a wrong one did)."""
        want = token.encode()
        if _query_token(self.target, want):
            return True
        if any(_header_token(name, value, want) for name, value in self.headers):
            return False
        return None

    def cross_origin(self) -> str | None:
        """Why a browser's page of another origin sent this request, or ``None`` for a
        request that a page of the port's own origin, or no page at all, sent."""
        hosts = self.values(b"host")
        site = (self.values(b"sec-fetch-site") or [b""])[-1].lower()
        for origin in self.values(b"origin"):
            if origin.strip().lower() == b"null":  # an opaque origin: trusted only
                if site != b"same-origin":          # where the browser vouches for it
                    return "a request from a page of an opaque origin"
            elif len(hosts) != 1 or not _same_origin(origin, hosts[0]):
                return "a request from a page of another origin"
        if site and site not in (b"same-origin", b"none"):
            mode = (self.values(b"sec-fetch-mode") or [b""])[-1].lower()
            dest = (self.values(b"sec-fetch-dest") or [b""])[-1].lower()
            if mode != b"navigate" or self.method not in _NAVIGATION_METHODS \
                    or dest in _NOT_NAVIGATIONS:
                return "a request from a page of another origin"
        return None

    def forwarded(self, credentials: Credentials) -> bytes:
        """The head as the sandbox's server gets it: no ``credentials`` anywhere in it
        (the application's own ``Authorization`` and cookies stay), and ``Connection:
        close`` unless it asks for an upgrade.

        Raises:
            CredentialInTarget: the target carries a token outside ``psdk_token``.
        """
        target, headers = scrub(self.target.decode("latin-1"),
                                [(n.decode("latin-1"), v.decode("latin-1"))
                                 for n, v in self.headers], credentials)
        upgrade = self.upgrade
        out = [b" ".join((self.method, target.encode("latin-1"), self.version))]
        for name, value in headers:
            if name.lower() in ("connection", "keep-alive") and not upgrade:
                continue
            out.append(f"{name}: {value}".encode("latin-1"))
        if not upgrade:
            out.append(b"Connection: close")
        return b"\r\n".join(out) + b"\r\n\r\n"
