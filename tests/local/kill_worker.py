"""A separate process for the lifecycle race: read a sandbox id per line on stdin, kill
it (after a pause of the given milliseconds), and say ``killed ID`` or
``error ID TYPE``; ``hold PATH`` takes the lock of a sandbox directory and keeps it
until the next line.

Usage: ``python kill_worker.py HOME``.
"""

from __future__ import annotations

import fcntl
import os
import sys

import anyio
import anyio.to_thread

from provider_sdk.errors import SandboxError
from provider_sdk.local import LocalProvider


async def main(home: str) -> None:
    provider = LocalProvider(home=home)
    while True:
        line = (await anyio.to_thread.run_sync(sys.stdin.readline)).split()
        if not line:
            return
        if line[0] == "hold":
            fd = os.open(os.path.join(line[1], ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("held", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            os.close(fd)
            print("let go", flush=True)
            continue
        sandbox_id, delay_ms = line[0], int(line[1])
        await anyio.sleep(delay_ms / 1000)
        try:
            await provider.kill(sandbox_id)
            print(f"killed {sandbox_id}", flush=True)
        except SandboxError as exc:
            print(f"error {sandbox_id} {type(exc).__name__}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
