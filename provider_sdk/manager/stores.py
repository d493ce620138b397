"""Opening a binding store from a URL: the one module that knows every store.

The stores derive from :class:`~provider_sdk.manager.store.BindingStore`; this module
picks one by the URL's scheme, so the base class never imports the stores. Each store
imports its driver only when constructed.
"""

from __future__ import annotations

import os
import urllib.parse

from provider_sdk.errors import ConfigError, InvalidInput
from provider_sdk.manager.postgres_store import PostgresStore
from provider_sdk.manager.redis_store import RedisStore
from provider_sdk.manager.sqlite_store import SQLiteStore
from provider_sdk.manager.store import BindingStore, MemoryStore, _safe, default_store_path

__all__ = ["open_store", "store_option"]


def open_store(url: str | None = None) -> BindingStore:
    """A store from a URL: ``memory:``, ``sqlite:///ABS/PATH`` (or a plain file path),
    ``redis://...`` / ``rediss://...`` (``?prefix=P`` names the key prefix), or
    ``postgresql://...`` (``?table=T`` names the table); the other query parameters go
    to the driver.

    ``None`` reads ``PSDK_MANAGER_STORE``; unset, it is the default SQLite file
    (:func:`default_store_path`).

    Raises:
        ConfigError: the URL's scheme is not one of those.
        InvalidInput: ``prefix`` or ``table`` is given twice, or is malformed.
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
        rest_url, prefix = store_option(url, "prefix")
        return RedisStore(rest_url) if prefix is None else RedisStore(rest_url, prefix=prefix)
    if scheme in ("postgres", "postgresql"):
        rest_url, table = store_option(url, "table")
        return PostgresStore(rest_url) if table is None else PostgresStore(rest_url,
                                                                           table=table)
    raise ConfigError(f"store URL {_safe(url)!r}: unknown scheme {scheme!r}; use memory:, "
                      "sqlite:///PATH, redis://... or postgresql://...")


def store_option(url: str, name: str) -> tuple[str, str | None]:
    """``url`` without its query parameter ``name``, and that parameter's value (or
    ``None``)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    values = [v for k, v in query if k == name]
    if len(values) > 1:
        raise InvalidInput(f"store URL {_safe(url)!r}: {name} is given {len(values)} times")
    if values and not values[0]:
        raise InvalidInput(f"store URL {_safe(url)!r}: {name} is empty")
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != name])
    return parts._replace(query=rest).geturl(), values[0] if values else None
