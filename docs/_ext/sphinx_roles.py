"""A griffe extension for the API reference: the code's docstrings use Sphinx roles.

The docstrings are Google style with reST inline markup (``:class:`~pkg.Name```,
``:meth:`name```, a paragraph ending in ``::``). mkdocstrings renders Markdown, so this
extension rewrites, in every docstring it loads:

- a role naming an object into a cross-reference, ``[`Name`][pkg.mod.Name]``, the name
  resolved in the scope of the object that carries the docstring; a name that does not
  resolve stays as code;
- a paragraph's closing ``::`` into ``:`` (the indented block after it is already a
  Markdown code block).

It only changes what the documentation shows; the code is untouched.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|data|attr|mod|exc|obj):`(?P<body>[^`]+)`")
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^>]+)>$")
_LITERAL = re.compile(r"(?<=\S)::$", re.MULTILINE)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles into mkdocs-autorefs cross-references."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader,
                  **kwargs: Any) -> None:
        _rewrite(obj)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        _rewrite(pkg)  # a top-level package gets no on_object event


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is None:
        return
    text = _ROLE.sub(lambda m: _reference(obj, m.group("body")), obj.docstring.value)
    obj.docstring.value = _LITERAL.sub(":", text)


def _reference(obj: griffe.Object, body: str) -> str:
    titled = _TITLED.match(body)
    if titled:
        title, target = titled.group("title"), titled.group("target")
    else:
        target = body
        title = body[1:].rsplit(".", 1)[-1] if body.startswith("~") else body
    target = target.lstrip("~")
    path = _resolve(obj, target)
    if path is None:
        return f"`{title}`"
    return f"[`{title}`][{path}]"


def _resolve(obj: griffe.Object, name: str) -> str | None:
    """The full path ``name`` refers to from ``obj``, or ``None``."""
    head, _, rest = name.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            base = scope.resolve(head)
        except (griffe.NameResolutionError, AttributeError, KeyError):
            scope = scope.parent
            continue
        return f"{base}.{rest}" if rest else base
    # A dotted name given in full (``pkg.mod.Name``) resolves from the top.
    return name if "." in name else None
