"""Dockerfiles: parsing, and what each template builder can do with one.

:func:`parse` reads a Dockerfile the way Docker's parser does (the ``escape`` directive,
line continuations, comments, JSON and shell forms) and keeps each instruction's line
number. :class:`TemplateSupport` is data a provider declares about its template
builder; :func:`problems` lists, with line numbers, what a Dockerfile asks that the
builder cannot do, so a build is refused before anything runs. Nothing here builds or
reads files beyond the text given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping

import attrs

from provider_sdk.errors import TemplateBuildError

__all__ = [
    "Dockerfile",
    "Instruction",
    "Problem",
    "TemplateSupport",
    "parse",
    "problems",
]

KEYWORDS = frozenset({
    "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
    "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME",
    "WORKDIR",
})
_JSON_FORMS = frozenset({"ADD", "CMD", "COPY", "ENTRYPOINT", "RUN", "SHELL", "VOLUME"})
_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9_-]*)\s*=\s*(.*?)\s*$")
_HEREDOC = re.compile(r"<<-?\s*[\"']?[A-Za-z_][A-Za-z0-9_]*[\"']?")
_VARIABLE = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


@attrs.frozen(kw_only=True)
class Instruction:
    """One instruction, with the line it starts on (1-based)."""

    keyword: str
    """Upper case: ``RUN``, ``COPY``, ..."""
    line: int
    text: str
    """The arguments as written, continuation lines joined, flags included."""
    flags: tuple[str, ...] = ()
    """Leading ``--name=value`` flags (``COPY --from=build``, ``RUN --mount=...``)."""
    args: tuple[str, ...] = ()
    """The JSON form's strings, or the shell form's words split on white space."""
    json_form: bool = False
    heredoc: bool = False
    """The arguments use a here-document (``RUN <<EOF``)."""

    @property
    def body(self) -> str:
        """The arguments after the flags, as written (a shell form's command)."""
        rest = self.text
        for flag in self.flags:
            rest = rest.lstrip()[len(flag):]
        return rest.strip()

    def flag(self, name: str) -> str | None:
        """The value of ``--name=value``, or ``""`` for a bare ``--name``; ``None`` if
        absent."""
        for flag in self.flags:
            key, sep, value = flag[2:].partition("=")
            if key == name:
                return value if sep else ""
        return None


@attrs.frozen(kw_only=True)
class Dockerfile:
    """A parsed Dockerfile."""

    text: str
    instructions: tuple[Instruction, ...]

    def stages(self) -> list[Instruction]:
        """The ``FROM`` instructions, one per build stage."""
        return [i for i in self.instructions if i.keyword == "FROM"]

    def base_images(self) -> list[tuple[Instruction, str]]:
        """Each stage's base image, with ``ARG`` defaults substituted; stages built
        ``FROM`` an earlier stage's name are left out."""
        args: dict[str, str] = {}
        names: set[str] = set()
        found = []
        for instruction in self.instructions:
            if instruction.keyword == "ARG" and not self.stages()[0].line < instruction.line:
                for word in instruction.args:
                    key, sep, value = word.partition("=")
                    if sep:
                        args[key] = value.strip("\"'")
            if instruction.keyword != "FROM":
                continue
            words = instruction.body.split()
            image = _substitute(words[0], args) if words else ""
            if len(words) >= 3 and words[1].lower() == "as":
                names.add(words[2].lower())
            if image.lower() not in names:
                found.append((instruction, image))
        return found

    def context_sources(self) -> Iterator[tuple[Instruction, str]]:
        """Each source a ``COPY`` or ``ADD`` takes from the build context (not those
        copied ``--from`` a stage or an image, nor ``ADD``'s URLs)."""
        for instruction in self.instructions:
            if instruction.keyword not in ("COPY", "ADD") or instruction.heredoc:
                continue
            if instruction.flag("from") is not None:
                continue
            for source in instruction.args[:-1]:
                if instruction.keyword == "ADD" and re.match(r"^[a-z][a-z0-9+.-]*://|^git@",
                                                             source, re.IGNORECASE):
                    continue
                yield instruction, source

    def last(self, keyword: str) -> Instruction | None:
        """The last instruction of that kind (the one in force, as for ``CMD``)."""
        for instruction in reversed(self.instructions):
            if instruction.keyword == keyword:
                return instruction
        return None


def parse(text: str) -> Dockerfile:
    """Parse a Dockerfile; :class:`~provider_sdk.errors.TemplateBuildError` with step
    ``parse`` and the line number when it is not one."""
    escape = "\\"
    lines = text.splitlines()
    # Parser directives: only at the very top, before any other line.
    for number, raw in enumerate(lines):
        match = _DIRECTIVE.match(raw)
        if not match:
            break
        if match.group(1).lower() == "escape":
            if match.group(2) not in ("\\", "`"):
                _fail(number + 1, f"escape directive must be \\ or `, not {match.group(2)!r}")
            escape = match.group(2)
    instructions: list[Instruction] = []
    index = 0
    while index < len(lines):
        raw = lines[index]
        start = index + 1
        index += 1
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = [raw.rstrip()]
        continued = parts[-1].endswith(escape)
        while continued:
            parts[-1] = parts[-1].removesuffix(escape)
            if index == len(lines):
                break
            following = lines[index]
            index += 1
            if not following.strip() or following.lstrip().startswith("#"):
                parts.append("")  # comments and blank lines inside a continuation
                continue
            parts.append(following.rstrip())
            continued = parts[-1].endswith(escape)
        joined = "".join(parts).strip()  # as Docker: the escape and newline vanish
        keyword, _, rest = joined.partition(" ")
        if not re.fullmatch(r"[A-Za-z]+", keyword) or keyword.upper() not in KEYWORDS:
            _fail(start, f"unknown instruction {keyword!r}")
        instruction = _instruction(keyword.upper(), rest.strip(), start)
        if instruction.heredoc and instruction.keyword in ("RUN", "COPY", "ADD"):
            # The here-document's lines belong to the instruction: skip to its end.
            index = _skip_heredocs(lines, index, rest, start)
        instructions.append(instruction)
    if not instructions:
        _fail(1, "the Dockerfile has no instructions")
    first = next((i for i in instructions if i.keyword != "ARG"), None)
    if first is None or first.keyword != "FROM":
        line = first.line if first is not None else instructions[-1].line
        _fail(line, "the first instruction (after ARG) must be FROM")
    for instruction in instructions:
        _validate(instruction)
    return Dockerfile(text=text, instructions=tuple(instructions))


def _instruction(keyword: str, rest: str, line: int) -> Instruction:
    flags: list[str] = []
    body = rest
    if keyword in ("ADD", "COPY", "FROM", "RUN", "HEALTHCHECK"):
        while body.startswith("--"):
            flag, _, body = body.partition(" ")
            flags.append(flag)
            body = body.lstrip()
    heredoc = keyword in ("RUN", "COPY", "ADD") and bool(_HEREDOC.search(body))
    if keyword in _JSON_FORMS and body.startswith("["):
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return Instruction(keyword=keyword, line=line, text=rest, flags=tuple(flags),
                               args=tuple(value), json_form=True)
    return Instruction(keyword=keyword, line=line, text=rest, flags=tuple(flags),
                       args=tuple(body.split()), heredoc=heredoc)


def _skip_heredocs(lines: list[str], index: int, rest: str, start: int) -> int:
    for match in _HEREDOC.finditer(rest):
        word = match.group(0).lstrip("<-").strip().strip("\"'")
        strip_tabs = match.group(0).startswith("<<-")
        while index < len(lines):
            line = lines[index].lstrip("\t") if strip_tabs else lines[index]
            index += 1
            if line == word:
                break
        else:
            _fail(start, f"here-document {word!r} is never closed")
    return index


def _validate(instruction: Instruction) -> None:
    line, keyword = instruction.line, instruction.keyword
    if keyword == "FROM":
        words = instruction.body.split()
        if not words:
            _fail(line, "FROM needs an image")
        if len(words) not in (1, 3) or (len(words) == 3 and words[1].lower() != "as"):
            _fail(line, f"FROM takes an image and an optional 'AS name', not {instruction.body!r}")
    elif keyword in ("COPY", "ADD"):
        if not instruction.heredoc and len(instruction.args) < 2:
            _fail(line, f"{keyword} needs at least one source and a destination")
    elif keyword in ("RUN", "CMD", "ENTRYPOINT", "WORKDIR", "USER", "SHELL") and not \
            instruction.body:
        _fail(line, f"{keyword} needs an argument")
    elif keyword == "SHELL" and not instruction.json_form:
        _fail(line, "SHELL must be written in JSON form")
    elif keyword == "ENV":
        if not instruction.args:
            _fail(line, "ENV needs a name and a value")
        if "=" not in instruction.args[0] and len(instruction.args) < 2:
            _fail(line, "ENV needs a value")
    elif keyword == "ARG" and len(instruction.args) < 1:
        _fail(line, "ARG needs a name")


def _substitute(word: str, args: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in args:
            return args[name]
        return match.group(2) or ""

    return _VARIABLE.sub(value, word)


def _fail(line: int, message: str) -> None:
    raise TemplateBuildError(f"line {line}: {message}", step="parse")


# ------------------------------------------------------------------ what builders do


@attrs.frozen(kw_only=True)
class Problem:
    """Something in a Dockerfile (or a spec) that one builder cannot do."""

    line: int | None
    """The Dockerfile line, or ``None`` for a spec option (``start_cmd``, ...)."""
    what: str
    """The instruction keyword or the option's name."""
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}: {self.what}" if self.line is not None else self.what
        return f"{where}: {self.reason}"


@attrs.frozen(kw_only=True)
class TemplateSupport:
    """What a provider's template builder does with a Dockerfile: declared data, like
    capabilities. The default is a full Docker classic builder."""

    unsupported: Mapping[str, str] = attrs.field(factory=dict)
    """Instruction keyword -> why the builder cannot honour it."""
    multi_stage: bool = True
    context: bool = True
    """``COPY`` and ``ADD`` can take files from the build context."""
    heredocs: bool = False
    """``RUN <<EOF`` (BuildKit only; classic builders cannot)."""
    run_flags: bool = False
    """``RUN --mount`` and ``--network`` (BuildKit only)."""
    options: Mapping[str, str] = attrs.field(factory=dict)
    """Spec option (``start_cmd``, ``ready_cmd``, ``cpu``, ``memory_mb``) -> why the
    builder cannot honour it."""


def problems(dockerfile: Dockerfile, support: TemplateSupport,
             options: Mapping[str, object] | None = None) -> list[Problem]:
    """Everything in ``dockerfile`` (and the spec's set ``options``) that a builder with
    ``support`` cannot do, in line order."""
    found: list[Problem] = []
    stages = dockerfile.stages()
    if not support.multi_stage and len(stages) > 1:
        found.append(Problem(line=stages[1].line, what="FROM",
                             reason="multi-stage builds are not supported"))
    for instruction in dockerfile.instructions:
        keyword = instruction.keyword
        if keyword in support.unsupported:
            found.append(Problem(line=instruction.line, what=keyword,
                                 reason=support.unsupported[keyword]))
        if instruction.heredoc and not support.heredocs:
            found.append(Problem(line=instruction.line, what=keyword,
                                 reason="here-documents need BuildKit, which this builder "
                                        "does not use"))
        if keyword == "RUN" and instruction.flags and not support.run_flags:
            found.append(Problem(line=instruction.line, what=keyword,
                                 reason=f"flags {' '.join(instruction.flags)} need BuildKit, "
                                        "which this builder does not use"))
    if not support.context:
        for instruction, source in dockerfile.context_sources():
            found.append(Problem(line=instruction.line, what=instruction.keyword,
                                 reason=f"copies {source!r} from the build context, which "
                                        "this builder cannot upload"))
    for name, value in (options or {}).items():
        if value is not None and name in support.options:
            found.append(Problem(line=None, what=name, reason=support.options[name]))
    return found
