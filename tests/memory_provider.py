"""An in-process provider for the core's and the CLI's tests: ``MemoryProvider``.

Files live in a dict; commands run as host subprocesses in a per-sandbox temporary
directory (the tests only run ``sh`` and coreutils). State is shared by every instance
in the process (``STORE``), so consecutive ``psdk`` invocations in one test see the same
sandboxes, as they would with a real backend. Nothing here is isolated: tests only.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import itertools
import os
import posixpath
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    CommandTimeout,
    Conflict,
    FileExists,
    FileNotFound,
    IsADirectory,
    NotADirectory,
    NotARegularFile,
    ProcessNotFound,
    SandboxNotFound,
    SandboxNotRunning,
    SnapshotNotFound,
    VolumeNotFound,
)
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import (
    ExecResult,
    FileInfo,
    FileType,
    Metrics,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Volume,
)
from provider_sdk.provider import Command, ProcessEvent, ProcessExit, ProcessOutput, SandboxProvider
from provider_sdk.sandbox import EmulatedShell, Sandbox, Shell

NAME = "memory"
WORKDIR = "/home/user"


@attrs.define
class _Proc:
    popen: subprocess.Popen[bytes]
    out_path: str
    err_path: str


@attrs.define
class _Box:
    info: SandboxInfo
    host_dir: str
    files: dict[str, bytes] = attrs.field(factory=dict)
    dirs: set[str] = attrs.field(factory=lambda: {"/", "/home", WORKDIR, "/tmp"})
    procs: dict[int, _Proc] = attrs.field(factory=dict)
    #: Paths that are devices, FIFOs or sockets: listed and stat'ed, never read.
    others: set[str] = attrs.field(factory=set)
    #: Symbolic links: path -> target (absolute).
    links: dict[str, str] = attrs.field(factory=dict)


@attrs.define
class Store:
    """Every sandbox, snapshot and volume of every MemoryProvider in this process."""

    boxes: dict[str, _Box] = attrs.field(factory=dict)
    snapshots: dict[str, tuple[str, dict[str, bytes], set[str]]] = attrs.field(factory=dict)
    volumes: dict[str, Volume] = attrs.field(factory=dict)
    ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    opened: list[dict[str, Any]] = attrs.field(factory=list)
    closed: int = 0

    def add_broken(self, sandbox_id: str, reason: str) -> None:
        """A record the provider cannot make sense of, listed as a broken ``ERROR`` one."""
        info = SandboxInfo(id=sandbox_id, provider=NAME, state=SandboxState.ERROR,
                           extra={"broken": reason, "env": {}})
        self.boxes[sandbox_id] = _Box(info=info, host_dir=tempfile.mkdtemp(
            prefix="psdk-memory-"))

    def add_special(self, sandbox_id: str, path: str, *, link_to: str | None = None) -> None:
        """A device-like path in a sandbox (or, with ``link_to``, a symlink to ``link_to``)."""
        box = self.boxes[sandbox_id]
        path = _abs(path)
        _add_parents(box, path)
        if link_to is None:
            box.others.add(path)
        else:
            box.links[path] = _abs(link_to)

    def reset(self) -> None:
        for box in self.boxes.values():
            _kill_all(box)
            shutil.rmtree(box.host_dir, ignore_errors=True)
        self.__init__()  # type: ignore[misc]


STORE = Store()


class MemoryProvider(SandboxProvider):
    """A provider whose sandboxes are dicts and host subprocesses."""

    name = NAME
    capabilities = frozenset({
        Capability.EXEC_STREAM, Capability.PROCESS_BACKGROUND, Capability.SHELL_PERSISTENT,
        Capability.PAUSE, Capability.SNAPSHOT_FILESYSTEM, Capability.VOLUMES,
        Capability.METRICS,
        Capability.TEMPLATES,  # any name: it is recorded, and every sandbox is alike
    })

    def __init__(self, *, label: str = "default", token: str | None = None) -> None:
        self.label = label
        self.token = token
        STORE.opened.append({"label": label, "token": token})

    async def aclose(self) -> None:
        STORE.closed += 1

    # ------------------------------------------------------------- lifecycle

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        await anyio.lowlevel.checkpoint()
        files: dict[str, bytes] = {}
        dirs: set[str] | None = None
        if spec.snapshot is not None:
            if spec.snapshot not in STORE.snapshots:
                raise SnapshotNotFound(f"no snapshot {spec.snapshot!r}", provider=NAME)
            _, snap_files, snap_dirs = STORE.snapshots[spec.snapshot]
            files, dirs = dict(snap_files), set(snap_dirs)
        sandbox_id = f"mem-{next(STORE.ids)}"
        info = SandboxInfo(id=sandbox_id, provider=NAME, state=SandboxState.RUNNING,
                           template=spec.template, metadata=spec.metadata,
                           created_at=dt.datetime.now(dt.timezone.utc),
                           extra={"env": dict(spec.env)})
        box = _Box(info=info, host_dir=tempfile.mkdtemp(prefix="psdk-memory-"), files=files)
        if dirs is not None:
            box.dirs = dirs
        STORE.boxes[sandbox_id] = box
        return _public(info)

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        await anyio.lowlevel.checkpoint()
        return _public(_box(sandbox_id).info)

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> builtins.list[SandboxInfo]:
        await anyio.lowlevel.checkpoint()
        return [_public(b.info) for b in STORE.boxes.values()]

    async def _kill(self, sandbox_id: str) -> None:
        await anyio.lowlevel.checkpoint()
        box = STORE.boxes.pop(sandbox_id, None)
        if box is not None:
            _kill_all(box)
            shutil.rmtree(box.host_dir, ignore_errors=True)

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
        box = _running(sandbox_id)
        box.info = attrs.evolve(box.info, state=SandboxState.PAUSED)
        return _public(box.info)

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        box = _box(sandbox_id)
        box.info = attrs.evolve(box.info, state=SandboxState.RUNNING)
        return _public(box.info)

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        box = _box(sandbox_id)
        snapshot_id = f"snap-{next(STORE.ids)}"
        STORE.snapshots[snapshot_id] = (sandbox_id, dict(box.files), set(box.dirs))
        return Snapshot(id=snapshot_id, provider=NAME, sandbox_id=sandbox_id,
                        captures={"filesystem"})

    async def _list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        return [Snapshot(id=k, provider=NAME, sandbox_id=v[0], captures={"filesystem"})
                for k, v in STORE.snapshots.items() if sandbox_id in (None, v[0])]

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        if STORE.snapshots.pop(snapshot_id, None) is None:
            raise SnapshotNotFound(f"no snapshot {snapshot_id!r}", provider=NAME)

    async def _create_volume(self, name: str) -> Volume:
        if name in STORE.volumes:
            raise Conflict(f"volume {name!r} exists", provider=NAME)
        STORE.volumes[name] = Volume(id=name, name=name, provider=NAME)
        return STORE.volumes[name]

    async def _get_volume(self, name: str) -> Volume:
        if name not in STORE.volumes:
            raise VolumeNotFound(f"no volume {name!r}", provider=NAME)
        return STORE.volumes[name]

    async def _list_volumes(self) -> builtins.list[Volume]:
        return list(STORE.volumes.values())

    async def _delete_volume(self, name: str) -> None:
        if STORE.volumes.pop(name, None) is None:
            raise VolumeNotFound(f"no volume {name!r}", provider=NAME)

    async def _metrics(self, sandbox_id: str) -> Metrics:
        box = _running(sandbox_id)
        return Metrics(cpu_seconds=0.0, disk_bytes=sum(map(len, box.files.values())))

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)

    # ------------------------------------------------------------------ exec

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        box = _running(sandbox_id)
        out, err = command.buffers()
        start = anyio.current_time()
        async with await anyio.open_process(
                list(command.argv), env=_env(box, command), cwd=box.host_dir,
                stdin=subprocess.PIPE, start_new_session=True) as proc:
            async def pump(stream: Any, sink: OutputBuffer, callback: Any) -> None:
                async for chunk in stream:
                    sink.append(chunk)
                    if callback is not None:
                        maybe = callback(chunk)
                        if maybe is not None:
                            await maybe

            async def feed() -> None:
                assert proc.stdin is not None
                if command.stdin:
                    await proc.stdin.send(command.stdin)
                await proc.stdin.aclose()

            timed_out = False
            try:
                with anyio.move_on_after(command.timeout) as scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(feed)
                        tg.start_soon(pump, proc.stdout, out, command.on_stdout)
                        tg.start_soon(pump, proc.stderr, err, command.on_stderr)
                        await proc.wait()
                timed_out = scope.cancelled_caught
            finally:
                if proc.returncode is None:
                    _killpg(proc.pid)
                    with anyio.CancelScope(shield=True):
                        await proc.wait()
        result = ExecResult(exit_code=proc.returncode if not timed_out else -9,
                            stdout_bytes=out.value(), stderr_bytes=err.value(),
                            stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                            duration=anyio.current_time() - start)
        if timed_out:
            raise CommandTimeout(f"command timed out after {command.timeout:g}s",
                                 result=result, provider=NAME, sandbox_id=sandbox_id)
        return result

    async def _start(self, sandbox_id: str, command: Command) -> int:
        box = _running(sandbox_id)
        fd_out, out_path = tempfile.mkstemp(dir=box.host_dir)
        fd_err, err_path = tempfile.mkstemp(dir=box.host_dir)
        popen = _spawn(list(command.argv), _env(box, command), box.host_dir, fd_out, fd_err)
        box.procs[popen.pid] = _Proc(popen, out_path, err_path)
        return popen.pid

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        proc = _proc(sandbox_id, pid)
        offsets = {"stdout": 0, "stderr": 0}
        while True:
            code = proc.popen.poll()
            for stream, path in (("stdout", proc.out_path), ("stderr", proc.err_path)):
                data = (await anyio.Path(path).read_bytes())[offsets[stream]:]
                if data:
                    offsets[stream] += len(data)
                    yield ProcessOutput(stream, data)
            if code is not None:
                yield ProcessExit(code)
                return
            await anyio.sleep(0.01)

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        stdin = _proc(sandbox_id, pid).popen.stdin
        assert stdin is not None
        stdin.write(data)
        stdin.flush()

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        stdin = _proc(sandbox_id, pid).popen.stdin
        assert stdin is not None
        stdin.close()

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        proc = _proc(sandbox_id, pid)
        _killpg(pid)
        await anyio.to_thread.run_sync(proc.popen.wait)

    # ----------------------------------------------------------------- files

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        box = _running(sandbox_id)
        path = _abs(path)
        path = box.links.get(path, path)
        if path in box.dirs:
            raise IsADirectory(f"{path} is a directory", provider=NAME, sandbox_id=sandbox_id)
        if path in box.others:
            raise NotARegularFile(f"{path} is not a regular file", provider=NAME,
                                  sandbox_id=sandbox_id)
        if path not in box.files:
            raise FileNotFound(f"no file {path}", provider=NAME, sandbox_id=sandbox_id)
        data = box.files[path]
        for i in range(0, max(len(data), 1), 4096):
            await anyio.lowlevel.checkpoint()
            yield data[i:i + 4096]

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        box = _running(sandbox_id)
        path = _abs(path)
        if path in box.dirs:
            raise IsADirectory(f"{path} is a directory", provider=NAME, sandbox_id=sandbox_id)
        data = b"".join([c async for c in chunks])
        _add_parents(box, path)
        box.files[path] = data

    async def _list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        box = _running(sandbox_id)
        path = _abs(path)
        if path in box.files:
            raise NotADirectory(f"{path} is a file", provider=NAME, sandbox_id=sandbox_id)
        if path not in box.dirs:
            raise FileNotFound(f"no directory {path}", provider=NAME, sandbox_id=sandbox_id)
        names = {p for p in [*box.files, *box.dirs, *box.others, *box.links] if p != path
                 and posixpath.dirname(p) == path}
        return [_stat(box, p) for p in names]

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        box = _running(sandbox_id)
        path = _abs(path)
        if not any(path in where for where in (box.files, box.dirs, box.others, box.links)):
            raise FileNotFound(f"no such path {path}", provider=NAME, sandbox_id=sandbox_id)
        return _stat(box, path)

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        box = _running(sandbox_id)
        path = _abs(path)
        if path in box.files or (path in box.dirs and not exist_ok):
            raise FileExists(f"{path} exists", provider=NAME, sandbox_id=sandbox_id)
        if not parents and posixpath.dirname(path) not in box.dirs:
            raise FileNotFound(f"no parent for {path}", provider=NAME, sandbox_id=sandbox_id)
        _add_parents(box, path)
        box.dirs.add(path)

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        box = _running(sandbox_id)
        path = _abs(path)
        if path in box.files:
            del box.files[path]
            return
        if path not in box.dirs:
            raise FileNotFound(f"no such path {path}", provider=NAME, sandbox_id=sandbox_id)
        inside = [p for p in [*box.files, *box.dirs] if p.startswith(path + "/")]
        if inside and not recursive:
            raise Conflict(f"{path} is not empty", provider=NAME, sandbox_id=sandbox_id)
        for p in inside:
            box.files.pop(p, None)
            box.dirs.discard(p)
        box.dirs.discard(path)

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        box = _running(sandbox_id)
        src, dst = _abs(src), _abs(dst)
        if src not in box.files:
            raise FileNotFound(f"no file {src}", provider=NAME, sandbox_id=sandbox_id)
        _add_parents(box, dst)
        box.files[dst] = box.files.pop(src)


# ---------------------------------------------------------------------- helpers


def _public(info: SandboxInfo) -> SandboxInfo:
    broken = info.extra.get("broken")
    return attrs.evolve(info, extra={} if broken is None else {"broken": broken})


def _box(sandbox_id: str) -> _Box:
    try:
        return STORE.boxes[sandbox_id]
    except KeyError:
        raise SandboxNotFound(f"no sandbox {sandbox_id!r}", provider=NAME,
                              sandbox_id=sandbox_id) from None


def _running(sandbox_id: str) -> _Box:
    box = _box(sandbox_id)
    if box.info.state != SandboxState.RUNNING:
        raise SandboxNotRunning(f"sandbox is {box.info.state}", state=str(box.info.state),
                                provider=NAME, sandbox_id=sandbox_id)
    return box


def _proc(sandbox_id: str, pid: int) -> _Proc:
    box = _running(sandbox_id)
    if pid not in box.procs:
        raise ProcessNotFound(f"no process {pid}", provider=NAME, sandbox_id=sandbox_id)
    return box.procs[pid]


def _env(box: _Box, command: Command) -> dict[str, str]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": box.host_dir}
    return {**base, **box.info.extra["env"], **command.env}


def _abs(path: str) -> str:
    return posixpath.normpath(posixpath.join(WORKDIR, path))


def _add_parents(box: _Box, path: str) -> None:
    parent = posixpath.dirname(path)
    while parent not in box.dirs:
        box.dirs.add(parent)
        parent = posixpath.dirname(parent)


def _stat(box: _Box, path: str) -> FileInfo:
    if path in box.dirs:
        return FileInfo(path=path, type=FileType.DIRECTORY, mode=0o755)
    if path in box.others:
        return FileInfo(path=path, type=FileType.OTHER, mode=0o666)
    if path in box.links:
        return FileInfo(path=path, type=FileType.SYMLINK, mode=0o777,
                        symlink_target=box.links[path])
    return FileInfo(path=path, type=FileType.FILE, size=len(box.files[path]), mode=0o644)


def _spawn(argv: list[str], env: dict[str, str], cwd: str, out: int,
           err: int) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=out,
                                stderr=err, start_new_session=True)
    finally:
        os.close(out)
        os.close(err)


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _kill_all(box: _Box) -> None:
    for pid, proc in box.procs.items():
        if proc.popen.poll() is None:
            _killpg(pid)
            proc.popen.wait()
        if proc.popen.stdin is not None:
            proc.popen.stdin.close()
