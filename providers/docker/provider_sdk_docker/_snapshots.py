"""Snapshots of Docker sandboxes (:class:`DockerSnapshots`, the ``snapshot.filesystem`` part
of the control plane): ``docker commit`` of the container, plus the files of its bounded
directories (which a commit leaves out, being volumes), never the environment given at
create."""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import secrets
from collections.abc import Mapping
from typing import Any

import anyio

from provider_sdk import errors
from provider_sdk.models import Snapshot
from provider_sdk_docker import _bounded
from provider_sdk_docker._commands import DockerCommands
from provider_sdk_docker._labels import (
    LABEL,
    LABEL_CREATED,
    LABEL_SNAPSHOT,
    LABEL_SNAPSHOT_SOURCE,
    SNAPSHOT_REPOSITORY,
    container_name,
    now,
)
from provider_sdk_docker._shared import Shared

__all__ = ["DockerSnapshots"]


class DockerSnapshots:
    """Takes, lists and deletes snapshots of one ``DockerProvider``'s sandboxes.

    Args:
        shared: the provider's Engine, settings and caches.
        commands: its commands role, which tells when the Engine has settled.
    """

    def __init__(self, shared: Shared, commands: DockerCommands) -> None:
        self._shared = shared
        self._engine = shared.engine
        self._commands = commands
        self.name = shared.name

    async def snapshot(self, sandbox_id: str) -> Snapshot:
        """Commit the sandbox's container (and its bounded directories' files)."""
        data = await self._shared.inspect(sandbox_id)
        snapshot_id = secrets.token_hex(6)
        created = now()
        labels = {LABEL_SNAPSHOT: snapshot_id, LABEL_SNAPSHOT_SOURCE: sandbox_id,
                  LABEL_CREATED: created.isoformat()}
        env = await self._snapshot_env(data)
        dirs = _bounded.describe((data["Config"].get("Labels") or {}).get(
            _bounded.LABEL_BOUNDED, "[]"))
        if dirs and self._shared.bounded is not None:
            image = await self._snapshot_bounded(data, snapshot_id, labels, env, dirs)
        else:
            image = await self._engine.api(
                "commit", container_name(sandbox_id), repository=SNAPSHOT_REPOSITORY,
                tag=snapshot_id, conf={"Labels": labels, "Env": env}, pause=True,
                what=sandbox_id, sandbox_id=sandbox_id)
        if data["State"]["Status"] == "running":
            # The commit paused and unpaused the container: the Engine's word on its
            # state is final once it has caught up with both.
            await self._commands.settle(sandbox_id)
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
        bounded = self._shared.bounded
        assert bounded is not None
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
                places = await bounded.carry(sandbox_id, staging["Id"], snapshot_id, dirs)
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

    async def list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        """Snapshots, of one sandbox where ``sandbox_id`` is given."""
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

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot's image; sandboxes made from it keep their layers."""
        image = f"{SNAPSHOT_REPOSITORY}:{snapshot_id}"
        await self._engine.api("inspect_image", image, kind="snapshot", what=snapshot_id)
        # force: sandboxes created from it keep their layers; only the snapshot goes.
        await self._engine.api("remove_image", image, force=True, kind="snapshot",
                               what=snapshot_id)
