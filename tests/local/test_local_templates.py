"""Local templates: an image built with Docker Engine becomes a filesystem under the
home, and sandboxes run on an overlay of it (their writes stay theirs).

The builds need a Docker Engine with ``psdk-base:bookworm-2``. The template made of it
has its ``python3`` removed: the agent runs on the host's. Without an Engine those tests
skip, and fail under CI.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import stat
import sys
import tarfile
from pathlib import Path

import anyio
import pytest
from engines import require_bwrap, require_docker

from provider_sdk import (
    Capability,
    ConfigError,
    Conflict,
    Lifecycle,
    SandboxNotFound,
    SandboxState,
    TemplateBuildError,
    TemplateNotFound,
    VolumeMount,
)
from provider_sdk.distributions import install_hint
from provider_sdk.local import LocalProvider, _bwrap, _launch
from provider_sdk.models import SandboxSpec, Template, TemplateSpec

pytestmark = pytest.mark.anyio

BASE = "psdk-base:bookworm-2"
DOCKERFILE = f"""\
FROM {BASE}
RUN rm /usr/bin/python /usr/bin/python3 /usr/bin/python3.11
RUN echo template-marker > /opt/marker && mkdir -p /srv/app && echo base > /srv/app/keep
ENV GREETING="hello there" APP_MODE=test
WORKDIR /srv/app
"""
DOCKER_MODULES = ("docker", "provider_sdk_docker", "provider_sdk_templates")


async def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll an async predicate until it is true or the deadline passes."""
    with anyio.fail_after(timeout):
        while not await predicate():  # noqa: ASYNC110 - polls another process's state
            await anyio.sleep(0.05)


def _build(home: Path, spec: TemplateSpec) -> Template:
    async def build() -> Template:
        return await LocalProvider(home=home).build_template(spec)
    return anyio.run(build)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Template]:
    """One home with one template built from DOCKERFILE, shared by this module."""
    require_bwrap()
    require_docker()
    assert Path(_bwrap.SANDBOX_PYTHON).exists()  # the host has the python3 the image lacks
    home = tmp_path_factory.mktemp("psdk-templates")
    return home, _build(home, TemplateSpec(name="psdk-test-local", dockerfile=DOCKERFILE))


@pytest.fixture
def template(built: tuple[Path, Template]) -> Template:
    return built[1]


def _template_root(template: Template) -> Path:
    return Path(template.extra["path"])


# ----------------------------------------------------------------- running on it


async def test_sandbox_runs_on_the_images_filesystem(local: LocalProvider,
                                                     template: Template) -> None:
    """The RUN step's file, the image's ENV and WORKDIR, its /etc; not the host's /usr
    (the image has no python3, the host has)."""
    async with local.create(template=template.id) as sandbox:
        assert (await sandbox.files.read_text("/opt/marker")) == "template-marker\n"
        result = await sandbox.exec('echo "$GREETING/$APP_MODE"; pwd; id -un; '
                                    "cat /etc/debian_version; command -v python3 || echo none")
        lines = result.stdout.splitlines()
        assert lines[:3] == ["hello there/test", "/srv/app", "user"]
        assert lines[3].startswith("12.")
        assert lines[4] == "none"
        assert (await sandbox.refresh()).template == template.id


async def test_template_sandbox_mount_table_names_no_home_path(
        local: LocalProvider, template: Template, built: tuple[Path, Template]) -> None:
    """The overlay's layers are named relative to the sandbox's directory, and a volume
    is a filesystem of its own (where mounting is possible): the mount table inside
    names no path of the home."""
    volumes = []
    if local.supports(Capability.LIMITS_DISK):
        await local.create_volume("tpl-sealed")
        volumes = [VolumeMount(volume="tpl-sealed", path="/data")]
    try:
        async with local.create(template=template.id, volumes=volumes) as sandbox:
            mountinfo = (await sandbox.exec(["cat", "/proc/self/mountinfo"])).stdout
    finally:
        if volumes:
            await local.delete_volume("tpl-sealed")
    assert " - overlay psdk " in mountinfo, mountinfo
    assert str(built[0]) not in mountinfo, mountinfo


async def test_spec_env_and_cwd_override_the_images(local: LocalProvider,
                                                    template: Template) -> None:
    """SandboxSpec env and cwd win over the image's; a cwd the image lacks is made."""
    async with local.create(template=template.id, env={"GREETING": "mine"},
                            cwd="/work/here") as sandbox:
        result = await sandbox.exec('echo "$GREETING $APP_MODE"; pwd')
        assert result.stdout == "mine test\n/work/here\n"


