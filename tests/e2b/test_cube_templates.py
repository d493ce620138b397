"""Cube's template API on the emulator: the unmodified ``cubesandbox`` SDK makes templates
from images pushed to a real registry on 127.0.0.1, and sandboxes from them run those
images (docker backend); every way a pull or the envd probe fails is a FAILED build that
says why, and never shows the registry password.

Needs a Docker Engine with the base image, and the registry CI starts
(``PSDK_TEST_REGISTRY``, ``PSDK_TEST_REGISTRY_USERNAME``, ``PSDK_TEST_REGISTRY_PASSWORD``);
without them the tests skip, except under CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from typing import Any

import attrs
import httpx
import pytest
from cubesandbox import (  # type: ignore[import-untyped]
    ApiError,
    Sandbox,
    Template,
    TemplateBuild,
    TemplateNotFoundError,
)
from engines import missing, require_docker
from provider_emulators import provider_options
from provider_sdk_e2b.cube import CubeProvider
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.models import SandboxSpec

BASE_IMAGE = os.environ.get("PSDK_DOCKER_TEMPLATE") or "psdk-base:bookworm-2"
MARKER_PATH = "/etc/psdk-marker"
BUILD_DEADLINE = 180.0


@attrs.frozen(kw_only=True)
class Registry:
    address: str
    username: str
    password: str


@attrs.frozen(kw_only=True)
class Pushed:
    """Images pushed for these tests: ``with_envd`` carries ``/usr/bin/envd`` and a
    marker file; ``without_envd`` only the marker."""

    repository: str
    marker: str
    with_envd: str
    without_envd: str


@pytest.fixture(scope="module")
def registry() -> Registry:
    names = ("PSDK_TEST_REGISTRY", "PSDK_TEST_REGISTRY_USERNAME", "PSDK_TEST_REGISTRY_PASSWORD")
    values = [os.environ.get(name) for name in names]
    if not all(values):
        missing(f"no OCI registry to push to: set {', '.join(names)}")
    address, username, password = (str(v) for v in values)
    return Registry(address=address, username=username, password=password)


def _engine() -> Any:
    import docker

    return docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                            or "unix:///var/run/docker.sock", version="auto", timeout=120)


def _forget_locally(reference: str) -> None:
    """Remove an image from the Docker Engine, so a template build must pull it."""
    import docker.errors

    client = _engine()
    try:
        client.remove_image(reference, force=True)
    except docker.errors.ImageNotFound:
        pass
    finally:
        client.close()


@pytest.fixture(scope="module")
def pushed(registry: Registry) -> Iterator[Pushed]:
    """Build two small images (network off), push them with the registry's credentials,
    and drop them from the Engine; delete them from the registry afterwards."""
    require_docker()
    unique = secrets.token_hex(4)
    repository = f"{registry.address}/psdk-test/cube-{unique}"
    marker = f"marker-{unique}"
    envd = ("RUN printf '#!/bin/sh\\nexec sleep infinity\\n' > /usr/bin/envd "
            "&& chmod 755 /usr/bin/envd\n")
    images = {"envd": f"FROM {BASE_IMAGE}\n{envd}RUN echo {marker} > {MARKER_PATH}\n",
              "no-envd": f"FROM {BASE_IMAGE}\nRUN echo {marker} > {MARKER_PATH}\n"}
    client = _engine()
    auth = {"username": registry.username, "password": registry.password}
    digests: list[str] = []
    try:
        for tag, dockerfile in images.items():
            reference = f"{repository}:{tag}"
            for event in client.build(
                    fileobj=io.BytesIO(dockerfile.encode()), tag=reference,
                    network_mode="none", rm=True, forcerm=True, decode=True):
                assert "error" not in event, event["error"]
            for event in client.push(
                    repository, tag=tag, auth_config=auth, stream=True, decode=True):
                assert "error" not in event, event["error"]
                if "aux" in event and "Digest" in event["aux"]:
                    digests.append(event["aux"]["Digest"])
            _forget_locally(reference)
        yield Pushed(repository=repository, marker=marker, with_envd=f"{repository}:envd",
                     without_envd=f"{repository}:no-envd")
    finally:
        for tag in images:
            _forget_locally(f"{repository}:{tag}")
        client.close()
        path = repository.split("/", 1)[1]
        for digest in digests:
            httpx.delete(f"http://{registry.address}/v2/{path}/manifests/{digest}",
                         auth=(registry.username, registry.password), timeout=30)


@pytest.fixture
def cube_docker(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningEmulator]:
    """The Cube flavor on the docker backend, with the SDK's settings pointing at it."""
    require_docker()
    options = EmulatorOptions(api_key=secrets.token_urlsafe(16), backend="docker")
    with run_in_thread("cube", options) as running:
        for key, value in running.environment().items():
            monkeypatch.setenv(key, value)
        yield running


def _api(running: RunningEmulator) -> httpx.Client:
    return httpx.Client(base_url=running.url, timeout=30,
                        headers={"X-API-Key": running.api_key.reveal()})


def _alias() -> str:
    return f"psdk-{secrets.token_hex(4)}"


