"""The templates layer: what is derived from a :class:`~provider_sdk.models.TemplateSpec`,
and the interfaces template builders share.

A spec is plain data (:mod:`provider_sdk.models`); this module reads one from a
Dockerfile (:func:`from_dockerfile`), parses it (:func:`parsed`), hashes it with the
context files it uses (:func:`content_hash`) and lists what a builder cannot do with it
(:func:`problems`). :class:`TemplateBuilder` is the one shape every provider's builder
has; ``SandboxProvider.build_template`` keeps the content-hash cache around it, once.
:class:`RootfsSource` is what a builder that runs sandboxes on a plain directory tree
(the local provider) needs from whatever makes an image: plugins implement it and
register it in the entry-point group :data:`ROOTFS_GROUP`; the core never imports them.
"""

from __future__ import annotations

import builtins
import functools
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

from provider_sdk.buildcontext import content_hash, used_files
from provider_sdk.dockerfile import Dockerfile, Problem, TemplateSupport
from provider_sdk.dockerfile import parse as parse_dockerfile
from provider_sdk.dockerfile import problems as dockerfile_problems
from provider_sdk.errors import TemplateBuildError
from provider_sdk.models import Template, TemplateSpec

__all__ = [
    "ROOTFS_GROUP",
    "ImageConfig",
    "Progress",
    "RootfsSource",
    "TemplateBuilder",
    "content_hash",
    "from_dockerfile",
    "parsed",
    "problems",
]

Progress = Callable[[str], None]
"""A callback that receives a build's progress lines."""

ROOTFS_GROUP = "provider_sdk.rootfs"
"""The entry-point group of :class:`RootfsSource` factories (called without arguments)."""


def from_dockerfile(path: str | os.PathLike[str], *,
                    context: str | os.PathLike[str] | None = None,
                    name: str | None = None, cpu: float | None = None,
                    memory_mb: int | None = None, start_cmd: str | None = None,
                    ready_cmd: str | None = None) -> TemplateSpec:
    """Read, parse and check a Dockerfile: the spec to build it.

    Args:
        path: the Dockerfile, or a directory holding one named ``Dockerfile``.
        context: the build context (default: the Dockerfile's directory);
            ``.dockerignore`` in it is honoured.
        name: the template's name (default: the directory's name, made valid).
        cpu: the spec's ``cpu``.
        memory_mb: the spec's ``memory_mb``.
        start_cmd: the spec's ``start_cmd``.
        ready_cmd: the spec's ``ready_cmd``.

    Raises:
        TemplateBuildError: step ``parse`` for a file that cannot be read or parsed,
            or the failing instruction (``COPY (line 4)``) for a source missing
            from the context.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "Dockerfile"
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateBuildError(f"cannot read the Dockerfile {str(file)!r}: {exc}",
                                 step="parse") from exc
    root = Path(context) if context is not None else file.resolve().parent
    if name is None:
        name = re.sub(r"[^a-z0-9._-]+", "-", root.resolve().name.lower()).strip("-._")
        name = name[:128] or "template"
    spec = TemplateSpec(name=name, dockerfile=text, context=str(root), cpu=cpu,
                        memory_mb=memory_mb, start_cmd=start_cmd, ready_cmd=ready_cmd)
    used_files(parsed(spec), root)  # a COPY source missing from the context fails here
    return spec


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> Dockerfile:
    return parse_dockerfile(text)


def parsed(spec: TemplateSpec) -> Dockerfile:
    """The spec's parsed Dockerfile (a text is parsed once); ``TemplateBuildError``
    (step ``parse``) if it does not parse."""
    return _parse(spec.dockerfile)


def problems(spec: TemplateSpec, support: TemplateSupport) -> builtins.list[Problem]:
    """What a builder with ``support`` cannot do with ``spec``, with line numbers."""
    return dockerfile_problems(parsed(spec), support, {
        "cpu": spec.cpu, "memory_mb": spec.memory_mb, "start_cmd": spec.start_cmd,
        "ready_cmd": spec.ready_cmd})


@runtime_checkable
class TemplateBuilder(Protocol):
    """The shape of a provider's template builder.

    ``SandboxProvider.build_template`` checks the spec, hashes it, asks :meth:`find`
    for a template already built with that hash (unless ``force``), and only then
    calls :meth:`build`: no builder keeps a cache check of its own.
    """

    async def find(self, spec: TemplateSpec, digest: str) -> Template | None:
        """The template built from a spec with content hash ``digest``, ready to use;
        ``None`` if there is none."""
        ...

    async def build(self, spec: TemplateSpec, digest: str, *, force: bool,
                    on_progress: Progress | None) -> Template:
        """Build ``spec`` (whose content hash is ``digest``), replacing a template of
        the same hash when ``force``."""
        ...

    async def list(self) -> builtins.list[Template]:
        """The templates this builder made (or its backend knows)."""
        ...

    async def delete(self, template_id: str) -> None:
        """Delete a template; ``TemplateNotFound`` if unknown."""
        ...


@attrs.frozen(kw_only=True)
class ImageConfig:
    """What an image's configuration says about how its processes run."""

    env: Mapping[str, str] = attrs.field(factory=dict)
    """``ENV``: the image's environment."""
    workdir: str | None = None
    """``WORKDIR``; ``None`` when unset."""
    user: str | None = None
    """``USER``; ``None`` when unset."""
    image: str | None = None
    """The image the filesystem was exported from, where there is one."""


@runtime_checkable
class RootfsSource(Protocol):
    """Builds a spec into a root filesystem on this machine: what a builder that runs
    sandboxes on a plain directory tree (the local provider's) is fed with.

    Implementations live in plugins and are registered as factories in the
    entry-point group :data:`ROOTFS_GROUP`.
    """

    async def export(self, spec: TemplateSpec, digest: str, dest: Path, *, force: bool,
                     on_progress: Progress | None, provider: str) -> ImageConfig:
        """Build ``spec`` (content hash ``digest``; again if ``force``) and write its
        filesystem into ``dest`` (created; it should be empty). Errors are the neutral
        ones, attributed to ``provider``."""
        ...

    async def aclose(self) -> None:
        """Release what the source holds (clients, connections)."""
        ...
