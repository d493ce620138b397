"""An exposed port under a crowd that never shows a token: the median time of a request
with the token (connect, send, read the whole answer) through the local provider's port
proxy while 400 connections without one are held open, against the same with none,
rounds interleaved (who goes first alternates).

The crowd is another process (anyone on the machine may be one), from 127.0.0.1 like
every client: each of its connections sends part of a request head and no token, and
is opened again as soon as the proxy closes it, so the proxy always has as many waiting
as it lets in. The server in the sandbox answers a short page. Prints one JSON line as
``bench/run.py`` does: ``port_crowd_400_token_request_vs_quiet_p50``, goal at most 3
times the quiet median. Not a test: goals are reported, not asserted. Usage:
``python bench/port_crowd.py [--rounds N]``; needs bubblewrap.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
import anyio.abc
from run import report

from provider_sdk import open_provider
from provider_sdk.models import ExposedPort

CROWD = 400
PORT = 8000
CROWDS = [("held", 1.0, 2.0), ("flood", 0.0, None)]
"""Each crowd: its name, the seconds it waits before opening a closed connection again,
and the goal."""
_SERVER = (f"cd /tmp && echo ok > index.html && "
           f"exec python3 -m http.server {PORT} --bind 127.0.0.1")


async def request(exposed: ExposedPort) -> float:
    """Seconds for one request with the token, from connect to the answer's end."""
    host, port = exposed.base_url.split("/")[2].split(":")
    start = time.perf_counter()
    with anyio.fail_after(60):
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(f"GET /index.html HTTP/1.1\r\nHost: {host}:{port}\r\n"
                              f"X-Psdk-Token: {exposed.token.reveal()}\r\n\r\n".encode())
            answer = b""
            try:
                while True:
                    answer += await stream.receive()
            except anyio.EndOfStream:
                pass
    if answer.split(b" ", 2)[1:2] != [b"200"]:
        raise RuntimeError(f"bench: the request was answered {answer[:40]!r}")
    return time.perf_counter() - start


async def crowd(address: str, count: int, pause: float) -> None:
    """Hold ``count`` connections to ``address`` that show no token, opening each again
    ``pause`` seconds after the proxy closes it; print ``ready`` once all are open the
    first time."""
    host, port = address.split(":")
    opened = anyio.Event()
    first = 0

    async def one() -> None:
        nonlocal first
        while True:
            try:
                async with await anyio.connect_tcp(host, int(port)) as stream:
                    await stream.send(b"GET / HTTP/1.1\r\nHost: crowd\r\n")
                    first += 1
                    if first == count:
                        opened.set()
                    while await stream.receive():
                        pass
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass
            await anyio.sleep(pause)

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
        await opened.wait()
        print("ready", flush=True)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as home:
        async with open_provider("local", home=home) as provider, \
                provider.create() as sandbox:
            await sandbox.start(["sh", "-c", _SERVER])
            exposed = await sandbox.expose(PORT)
            with anyio.fail_after(30):
                while True:
                    try:
                        await request(exposed)
                        break
                    except RuntimeError:
                        await anyio.sleep(0.1)
            address = exposed.base_url.split("/")[2]
            for name, pause, goal in CROWDS:
                quiet: list[float] = []
                crowded: list[float] = []
                for i in range(rounds):
                    order = (False, True) if i % 2 else (True, False)
                    for with_crowd in order:
                        if with_crowd:
                            crowded.append(await _with_crowd(address, exposed, pause))
                        else:
                            quiet.append(await request(exposed))
                report(f"port_crowd_{CROWD}_{name}_token_request_vs_quiet_p50",
                       statistics.median(crowded), statistics.median(quiet), goal=goal)


async def _with_crowd(address: str, exposed: ExposedPort, pause: float) -> float:
    """One request's time while a crowd process holds its connections."""
    process = await anyio.open_process([sys.executable, __file__, "--crowd", address,
                                        str(CROWD), str(pause)], stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        with anyio.fail_after(60):
            ready = b""
            while b"ready" not in ready:
                ready += await process.stdout.receive()
        await anyio.sleep(0.5)  # the crowd churns: each closed connection comes back
        return await request(exposed)
    finally:
        process.kill()
        await process.aclose()
        await request(exposed)  # untimed: it comes after what the crowd left queued


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--crowd":
        anyio.run(crowd, sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--rounds", type=int, default=9, help="samples per median")
        if shutil.which("bwrap") is None:
            sys.exit("bench: the local provider's port proxy needs bubblewrap (bwrap)")
        anyio.run(main, parser.parse_args().rounds)