async def test_writes_reach_neither_the_template_nor_another_sandbox(
        local: LocalProvider, template: Template) -> None:
    """A change to a template file and a new file stay in the sandbox that made them."""
    first = await local.create(template=template.id)
    second = await local.create(template=template.id)
    await first.files.write("/opt/marker", "changed\n")
    await first.files.write("/srv/app/new", "only here\n")
    assert (await first.files.read_text("/opt/marker")) == "changed\n"
    assert (await second.files.read_text("/opt/marker")) == "template-marker\n"
    assert not await second.files.exists("/srv/app/new")
    root = _template_root(template)
    assert (root / "opt" / "marker").read_text() == "template-marker\n"
    assert not (root / "srv" / "app" / "new").exists()


async def test_a_template_sandboxs_ids_are_its_own(local: LocalProvider,
                                                   template: Template) -> None:
    """Where sandboxes have host ids of their own (root here), the image's root's files
    show inside as the sandbox user's, who may change them, and what the sandbox writes
    is owned on the host by its own slot, never by the host's root; the template's own
    files keep their owners."""
    if not local.supports(Capability.SEAL_IDS):
        pytest.skip("sandboxes have host ids of their own only where the host runs as root")
    async with local.create(template=template.id) as sandbox:
        result = await sandbox.exec("stat -c %u:%g /opt/marker /srv/app; "
                                    "echo more >> /opt/marker && echo new > /srv/app/new && "
                                    "cat /opt/marker")
        meta = json.loads((local.home / "sandboxes" / sandbox.id / "meta.json").read_text())
        directory = local.home / "sandboxes" / sandbox.id
        upper = directory / "layer" / "upper" if (directory / "layer").is_dir() \
            else directory / "upper"
        owners = {name: os.lstat(upper / name).st_uid
                  for name in ("opt/marker", "srv/app/new", "srv/app", ".")}
    assert result.stdout == "1000:1000\n1000:1000\ntemplate-marker\nmore\n", result
    user = meta["ids"] + 1000
    assert owners == {"opt/marker": user, "srv/app/new": user, "srv/app": user, ".": user}
    assert os.lstat(_template_root(template) / "opt" / "marker").st_uid == 0


async def test_a_template_sandboxs_agent_starts_from_nothing_its_commands_change(
        local: LocalProvider, template: Template) -> None:
    """The image's files are the sandbox user's, but not what the agent starts from:
    its directory is a read-only tmpfs of its own (a module planted there would run in
    the agent at its next start), ``/etc/ld.so.preload``, which the loader that starts
    the agent reads, an empty read-only file, ``/.psdk``, where the interpreter looks
    for its library, a read-only tmpfs; and the agent starts in the C locale with a
    zone of its variable's, so the C library reads no locale, conversion-module or
    zone file of the image's. After a restart the agent is the provider's: nothing a
    command planted ran. The overlay is ``nosuid``."""
    script = ("for f in /etc/psdk/shutil.py /etc/psdk/agent.py /etc/ld.so.preload "
              "/.psdk/python311.zip /.psdk/host/python311.zip; do "
              "echo \"$0\" > $f 2>/dev/null && echo WROTE $f; done; "
              "for d in /etc/psdk/__pycache__ /.psdk/lib; do "
              "mkdir $d 2>/dev/null && echo MADE $d; done; "
              "cat /etc/ld.so.preload; grep ' / / ' /proc/self/mountinfo")
    async with local.create(template=template.id) as sandbox:
        result = await sandbox.exec(["/bin/bash", "-c", script, 'open("/tmp/planted", "w")'])
        meta = json.loads((local.home / "sandboxes" / sandbox.id / "meta.json").read_text())
        _launch.kill(_launch.Launched(**meta["launch"]))
        await sandbox.resume()
        assert not await sandbox.files.exists("/tmp/planted")
        meta = json.loads((local.home / "sandboxes" / sandbox.id / "meta.json").read_text())
        environ = (await anyio.Path(f"/proc/{meta['launch']['agent_pid']}/environ")
                   .read_bytes()).split(b"\0")
    assert "WROTE" not in result.stdout, result.stdout
    assert "MADE" not in result.stdout, result.stdout
    root_mount = result.stdout.strip().splitlines()[-1]
    assert "nosuid" in root_mount.split()[5], root_mount
    assert {b"LC_ALL=C", b"TZ=UTC0"} <= set(environ), environ
    assert not any(var.startswith(b"LANG=") for var in environ), environ


