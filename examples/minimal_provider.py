"""A whole provider in one file: the shape to copy for a new backend.

Each sandbox is a directory, the root of a bubblewrap that holds the sandbox's
namespaces (the host's ``/usr`` read-only, its own ``/proc``, ``/dev``, processes and an
empty network) while it lives; each command enters them with ``nsenter``, so it sees
nothing of the host or of another sandbox. The provider writes the two roles every
provider needs, a control plane and commands; the files API comes from the core, built
on the commands (``provider_sdk.command_files``). It declares no capability: no
background processes, no pause, no snapshots; and it contains commands only as far as
bubblewrap's defaults do (a timeout ends every process that keeps the command's
environment mark; run it as an ordinary user).

Try it, and run the contract suite against it, without installing anything::

    PYTHONPATH=examples psdk run --provider minimal_provider:MinimalProvider -- uname -a
    PYTHONPATH=examples psdk contract --provider minimal_provider:MinimalProvider
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import json
import os
import posixpath
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.abc

from provider_sdk import errors, scripts
from provider_sdk.capabilities import Capability
from provider_sdk.commands import Command
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import ExecResult, SandboxInfo, SandboxSpec, SandboxState
from provider_sdk.provider import SandboxProvider, exit_code_from_status

NAME = "minimal"
WORKDIR = "/home/user"
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKDIR, "LANG": "C.UTF-8"}
HOLD = "while :; do sleep 3600; done"


class Directories:
    """The control plane: a sandbox is ``<home>/<id>/``: its ``root``, and a
    ``meta.json`` with what it was made with and the bubblewrap that holds it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)

    def meta(self, sandbox_id: str) -> dict[str, Any]:
        """A sandbox's record; ``SandboxNotFound`` if there is none."""
        try:
            found: dict[str, Any] = json.loads(
                (self.home / sandbox_id / "meta.json").read_text())
        except (FileNotFoundError, NotADirectoryError, ValueError):
            raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r}", provider=NAME,
                                         sandbox_id=sandbox_id) from None
        return found

    def _info(self, sandbox_id: str, meta: Mapping[str, Any]) -> SandboxInfo:
        alive = Path(f"/proc/{meta['holder']}").exists()
        return SandboxInfo(id=sandbox_id, provider=NAME, template=None,
                           state=SandboxState.RUNNING if alive else SandboxState.STOPPED,
                           metadata=meta["metadata"], expires_at=None,
                           created_at=dt.datetime.fromisoformat(meta["created_at"]))

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        sandbox_id = secrets.token_hex(6)
        root = self.home / sandbox_id / "root"
        cwd = spec.cwd or WORKDIR
        for name in ("tmp", "usr", "proc", "dev", WORKDIR[1:], cwd[1:]):
            (root / name).mkdir(parents=True, exist_ok=True)
        for name in ("bin", "sbin", "lib", "lib64"):  # as the host has them (merged /usr)
            if (Path("/") / name).is_symlink():
                (root / name).symlink_to(os.readlink(Path("/") / name))
        holder = await anyio.to_thread.run_sync(_hold, root)
        meta = {"metadata": dict(spec.metadata), "env": dict(spec.env), "cwd": cwd,
                "holder": holder, "created_at": dt.datetime.now(dt.timezone.utc).isoformat()}
        (self.home / sandbox_id / "meta.json").write_text(json.dumps(meta))
        return self._info(sandbox_id, meta)

    async def info(self, sandbox_id: str) -> SandboxInfo:
        return self._info(sandbox_id, self.meta(sandbox_id))

    async def list(self, *, metadata: Mapping[str, str],
                   state: SandboxState | None) -> builtins.list[SandboxInfo]:
        found = []
        for entry in sorted(self.home.iterdir()):
            try:
                found.append(await self.info(entry.name))
            except errors.SandboxNotFound:  # being made, or removed meanwhile
                continue
        return found  # the base keeps those that match ``metadata`` and ``state``

    async def kill(self, sandbox_id: str) -> None:
        try:
            holder = self.meta(sandbox_id)["holder"]
        except errors.SandboxNotFound:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder, signal.SIGKILL)  # bubblewrap's init: its namespace ends
        await anyio.to_thread.run_sync(
            lambda: shutil.rmtree(self.home / sandbox_id, ignore_errors=True))


