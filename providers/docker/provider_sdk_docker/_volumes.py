"""Volumes of ``DockerProvider`` (:class:`DockerVolumes`, the ``volumes`` part of the
control plane): Docker named volumes labelled ``psdk.volume``; no other volume on the
Engine is listed or touched."""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from provider_sdk import errors
from provider_sdk.models import Volume
from provider_sdk_docker._labels import LABEL_CREATED, LABEL_VOLUME, now
from provider_sdk_docker._shared import Shared

__all__ = ["VOLUME_NAME", "DockerVolumes"]

VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class DockerVolumes:
    """Creates, finds, lists and deletes one Engine's volumes made by this SDK.

    Args:
        shared: the provider's Engine.
    """

    def __init__(self, shared: Shared) -> None:
        self._engine = shared.engine
        self.name = shared.name

    async def create_volume(self, name: str) -> Volume:
        """Create a volume; ``Conflict`` if the Engine has one of that name."""
        if not VOLUME_NAME.fullmatch(name):
            raise errors.InvalidInput(f"volume name {name!r}: use letters, digits, '_', '.', "
                                      "'-', starting with a letter or digit",
                                      provider=self.name)
        with contextlib.suppress(errors.VolumeNotFound):
            await self._engine.api("inspect_volume", name, kind="volume", what=name)
            raise errors.Conflict(f"a volume named {name!r} exists", provider=self.name)
        data = await self._engine.api(
            "create_volume", name, labels={LABEL_VOLUME: "1", LABEL_CREATED: now().isoformat()},
            kind="volume", what=name)
        return self._to_volume(data)

    async def get_volume(self, name: str) -> Volume:
        """A volume made by this SDK; ``VolumeNotFound`` for any other."""
        data = await self._engine.api("inspect_volume", name, kind="volume", what=name)
        if (data.get("Labels") or {}).get(LABEL_VOLUME) != "1":
            raise errors.VolumeNotFound(f"no volume {name!r} made by this SDK",
                                        provider=self.name)
        return self._to_volume(data)

    async def list_volumes(self) -> builtins.list[Volume]:
        """Every volume made by this SDK, by name."""
        data = await self._engine.api("volumes", filters={"label": LABEL_VOLUME})
        return sorted((self._to_volume(v) for v in data.get("Volumes") or ()),
                      key=lambda v: v.name)

    async def delete_volume(self, name: str) -> None:
        """Delete a volume made by this SDK (the Engine refuses one in use)."""
        await self.get_volume(name)
        await self._engine.api("remove_volume", name, kind="volume", what=name)

    def _to_volume(self, data: Mapping[str, Any]) -> Volume:
        created = (data.get("Labels") or {}).get(LABEL_CREATED)
        return Volume(id=data["Name"], name=data["Name"], provider=self.name,
                      created_at=dt.datetime.fromisoformat(created) if created else None,
                      extra={"driver": data.get("Driver"), "mountpoint": data.get("Mountpoint")})