async def test_deleting_a_template_file_hides_it_in_that_sandbox_only(
        local: LocalProvider, template: Template) -> None:
    """``rm`` of a file the template has works; others and the template still have it."""
    first = await local.create(template=template.id)
    second = await local.create(template=template.id)
    result = await first.exec("rm /etc/debian_version /srv/app/keep && ls /srv/app")
    assert result.exit_code == 0, result.stderr
    assert not await first.files.exists("/etc/debian_version")
    assert await second.files.exists("/etc/debian_version")
    assert (_template_root(template) / "etc" / "debian_version").is_file()


async def test_template_sandbox_pauses_and_resumes(local: LocalProvider,
                                                   template: Template) -> None:
    """Pause freezes a template sandbox; resume carries on with its files."""
    async with local.create(template=template.id) as sandbox:
        await sandbox.files.write("/srv/app/state", "kept\n")
        await sandbox.pause()
        assert (await sandbox.refresh()).state == SandboxState.PAUSED
        await sandbox.resume()
        assert (await sandbox.exec("cat /srv/app/state /opt/marker")).stdout == \
            "kept\ntemplate-marker\n"


async def test_stopped_template_sandbox_resumes_from_its_files(
        local: LocalProvider, template: Template) -> None:
    """After its processes die, resume mounts its layer over the template again."""
    async with local.create(template=template.id) as sandbox:
        await sandbox.exec("echo kept > /srv/app/state && rm /opt/marker")
        meta = json.loads((local.home / "sandboxes" / sandbox.id / "meta.json").read_text())
        _launch.kill(_launch.Launched(**meta["launch"]))
        assert (await sandbox.refresh()).state == SandboxState.STOPPED
        await sandbox.resume()
        result = await sandbox.exec("cat /srv/app/state; test -e /opt/marker || echo gone")
        assert result.stdout == "kept\ngone\n"


async def test_snapshot_of_a_template_sandbox_keeps_template_and_changes(
        local: LocalProvider, template: Template) -> None:
    """A sandbox made from the snapshot sees the template's files, the changes, and the
    deletions."""
    async with local.create(template=template.id) as sandbox:
        await sandbox.exec("echo changed > /srv/app/state && rm /srv/app/keep")
        snap = await sandbox.snapshot()
    async with local.create(snapshot=snap.id) as restored:
        result = await restored.exec("cat /opt/marker /srv/app/state; "
                                     "test -e /srv/app/keep || echo deleted; pwd")
        assert result.stdout == "template-marker\nchanged\ndeleted\n/srv/app\n"
        assert (await restored.refresh()).template == template.id


async def test_idle_timeout_ends_a_template_sandbox(local: LocalProvider,
                                                   template: Template) -> None:
    """Lifecycle(idle_timeout, on_idle='kill') works on a template sandbox too."""
    sandbox = await local.create(template=template.id,
                                 lifecycle=Lifecycle(idle_timeout=0.5, on_idle="kill"))

    async def gone() -> bool:
        return sandbox.id not in [i.id for i in await local.list()]

    await wait_for(gone)
    with pytest.raises(SandboxNotFound):
        await local.get_info(sandbox.id)


async def test_kill_removes_the_sandboxs_layer_only(local: LocalProvider,
                                                   template: Template) -> None:
    """Kill removes the sandbox's directory; the template stays usable."""
    sandbox = await local.create(template=template.id)
    await sandbox.kill()
    assert not (local.home / "sandboxes" / sandbox.id).exists()
    async with local.create(template=template.id) as again:
        assert (await again.files.read_text("/opt/marker")) == "template-marker\n"


# ------------------------------------------------------------------ build, cache


async def test_unchanged_spec_is_not_rebuilt_and_force_rebuilds(
        local: LocalProvider, template: Template) -> None:
    """Same spec: the same template, no progress. force=True builds and exports again."""
    spec = TemplateSpec(name="psdk-test-local", dockerfile=DOCKERFILE)
    progress: list[str] = []
    again = await local.build_template(spec, on_progress=progress.append)
    assert (again.id, again.content_hash, again.created_at) == \
        (template.id, template.content_hash, template.created_at)
    assert progress == []
    # force while a sandbox runs on it: refused, the files are in use
    sandbox = await local.create(template=template.id)
    with pytest.raises(Conflict, match=sandbox.id):
        await local.build_template(spec, force=True)
    await sandbox.kill()
    forced = await local.build_template(spec, force=True, on_progress=progress.append)
    assert forced.id == template.id
    assert forced.created_at is not None
    assert template.created_at is not None
    assert forced.created_at > template.created_at
    assert any(line.startswith("Step ") for line in progress)
    assert template.id in [t.id for t in await local.list_templates()]


