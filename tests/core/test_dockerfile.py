"""Dockerfiles: parsing with line numbers, what builders refuse, the build context and
its content hash, ``provider_sdk.templates.from_dockerfile``."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provider_sdk.buildcontext import DockerIgnore, context_files
from provider_sdk.dockerfile import TemplateSupport, parse
from provider_sdk.errors import TemplateBuildError
from provider_sdk.models import TemplateSpec
from provider_sdk.templates import content_hash, from_dockerfile, parsed, problems


def test_instructions_keep_their_first_line_and_join_continuations() -> None:
    parsed = parse("# comment\nFROM base AS build\n\nRUN apt-get install \\\n"
                   "    # inside\n    curl\nCOPY --chown=1000 a b /dst/\n"
                   'CMD ["python3", "-m", "http.server"]\n')
    assert [(i.keyword, i.line) for i in parsed.instructions] == [
        ("FROM", 2), ("RUN", 4), ("COPY", 7), ("CMD", 8)]
    run = parsed.instructions[1]
    assert run.body == "apt-get install     curl"
    copy = parsed.instructions[2]
    assert copy.flags == ("--chown=1000",)
    assert copy.flag("chown") == "1000"
    assert copy.args == ("a", "b", "/dst/")
    assert parsed.instructions[3].json_form
    assert parsed.instructions[3].args == ("python3", "-m", "http.server")


def test_escape_directive_changes_the_continuation_character() -> None:
    parsed = parse("# escape=`\nFROM base\nRUN echo a `\n  b\n")
    assert parsed.instructions[1].body == "echo a   b"


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("", 1, "no instructions"),
    ("RUN true\n", 1, "must be FROM"),
    ("FROM base\nFROBNICATE x\n", 2, "unknown instruction 'FROBNICATE'"),
    ("FROM\n", 1, "FROM needs an image"),
    ("FROM base\n\nCOPY onlyone\n", 3, "COPY needs at least one source"),
    ("FROM base\nSHELL /bin/sh -c\n", 2, "JSON form"),
    ("FROM base\nRUN <<EOF\necho hi\n", 2, "never closed"),
    ("# escape=x\nFROM base\n", 1, "escape directive"),
])
def test_a_dockerfile_that_does_not_parse_names_the_line(text: str, line: int,
                                                         fragment: str) -> None:
    with pytest.raises(TemplateBuildError) as caught:
        parse(text)
    assert caught.value.step == "parse"
    assert f"line {line}:" in str(caught.value)
    assert fragment in str(caught.value)


def test_heredoc_lines_belong_to_their_instruction() -> None:
    parsed = parse("FROM base\nRUN <<EOF\nFROBNICATE is shell here\nEOF\nRUN true\n")
    assert [(i.keyword, i.line, i.heredoc) for i in parsed.instructions] == [
        ("FROM", 1, False), ("RUN", 2, True), ("RUN", 5, False)]


def test_base_images_substitute_args_and_skip_earlier_stages() -> None:
    parsed = parse("ARG BASE=debian:12\nFROM ${BASE} AS build\nRUN make\n"
                   "FROM build\nFROM $OTHER\n")
    assert [(i.line, image) for i, image in parsed.base_images()] == [(2, "debian:12"),
                                                                     (5, "")]


def test_problems_list_every_unsupported_thing_with_its_line() -> None:
    support = TemplateSupport(unsupported={"CMD": "no image command"}, multi_stage=False,
                              context=False, options={"start_cmd": "not here"})
    spec = TemplateSpec(name="t", dockerfile=(
        "FROM a AS one\nRUN --mount=type=cache,target=/c make\nFROM b\n"
        "COPY --from=one /x /x\nCOPY local /y\nADD https://example.invalid/f /z\n"
        "RUN <<EOF\ntrue\nEOF\nCMD [\"x\"]\n"), start_cmd="serve")
    found = [str(p) for p in problems(spec, support)]
    assert found == [
        "line 3: FROM: multi-stage builds are not supported",
        "line 2: RUN: flags --mount=type=cache,target=/c need BuildKit, which this builder "
        "does not use",
        "line 7: RUN: here-documents need BuildKit, which this builder does not use",
        "line 10: CMD: no image command",
        "line 5: COPY: copies 'local' from the build context, which this builder cannot "
        "upload",
        "start_cmd: not here",
    ]


def test_a_full_builder_has_no_problem_with_a_plain_dockerfile() -> None:
    spec = TemplateSpec(name="t", dockerfile="FROM a\nRUN true\nCMD [\"x\"]\n")
    assert problems(spec, TemplateSupport()) == []


@pytest.mark.parametrize(("rules", "path", "excluded"), [
    ("*.log", "a.log", True),
    ("*.log", "sub/a.log", False),
    ("**/*.log", "sub/deep/a.log", True),
    ("build", "build/x/y", True),
    ("/build", "build/x", True),
    ("*.md\n!README.md", "README.md", False),
    ("*.md\n!README.md", "NOTES.md", True),
    ("data/?.bin", "data/a.bin", True),
    ("data/?.bin", "data/ab.bin", False),
    ("[a-c]*", "beta", True),
    ("[!a-c]*", "beta", False),
    ("# comment\n\n", "x", False),
])
def test_dockerignore_follows_dockers_rules(rules: str, path: str, excluded: bool) -> None:
    assert DockerIgnore(rules).excluded(path) is excluded


@given(st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6}){0,3}", fullmatch=True))
def test_a_directory_rule_excludes_everything_under_it(path: str) -> None:
    top = path.split("/")[0]
    assert DockerIgnore(top).excluded(path)
    assert not DockerIgnore(top + "x").excluded(path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('hi')\n")
    (tmp_path / "app" / "debug.log").write_text("noise\n")
    (tmp_path / "README.md").write_text("docs\n")
    (tmp_path / ".dockerignore").write_text("**/*.log\n")
    (tmp_path / "Dockerfile").write_text("FROM base\nCOPY app /srv/app\nRUN true\n")
    return tmp_path


def test_from_dockerfile_reads_the_file_and_takes_its_directory_as_context(
        project: Path) -> None:
    spec = from_dockerfile(project, name="svc", cpu=2, memory_mb=512)
    assert spec.context == str(project)
    assert spec.dockerfile.startswith("FROM base")
    assert (spec.name, spec.cpu, spec.memory_mb) == ("svc", 2, 512)
    assert [i.keyword for i in parsed(spec).instructions] == ["FROM", "COPY", "RUN"]


def test_from_dockerfile_names_the_template_after_its_directory(tmp_path: Path) -> None:
    folder = tmp_path / "My Service_2"
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM base\n")
    assert from_dockerfile(folder / "Dockerfile").name == "my-service_2"


def test_context_files_leave_out_what_dockerignore_excludes(project: Path) -> None:
    kept = [relative for _, relative in context_files(project)]
    assert "app/debug.log" not in kept
    assert {"app/main.py", "README.md", "Dockerfile", ".dockerignore"} <= set(kept)


def test_hash_changes_with_a_file_the_build_copies(project: Path) -> None:
    before = content_hash(from_dockerfile(project))
    assert content_hash(from_dockerfile(project)) == before
    (project / "app" / "main.py").write_text("print('changed')\n")
    assert content_hash(from_dockerfile(project)) != before


def test_hash_ignores_files_the_build_does_not_read(project: Path) -> None:
    before = content_hash(from_dockerfile(project))
    (project / "README.md").write_text("other docs\n")
    (project / "app" / "debug.log").write_text("more noise\n")
    assert content_hash(from_dockerfile(project)) == before


def test_hash_covers_the_options(project: Path) -> None:
    plain = content_hash(from_dockerfile(project))
    assert content_hash(from_dockerfile(project, cpu=2)) != plain
    assert content_hash(from_dockerfile(project, start_cmd="serve")) != plain


def test_a_copy_source_missing_from_the_context_names_its_line(project: Path) -> None:
    (project / "Dockerfile").write_text("FROM base\nRUN true\nCOPY nowhere /x\n")
    with pytest.raises(TemplateBuildError) as caught:
        from_dockerfile(project)
    assert caught.value.step == "COPY (line 3)"
    assert "'nowhere'" in str(caught.value)


def test_a_copy_source_excluded_by_dockerignore_is_missing(project: Path) -> None:
    (project / "Dockerfile").write_text("FROM base\nCOPY app/debug.log /x\n")
    with pytest.raises(TemplateBuildError, match=r"dockerignore"):
        from_dockerfile(project)


def test_a_copy_source_outside_the_context_is_refused(project: Path) -> None:
    (project / "Dockerfile").write_text("FROM base\nCOPY ../secret /x\n")
    with pytest.raises(TemplateBuildError, match=r"outside the build context"):
        from_dockerfile(project)


def test_an_unreadable_dockerfile_is_a_parse_error(tmp_path: Path) -> None:
    with pytest.raises(TemplateBuildError) as caught:
        from_dockerfile(tmp_path / "missing" / "Dockerfile")
    assert caught.value.step == "parse"
    assert "cannot read" in str(caught.value)


def test_a_broken_dockerfile_fails_in_from_dockerfile(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM base\nRUNN true\n")
    with pytest.raises(TemplateBuildError, match=r"line 2: unknown instruction 'RUNN'"):
        from_dockerfile(tmp_path)
