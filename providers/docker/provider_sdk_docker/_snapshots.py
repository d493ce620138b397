"""Snapshots of Docker sandboxes: ``docker commit`` of the container, plus the files of its
bounded directories (which a commit leaves out, being volumes), never the environment
given at create."""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from provider_sdk import errors
from provider_sdk.models import Snapshot
from provider_sdk_docker import _bounded
from provider_sdk_docker._engine import Engine
from provider_sdk_docker._labels import (
    LABEL,
    LABEL_CREATED,
    LABEL_SNAPSHOT,
    LABEL_SNAPSHOT_SOURCE,
    SNAPSHOT_REPOSITORY,
    now,
)
from provider_sdk_docker._processes import container_name

__all__ = ["SnapshotsMixin"]


class SnapshotsMixin:
    """The snapshot hooks of ``DockerProvider``."""

    name: ClassVar[str]
    _engine: Engine
    _bounded: _bounded.BoundedDirs | None

    if TYPE_CHECKING:
        async def _inspect(self, sandbox_id: str) -> dict[str, Any]: ...
        async def _settle(self, sandbox_id: str) -> None: ...

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        data = await self._inspect(sandbox_id)
        snapshot_id = secrets.token_hex(6)
        created = now()
        labels = {LABEL_SNAPSHOT: snapshot_id, LABEL_SNAPSHOT_SOURCE: sandbox_id,
                  LABEL_CREATED: created.isoformat()}
        env = await self._snapshot_env(data)
        dirs = _bounded.describe((data["Config"].get("Labels") or {}).get(
            _bounded.LABEL_BOUNDED, "[]"))
        if dirs and self._bounded is not None:
            image = await self._snapshot_bounded(data, snapshot_id, labels, env, dirs)
        else:
            image = await self._engine.api(
                "commit", container_name(sandbox_id), repository=SNAPSHOT_REPOSITORY,
                tag=snapshot_id, conf={"Labels": labels, "Env": env}, pause=True,
                what=sandbox_id, sandbox_id=sandbox_id)
        if data["State"]["Status"] == "running":
            # The commit paused and unpaused the container: the Engine's word on its
            # state is final once it has caught up with both.
            await self._settle(sandbox_id)
        return Snapshot(id=snapshot_id, provider=self.name, sandbox_id=sandbox_id,
                        captures={"filesystem"}, created_at=created,
                        extra={"image": f"{SNAPSHOT_REPOSITORY}:{snapshot_id}",
                               "image_id": image["Id"]})

    async def _snapshot_bounded(self, data: Mapping[str, Any], snapshot_id: str,
                                labels: dict[str, str], env: builtins.list[str],
                                dirs: tuple[str, ...]) -> dict[str, Any]:
        """Snapshot a sandbox with bounded directories: its container committed, then
        their files copied into the image (a commit leaves volumes out), all while it
        is frozen."""
        assert self._bounded is not None
        sandbox_id = data["Config"]["Labels"][LABEL]
        name = container_name(sandbox_id)
        frozen = data["State"]["Status"] == "paused"
        if not frozen:
            await self._engine.api("pause", name, what=sandbox_id, sandbox_id=sandbox_id)
        try:
            base = await self._engine.api("commit", name, conf={"Env": env}, pause=False,
                                          what=sandbox_id, sandbox_id=sandbox_id)
            staging = await self._engine.api("create_container", base["Id"],
                                             network_disabled=True, what=sandbox_id)
            try:
                places = await self._bounded.carry(sandbox_id, staging["Id"], snapshot_id,
                                                   dirs)
                labels[_bounded.LABEL_CARRIED] = _bounded.carried_label(snapshot_id, places)
                image: dict[str, Any] = await self._engine.api(
                    "commit", staging["Id"], repository=SNAPSHOT_REPOSITORY, tag=snapshot_id,
                    conf={"Labels": labels, "Env": env}, pause=False, what=sandbox_id,
                    sandbox_id=sandbox_id)
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                    await self._engine.api("remove_container", staging["Id"], force=True)
        finally:
            if not frozen:
                with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                    await self._engine.api("unpause", name, what=sandbox_id,
                                           sandbox_id=sandbox_id)
        return image

    async def _snapshot_env(self, container: Mapping[str, Any]) -> builtins.list[str]:
        """The environment a snapshot's image keeps: its image's, never the one given at
        create.

        The Engine merges the container's variables into a commit's ``Env`` unless a
        variable of the same name is there, so every variable given at create and not in
        the image is listed by name alone: the image keeps the name, not the value, and
        the Engine drops such an entry when it starts a container.
        """
        image = await self._engine.api("inspect_image", container["Image"], kind="image",
                                       what=str(container["Image"]))
        original = list((image.get("Config") or {}).get("Env") or ())
        names = {entry.partition("=")[0] for entry in original}
        given = [entry.partition("=")[0] for entry in container["Config"].get("Env") or ()]
        return original + sorted({n for n in given if n not in names})

    async def _list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        wanted = [LABEL_SNAPSHOT]
        if sandbox_id is not None:
            wanted.append(f"{LABEL_SNAPSHOT_SOURCE}={sandbox_id}")
        images = await self._engine.api("images", filters={"label": wanted})
        found = []
        for image in images:
            labels = image.get("Labels") or {}
            snapshot_id = labels.get(LABEL_SNAPSHOT, "")
            if f"{SNAPSHOT_REPOSITORY}:{snapshot_id}" not in (image.get("RepoTags") or ()):
                continue  # an image built on a snapshot inherits its labels
            created = labels.get(LABEL_CREATED)
            found.append(Snapshot(
                id=snapshot_id, provider=self.name,
                sandbox_id=labels.get(LABEL_SNAPSHOT_SOURCE), captures={"filesystem"},
                created_at=dt.datetime.fromisoformat(created) if created else None,
                extra={"image": f"{SNAPSHOT_REPOSITORY}:{snapshot_id}",
                       "image_id": image["Id"]}))
        return sorted(found, key=lambda s: (s.created_at or now(), s.id))

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        image = f"{SNAPSHOT_REPOSITORY}:{snapshot_id}"
        await self._engine.api("inspect_image", image, kind="snapshot", what=snapshot_id)
        # force: sandboxes created from it keep their layers; only the snapshot goes.
        await self._engine.api("remove_image", image, force=True, kind="snapshot",
                               what=snapshot_id)