async def test_template_is_listed_with_the_images_config(local: LocalProvider,
                                                        template: Template) -> None:
    """list_templates reports the name, the content hash and the image's ENV/WORKDIR."""
    listed = {t.id: t for t in await local.list_templates()}
    found = listed[template.id]
    assert (found.name, found.provider) == ("psdk-test-local", "local")
    assert found.content_hash == template.content_hash
    assert template.id == f"psdk-test-local-{template.content_hash[:12]}"  # type: ignore[index]
    assert found.extra["env"]["GREETING"] == "hello there"
    assert found.extra["workdir"] == "/srv/app"


async def test_delete_refuses_while_used_then_works_without_docker(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A template in use by a sandbox or a snapshot is a Conflict; unused it is deleted.
    Listing, creating and deleting need no Docker."""
    require_docker()
    provider = LocalProvider(home=home)
    template = await provider.build_template(TemplateSpec(
        name="psdk-test-delete", dockerfile=f"FROM {BASE}\nRUN echo gone > /gone\n"))
    for module in DOCKER_MODULES:  # from here on, importing Docker's modules fails
        monkeypatch.setitem(sys.modules, module, None)
    sandbox = await provider.create(template=template.id)
    assert (await sandbox.files.read_text("/gone")) == "gone\n"
    snap = await sandbox.snapshot()
    with pytest.raises(Conflict, match=sandbox.id):
        await provider.delete_template(template.id)
    await sandbox.kill()
    with pytest.raises(Conflict, match=snap.id):
        await provider.delete_template(template.id)
    await provider.delete_snapshot(snap.id)
    await provider.delete_template(template.id)
    assert template.id not in [t.id for t in await provider.list_templates()]
    assert not await anyio.Path(template.extra["path"]).exists()
    with pytest.raises(TemplateNotFound):
        await provider.delete_template(template.id)
    with pytest.raises(TemplateNotFound, match=template.id):
        await provider.create(template=template.id)
    assert await provider.list() == []


async def test_failing_run_raises_template_build_error_naming_the_step(
        provider: LocalProvider) -> None:
    """A RUN that fails: TemplateBuildError with the step and the log; nothing is kept."""
    require_docker()
    spec = TemplateSpec(name="psdk-test-fail",
                        dockerfile=f"FROM {BASE}\nRUN echo before-failure && exit 3\n")
    with pytest.raises(TemplateBuildError) as caught:
        await provider.build_template(spec)
    assert "RUN" in caught.value.step
    assert "before-failure" in caught.value.log_tail
    assert caught.value.provider == "local"
    assert str(caught.value).startswith("[local] ")
    assert await provider.list_templates() == []


async def test_cmd_is_refused_with_its_line_before_building(provider: LocalProvider) -> None:
    """What local sandboxes cannot honour is refused with line numbers, before Docker;
    USER is refused only for a uid other than 0 and 1000."""
    spec = TemplateSpec(name="psdk-test-cmd", dockerfile=(
        f"FROM {BASE}\nRUN true\nCMD [\"sleep\", \"1\"]\nEXPOSE 8080\nUSER 1001\n"
        "USER 1000:1000\nUSER someone\n"))
    problems = provider.check_template(spec)
    assert [(p.line, p.what) for p in problems] == [(3, "CMD"), (4, "EXPOSE"), (5, "USER")]
    with pytest.raises(TemplateBuildError, match="line 3") as caught:
        await provider.build_template(spec)
    assert caught.value.step == "check"


async def test_start_cmd_runs_and_ready_cmd_is_awaited_as_the_images_user(
        provider: LocalProvider) -> None:
    """A template's start_cmd runs in the background from create, which returns once
    ready_cmd succeeds; after a restart from files it runs again. ``USER app`` (uid
    1000 in the image's passwd) is honoured."""
    require_docker()
    spec = TemplateSpec(
        name="psdk-test-start",
        dockerfile=f"FROM {BASE}\nRUN useradd --uid 1000 --create-home app\nUSER app\n",
        start_cmd="sleep 0.3; echo up > /tmp/ready-flag; exec sleep 1000",
        ready_cmd="test -s /tmp/ready-flag")
    assert provider.check_template(spec) == []
    template = await provider.build_template(spec)
    sandbox = await provider.create(template=template.id)
    result = await sandbox.exec("cat /tmp/ready-flag; id -un; id -u")
    assert result.stdout == "up\napp\n1000\n"
    await sandbox.exec("rm /tmp/ready-flag")
    meta = json.loads(await anyio.Path(provider.home / "sandboxes" / sandbox.id
                                       / "meta.json").read_text())
    _launch.kill(_launch.Launched(**meta["launch"]))
    await sandbox.resume()
    assert (await sandbox.files.read_text("/tmp/ready-flag")) == "up\n"
    await sandbox.kill()
    await provider.delete_template(template.id)


async def test_an_image_user_other_than_uid_1000_fails_the_build(
        provider: LocalProvider) -> None:
    """``USER`` naming a user whose uid is not 0 or 1000 fails at that line."""
    require_docker()
    spec = TemplateSpec(name="psdk-test-user", dockerfile=(
        f"FROM {BASE}\nRUN useradd --uid 1234 other\nUSER other\n"))
    with pytest.raises(TemplateBuildError, match="1000") as caught:
        await provider.build_template(spec)
    assert caught.value.step == "USER (line 3)"
    assert await provider.list_templates() == []


async def test_build_without_the_templates_distribution_is_a_config_error(
        provider: LocalProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building needs Docker Engine through sandbox-provider-sdk-templates; the error
    says so, and how to install it (a spec built before is found without it)."""
    for module in ["provider_sdk_templates", *(m for m in sys.modules
                                               if m.startswith("provider_sdk_templates."))]:
        monkeypatch.setitem(sys.modules, module, None)
    spec = TemplateSpec(name="x", dockerfile=f"FROM {BASE}\nRUN echo {secrets.token_hex(8)}\n")
    with pytest.raises(ConfigError,
                       match=re.escape(install_hint("sandbox-provider-sdk-templates"))):
        await provider.build_template(spec)
    assert await provider.list_templates() == []


async def test_unknown_or_malformed_template_is_not_found(provider: LocalProvider) -> None:
    """Only built template ids name a template; nothing is created otherwise."""
    for name in ("nope-0123456789ab", "../../etc", ".hidden-0123456789ab"):
        with pytest.raises(TemplateNotFound):
            await provider.create(template=name)
    assert await provider.list() == []


# ------------------------------------------------------------- archive extraction


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for info, content in members:
            if content is not None:
                info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    data.seek(0)
    return data


def _entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644,
           link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def test_extract_keeps_symlinks_modes_and_hard_links(tmp_path: Path) -> None:
    from provider_sdk_templates.rootfs import extract

    extract(_archive(
        (_entry("bin", tarfile.DIRTYPE, 0o755), None),
        (_entry("bin/tool", mode=0o4755), b"#!/bin/sh\n"),
        (_entry("usr-link", tarfile.SYMTYPE, link="/usr/lib"), None),
        (_entry("bin/same", tarfile.LNKTYPE, link="bin/tool"), None),
        (_entry("readonly", tarfile.DIRTYPE, 0o555), None),
        (_entry("readonly/file"), b"x"),
        (_entry("dev/null", tarfile.CHRTYPE, 0o666), None),
    ), tmp_path)
    assert stat.S_IMODE((tmp_path / "bin" / "tool").stat().st_mode) == 0o4755
    assert os.readlink(tmp_path / "usr-link") == "/usr/lib"
    assert (tmp_path / "bin" / "same").stat().st_ino == (tmp_path / "bin" / "tool").stat().st_ino
    assert stat.S_IMODE((tmp_path / "readonly").stat().st_mode) == 0o555
    assert (tmp_path / "readonly" / "file").read_bytes() == b"x"
    assert not (tmp_path / "dev" / "null").exists()


@pytest.mark.parametrize("members", [
    [(_entry("../escaped"), b"x")],
    [(_entry("a/../../escaped"), b"x")],
    [(_entry("link", tarfile.SYMTYPE, link="/tmp"), None), (_entry("link/escaped"), b"x")],
    [(_entry("hard", tarfile.LNKTYPE, link="../outside"), None)],
], ids=["dotdot", "nested-dotdot", "through-symlink", "hard-link-out"])
def test_extract_refuses_entries_that_leave_the_directory(
        tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    from provider_sdk_templates.rootfs import extract

    target = tmp_path / "root"
    with pytest.raises(TemplateBuildError, match="unsafe entry"):
        extract(_archive(*members), target)
    assert not (tmp_path / "escaped").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_default_sandboxes_are_unchanged_by_templates(tmp_path: Path) -> None:
    """A template-less spec still runs on the host's /usr (no Docker involved)."""
    require_bwrap()

    async def run() -> str:
        provider = LocalProvider(home=tmp_path / "home")
        async with provider.create(SandboxSpec()) as sandbox:
            return (await sandbox.exec("command -v python3")).stdout
    assert anyio.run(run) == "/usr/bin/python3\n"