def _wait(job: TemplateBuild) -> tuple[TemplateBuild, list[int]]:
    """Poll the build until it is READY or FAILED; return it and the progress seen."""
    seen = [job.progress]
    deadline = time.monotonic() + BUILD_DEADLINE
    while True:
        status = Template.get_build_status(job.template_id, job.build_id)
        seen.append(status.progress)
        if status.status.upper() in ("READY", "FAILED"):
            return status, seen
        assert time.monotonic() < deadline, f"the build is still {status.status}"
        time.sleep(0.1)


def _build(registry: Registry, image: str, **extra: object) -> tuple[TemplateBuild, list[int]]:
    job = Template.build(image=image, registry_username=registry.username,
                         registry_password=registry.password, **extra)
    return _wait(job)


@attrs.frozen(kw_only=True)
class Built:
    template_id: str
    alias: str
    job_id: str


@pytest.fixture
def built(cube_docker: RunningEmulator, registry: Registry, pushed: Pushed) -> Built:
    """A template from the pushed image with envd, built after the image was dropped
    from the Engine (so it was pulled from the registry)."""
    _forget_locally(pushed.with_envd)
    alias = _alias()
    job = Template.build(name=f"{alias}:v1", image=f"http://{pushed.with_envd}",
                         registry_username=registry.username,
                         registry_password=registry.password, cpu_count=1000, memory_mb=512,
                         envs={"FROM_TEMPLATE": "1"}, probe_port=49983, probe_path="/health")
    assert re.fullmatch(r"tpl-[0-9a-f]{24}", job.template_id)
    assert (job.status, job.phase, job.progress) == ("PENDING", "PULLING", 0)
    done, progress = _wait(job)
    assert (done.status, done.progress) == ("READY", 100), done.message
    assert progress == sorted(progress)
    assert len(set(progress)) > 2
    return Built(template_id=job.template_id, alias=alias, job_id=job.build_id)


# ------------------------------------------------------------------ happy path

def test_a_built_template_is_ready_under_its_id_and_alias(cube_docker: RunningEmulator,
                                                          built: Built,
                                                          pushed: Pushed) -> None:
    info = Template.get(built.alias)
    assert (info.template_id, info.status, info.name) == (built.template_id, "READY",
                                                          built.alias)
    assert info.image_info == f"http://{pushed.with_envd}"
    assert info.create_request is not None
    assert info.create_request["cpu"] == 1000
    listed = {t.template_id: t for t in Template.list()}
    assert listed[built.template_id].name == built.alias
    with _api(cube_docker) as api:
        found = api.get(f"/templates/aliases/{built.alias}")
        assert found.json() == {"templateID": built.template_id, "public": False}
        assert api.get("/templates/aliases/psdk-nobody").status_code == 404


def test_the_build_logs_name_each_phase(built: Built) -> None:
    logs = Template.get_build_logs(built.template_id, built.job_id)
    text = "\n".join(logs["logs"])
    for phase in ("PULLING", "BUILDING", "DISTRIBUTING", "READY"):
        assert f"[{phase}]" in text


def test_a_sandbox_from_the_template_runs_the_pushed_image(built: Built,
                                                           pushed: Pushed) -> None:
    for template in (built.alias, built.template_id):
        with Sandbox.create(template=template) as sandbox:
            assert sandbox.files.read(MARKER_PATH) == f"{pushed.marker}\n"
            result = sandbox.commands.run(f"test -x /usr/bin/envd && cat {MARKER_PATH}")
            assert (result.exit_code, result.stdout) == (0, f"{pushed.marker}\n")


@pytest.mark.anyio
async def test_the_cube_provider_runs_a_sandbox_from_the_template(
        cube_docker: RunningEmulator, built: Built, pushed: Pushed) -> None:
    async with CubeProvider(**provider_options(cube_docker)) as provider:
        sandbox = await provider.create(SandboxSpec(template=built.alias))
        try:
            assert await sandbox.files.read_text(MARKER_PATH) == f"{pushed.marker}\n"
        finally:
            await sandbox.kill()


def test_a_rebuild_is_a_new_job_that_gets_ready(built: Built) -> None:
    job = Template.rebuild(built.template_id)
    assert job.build_id != built.job_id
    assert job.template_id == built.template_id
    done, _ = _wait(job)
    assert done.status == "READY"
    assert Template.get(built.template_id).job_id == job.build_id


def test_the_registry_password_is_never_shown(cube_docker: RunningEmulator, built: Built,
                                              registry: Registry) -> None:
    with _api(cube_docker) as api:
        for path in (f"/templates/{built.template_id}", "/templates",
                     f"/templates/{built.template_id}/builds/{built.job_id}/logs",
                     f"/templates/{built.template_id}/builds/{built.job_id}/status"):
            answer = api.get(path)
            assert answer.status_code == 200
            assert registry.password not in answer.text
    request = Template.get(built.template_id).create_request
    assert request is not None
    assert request["registryUsername"] == registry.username
    assert "registryPassword" not in request


