"""Routing: a table of ``(method, pattern, handler)`` rows, matched in order.

A pattern is a path with parameters: ``{name}`` takes one segment, ``{name:REGEX}`` what
the expression matches (``{tail:.*}``, slashes included). The method ``*`` matches any.
The first row whose pattern and method both match serves the request; when patterns
match but no method does, the answer is a 405 naming the methods that would have (a
service may answer that as its own unknown route instead). Parameters are taken from
the raw path, then percent-decoded, so an encoded slash stays inside its parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

import attrs

from provider_sdk_emulators.kit.http import Handler

__all__ = ["Found", "Router", "compile_pattern"]

_PARAM = re.compile(r"\{(\w+)(?::([^{}]*(?:\{[^{}]*\}[^{}]*)*))?\}")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The expression that matches a whole path against ``pattern``."""
    parts, last = [], 0
    for match in _PARAM.finditer(pattern):
        parts.append(re.escape(pattern[last:match.start()]))
        parts.append(f"(?P<{match.group(1)}>{match.group(2) or '[^/]+'})")
        last = match.end()
    parts.append(re.escape(pattern[last:]))
    return re.compile("".join(parts))


@attrs.frozen
class Found:
    """What a path resolved to: the handler and its path parameters, or, when no row
    serves the method, ``handler`` ``None`` and the methods that would (empty when no
    pattern matched at all: a 404)."""

    handler: Handler | None
    params: dict[str, str] = attrs.field(factory=dict)
    allowed: tuple[str, ...] = ()


class Router:
    """An ordered table of routes."""

    def __init__(self, routes: Iterable[tuple[str, str, Handler]] = ()) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        for method, pattern, handler in routes:
            self.add(method, pattern, handler)

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        """Add a row after the others: ``method`` (or ``*``), ``pattern``, ``handler``."""
        self._routes.append((method.upper(), compile_pattern(pattern), handler))

    def resolve(self, method: str, path: str) -> Found:
        """The first row that serves ``method`` on ``path``; see :class:`Found`."""
        allowed: list[str] = []
        for row_method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if row_method in ("*", method):
                return Found(handler, {k: unquote(v) for k, v in match.groupdict().items()})
            if row_method not in allowed:
                allowed.append(row_method)
        return Found(None, allowed=tuple(sorted(allowed)))
