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
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
from provider_sdk_docker import DEFAULT_TEMPLATE, DockerProvider
from run import report

from provider_sdk.models import TemplateSpec
from provider_sdk.provider import SandboxProvider

CONTEXT_FILES = 300
FILE_BYTES = 16 << 10
ENVD_STAND_IN = "#!/bin/sh\nexec sleep infinity\n"


def make_context(root: Path) -> None:
    for index in range(CONTEXT_FILES):
        (root / "data").mkdir(exist_ok=True)
        (root / "data" / f"f{index:04}.bin").write_bytes(os.urandom(FILE_BYTES))


def new_spec(root: Path) -> TemplateSpec:
    marker = secrets.token_hex(8)
    dockerfile = root / "Dockerfile"
    dockerfile.write_text(f"FROM {DEFAULT_TEMPLATE}\nCOPY data /opt/data\n"
                          f"RUN echo {marker} > /opt/marker\n")
    return TemplateSpec.from_dockerfile(dockerfile, name=f"psdk-bench-{marker}")


async def measure(provider: SandboxProvider, root: Path, rounds: int) -> tuple[float, float]:
    firsts, seconds = [], []
    for _ in range(rounds):
        spec = new_spec(root)
        start = time.perf_counter()
        template = await provider.build_template(spec)
        firsts.append(time.perf_counter() - start)
        start = time.perf_counter()
        again = await provider.build_template(spec)
        seconds.append(time.perf_counter() - start)
        assert again.id == template.id, "the unchanged spec was built again"
        with contextlib.suppress(Exception):
            await provider.delete_template(template.id)
    return statistics.median(seconds), statistics.median(firsts)


@contextlib.contextmanager
def cube_environment(envd: Path) -> Iterator[dict[str, str] | None]:
    """The Cube emulator (docker backend) and the registry settings, if configured."""
    registry = os.environ.get("PSDK_TEST_REGISTRY")
    if not registry:
        yield None
        return
    from provider_sdk_e2b.emulator import run_in_thread

    from provider_sdk.emulators import EmulatorOptions

    with run_in_thread("cube", EmulatorOptions(api_key="bench-key", backend="docker")) as run:
        yield {**run.environment(), "PSDK_REGISTRY": registry,
               "PSDK_REGISTRY_USERNAME": os.environ.get("PSDK_TEST_REGISTRY_USERNAME", ""),
               "PSDK_REGISTRY_PASSWORD": os.environ.get("PSDK_TEST_REGISTRY_PASSWORD", ""),
               "PSDK_CUBE_ENVD": str(envd)}


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as tmp:
        root = Path(tmp)
        make_context(root)
        async with DockerProvider() as docker:
            second, first = await measure(docker, root, rounds)
        report("docker: second build of an unchanged spec, vs the first", second, first, 0.05)
        envd = root / "envd"
        envd.write_text(ENVD_STAND_IN)
        with cube_environment(envd) as settings:
            if settings is None:
                print('{"name": "cube: skipped", "reason": "PSDK_TEST_REGISTRY is not set"}')
                return
            os.environ.update(settings)
            from provider_sdk_e2b.cube import CubeProvider

            async with CubeProvider() as cube:
                second, first = await measure(cube, root, rounds)
            report("cube: second build of an unchanged spec, vs the first", second, first,
                   0.05)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    anyio.run(main, parser.parse_args().rounds)
