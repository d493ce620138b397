"""Opening a binding store from a URL: the one module that knows every store.

The stores derive from :class:`~provider_sdk.manager.store.BindingStore`; this module
picks one by the URL's scheme, so the base class never imports the stores. Each store
imports its driver only when constructed.
"""

from __future__ import annotations

import os

from provider_sdk.errors import ConfigError, InvalidInput
from provider_sdk.manager.postgres_store import PostgresStore
from provider_sdk.manager.redis_store import RedisStore
from provider_sdk.manager.sqlite_store import SQLiteStore
from provider_sdk.manager.store import BindingStore, MemoryStore, _safe, default_store_path

__all__ = ["open_store"]


def open_store(url: str | None = None) -> BindingStore:
    """A store from a URL: ``memory:``, ``sqlite:///ABS/PATH`` (or a plain file path),
    ``redis://...`` / ``rediss://...``, or ``postgresql://...``.

    ``None`` reads ``PSDK_MANAGER_STORE``; unset, it is the default SQLite file
    (:func:`default_store_path`).

    Raises:
        ConfigError: the URL's scheme is not one of those.
    """
    url = url or os.environ.get("PSDK_MANAGER_STORE") or ""
    if not url:
        return SQLiteStore(default_store_path())
    if url == "memory:":
        return MemoryStore()
    scheme, sep, rest = url.partition("://")
    if not sep:
        if url.startswith("sqlite:"):
            return SQLiteStore(url.removeprefix("sqlite:"))
        if ":" in url.split("/", 1)[0]:
            raise ConfigError(f"store URL {_safe(url)!r}: unknown scheme; use memory:, "
                              "sqlite:///PATH, redis://... or postgresql://...")
        return SQLiteStore(url)
    if scheme == "sqlite":
        if not rest.startswith("/"):
            raise InvalidInput(f"store URL {url!r}: sqlite:/// needs an absolute path")
        return SQLiteStore(rest)
    if scheme in ("redis", "rediss", "unix"):
        return RedisStore(url)
    if scheme in ("postgres", "postgresql"):
        return PostgresStore(url)
    raise ConfigError(f"store URL {_safe(url)!r}: unknown scheme {scheme!r}; use memory:, "
                      "sqlite:///PATH, redis://... or postgresql://...")
