"""``psdk demo``: a guided tour of the SDK, on the embedded local provider unless
``--provider`` names another.

Each step prints the Python call it makes, then what came back: create, exec with
streamed output, files, a persistent shell, a snapshot and a sandbox made from it,
pause and resume, kill. A step whose capability the provider lacks is skipped with a
note. Everything the tour creates is removed, even when interrupted.

Where bubblewrap is missing, the tour opens the local provider in its unisolated mode
and says so loudly, on stderr, before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from provider_sdk import config
from provider_sdk.capabilities import Capability
from provider_sdk.cli.console import Console
from provider_sdk.errors import NotFound, SandboxError
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

__all__ = ["UNISOLATED_WARNING", "cmd_demo"]

UNISOLATED_WARNING = """\
!!! bubblewrap (bwrap) is not installed, so this tour runs the local provider UNISOLATED:
!!! its commands run directly on this machine, as you, with your files and network.
!!! Install bubblewrap (apt-get install bubblewrap) for real sandboxes."""

_DIR = "/tmp/psdk-demo"
_COUNTER = f"{_DIR}/counter"


class _Tour:
    """Numbered steps, the code each one runs, and what came back."""

    def __init__(self, console: Console, steps: int) -> None:
        self._console = console
        self._steps = steps
        self._n = 0

    def step(self, title: str) -> None:
        self._n += 1
        self._console.out(f"\n[{self._n}/{self._steps}] {title}")

    def code(self, text: str) -> None:
        self._console.out(f"    >>> {text}")

    def say(self, text: str) -> None:
        self._console.out(f"    {text}")

    def output(self, data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            self._console.out(f"    | {line}")

    def skip(self, capability: Capability) -> None:
        self.say(f"(skipped: this provider does not declare {capability})")


async def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    """Run the tour on ``--provider``, by default the embedded local provider."""
    name = args.provider or "local"
    options: dict[str, Any] = {}
    if name == "local" and shutil.which("bwrap") is None:
        console.note(UNISOLATED_WARNING)
        options["unisolated"] = True
    tour = _Tour(console, 8)
    console.out("A tour of provider-sdk on the embedded local provider." if name == "local"
                else f"A tour of provider-sdk on the {name} provider.")
    tour.step("Open the provider")
    tour.code(f"provider = open_provider({name!r}{', unisolated=True' if options else ''})")
    async with config.open_provider(name, **options) as provider:
        tour.say("capabilities: " + ", ".join(sorted(str(c) for c in provider.capabilities)))
        tour.step("Create a sandbox")
        tour.code("sandbox = await provider.create(metadata={'psdk-demo': 'tour'})")
        start = time.perf_counter()
        with console.status("creating a sandbox"):
            sandbox = await provider.create(metadata={"psdk-demo": "tour"})
        async with sandbox:
            tour.say(f"{sandbox.id} is {sandbox.info.state} after "
                     f"{time.perf_counter() - start:.2f} s")
            await _exec(tour, sandbox)
            await _files(tour, sandbox)
            await _shell(tour, sandbox)
            await _snapshot(tour, provider, sandbox, console)
            await _pause(tour, sandbox)
            tour.step("Kill it")
            tour.code("await sandbox.kill()")
            await sandbox.kill()
            try:
                state = str((await provider.get_info(sandbox.id)).state)
            except NotFound:
                state = "gone"
            tour.say(f"{sandbox.id} is {state}; killing twice is not an error")
    console.out("\nThat was the tour. Next: psdk run -- uname -a, or psdk --help.")
    return 0


async def _exec(tour: _Tour, sandbox: Sandbox) -> None:
    tour.step("Run a command, its output streamed as it comes")
    command = "echo hello from $(uname -s); for i in 1 2 3; do echo tick $i; sleep 0.2; done"
    if sandbox.provider.supports(Capability.EXEC_STREAM):
        tour.code(f"await sandbox.exec({command!r}, on_stdout=print)")
        result = await sandbox.exec(command, on_stdout=tour.output)
    else:
        tour.code(f"result = await sandbox.exec({command!r})")
        result = await sandbox.exec(command)
        tour.output(result.stdout_bytes)
    tour.say(f"exit code {result.exit_code} after {result.duration:.2f} s")


async def _files(tour: _Tour, sandbox: Sandbox) -> None:
    tour.step("Files")
    tour.code(f"await sandbox.files.write('{_DIR}/hello.txt', 'hi there\\n')")
    await sandbox.files.write(f"{_DIR}/hello.txt", "hi there\n")
    await sandbox.files.write(f"{_DIR}/data.bin", bytes(range(256)))
    tour.code(f"await sandbox.files.read_text('{_DIR}/hello.txt')")
    tour.say(repr(await sandbox.files.read_text(f"{_DIR}/hello.txt")))
    tour.code(f"await sandbox.files.list('{_DIR}')")
    for entry in await sandbox.files.list(_DIR):
        tour.say(f"{entry.type!s:<10}{entry.size:>6} B  {entry.path}")


async def _shell(tour: _Tour, sandbox: Sandbox) -> None:
    tour.step("A persistent shell: cd and export carry over")
    if not sandbox.provider.supports(Capability.SHELL_PERSISTENT):
        tour.skip(Capability.SHELL_PERSISTENT)
        return
    tour.code("shell = await sandbox.shell()")
    async with await sandbox.shell() as shell:
        for command in ("cd /tmp && export GREETING=hello", 'echo "$GREETING from $PWD"'):
            tour.code(f"await shell.run({command!r})")
            result = await shell.run(command)
            tour.output(result.stdout_bytes if result.ok else result.stderr_bytes)


async def _snapshot(tour: _Tour, provider: SandboxProvider, sandbox: Sandbox,
                    console: Console) -> None:
    tour.step("Snapshot, and a new sandbox from it")
    if not provider.supports(Capability.SNAPSHOT_FILESYSTEM):
        tour.skip(Capability.SNAPSHOT_FILESYSTEM)
        return
    tour.code("snapshot = await sandbox.snapshot()")
    with console.status("taking a snapshot"):
        snapshot = await sandbox.snapshot()
    tour.say(f"{snapshot.id} captures {', '.join(sorted(snapshot.captures))}")
    try:
        tour.code("async with provider.create(snapshot=snapshot.id) as copy: ...")
        with console.status("creating a sandbox from the snapshot"):
            copy = await provider.create(snapshot=snapshot.id)
        async with copy:
            text = await copy.files.read_text(f"{_DIR}/hello.txt")
            tour.say(f"{copy.id} reads hello.txt: {text!r}")
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
            await provider.delete_snapshot(snapshot.id)


async def _pause(tour: _Tour, sandbox: Sandbox) -> None:
    tour.step("Pause and resume")
    if not sandbox.provider.supports(Capability.PAUSE):
        tour.skip(Capability.PAUSE)
        return
    async with _counter(tour, sandbox) as read:
        before = await read()
        if before is not None:
            tour.say(f"the counter is at {before}")
        tour.code("await sandbox.pause()")
        tour.say(f"state: {(await sandbox.pause()).state}; waiting a second")
        await anyio.sleep(1)
        tour.code("await sandbox.resume()")
        tour.say(f"state: {(await sandbox.resume()).state}")
        tour.say(f"hello.txt is still there: "
                 f"{await sandbox.files.exists(f'{_DIR}/hello.txt')}")
        if before is None:
            return
        resumed = later = await read()

        async def moved_on() -> bool:
            nonlocal later
            later = await read()
            return later != resumed

        await _until(moved_on, 10)
        tour.say(f"the counter reads {resumed}, then {later}: it went on from where the "
                 "pause froze it (a restarted process would count from 1)")


@contextlib.asynccontextmanager
async def _counter(tour: _Tour,
                   sandbox: Sandbox) -> AsyncIterator[Callable[[], Awaitable[int | None]]]:
    """A background counter, when memory survives a pause; yields a reader of its value."""
    async def nothing() -> int | None:
        return None

    if not (sandbox.provider.supports(Capability.PAUSE_MEMORY)
            and sandbox.provider.supports(Capability.PROCESS_BACKGROUND)):
        yield nothing
        return
    script = f"i=0; while :; do i=$((i+1)); echo $i > {_COUNTER}; sleep 0.2; done"
    tour.code(f"counter = await sandbox.start({script!r})")
    process = await sandbox.start(script)

    async def read() -> int | None:
        with contextlib.suppress(NotFound, ValueError):
            return int(await sandbox.files.read_text(_COUNTER))
        return None

    async def counting() -> bool:
        return (await read() or 0) >= 3

    try:
        await _until(counting, 10)
        yield read
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
            await process.kill()


async def _until(check: Callable[[], Awaitable[bool]], timeout: float) -> bool:
    """Poll ``check`` until it is true or ``timeout`` seconds pass; whether it became true."""
    with anyio.move_on_after(timeout):
        while True:
            if await check():
                return True
            await anyio.sleep(0.05)
    return False
