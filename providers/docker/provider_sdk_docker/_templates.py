"""Templates on a Docker Engine: images built with the classic builder, networking off,
tagged by the content hash of the Dockerfile and its context; nothing is pulled.

:class:`DockerTemplates` is ``DockerProvider``'s template builder (a
:class:`~provider_sdk.templates.TemplateBuilder`)."""

from __future__ import annotations

import builtins
import datetime as dt
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from provider_sdk import errors
from provider_sdk.buildcontext import write_context
from provider_sdk.models import Template, TemplateSpec
from provider_sdk.templates import parsed
from provider_sdk_docker._engine import Engine
from provider_sdk_docker._files import parse_time
from provider_sdk_docker._labels import LABEL_TEMPLATE_HASH, LABEL_TEMPLATE_NAME, TEMPLATE_PREFIX

__all__ = ["DockerTemplates"]


def _tag(spec: TemplateSpec, digest: str) -> str:
    return f"{TEMPLATE_PREFIX}{spec.name}:{digest[:12]}"


class DockerTemplates:
    """Builds, lists and deletes template images in one Engine.

    Args:
        engine: the provider's Engine.
        provider: the provider's name, for errors and templates.
    """

    def __init__(self, engine: Engine, provider: str) -> None:
        self._engine = engine
        self.name = provider

    async def find(self, spec: TemplateSpec, digest: str) -> Template | None:
        tag = _tag(spec, digest)
        try:
            return self._to_template(await self._engine.api("inspect_image", tag, kind="image",
                                                            what=tag))
        except errors.TemplateNotFound:
            return None

    async def build(self, spec: TemplateSpec, digest: str, *, force: bool,
                    on_progress: Callable[[str], None] | None) -> Template:
        tag = _tag(spec, digest)
        await self._check_base_images(spec)
        with tempfile.TemporaryFile() as context:
            await anyio.to_thread.run_sync(write_context, spec, context)
            context.seek(0)
            lines = await self._engine.api(
                "build", fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                network_mode="none", decode=True, nocache=force, pull=False,
                labels={LABEL_TEMPLATE_HASH: digest, LABEL_TEMPLATE_NAME: spec.name},
                kind="image", what=tag)
            log: builtins.list[str] = []
            step = "build"
            while (item := await self._engine.call(next, lines, None)) is not None:
                text = str(item.get("stream") or item.get("status") or "").rstrip()
                if text:
                    log.append(text)
                    if text.startswith("Step "):
                        step = text
                    if on_progress is not None:
                        on_progress(text)
                if "error" in item:
                    raise errors.TemplateBuildError(
                        f"building {spec.name!r} failed at {step}: {item['error'].strip()}",
                        step=step, log_tail="\n".join([*log[-20:], item["error"].strip()]),
                        provider=self.name)
        return self._to_template(await self._engine.api("inspect_image", tag, kind="image",
                                                        what=tag))

    async def _check_base_images(self, spec: TemplateSpec) -> None:
        """Every ``FROM`` image must be in the Engine: nothing is pulled, so a missing one
        fails here, naming its line, before the build starts."""
        for instruction, image in parsed(spec).base_images():
            if image.lower() == "scratch":
                continue
            try:
                await self._engine.api("inspect_image", image, kind="image", what=image)
            except errors.TemplateNotFound:
                raise errors.TemplateBuildError(
                    f"the base image {image!r} is not in the Docker Engine; nothing is "
                    "pulled: build, load or pull it first",
                    step=f"FROM (line {instruction.line})", provider=self.name) from None

    async def list(self) -> builtins.list[Template]:
        images = await self._engine.api("images", filters={"label": LABEL_TEMPLATE_HASH})
        found = []
        for image in images:
            for tag in image.get("RepoTags") or ():
                if tag.startswith(TEMPLATE_PREFIX):
                    found.append(self._to_template({**image, "RepoTags": [tag],
                                                    "Config": {"Labels": image["Labels"]}}))
        return sorted(found, key=lambda t: t.id)

    async def delete(self, template_id: str) -> None:
        try:
            data = await self._engine.api("inspect_image", template_id, kind="image",
                                          what=template_id)
        except errors.TemplateNotFound:
            raise errors.TemplateNotFound(f"no template {template_id!r}",
                                          provider=self.name) from None
        if LABEL_TEMPLATE_HASH not in ((data.get("Config") or {}).get("Labels") or {}):
            raise errors.TemplateNotFound(f"no template {template_id!r} built by this SDK",
                                          provider=self.name)
        await self._engine.api("remove_image", template_id, force=True, kind="image",
                               what=template_id)

    def _to_template(self, data: Mapping[str, Any]) -> Template:
        labels = (data.get("Config") or {}).get("Labels") or {}
        tags = [t for t in data.get("RepoTags") or () if t.startswith(TEMPLATE_PREFIX)]
        created = data.get("Created")
        return Template(
            id=tags[0] if tags else data["Id"], name=labels.get(LABEL_TEMPLATE_NAME, ""),
            provider=self.name, content_hash=labels.get(LABEL_TEMPLATE_HASH),
            created_at=parse_time(created) if isinstance(created, str) else
            dt.datetime.fromtimestamp(created, dt.timezone.utc) if created else None,
            extra={"image_id": data["Id"]})
