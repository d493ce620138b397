"""The reference templates shipped with this distribution (``templates/catalog/``).

Each entry is a directory with a Dockerfile (and whatever it copies) plus its options in
``catalog.toml``. :func:`spec` turns one into a
:class:`~provider_sdk.models.TemplateSpec` for any provider's ``build_template``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import attrs

from provider_sdk.errors import TemplateNotFound
from provider_sdk.models import TemplateSpec
from provider_sdk.templates import from_dockerfile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["CatalogEntry", "directory", "entries", "entry", "spec"]


def directory() -> Path:
    """Where the catalog is: inside the installed package, or beside it in a checkout."""
    installed = Path(__file__).with_name("catalog")
    return installed if installed.is_dir() else Path(__file__).parent.parent / "catalog"


@attrs.frozen(kw_only=True)
class CatalogEntry:
    """One reference template."""

    name: str
    description: str
    path: Path
    """The directory holding its Dockerfile: the build context."""
    network: bool
    """Its build downloads packages (it cannot be built offline)."""
    cpu: float | None = None
    memory_mb: int | None = None
    start_cmd: str | None = None
    ready_cmd: str | None = None


def entries() -> list[CatalogEntry]:
    """Every reference template, by name."""
    root = directory()
    data: dict[str, Any] = tomllib.loads((root / "catalog.toml").read_text(encoding="utf-8"))
    return [CatalogEntry(name=name, path=root / name, **table)
            for name, table in sorted(data.items())]


def entry(name: str) -> CatalogEntry:
    """One reference template; ``TemplateNotFound`` naming the others if unknown."""
    for found in entries():
        if found.name == name:
            return found
    names = ", ".join(e.name for e in entries())
    raise TemplateNotFound(f"no catalog template {name!r}; the catalog has: {names}")


def spec(template: str, /, **options: Any) -> TemplateSpec:
    """The catalog template ``template`` as a spec; ``options`` (``name=``, ``cpu=``, ...)
    override the catalog's."""
    chosen = entry(template)
    settings: dict[str, Any] = {
        "name": template, "cpu": chosen.cpu, "memory_mb": chosen.memory_mb,
        "start_cmd": chosen.start_cmd, "ready_cmd": chosen.ready_cmd, **options}
    return from_dockerfile(chosen.path / "Dockerfile", context=chosen.path, **settings)
