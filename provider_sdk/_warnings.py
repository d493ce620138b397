"""Warnings that name the caller's line, however deep in the SDK they are raised.

A warning raised inside a role, under the base's hooks, an ``async with`` and the event
loop, names the first frame outside this SDK, its provider plugins and the async
machinery between them: the user's line that called the SDK, found by walking the
stack rather than by counting frames that a refactoring moves.
"""

from __future__ import annotations

import sys
import warnings

__all__ = ["warn_caller"]

#: Top-level modules whose frames stand between a user's call and the warning.
_BETWEEN = frozenset({"anyio", "asyncio", "contextlib", "sniffio", "trio", "threading",
                      "concurrent", "outcome"})


def _between(module: str) -> bool:
    top = module.partition(".")[0]
    return top.startswith("provider_sdk") or top in _BETWEEN


def warn_caller(message: str, category: type[Warning]) -> None:
    """Warn with ``message`` at the first frame outside the SDK and the async machinery
    (the outermost frame when every frame is inside, as on the sync facade's thread)."""
    level = 2  # the function that called this one
    frame = sys._getframe(1)
    while frame.f_back is not None and _between(str(frame.f_globals.get("__name__", ""))):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
