"""Templates of ``LocalProvider``: built with Docker Engine, exported into the home,
listed and deleted.

Only building needs Docker (through ``DockerProvider``) and the distribution
``sandbox-provider-sdk-templates``; a built template is a directory the sandboxes made from it
use as their overlay's lower layer (see ``_templates``), so it is not deleted while one
of them, or a snapshot of one, exists.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets
import shutil
from collections.abc import Callable
from typing import Any, ClassVar

import anyio

from provider_sdk import errors
from provider_sdk.distributions import install_hint
from provider_sdk.local import _templates
from provider_sdk.local._home import Home, now, read_meta, write_meta
from provider_sdk.local._trees import remove_tree
from provider_sdk.models import Template, TemplateSpec

__all__ = ["TemplateBuildsMixin"]


class TemplateBuildsMixin:
    """The template hooks of ``LocalProvider``, and the template records it reads."""

    name: ClassVar[str]
    _home: Home

    def _template_meta(self, template_id: str) -> dict[str, Any]:
        meta = (read_meta(self._home.template(template_id))
                if _templates.TEMPLATE_ID.match(template_id) else None)
        if meta is None:
            known = ", ".join(["default", *self._home.ids("templates")])
            raise errors.TemplateNotFound(
                f"template {template_id!r} does not exist; this home has: {known}",
                provider=self.name)
        return meta

    async def _build_template(self, spec: TemplateSpec, *, force: bool,
                              on_progress: Callable[[str], None] | None) -> Template:
        try:
            from provider_sdk_docker import DockerProvider
            from provider_sdk_templates import rootfs
        except ImportError as exc:
            raise errors.ConfigError(
                "templates for the local provider are built with Docker Engine: install the "
                f"distribution sandbox-provider-sdk-templates (missing module: {exc.name}): "
                + install_hint("sandbox-provider-sdk-templates"),
                provider=self.name) from exc
        digest = await anyio.to_thread.run_sync(spec.content_hash)
        template_id = _templates.template_id(spec.name, digest)
        meta = read_meta(self._home.template(template_id))
        if meta is not None and not force:
            return self._to_template(meta)
        if meta is not None:
            await anyio.to_thread.run_sync(self._check_unused, template_id)
        # Docker's errors are this provider's: the caller asked the local provider.
        with errors.on_behalf_of(self.name):
            docker = DockerProvider()
            try:
                before = {(t.name, t.content_hash) for t in await docker.list_templates()}
                image = await docker.build_template(spec, force=force, on_progress=on_progress)
                try:
                    if on_progress is not None:
                        on_progress(f"exporting the filesystem of {image.id} as local "
                                    f"template {template_id}")
                    meta = await anyio.to_thread.run_sync(
                        lambda: self._export(rootfs.export_image, image.id, spec, digest,
                                             force))
                finally:
                    if (spec.name, digest) not in before:  # made for this build: not kept
                        with contextlib.suppress(errors.SandboxError):
                            await docker.delete_template(image.id)
            finally:
                await docker.aclose()
        return self._to_template(meta)

    def _export(self, export: Callable[..., Any], image: str, spec: TemplateSpec, digest: str,
                force: bool) -> dict[str, Any]:
        """Export ``image`` beside the templates, then move it into place."""
        name = spec.name
        template_id = _templates.template_id(name, digest)
        templates = self._home.path / "templates"
        staging = templates / f".{template_id}-{secrets.token_hex(4)}"
        staging.mkdir(mode=0o700)
        try:
            config = export(image, staging / "root", provider=self.name)
            if _templates.user_uid(staging / "root", config.user) not in (0, 1000):
                users = [i.line for i in spec.parsed().instructions if i.keyword == "USER"]
                raise errors.TemplateBuildError(
                    f"the image's USER is {config.user!r}, which is not uid 0 or 1000 in its "
                    "/etc/passwd: local sandboxes always run as uid 1000",
                    step=f"USER (line {users[-1]})" if users else "USER", provider=self.name)
            _templates.prepare_root(staging / "root")
            meta = {"id": template_id, "name": name, "content_hash": digest,
                    "created_at": now().isoformat(), "image": image,
                    "env": dict(config.env), "workdir": config.workdir, "user": config.user,
                    "cpu": spec.cpu, "memory_mb": spec.memory_mb,
                    "start_cmd": spec.start_cmd, "ready_cmd": spec.ready_cmd}
            write_meta(staging, meta)
            target = self._home.template(template_id)
            with self._home.lock(templates):
                if read_meta(target) is not None:
                    if not force:  # another build of the same spec finished first
                        shutil.rmtree(staging)
                        return read_meta(target) or meta
                    self._check_unused(template_id)
                    remove_tree(target)
                staging.rename(target)
            return meta
        except BaseException:
            remove_tree(staging)
            raise

    def _check_unused(self, template_id: str) -> None:
        """Conflict while a sandbox or snapshot of this home is made from the template
        (its files are their lower layer)."""
        sandboxes = [s for s in self._home.ids("sandboxes")
                     if (read_meta(self._home.sandbox(s)) or {}).get("template") == template_id]
        snapshots = [s for s in self._home.ids("snapshots")
                     if (read_meta(self._home.snapshot(s)) or {}).get("template") == template_id]
        if sandboxes or snapshots:
            users = [f"sandbox {s}" for s in sandboxes] + [f"snapshot {s}" for s in snapshots]
            raise errors.Conflict(
                f"template {template_id!r} is in use by {', '.join(users)}: kill those "
                "sandboxes and delete those snapshots first", provider=self.name)

    async def _list_templates(self) -> list[Template]:
        metas = [read_meta(self._home.template(t)) for t in self._home.ids("templates")]
        return [self._to_template(m) for m in metas if m is not None]

    async def _delete_template(self, template_id: str) -> None:
        self._template_meta(template_id)  # TemplateNotFound
        templates = self._home.path / "templates"

        def delete() -> None:
            with self._home.lock(templates):
                self._check_unused(template_id)
                remove_tree(self._home.template(template_id))

        await anyio.to_thread.run_sync(delete)

    def _to_template(self, meta: dict[str, Any]) -> Template:
        return Template(id=meta["id"], name=meta["name"], provider=self.name,
                        content_hash=meta["content_hash"],
                        created_at=dt.datetime.fromisoformat(meta["created_at"]),
                        extra={"path": str(self._home.template(meta["id"]) / "root"),
                               "image": meta["image"], "env": dict(meta["env"]),
                               "workdir": meta["workdir"], "user": meta["user"],
                               "start_cmd": meta.get("start_cmd"),
                               "ready_cmd": meta.get("ready_cmd")})
