"""Benchmark of template caching: building an unchanged spec again against building it
the first time, in the same run, per target. Goal: the second build costs at most 5% of
the first.

Each round makes a new spec (a fresh marker, so the first build really builds) with a
context of many small files that ``COPY`` reads, so the second build's content hash has
real work to do. Targets: ``docker`` always; ``cube`` (the Cube emulator on the docker
backend, pushing to the registry named by ``PSDK_TEST_REGISTRY`` with
``PSDK_TEST_REGISTRY_USERNAME`` and ``PSDK_TEST_REGISTRY_PASSWORD``) when that is set.
Prints JSON lines as ``bench/run.py`` does. Usage: ``python bench/templates.py
[--rounds N]``; needs a Docker Engine and the base image.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
from provider_sdk_daytona.provider import DaytonaProvider
from provider_sdk_docker import DEFAULT_TEMPLATE, DockerProvider
from provider_sdk_e2b.cube import CubeProvider
from provider_sdk_e2b.provider import E2BProvider
from provider_sdk_emulators.e2b import run_in_thread
from run import report

from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.local import LocalProvider
from provider_sdk.models import TemplateSpec
from provider_sdk.provider import SandboxProvider
from provider_sdk.templates import from_dockerfile

CONTEXT_FILES = 300
FILE_BYTES = 16 << 10
ENVD_STAND_IN = "#!/bin/sh\nexec sleep infinity\n"


def make_context(root: Path) -> None:
    (root / "data").mkdir()
    for index in range(CONTEXT_FILES):
        (root / "data" / f"f{index:04}.bin").write_bytes(os.urandom(FILE_BYTES))


def new_spec(root: Path, *, copies: bool) -> TemplateSpec:
    marker = secrets.token_hex(8)
    dockerfile = root / "Dockerfile"
    copy = "COPY data /opt/data\n" if copies else ""
    dockerfile.write_text(f"FROM {DEFAULT_TEMPLATE}\n{copy}RUN echo {marker} > /opt/marker\n")
    return from_dockerfile(dockerfile, name=f"psdk-bench-{marker}")


async def measure(provider: SandboxProvider, root: Path, rounds: int) -> tuple[float, float]:
    """Medians of the second build and of the first, over fresh specs."""
    firsts, seconds = [], []
    copies = provider.template_support.context
    for _ in range(rounds):
        spec = new_spec(root, copies=copies)
        start = time.perf_counter()
        template = await provider.build_template(spec)
        firsts.append(time.perf_counter() - start)
        start = time.perf_counter()
        again = await provider.build_template(spec)
        seconds.append(time.perf_counter() - start)
        assert again.id == template.id, "the unchanged spec was built again"
        await provider.delete_template(template.id)
    return statistics.median(seconds), statistics.median(firsts)


@contextlib.contextmanager
def emulated(name: str) -> Iterator[RunningEmulator]:
    """The vendor's emulator on the docker backend, its settings in the environment."""
    with run_in_thread(name, EmulatorOptions(api_key=secrets.token_urlsafe(16),
                                             backend="docker")) as running:
        saved = dict(os.environ)
        os.environ.update(running.environment())
        try:
            yield running
        finally:
            os.environ.clear()
            os.environ.update(saved)


async def targets(root: Path) -> AsyncIterator[tuple[str, SandboxProvider | str]]:
    """Each target's provider, or why it is skipped."""
    async with DockerProvider() as docker:
        yield "docker", docker
    if shutil.which("bwrap"):
        async with LocalProvider(home=root / "home") as local:
            yield "local", local
    else:
        yield "local", "bubblewrap is not installed"
    with emulated("e2b"):
        async with E2BProvider() as e2b:
            yield "e2b", e2b
    with emulated("daytona") as running:
        async with DaytonaProvider(api_key=running.api_key.reveal(),
                                   api_url=running.settings["DAYTONA_API_URL"]) as daytona:
            yield "daytona", daytona
    registry = os.environ.get("PSDK_TEST_REGISTRY")
    if not registry:
        yield "cube", "PSDK_TEST_REGISTRY is not set"
        return
    envd = root / "envd"
    envd.write_text(ENVD_STAND_IN)
    with emulated("cube"):
        os.environ["PSDK_REGISTRY_USERNAME"] = os.environ.get("PSDK_TEST_REGISTRY_USERNAME", "")
        os.environ["PSDK_REGISTRY_PASSWORD"] = os.environ.get("PSDK_TEST_REGISTRY_PASSWORD", "")
        async with CubeProvider(registry=registry, envd=str(envd)) as cube:
            yield "cube", cube


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as tmp:
        root = Path(tmp)
        make_context(root)
        async for name, provider in targets(root):
            if isinstance(provider, str):
                print(json.dumps({"name": f"{name}: skipped", "reason": provider}), flush=True)
                continue
            second, first = await measure(provider, root, rounds)
            report(f"{name}: second build of an unchanged spec, vs the first", second, first,
                   0.05)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    anyio.run(main, parser.parse_args().rounds)
