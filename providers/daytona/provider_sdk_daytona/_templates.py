"""Daytona's template builder: a Dockerfile becomes a Daytona snapshot.

The Dockerfile goes to ``Image.from_dockerfile``'s build info (see ``_convert``) and is
built as a snapshot named ``<name>-<first 12 hex digits of the content hash>``; an
active snapshot of that name is the template already built (:meth:`DaytonaTemplates.find`).
Snapshots taken from sandboxes are not templates and are left out.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from daytona import AsyncDaytona, CreateSnapshotParams, DaytonaError, Resources

from provider_sdk import errors
from provider_sdk.models import Template, TemplateSpec
from provider_sdk.templates import Progress
from provider_sdk_daytona import _convert as convert
from provider_sdk_daytona._errors import neutral, status_of

__all__ = ["DaytonaTemplates"]


def _name(spec: TemplateSpec, digest: str) -> str:
    return f"{spec.name}-{digest[:12]}"


_BUILT = re.compile(r"^(.+)-[0-9a-f]{12}$")
"""A snapshot name :func:`_name` made: the template's name, then its hash."""


def _template_name(snapshot_name: str) -> str:
    """The template name of a snapshot: its own name less the hash this builder adds."""
    match = _BUILT.match(snapshot_name)
    return match.group(1) if match else snapshot_name


@contextlib.contextmanager
def _translate() -> Iterator[None]:
    try:
        yield
    except DaytonaError as exc:
        raise neutral(exc, not_found=errors.TemplateNotFound) from exc


class DaytonaTemplates:
    """Builds, lists and deletes Daytona snapshots as templates (a
    :class:`~provider_sdk.templates.TemplateBuilder`).

    Args:
        client: the SDK's async client.
        snapshots: lists Daytona's snapshots (of one sandbox, or all with ``None``).
        timeout: seconds a build may take.
        provider: the provider's name, for errors.
    """

    def __init__(self, *, client: AsyncDaytona,
                 snapshots: Callable[[str | None], Awaitable[builtins.list[Any]]],
                 timeout: float, provider: str) -> None:
        self._client = client
        self._snapshots = snapshots
        self._timeout = timeout
        self._provider = provider

    async def _get(self, name: str) -> Any:
        try:
            with _translate():
                return await self._client.snapshot.get(name)
        except errors.TemplateNotFound:
            return None

    async def find(self, spec: TemplateSpec, digest: str) -> Template | None:
        existing = await self._get(_name(spec, digest))
        if existing is None or convert.state_of(existing) != "active":
            return None
        return convert.to_template(spec.name, digest, existing)

    async def build(self, spec: TemplateSpec, digest: str, *, force: bool,
                    on_progress: Progress | None) -> Template:
        name = _name(spec, digest)
        existing = await self._get(name)
        with _translate():
            if existing is not None:  # forced, or not active: made again
                await self._client.snapshot.delete(existing)
            image = convert.image_from_dockerfile(spec.dockerfile)
            resources = None
            if spec.cpu or spec.memory_mb:
                resources = Resources(cpu=math.ceil(spec.cpu) if spec.cpu else None,
                                      memory=math.ceil(spec.memory_mb / 1024)
                                      if spec.memory_mb else None)
            try:
                made = await self._client.snapshot.create(
                    CreateSnapshotParams(name=name, image=image, resources=resources),
                    on_logs=on_progress, timeout=self._timeout)
            except DaytonaError as exc:
                if status_of(exc) is None and "Failed to create snapshot" in str(exc):
                    # The builder's log names the steps it ran; the last is the one that
                    # failed.
                    steps = re.findall(r"Step \d+/\d+ : [^\n]*", str(exc))
                    raise errors.TemplateBuildError(
                        str(exc), step=steps[-1].strip() if steps else "build",
                        log_tail=str(exc)[-2000:], provider=self._provider) from exc
                raise
        return convert.to_template(spec.name, digest, made)

    async def list(self) -> builtins.list[Template]:
        return [convert.to_template(_template_name(s.name), None, s)
                for s in await self._snapshots(None) if not s.source_sandbox_id]

    async def delete(self, template_id: str) -> None:
        with _translate():
            await self._client.snapshot.delete(template_id)