def _hold(root: Path) -> int:
    """Start the bubblewrap that holds a sandbox's namespaces, detached; the host pid
    of its init."""
    info_read, info_write = os.pipe()
    subprocess.Popen(["bwrap", "--unshare-all", "--info-fd", str(info_write),
                      "--bind", str(root), "/", "--ro-bind", "/usr", "/usr",
                      "--proc", "/proc", "--dev", "/dev", "/bin/sh", "-c", HOLD],
                     pass_fds=(info_write,), start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    os.close(info_write)
    with os.fdopen(info_read) as info:
        init = int(json.load(info)["child-pid"])
    # bubblewrap reports its init before it has made the sandbox's root: the holding
    # shell, its child, starts only once it has.
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{init}/task/{init}/children").read_text().strip():
        if time.monotonic() > deadline:
            raise errors.OperationTimeout("the sandbox's bubblewrap did not start",
                                          provider=NAME)
        time.sleep(0.002)
    return init


class Nsenter:
    """The commands role: each command enters its sandbox's namespaces. A timeout or a
    cancellation kills every process that carries the command's mark (see
    ``provider_sdk.scripts``)."""

    def __init__(self, control: Directories) -> None:
        self.control = control

    def _argv(self, meta: Mapping[str, Any], cwd: str, env: Mapping[str, str],
              argv: tuple[str, ...]) -> list[str]:
        return ["nsenter", "--target", str(meta["holder"]), "--all", "--root",
                f"--wdns={cwd}", "--", "/usr/bin/env", "-i",
                *(f"{key}={value}" for key, value in env.items()), *argv]

    async def exec(self, sandbox_id: str, command: Command) -> ExecResult:
        meta = self.control.meta(sandbox_id)
        if (await self.control.info(sandbox_id)).state != SandboxState.RUNNING:
            raise errors.SandboxNotRunning("the sandbox is stopped", state="stopped",
                                           provider=NAME, sandbox_id=sandbox_id)
        mark = secrets.token_hex(8)
        cwd = posixpath.normpath(posixpath.join(meta["cwd"], command.cwd or "."))
        env = {**BASE_ENV, **meta["env"], **command.env, **scripts.mark_env(mark)}
        out, err = command.buffers()
        started = anyio.current_time()
        process = await anyio.open_process(self._argv(meta, cwd, env, command.argv))
        try:
            with anyio.move_on_after(command.timeout) as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_drain, process.stdout, out)
                    tg.start_soon(_drain, process.stderr, err)
                    tg.start_soon(_feed, process.stdin, command.stdin)
                    await process.wait()
        finally:
            if process.returncode is None:  # timed out or cancelled: end its tree
                with anyio.CancelScope(shield=True):
                    await self._kill_marked(meta, mark)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
        status = process.returncode or 0  # -N: nsenter died of its command's signal N
        code = -9 if scope.cancelled_caught else exit_code_from_status(
            status if status >= 0 else 128 - status)
        result = ExecResult(exit_code=code, stdout_bytes=out.value(),
                            stderr_bytes=err.value(), stdout_truncated=out.dropped,
                            stderr_truncated=err.dropped,
                            duration=anyio.current_time() - started)
        if scope.cancelled_caught:
            raise errors.CommandTimeout(f"the command ran past its {command.timeout} s",
                                        result=result, provider=NAME, sandbox_id=sandbox_id)
        return result

    async def _kill_marked(self, meta: Mapping[str, Any], mark: str) -> None:
        argv = self._argv(meta, "/", BASE_ENV, scripts.kill_marked_argv(mark))
        await anyio.run_process(argv, check=False)


async def _feed(stream: anyio.abc.ByteSendStream | None, data: bytes | None) -> None:
    """Give a command its input, then end of file. A command may end without reading
    it all: what it left is dropped, as a pipe to a shell would drop it."""
    assert stream is not None
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        try:
            if data:
                await stream.send(data)
        finally:
            await stream.aclose()


async def _drain(stream: anyio.abc.ByteReceiveStream | None, buffer: OutputBuffer) -> None:
    assert stream is not None
    async for chunk in stream:
        buffer.append(chunk)


class MinimalProvider(SandboxProvider):
    """Sandboxes that are directories held by bubblewrap (see the module)."""

    name: ClassVar[str] = NAME
    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    def __init__(self, *, home: str | os.PathLike[str] | None = None) -> None:
        control = Directories(Path(home or Path(tempfile.gettempdir()) / "psdk-minimal"))
        super().__init__(control=control, commands=Nsenter(control))
