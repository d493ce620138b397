"""Benchmarks of the Docker provider against the raw ``docker`` package doing the same
work on the same Engine, in the same run, rounds interleaved.

The baseline uses the ``docker`` package's low-level client directly, with the same
container settings (network mode ``none``, capabilities dropped, limits), so the ratio
is what the SDK adds. Prints JSON lines as ``bench/run.py`` does. Usage:
``python bench/docker_provider.py [--rounds N]``; needs a Docker Engine and the base image.
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import statistics
import tarfile
import time
from collections.abc import Awaitable, Callable

import anyio
import docker
from provider_sdk_docker import DEFAULT_TEMPLATE, DockerProvider
from provider_sdk_docker._control import CAPABILITIES_KEPT
from provider_sdk_docker._scripts import KEEPALIVE
from run import report

FILE_SIZE = 64 << 20


class Raw:
    """The same work with the ``docker`` package alone."""

    def __init__(self) -> None:
        self.api = docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                                    or "unix:///var/run/docker.sock", version="auto")

    def create(self) -> str:
        host = self.api.create_host_config(
            network_mode="none", cap_drop=["ALL"], cap_add=list(CAPABILITIES_KEPT),
            security_opt=["no-new-privileges"], pids_limit=1024, mem_limit=2048 << 20,
            memswap_limit=2048 << 20, init=True)
        container = self.api.create_container(
            DEFAULT_TEMPLATE, entrypoint=["/bin/sh", "-c", KEEPALIVE], command=[],
            name=f"psdk-bench-{secrets.token_hex(4)}", labels={"psdk.bench": "1"},
            host_config=host)
        self.api.start(container["Id"])
        return str(container["Id"])

    def exec(self, container: str) -> int:
        created = self.api.exec_create(container, ["true"])
        self.api.exec_start(created["Id"])
        return int(self.api.exec_inspect(created["Id"])["ExitCode"])

    def write_read(self, container: str, data: bytes) -> bytes:
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo("big.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        self.api.put_archive(container, "/tmp", archive.getvalue())
        chunks, _ = self.api.get_archive(container, "/tmp/big.bin")
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.extractfile("big.bin")
            assert member is not None
            return member.read()

    def kill(self, container: str) -> None:
        self.api.remove_container(container, force=True)


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def main(rounds: int) -> None:
    raw = Raw()
    data = os.urandom(FILE_SIZE)
    async with DockerProvider() as provider:
        # Warm both paths (image cache, client version negotiation, threads).
        warm = await provider.create()
        await warm.exec(["true"])
        raw.kill(raw.create())

        create_sdk: list[float] = []
        create_raw: list[float] = []
        for _ in range(rounds):
            start = time.perf_counter()
            sandbox = await provider.create()
            await sandbox.exec(["true"])
            create_sdk.append(time.perf_counter() - start)
            await sandbox.kill()
            start = time.perf_counter()
            container = await anyio.to_thread.run_sync(raw.create)
            await anyio.to_thread.run_sync(raw.exec, container)
            create_raw.append(time.perf_counter() - start)
            raw.kill(container)
        report("docker.create_start_first_exec_p50", statistics.median(create_sdk),
               statistics.median(create_raw), 1.10)

        container = raw.create()
        try:
            exec_sdk, exec_raw = [], []
            for _ in range(rounds * 5):
                exec_sdk.append(await timed(lambda: warm.exec(["true"])))
                start = time.perf_counter()
                await anyio.to_thread.run_sync(raw.exec, container)
                exec_raw.append(time.perf_counter() - start)
            report("docker.exec_round_trip_p50", statistics.median(exec_sdk),
                   statistics.median(exec_raw), 1.10)

            file_sdk, file_raw = [], []
            for _ in range(max(3, rounds // 2)):
                async def sdk_file() -> None:
                    await warm.files.write("/tmp/big.bin", data)
                    assert await warm.files.read("/tmp/big.bin") == data

                file_sdk.append(await timed(sdk_file))
                start = time.perf_counter()
                back = await anyio.to_thread.run_sync(raw.write_read, container, data)
                file_raw.append(time.perf_counter() - start)
                assert back == data
            report("docker.file_64mib_write_read_p50", statistics.median(file_sdk),
                   statistics.median(file_raw), 1.25)
        finally:
            raw.kill(container)
            await warm.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    anyio.run(main, parser.parse_args().rounds)
