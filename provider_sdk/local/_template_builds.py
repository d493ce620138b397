"""Templates of ``LocalProvider``: filesystems exported into the home, listed and deleted.

:class:`LocalTemplates` is the provider's template builder. It builds nothing itself:
a :class:`~provider_sdk.templates.RootfsSource`, found through the entry-point group
``provider_sdk.rootfs`` (the distribution ``sandbox-provider-sdk-templates`` registers
one that builds with Docker Engine), writes the spec's filesystem into a staging
directory, which is checked, prepared and moved into place. A built template is a
directory the sandboxes made from it use as their overlay's lower layer (see
``_templates``), so it is not deleted while one of them, or a snapshot of one, exists.
Its record is a :class:`~provider_sdk.local._records.TemplateRecord`; a broken one is
left out of listings (with a ``BrokenRecordWarning``), refused as ``TemplateNotFound``
saying why, and replaced by a build of its spec or removed by a delete.
"""

from __future__ import annotations

import builtins
import secrets
import shutil
from importlib.metadata import entry_points
from pathlib import Path

import anyio

from provider_sdk import errors
from provider_sdk.distributions import install_hint
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.local import _records, _templates
from provider_sdk.local._home import Home, now, write_meta
from provider_sdk.local._records import TemplateRecord
from provider_sdk.local._trees import remove_tree
from provider_sdk.models import Template, TemplateSpec
from provider_sdk.templates import ROOTFS_GROUP, ImageConfig, Progress, RootfsSource, parsed

__all__ = ["TEMPLATE_SUPPORT", "LocalTemplates", "rootfs_source"]

_DISTRIBUTION = "sandbox-provider-sdk-templates"


_NO_COMMAND = "local sandboxes run no image command: start processes with sandbox.start()"
TEMPLATE_SUPPORT = TemplateSupport(
    unsupported={
        "CMD": _NO_COMMAND,
        "ENTRYPOINT": _NO_COMMAND,
        "HEALTHCHECK": "local sandboxes run no image command, so nothing is checked",
        "EXPOSE": "local sandboxes have loopback only: no port is published",
        "VOLUME": "the image's volumes are not made: mount provider volumes "
                  "(SandboxSpec.volumes) instead",
    },
    # USER is checked by LocalProvider.check_template and at build time: uid 0 or 1000.
)
"""What a local template build leaves out of a Dockerfile, and why."""


def rootfs_source(provider: str) -> RootfsSource:
    """The installed root filesystem source (the first by name in ``provider_sdk.rootfs``);
    ``ConfigError`` naming the distribution to install when there is none."""
    found = sorted(entry_points(group=ROOTFS_GROUP), key=lambda e: e.name)
    if not found:
        raise errors.ConfigError(
            "templates for the local provider are built with Docker Engine: install the "
            f"distribution {_DISTRIBUTION}: " + install_hint(_DISTRIBUTION), provider=provider)
    try:
        factory = found[0].load()
    except ImportError as exc:
        raise errors.ConfigError(
            "templates for the local provider are built with Docker Engine: install the "
            f"distribution {_DISTRIBUTION} (missing module: {exc.name}): "
            + install_hint(_DISTRIBUTION), provider=provider) from exc
    source: RootfsSource = factory()
    return source


