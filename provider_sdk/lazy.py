"""Names a package exports but imports only when first used, so that importing it (and
``psdk --help``, and reading a plugin's declared capabilities) stays cheap: the core
package and each provider plugin's package use it for their classes."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, sources: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: a name in ``sources`` is imported
    from the module ``sources[name]`` the first time it is asked for, then kept in the
    package's namespace; any other name is an ``AttributeError``.

    Use it as ``__getattr__ = lazy_exports(__name__, {"Name": "package.module"})``, with
    the same names imported under ``TYPE_CHECKING`` for type checkers.
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
