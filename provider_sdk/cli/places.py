"""Where the sandboxes and snapshots ``psdk`` made live: which provider holds each id.

``psdk create --provider docker`` leaves a small record in the psdk home, so that
``psdk exec ID``, ``kill ID``, ``info ID``... find the sandbox by its id alone, in any
later process, after a restart too. Snapshots likewise (``psdk snapshot create``). Layout::

    <home>/cli/places/sandbox/<sha256 of the id>.json   {"id": ..., "provider": ...}
    <home>/cli/places/snapshot/<sha256 of the id>.json

One file per id, written to a temporary name and renamed into place, so concurrent
``psdk`` processes never see half a record and need no lock. A record is a hint, never
the truth: the provider it names is asked first, the configured default next, and a
record whose provider no longer knows the id is dropped. A record that cannot be read
is ignored. This module owns the records and nothing else; it never opens a provider.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Literal

__all__ = ["Kind", "Places", "default_places"]

Kind = Literal["sandbox", "snapshot"]
"""What an id names."""

_MAX_RECORD = 4096


class Places:
    """The records under one directory (``<home>/cli/places``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _file(self, kind: Kind, ident: str) -> Path:
        digest = hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()
        return self.root / kind / f"{digest}.json"

    def remember(self, kind: Kind, ident: str, provider: str) -> None:
        """Record that ``provider`` holds the ``kind`` called ``ident``."""
        target = self._file(kind, ident)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
        try:
            partial.write_text(json.dumps({"id": ident, "provider": provider}))
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()

    def provider_of(self, kind: Kind, ident: str) -> str | None:
        """The provider recorded for ``ident``, or ``None`` (no record, or a broken one)."""
        try:
            with self._file(kind, ident).open("rb") as f:
                data = json.loads(f.read(_MAX_RECORD))
        except (OSError, ValueError):
            return None
        if not (isinstance(data, dict) and data.get("id") == ident
                and isinstance(data.get("provider"), str)):
            return None
        provider: str = data["provider"]
        return provider

    def providers(self, kind: Kind) -> set[str]:
        """Every provider some record of ``kind`` names (unreadable records skipped)."""
        found: set[str] = set()
        with contextlib.suppress(OSError):
            for record in (self.root / kind).glob("*.json"):
                try:
                    with record.open("rb") as f:
                        data = json.loads(f.read(_MAX_RECORD))
                except (OSError, ValueError):
                    continue
                if isinstance(data, dict) and isinstance(data.get("provider"), str):
                    found.add(data["provider"])
        return found

    def forget(self, kind: Kind, ident: str) -> None:
        """Drop the record of ``ident``, if any."""
        with contextlib.suppress(FileNotFoundError):
            self._file(kind, ident).unlink()


def default_places() -> Places:
    """The records in the psdk home (``PSDK_HOME``, else the per-user data directory)."""
    from provider_sdk.config import default_home

    return Places(default_home() / "cli" / "places")