def test_delete_removes_the_template_and_its_alias(cube_docker: RunningEmulator,
                                                   built: Built) -> None:
    Template.delete(built.template_id)
    with pytest.raises(TemplateNotFoundError):
        Template.get(built.template_id)
    with pytest.raises(TemplateNotFoundError):
        Template.get(built.alias)
    with _api(cube_docker) as api:
        assert api.get(f"/templates/aliases/{built.alias}").status_code == 404
    assert built.template_id not in {t.template_id for t in Template.list()}


# --------------------------------------------------------------------- aliases

def test_an_alias_held_by_another_template_is_a_conflict(cube_docker: RunningEmulator,
                                                         registry: Registry,
                                                         pushed: Pushed) -> None:
    alias = _alias()
    first = Template.build(name=alias, image=f"http://{pushed.repository}:never-pushed")
    with pytest.raises(ApiError) as conflict:
        Template.build(name=alias, image=f"http://{pushed.with_envd}")
    assert conflict.value.status_code == 409
    second = Template.build(image=f"http://{pushed.repository}:never-pushed")
    with pytest.raises(ApiError) as taken:
        Template.set_alias(second.template_id, alias)
    assert taken.value.status_code == 409
    for bad in ("Upper", "tpl-x", "snap-x", "-x", "x" * 65):
        with pytest.raises(ApiError) as invalid:
            Template.set_alias(second.template_id, bad)
        assert invalid.value.status_code == 400
    Template.set_alias(first.template_id, None)  # cleared: free for another
    assert Template.set_alias(second.template_id, alias).name == alias
    assert Template.get(alias).template_id == second.template_id


# -------------------------------------------------------------------- failures

def test_a_wrong_password_fails_the_pull_without_showing_it(cube_docker: RunningEmulator,
                                                            pushed: Pushed) -> None:
    wrong = f"wrong-{secrets.token_hex(8)}"
    job = Template.build(image=f"http://{pushed.with_envd}", registry_username="psdk",
                         registry_password=wrong)
    done, _ = _wait(job)
    assert done.status == "FAILED"
    info = Template.get(job.template_id)
    assert info.status == "FAILED"
    assert info.last_error.startswith("pull: unauthorized")
    with _api(cube_docker) as api:
        for path in (f"/templates/{job.template_id}", "/templates",
                     f"/templates/{job.template_id}/builds/{job.build_id}/logs"):
            assert wrong not in api.get(path).text


def test_a_tag_never_pushed_fails_as_manifest_unknown(cube_docker: RunningEmulator,
                                                      registry: Registry,
                                                      pushed: Pushed) -> None:
    done, _ = _build(registry, f"http://{pushed.repository}:never-pushed")
    assert done.status == "FAILED"
    assert done.error_message.startswith("pull: manifest unknown")


def test_an_unreachable_registry_fails_the_pull(cube_docker: RunningEmulator,
                                                registry: Registry) -> None:
    with socket.socket() as probe:  # a port on 127.0.0.1 that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done, _ = _build(registry, f"http://127.0.0.1:{port}/psdk-test/nothing:1")
    assert done.status == "FAILED"
    assert done.error_message.startswith("pull: registry unreachable")


def test_a_plain_http_registry_needs_the_http_prefix(cube_docker: RunningEmulator,
                                                     registry: Registry,
                                                     pushed: Pushed) -> None:
    done, _ = _build(registry, pushed.with_envd)
    assert done.status == "FAILED"
    assert "does not answer HTTPS" in done.error_message
    assert f"http://{pushed.with_envd}" in done.error_message


def test_an_image_without_envd_fails_the_probe(cube_docker: RunningEmulator,
                                               registry: Registry, pushed: Pushed) -> None:
    done, _ = _build(registry, f"http://{pushed.without_envd}")
    assert done.status == "FAILED"
    assert done.error_message.startswith("probe: nothing answers on 49983/health")
    assert "/usr/bin/envd" in done.error_message
    assert Template.get(done.template_id).last_error == done.error_message


def test_a_sandbox_from_a_failed_template_is_refused(cube_docker: RunningEmulator,
                                                     registry: Registry,
                                                     pushed: Pushed) -> None:
    done, _ = _build(registry, f"http://{pushed.without_envd}", name=_alias())
    with _api(cube_docker) as api:
        answer = api.post("/sandboxes", json={"templateID": done.template_id})
    assert answer.status_code == 400
    assert "not ready" in answer.json()["message"]


def test_the_local_backend_cannot_run_images(cube_emulator: RunningEmulator,
                                             pushed: Pushed) -> None:
    done, _ = _wait(Template.build(image=f"http://{pushed.with_envd}"))
    assert done.status == "FAILED"
    assert "cannot run images; run it with --backend docker" in done.error_message


def test_requests_cube_refuses(cube_docker: RunningEmulator) -> None:
    with _api(cube_docker) as api:
        assert api.post("/templates", json={"name": "x"}).status_code == 400
        assert api.post("/templates", json={"image": "127.0.0.1:1/a:1",
                                            "name": "tpl-x"}).status_code == 400
        assert api.patch("/templates/tpl-000000000000000000000000",
                         json={}).status_code == 501
        assert api.get("/templates/tpl-000000000000000000000000").status_code == 404
