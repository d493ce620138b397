"""Build contexts: which files a template build sends, and its content hash.

The files are those of the context directory that ``.dockerignore`` does not exclude
(Docker's rules: ``*``, ``?``, ``[...]``, ``**``, ``!`` exceptions, the last matching
line wins, a matched directory excludes what is under it). The content hash covers the
Dockerfile, the spec's options and the files that the Dockerfile's ``COPY`` and ``ADD``
take from the context, so a file the build never reads does not cause a rebuild.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import attrs

from provider_sdk.dockerfile import Dockerfile, parse
from provider_sdk.errors import TemplateBuildError

if TYPE_CHECKING:
    from provider_sdk.models import TemplateSpec

__all__ = ["DockerIgnore", "content_hash", "context_files", "used_files", "write_context"]

_HASH_VERSION = b"psdk-template-1"


@attrs.frozen
class _Rule:
    pattern: re.Pattern[str]
    exclude: bool


class DockerIgnore:
    """The rules of one ``.dockerignore`` file."""

    def __init__(self, text: str = "") -> None:
        self._rules: list[_Rule] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exclude = not line.startswith("!")
            line = line.lstrip("!").strip()
            cleaned = os.path.normpath(line.lstrip("/")).replace(os.sep, "/")
            if cleaned in (".", ""):
                continue
            self._rules.append(_Rule(pattern=re.compile(_translate(cleaned)), exclude=exclude))

    @classmethod
    def read(cls, context: Path) -> DockerIgnore:
        """The rules of ``context/.dockerignore`` (none if there is no such file)."""
        try:
            return cls((context / ".dockerignore").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()

    def excluded(self, relative: str) -> bool:
        """Whether a path (relative, ``/``-separated) is left out of the context: the last
        rule matching it or one of its parent directories decides."""
        parents = relative.split("/")
        candidates = ["/".join(parents[:n]) for n in range(1, len(parents) + 1)]
        result = False
        for rule in self._rules:
            if any(rule.pattern.fullmatch(c) for c in candidates):
                result = rule.exclude
        return result


def _translate(pattern: str) -> str:
    """A Go ``filepath.Match`` pattern, with Docker's ``**``, as a regular expression."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[i + 1:end]
                if body.startswith("^"):
                    body = "!" + body[1:]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def context_files(context: Path) -> Iterator[tuple[Path, str]]:
    """Every path of the context that ``.dockerignore`` keeps, sorted, with its
    relative name; directories come before what they hold."""
    if not context.is_dir():
        raise TemplateBuildError(f"the build context {str(context)!r} is not a directory",
                                 step="context")
    ignore = DockerIgnore.read(context)
    keep = {".dockerignore"}
    for path in sorted(context.rglob("*")):
        relative = path.relative_to(context).as_posix()
        if relative in keep or not ignore.excluded(relative):
            yield path, relative


def used_files(dockerfile: Dockerfile, context: Path | None) -> list[tuple[Path, str]]:
    """The context's files that the Dockerfile's ``COPY`` and ``ADD`` read, sorted;
    :class:`~provider_sdk.errors.TemplateBuildError` naming the line for a source that
    is missing, excluded or outside the context."""
    sources = list(dockerfile.context_sources())
    if not sources:
        return []
    if context is None:
        instruction, source = sources[0]
        raise TemplateBuildError(
            f"line {instruction.line}: {instruction.keyword} {source!r} needs a build context",
            step=f"{instruction.keyword} (line {instruction.line})")
    files = list(context_files(context))
    chosen: dict[str, Path] = {}
    for instruction, source in sources:
        step = f"{instruction.keyword} (line {instruction.line})"
        cleaned = os.path.normpath(source.lstrip("/")).replace(os.sep, "/")
        if cleaned == ".." or cleaned.startswith("../"):
            raise TemplateBuildError(f"line {instruction.line}: {source!r} is outside the "
                                     "build context", step=step)
        if cleaned == ".":
            matched = files
        else:
            pattern = re.compile(_translate(cleaned))
            tops = [(p, r) for p, r in files if pattern.fullmatch(r)]
            matched = [(p, r) for p, r in files
                       if any(r == top or r.startswith(top + "/") for _, top in tops)]
        if not matched:
            raise TemplateBuildError(
                f"line {instruction.line}: {instruction.keyword} source {source!r} is not in "
                "the build context (missing, or left out by .dockerignore)", step=step)
        for path, relative in matched:
            chosen[relative] = path
    return [(chosen[r], r) for r in sorted(chosen)]


def content_hash(spec: TemplateSpec) -> str:
    """SHA-256 over the Dockerfile, the spec's options and the context files it uses
    (names, modes and bytes)."""
    digest = hashlib.sha256(_HASH_VERSION + b"\0")
    for value in (spec.dockerfile, spec.cpu, spec.memory_mb, spec.start_cmd, spec.ready_cmd):
        digest.update(repr(value).encode() + b"\0")
    context = Path(spec.context) if spec.context is not None else None
    for path, relative in used_files(parse(spec.dockerfile), context):
        info = path.lstat()
        digest.update(relative.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(f"{stat.S_IMODE(info.st_mode) | stat.S_IFMT(info.st_mode):o}\0".encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode("utf-8", "surrogateescape"))
        elif path.is_file():
            with path.open("rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def write_context(spec: TemplateSpec, out: IO[bytes], *, dockerfile: str | None = None) -> None:
    """Write the build context as a tar to ``out``: the kept files, and the Dockerfile
    (``dockerfile`` if given, else the spec's) as ``Dockerfile``."""
    with tarfile.open(fileobj=out, mode="w") as tar:
        if spec.context is not None:
            for path, relative in context_files(Path(spec.context)):
                if relative != "Dockerfile":
                    tar.add(path, arcname=relative, recursive=False)
        data = (spec.dockerfile if dockerfile is None else dockerfile).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(data))