class LocalTemplates:
    """The local provider's template builder (a :class:`~provider_sdk.templates.TemplateBuilder`).

    Args:
        home: the provider's home.
        provider: the provider's name, for errors and templates.
    """

    def __init__(self, home: Home, provider: str) -> None:
        self._home = home
        self._provider = provider

    def record(self, template_id: str) -> TemplateRecord:
        """A built template's record; ``TemplateNotFound`` naming the others if unknown,
        or saying why if its record is broken."""
        record, reason = (
            _records.read_template(self._home.template(template_id), template_id)
            if _templates.TEMPLATE_ID.match(template_id) else (None, None))
        if reason is not None:
            raise errors.TemplateNotFound(
                f"template {template_id!r} is broken: {reason}; delete it or build it "
                "again", provider=self._provider)
        if record is None:
            known = ", ".join(["default", *self._home.ids("templates")])
            raise errors.TemplateNotFound(
                f"template {template_id!r} does not exist; this home has: {known}",
                provider=self._provider)
        return record

    def _read(self, template_id: str) -> TemplateRecord | None:
        """A template's good record, else ``None`` (none, or a broken one)."""
        return _records.read_template(self._home.template(template_id), template_id)[0]

    async def find(self, spec: TemplateSpec, digest: str) -> Template | None:
        found = await anyio.to_thread.run_sync(
            self._read, _templates.template_id(spec.name, digest))
        return self.to_template(found) if found is not None else None

    async def build(self, spec: TemplateSpec, digest: str, *, force: bool,
                    on_progress: Progress | None) -> Template:
        source = rootfs_source(self._provider)
        template_id = _templates.template_id(spec.name, digest)
        if self._home.template(template_id).exists():
            await anyio.to_thread.run_sync(self._check_unused, template_id)
        templates = self._home.path / "templates"
        staging = templates / f".{template_id}-{secrets.token_hex(4)}"
        staging.mkdir(mode=0o700)
        try:
            try:
                config = await source.export(spec, digest, staging / "root", force=force,
                                             on_progress=on_progress, provider=self._provider)
            finally:
                await source.aclose()
            record = await anyio.to_thread.run_sync(
                lambda: self._place(staging, spec, digest, config, force))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(remove_tree, staging)
            raise
        return self.to_template(record)

    def _place(self, staging: Path, spec: TemplateSpec, digest: str, config: ImageConfig,
               force: bool) -> TemplateRecord:
        """Check and prepare an exported filesystem in ``staging``, then move it into
        place (removed by the caller if this fails). A template there already is kept
        (another build of the same spec finished first) unless ``force``, or its record
        is broken."""
        template_id = _templates.template_id(spec.name, digest)
        if _templates.user_uid(staging / "root", config.user) not in (0, 1000):
            users = [i.line for i in parsed(spec).instructions if i.keyword == "USER"]
            raise errors.TemplateBuildError(
                f"the image's USER is {config.user!r}, which is not uid 0 or 1000 in its "
                "/etc/passwd: local sandboxes always run as uid 1000",
                step=f"USER (line {users[-1]})" if users else "USER", provider=self._provider)
        _templates.prepare_root(staging / "root")
        record = TemplateRecord(
            id=template_id, name=spec.name, content_hash=digest, created_at=now(),
            image=config.image or "", env=dict(config.env), workdir=config.workdir,
            user=config.user, cpu=spec.cpu, memory_mb=spec.memory_mb,
            start_cmd=spec.start_cmd, ready_cmd=spec.ready_cmd)
        write_meta(staging, record.to_json())
        target = self._home.template(template_id)
        with self._home.lock(self._home.path / "templates"):
            if target.exists():
                there = self._read(template_id)
                if there is not None and not force:
                    shutil.rmtree(staging)
                    return there
                self._check_unused(template_id)
                remove_tree(target)
            staging.rename(target)
        return record

    def _check_unused(self, template_id: str) -> None:
        """Conflict while a sandbox or snapshot of this home is made from the template
        (its files are their lower layer)."""
        sandboxes = [s for s in self._home.ids("sandboxes")
                     if _records.template_of(self._home.sandbox(s)) == template_id]
        snapshots = [s for s in self._home.ids("snapshots")
                     if _records.template_of(self._home.snapshot(s)) == template_id]
        if sandboxes or snapshots:
            users = [f"sandbox {s}" for s in sandboxes] + [f"snapshot {s}" for s in snapshots]
            raise errors.Conflict(
                f"template {template_id!r} is in use by {', '.join(users)}: kill those "
                "sandboxes and delete those snapshots first", provider=self._provider)

    async def list(self) -> builtins.list[Template]:
        found: builtins.list[Template] = []
        for template_id in self._home.all_ids("templates"):
            record, reason = _records.read_template(self._home.template(template_id),
                                                    template_id)
            if reason is not None:
                _records.warn_template(template_id, reason, self._home.path)
            elif record is not None:
                found.append(self.to_template(record))
        return found

    async def delete(self, template_id: str) -> None:
        if not (_templates.TEMPLATE_ID.match(template_id)
                and self._home.template(template_id).is_dir()):
            self.record(template_id)  # TemplateNotFound
        templates = self._home.path / "templates"

        def delete() -> None:
            with self._home.lock(templates):
                self._check_unused(template_id)
                remove_tree(self._home.template(template_id))

        await anyio.to_thread.run_sync(delete)

    def to_template(self, record: TemplateRecord) -> Template:
        """A template record as a neutral :class:`~provider_sdk.models.Template`."""
        return Template(id=record.id, name=record.name, provider=self._provider,
                        content_hash=record.content_hash, created_at=record.created_at,
                        extra={"path": str(self._home.template(record.id) / "root"),
                               "image": record.image, "env": dict(record.env),
                               "workdir": record.workdir, "user": record.user,
                               "start_cmd": record.start_cmd, "ready_cmd": record.ready_cmd})

