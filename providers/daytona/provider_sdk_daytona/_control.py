"""The control plane of ``DaytonaProvider``: sandboxes made, looked up, listed, killed,
stopped and started (``pause``), archived and recovered, relabelled; snapshots, the
template builder and volumes.

A create sends a token label and, retried after a 502, looks for what it made before
making another; it returns once the toolbox answers. A sandbox's state comes from
``_convert.STATES``, its info from ``_convert.to_info``. Commands, files and ports are
the other roles'; this module runs nothing inside a sandbox.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import secrets
from collections.abc import Mapping
from typing import Any

import anyio
from daytona import (
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    DaytonaConflictError,
    Image,
    ListSandboxesQuery,
)
from daytona import VolumeMount as DaytonaVolumeMount

from provider_sdk import errors
from provider_sdk.labels import check_labels
from provider_sdk.models import Resources as NeutralResources
from provider_sdk.models import SandboxInfo, SandboxSpec, SandboxState, Snapshot, Volume
from provider_sdk_daytona import _convert as convert
from provider_sdk_daytona._calls import DaytonaCalls, translate
from provider_sdk_daytona._errors import PROVIDER
from provider_sdk_daytona._templates import DaytonaTemplates

__all__ = ["EXTENSIONS", "DaytonaControl"]

EXTENSIONS = ("daytona.image", "daytona.name", "daytona.public",
              "daytona.auto_archive_interval")


class DaytonaControl:
    """The control plane role of ``DaytonaProvider`` (a
    :class:`provider_sdk.roles.ControlPlane`), with its parts: pausing, snapshots,
    labels, templates and volumes."""

    name = PROVIDER

    def __init__(self, calls: DaytonaCalls) -> None:
        self._calls = calls

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        params = await self._params(spec)
        not_found: type[errors.NotFound] = (
            errors.SnapshotNotFound if spec.snapshot is not None else
            errors.TemplateNotFound if spec.template is not None else errors.SandboxNotFound)
        token = secrets.token_hex(8)
        params.labels = {**(params.labels or {}), convert.CREATE_LABEL: token}

        tries = 0

        async def create_once() -> AsyncSandbox:
            nonlocal tries
            tries += 1
            if tries > 1:
                # The last try's 502 may have come after Daytona made the sandbox: never
                # make a second one.
                query = ListSandboxesQuery(labels={convert.CREATE_LABEL: token})
                made = [found async for found in self._calls.client.list(query)]
                if made:
                    await made[0].wait_for_sandbox_start(timeout=self._calls.create_timeout)
                    return made[0]
            return await self._calls.client.create(params, timeout=self._calls.create_timeout)

        with translate(not_found=not_found):
            sandbox = await self._calls.retrying(create_once)
        self._calls.sandboxes[sandbox.id] = sandbox
        try:
            await self._calls.probe(sandbox)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.kill(sandbox.id)
            raise
        return convert.to_info(sandbox)

    async def _params(self, spec: SandboxSpec) -> (
            CreateSandboxFromSnapshotParams | CreateSandboxFromImageParams):
        unknown = sorted(k for k in spec.extensions
                         if k.startswith("daytona.") and k not in EXTENSIONS)
        if unknown:
            raise errors.InvalidInput(f"unknown extensions {unknown}; Daytona's are "
                                      f"{', '.join(EXTENSIONS)}", provider=self.name)
        labels = dict(spec.metadata)
        if spec.cwd is not None:
            labels[convert.CWD_LABEL] = spec.cwd
        idle = spec.lifecycle.idle_timeout
        kill_when_idle = idle is not None and spec.lifecycle.on_idle == "kill"
        common: dict[str, Any] = {
            "env_vars": dict(spec.env), "labels": labels,
            "volumes": [await self._mount(m) for m in spec.volumes],
            # Never Daytona's surprise 15-minute auto-stop: off unless asked for. Idle
            # "pause" is auto-stop; idle "kill" is auto-stop, then deletion at once.
            "auto_stop_interval": math.ceil(idle / 60) if idle is not None else 0,
            "auto_delete_interval": 0 if kill_when_idle else -1,
            **convert.network_fields(spec.network),
        }
        ext = spec.extensions
        if "daytona.name" in ext:
            common["name"] = str(ext["daytona.name"])
        if "daytona.public" in ext:
            common["public"] = bool(ext["daytona.public"])
        if "daytona.auto_archive_interval" in ext:
            common["auto_archive_interval"] = int(ext["daytona.auto_archive_interval"])
        image = ext.get("daytona.image")
        sources = [s for s in (spec.snapshot, spec.template, image) if s is not None]
        if len(sources) > 1:
            raise errors.InvalidInput("give one of snapshot, template and the extension "
                                      "daytona.image", provider=self.name)
        if image is not None:
            if not isinstance(image, (str, Image)):
                raise errors.InvalidInput("daytona.image must be an image name or a "
                                          "daytona.Image", provider=self.name)
            return CreateSandboxFromImageParams(image=image, resources=convert.resources(spec),
                                                **common)
        if spec.resources != NeutralResources():
            raise errors.InvalidInput(
                "resources: a Daytona sandbox made from a snapshot has the snapshot's size; "
                "create from an image (extension daytona.image) to choose resources",
                provider=self.name)
        return CreateSandboxFromSnapshotParams(snapshot=spec.snapshot or spec.template,
                                               **common)

    async def _mount(self, mount: Any) -> DaytonaVolumeMount:
        # Daytona mounts have no read-only flag: volumes.read_only is not declared.
        volume = await self.get_volume(mount.volume)
        return DaytonaVolumeMount(volume_id=volume.id, mount_path=mount.path)

    async def info(self, sandbox_id: str) -> SandboxInfo:
        return convert.to_info(await self._calls.refreshed(sandbox_id))

    async def list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> builtins.list[SandboxInfo]:
        query = ListSandboxesQuery(labels=dict(metadata) or None)
        found: builtins.list[SandboxInfo] = []
        with translate():
            async for sandbox in self._calls.client.list(query):
                found.append(convert.to_info(sandbox))
        return found

    async def kill(self, sandbox_id: str) -> None:
        self._calls.forget(sandbox_id)
        try:
            sandbox = await self._calls.sandbox(sandbox_id)
            with translate(sandbox_id):
                await self._calls.retrying(
                    lambda: sandbox.delete(timeout=self._calls.create_timeout))
        except errors.SandboxNotFound:
            pass
        finally:
            self._calls.sandboxes.pop(sandbox_id, None)

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        sandbox = await self._calls.fetch(sandbox_id)
        state = convert.sandbox_state(sandbox)
        if state == SandboxState.RUNNING:
            with translate(sandbox_id):
                await self._calls.retrying(lambda: sandbox.stop(timeout=self._calls.create_timeout))
        elif state not in (SandboxState.PAUSED, SandboxState.PAUSING):
            raise errors.SandboxNotRunning(f"the sandbox is {state}", state=str(state),
                                           provider=self.name, sandbox_id=sandbox_id)
        return convert.to_info(sandbox)

    async def resume(self, sandbox_id: str) -> SandboxInfo:
        sandbox = await self._calls.fetch(sandbox_id)
        if convert.state_name(sandbox) != "started":
            with translate(sandbox_id):
                await self._calls.retrying(
                    lambda: sandbox.start(timeout=self._calls.create_timeout))
        await self._calls.probe(sandbox)
        return convert.to_info(sandbox)

    async def set_metadata(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        # Daytona replaces the labels whole (PUT /sandbox/{id}/labels): the current ones,
        # read just before, reserved ones too, go with the new. Two callers at once: the
        # last one wins.
        return await self._replace_labels(sandbox_id, await self._calls.refreshed(sandbox_id),
                                          labels)

    async def set_metadata_as_seen(self, sandbox_id: str,
                                   labels: Mapping[str, str]) -> SandboxInfo:
        # No GET: the labels of the handle kept since this provider last read or wrote
        # them (fetched, if it keeps none) go with the new.
        return await self._replace_labels(sandbox_id, await self._calls.sandbox(sandbox_id),
                                          labels)

    async def _replace_labels(self, sandbox_id: str, sandbox: AsyncSandbox,
                              labels: Mapping[str, str]) -> SandboxInfo:
        merged = {**(sandbox.labels or {}), **labels}
        check_labels(merged, provider=self.name)
        with translate(sandbox_id):
            await self._calls.retrying(lambda: sandbox.set_labels(merged))
        return convert.to_info(sandbox)

    async def ex_archive(self, sandbox_id: str) -> SandboxInfo:
        """Archive a sandbox (Daytona only): its files move to cheaper storage; a running
        sandbox is stopped first. ``resume`` starts it again (slower than from stopped)."""
        sandbox = await self._calls.fetch(sandbox_id)
        with translate(sandbox_id):
            if convert.state_name(sandbox) == "started":
                await self._calls.retrying(lambda: sandbox.stop(timeout=self._calls.create_timeout))
            await self._calls.retrying(sandbox.archive)
        return convert.to_info(sandbox)

    async def ex_recover(self, sandbox_id: str) -> SandboxInfo:
        """Recover a sandbox from a recoverable error state (Daytona only)."""
        sandbox = await self._calls.fetch(sandbox_id)
        with translate(sandbox_id):
            await self._calls.retrying(lambda: sandbox.recover(timeout=self._calls.create_timeout))
        await self._calls.probe(sandbox)
        return convert.to_info(sandbox)

    # --------------------------------------------------------------- snapshots

    async def snapshot(self, sandbox_id: str) -> Snapshot:
        sandbox = await self._calls.sandbox(sandbox_id)
        name = f"psdk-{sandbox_id[:8]}-{secrets.token_hex(6)}"
        with translate(sandbox_id):
            # A try that answered 502 may have made it: then the name is taken, by us.
            with contextlib.suppress(DaytonaConflictError):
                await self._calls.retrying(lambda: sandbox.create_snapshot(
                    name, timeout=self._calls.create_timeout))
            made = await self._calls.client.snapshot.get(name)
        return convert.to_snapshot(made)

    async def _daytona_snapshots(self, sandbox_id: str | None) -> builtins.list[Any]:
        """Every Daytona snapshot (of one sandbox), page by page."""
        found: builtins.list[Any] = []
        page = 1
        with translate():
            while True:
                listing = await self._calls.client.snapshot.list(
                    page=page, limit=100, source_sandbox_id=sandbox_id)
                found += listing.items
                if page >= listing.total_pages:
                    return found
                page += 1

    async def list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        # Snapshots taken from sandboxes; the others are images (templates).
        return [convert.to_snapshot(s) for s in await self._daytona_snapshots(sandbox_id)
                if s.source_sandbox_id]

    async def delete_snapshot(self, snapshot_id: str) -> None:
        with translate(not_found=errors.SnapshotNotFound):
            await self._calls.client.snapshot.delete(snapshot_id)

    # --------------------------------------------------------------- templates

    def template_builder(self) -> DaytonaTemplates:
        return DaytonaTemplates(client=self._calls.client, snapshots=self._daytona_snapshots,
                                timeout=self._calls.create_timeout, provider=self.name)

    # ----------------------------------------------------------------- volumes

    async def create_volume(self, name: str) -> Volume:
        with translate(not_found=errors.VolumeNotFound):
            return convert.to_volume(await self._calls.client.volume.create(name))

    async def get_volume(self, name: str) -> Volume:
        with translate(not_found=errors.VolumeNotFound):
            return convert.to_volume(await self._calls.client.volume.get(name))

    async def list_volumes(self) -> builtins.list[Volume]:
        with translate(not_found=errors.VolumeNotFound):
            return [convert.to_volume(v) for v in await self._calls.client.volume.list()]

    async def delete_volume(self, name: str) -> None:
        with translate(not_found=errors.VolumeNotFound):
            volume = await self._calls.client.volume.get(name)
            await self._calls.client.volume.delete(volume)
