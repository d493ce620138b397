"""An in-process provider for the core's, the CLI's and the manager's tests: ``MemoryProvider``.

Each sandbox is small but real. A host directory is its ``/``; a bubblewrap process holds
its namespaces (user, mount, PID, IPC, UTS, cgroup, and a network with loopback only) for
as long as it lives, with ``/usr`` read-only from the host, its own ``/proc`` and
``/dev``, and each mounted volume (a host directory) bound in. Commands enter those
namespaces with ``nsenter``, so they see nothing of the host. The files API works on the
same tree as the commands, as they see it (``/proc/<pid>/root``), resolving every path
inside it (``openat2`` with ``RESOLVE_IN_ROOT``): neither ``..`` nor a symlink leads out.
Pause stops every process of the sandbox (``SIGSTOP``) and resume lets them go on.
Every command is a child subreaper, so what it leaves running (``setsid``, a double
fork) stays in its tree, and a timeout, a cancelled exec or a kill ends that whole tree
with the core's tree kill (:mod:`provider_sdk.scripts`); the sandbox's pid 1 reaps what
is left to it and, as its namespace's init, survives ``kill -KILL -1`` from inside.
The records (sandboxes, snapshots as copies of a root, volumes) live in this process
(``STORE``), shared by every instance, so consecutive ``psdk`` invocations in one test
see the same sandboxes, as they would with a real backend. Linux with ``bwrap`` and
``nsenter`` only; for tests.
"""

from __future__ import annotations

import atexit
import builtins
import concurrent.futures
import contextlib
import ctypes
import datetime as dt
import errno
import itertools
import json
import os
import posixpath
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import anyio
import attrs

from provider_sdk import scripts
from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    CommandTimeout,
    Conflict,
    FileExists,
    FileNotFound,
    IsADirectory,
    NotADirectory,
    NotARegularFile,
    PermissionDenied,
    ProcessNotFound,
    SandboxError,
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
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHUNK = 1 << 20
BWRAP = "/usr/bin/bwrap"
NSENTER = "/usr/bin/nsenter"
# Host directories beside /usr that a shell needs: the same symlinks (merged /usr) or
# bound read-only.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Every namespace of the sandbox, its root and its working directory (``/``).
ENTER = ("-U", "-m", "-p", "-n", "-i", "-u", "-C", "-r", "-w")
IN_CWD = 'cd -- "$0" && exec "$@"'
PYTHON = "/usr/bin/python3"
# Every command starts as a child subreaper (kept across exec): whatever it leaves behind
# (setsid, a double fork) is reparented to it, inside its tree, not to the sandbox's init.
# Python ignores SIGPIPE and SIGXFSZ, which exec would pass on: they are reset first.
SUBREAPER = ("import ctypes, os, signal, sys\n"
             "for s in (signal.SIGPIPE, signal.SIGXFSZ):\n"
             "    signal.signal(s, signal.SIG_DFL)\n"
             "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"
             "os.execv(sys.argv[1], sys.argv[1:])\n")
# The sandbox's pid 1: it reaps whatever is reparented to it and, as a namespace's init,
# ignores SIGKILL and SIGSTOP from inside (``kill -KILL -1`` leaves the sandbox up).
INIT = ("import os, signal\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})\n"
        "while True:\n"
        "    try:\n"
        "        while os.waitpid(-1, os.WNOHANG)[0]:\n"
        "            pass\n"
        "    except ChildProcessError:\n"
        "        pass\n"
        "    signal.sigwait({signal.SIGCHLD})\n")


@attrs.define(eq=False)
class _Proc:
    popen: subprocess.Popen[bytes]
    out_path: str
    err_path: str


@attrs.define(eq=False)
class _Box:
    info: SandboxInfo
    root: str
    """The host directory that is the sandbox's ``/`` (mounts aside)."""
    workdir: str = WORKDIR
    env: dict[str, str] = attrs.field(factory=dict)
    volumes: tuple[str, ...] = ()
    bwrap: subprocess.Popen[bytes] | None = None
    init: int = 0
    """The host pid of the sandbox's pid 1."""
    root_fd: int = -1
    """The sandbox's ``/`` as its processes see it, mounts included."""
    procs: dict[int, _Proc] = attrs.field(factory=dict)

    def host(self, path: str) -> Path:
        """Where ``path`` of the sandbox is in its root directory on the host (not under
        a mount): for tests that look at a sandbox from outside."""
        return Path(self.root, posixpath.normpath(posixpath.join(self.workdir, path))[1:])


@attrs.define
class Store:
    """Every sandbox, snapshot and volume of every MemoryProvider in this process."""

    boxes: dict[str, _Box] = attrs.field(factory=dict)
    #: Snapshot id -> (sandbox id, host directory holding a copy of its root).
    snapshots: dict[str, tuple[str, str]] = attrs.field(factory=dict)
    #: Volume name -> its host directory.
    volumes: dict[str, str] = attrs.field(factory=dict)
    ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    opened: list[dict[str, Any]] = attrs.field(factory=list)
    closed: int = 0
    base: str = attrs.field(factory=lambda: tempfile.mkdtemp(prefix="psdk-memory-"))
    """The host directory under which roots, snapshots, volumes and outputs live."""

    def add_broken(self, sandbox_id: str, reason: str) -> None:
        """A record the provider cannot make sense of, listed as a broken ``ERROR`` one."""
        info = SandboxInfo(id=sandbox_id, provider=NAME, state=SandboxState.ERROR,
                           extra={"broken": reason})
        self.boxes[sandbox_id] = _Box(info=info, root=tempfile.mkdtemp(dir=self.base))

    def add_special(self, sandbox_id: str, path: str, *, link_to: str | None = None) -> None:
        """A FIFO at ``path`` in a sandbox (or, with ``link_to``, a symlink to ``link_to``).
        Devices (``/dev/zero``) are there already."""
        where = self.boxes[sandbox_id].host(path)
        if link_to is None:
            os.mkfifo(where)
        else:
            os.symlink(link_to, where)

    def reset(self) -> None:
        """Kill every sandbox and forget every record; the files go with them."""
        self.clear()
        self.__init__()  # type: ignore[misc]

    def clear(self) -> None:
        """Kill every sandbox and remove everything under :attr:`base`."""
        for box in self.boxes.values():
            _stop(box)
        shutil.rmtree(self.base, ignore_errors=True)


STORE = Store()
atexit.register(STORE.clear)
# bubblewrap dies with the thread that started it: one that lives as long as the process.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="psdk-memory")


class MemoryProvider(SandboxProvider):
    """A provider whose sandboxes are host directories held in bubblewrap namespaces."""

    name = NAME
    capabilities = frozenset({
        Capability.EXEC_STREAM, Capability.EXEC_CONTAINED, Capability.PROCESS_BACKGROUND,
        Capability.SHELL_PERSISTENT, Capability.PAUSE, Capability.PAUSE_MEMORY,
        Capability.SNAPSHOT_FILESYSTEM, Capability.VOLUMES, Capability.VOLUMES_SHARED,
        Capability.VOLUMES_READ_ONLY, Capability.METRICS,
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
        source = None
        if spec.snapshot is not None:
            if spec.snapshot not in STORE.snapshots:
                raise SnapshotNotFound(f"no snapshot {spec.snapshot!r}", provider=NAME)
            source = STORE.snapshots[spec.snapshot][1]
        mounts = []
        for mount in spec.volumes:
            if mount.volume not in STORE.volumes:
                raise VolumeNotFound(f"no volume {mount.volume!r}", provider=NAME)
            mounts += ["--ro-bind" if mount.read_only else "--bind",
                       STORE.volumes[mount.volume], mount.path]
        sandbox_id = f"mem-{next(STORE.ids)}"
        info = SandboxInfo(id=sandbox_id, provider=NAME, state=SandboxState.RUNNING,
                           template=spec.template, metadata=spec.metadata,
                           created_at=dt.datetime.now(dt.timezone.utc))
        box = _Box(info=info, root=os.path.join(STORE.base, sandbox_id),
                   workdir=spec.cwd or WORKDIR, env=dict(spec.env),
                   volumes=tuple(m.volume for m in spec.volumes))
        try:
            await anyio.to_thread.run_sync(_make_root, box.root, source)
            await anyio.to_thread.run_sync(_SPAWNER.submit(_launch, box, mounts).result)
            with _errors(box, box.workdir):
                os.close(_makedirs(box, box.workdir))
        except BaseException:
            _stop(box)
            raise
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
            _stop(box)

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
        box = _running(sandbox_id)
        _freeze(box)
        box.info = attrs.evolve(box.info, state=SandboxState.PAUSED)
        return _public(box.info)

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        box = _box(sandbox_id)
        if box.info.state == SandboxState.PAUSED:
            for pid in _members(box):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGCONT)
        box.info = attrs.evolve(box.info, state=SandboxState.RUNNING)
        return _public(box.info)

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        box = _box(sandbox_id)
        snapshot_id = f"snap-{next(STORE.ids)}"
        copy = os.path.join(STORE.base, snapshot_id)
        await anyio.to_thread.run_sync(_copy_tree, box.root, copy)
        STORE.snapshots[snapshot_id] = (sandbox_id, copy)
        return Snapshot(id=snapshot_id, provider=NAME, sandbox_id=sandbox_id,
                        captures={"filesystem"})

    async def _list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        return [Snapshot(id=k, provider=NAME, sandbox_id=v[0], captures={"filesystem"})
                for k, v in STORE.snapshots.items() if sandbox_id in (None, v[0])]

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        found = STORE.snapshots.pop(snapshot_id, None)
        if found is None:
            raise SnapshotNotFound(f"no snapshot {snapshot_id!r}", provider=NAME)
        shutil.rmtree(found[1], ignore_errors=True)

    async def _create_volume(self, name: str) -> Volume:
        if name in STORE.volumes:
            raise Conflict(f"volume {name!r} exists", provider=NAME)
        STORE.volumes[name] = tempfile.mkdtemp(prefix="volume-", dir=STORE.base)
        return Volume(id=name, name=name, provider=NAME)

    async def _get_volume(self, name: str) -> Volume:
        if name not in STORE.volumes:
            raise VolumeNotFound(f"no volume {name!r}", provider=NAME)
        return Volume(id=name, name=name, provider=NAME)

    async def _list_volumes(self) -> builtins.list[Volume]:
        return [Volume(id=name, name=name, provider=NAME) for name in STORE.volumes]

    async def _delete_volume(self, name: str) -> None:
        if name not in STORE.volumes:
            raise VolumeNotFound(f"no volume {name!r}", provider=NAME)
        users = sorted(k for k, b in STORE.boxes.items() if name in b.volumes)
        if users:
            raise Conflict(f"volume {name!r} is mounted by {', '.join(users)}", provider=NAME)
        shutil.rmtree(STORE.volumes.pop(name), ignore_errors=True)

    async def _metrics(self, sandbox_id: str) -> Metrics:
        box = _running(sandbox_id)
        memory, cpu = _usage(box)
        disk = await anyio.to_thread.run_sync(_disk_usage, box.root)
        return Metrics(cpu_seconds=cpu, memory_bytes=memory, disk_bytes=disk)

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)

    # ------------------------------------------------------------------ exec

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        box = _running(sandbox_id)
        out, err = command.buffers()
        start = anyio.current_time()
        # The output pipes are this provider's own, so that after a timeout or a
        # cancellation it finds whatever still holds them open (a child that left the
        # command's tree after the command ended) and kills that too.
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(2)]
        try:
            async with await anyio.open_process(
                    _enter(box, command), env=_env(box, command), stdin=subprocess.PIPE,
                    stdout=pipes[0][1], stderr=pipes[1][1], start_new_session=True) as proc:
                for _read, write in pipes:
                    os.close(write)
                pipes = [(read, -1) for read, _write in pipes]
                code, timed_out = await self._run(box, proc, command, pipes, (out, err))
        finally:
            for read, write in pipes:
                for fd in (read, write):
                    if fd >= 0:
                        os.close(fd)
        result = ExecResult(exit_code=code if not timed_out else -9,
                            stdout_bytes=out.value(), stderr_bytes=err.value(),
                            stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                            duration=anyio.current_time() - start)
        if timed_out:
            raise CommandTimeout(f"command timed out after {command.timeout:g}s",
                                 result=result, provider=NAME, sandbox_id=sandbox_id)
        return result

    async def _run(self, box: _Box, proc: anyio.abc.Process, command: Command,
                   pipes: builtins.list[tuple[int, int]],
                   sinks: tuple[OutputBuffer, OutputBuffer]) -> tuple[int, bool]:
        """Feed, read and wait for an exec's process: its exit status, and whether it
        timed out. Unless it ended by itself, its tree and every holder of its output
        are killed before this returns or raises."""
        async def pump(fd: int, sink: OutputBuffer, callback: Any) -> None:
            os.set_blocking(fd, False)
            while True:
                await anyio.wait_readable(fd)
                try:
                    chunk = os.read(fd, CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    return
                sink.append(chunk)
                if callback is not None:
                    maybe = callback(chunk)
                    if maybe is not None:
                        await maybe

        async def feed() -> None:
            # A command may end without reading it all: what it left is dropped.
            assert proc.stdin is not None
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                     OSError):
                try:
                    if command.stdin:
                        await proc.stdin.send(command.stdin)
                finally:
                    await proc.stdin.aclose()

        ended = False
        try:
            with anyio.move_on_after(command.timeout) as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(feed)
                    tg.start_soon(pump, pipes[0][0], sinks[0], command.on_stdout)
                    tg.start_soon(pump, pipes[1][0], sinks[1], command.on_stderr)
                    await proc.wait()
            ended = not scope.cancelled_caught
        finally:
            with anyio.CancelScope(shield=True):
                if proc.returncode is None:
                    await anyio.to_thread.run_sync(_kill_tree, proc.pid)
                    _killpg(proc.pid)  # and, whatever the tree kill missed, its group
                if not ended:
                    held = {os.fstat(read).st_ino for read, _write in pipes}
                    await anyio.to_thread.run_sync(_kill_holders, box, held)
                await proc.wait()
        assert proc.returncode is not None
        return proc.returncode, not ended

    async def _start(self, sandbox_id: str, command: Command) -> int:
        box = _running(sandbox_id)
        fd_out, out_path = tempfile.mkstemp(dir=STORE.base)
        fd_err, err_path = tempfile.mkstemp(dir=STORE.base)
        popen = _spawn(_enter(box, command), _env(box, command), fd_out, fd_err)
        box.procs[popen.pid] = _Proc(popen, out_path, err_path)
        return popen.pid

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        proc = _proc(sandbox_id, pid)
        # Read from files on the host, a chunk at a time: whatever the process prints,
        # this holds one chunk, and a reader that pauses loses nothing.
        fds: dict[Literal["stdout", "stderr"], int] = {
            "stdout": os.open(proc.out_path, os.O_RDONLY | os.O_CLOEXEC),
            "stderr": os.open(proc.err_path, os.O_RDONLY | os.O_CLOEXEC)}
        try:
            while True:
                code = proc.popen.poll()
                idle = True
                for stream, fd in fds.items():
                    data = os.read(fd, CHUNK)
                    if data:
                        idle = False
                        yield ProcessOutput(stream, data)
                if not idle:
                    await anyio.lowlevel.checkpoint()
                elif code is not None:
                    yield ProcessExit(code)
                    return
                else:
                    await anyio.sleep(0.01)
        finally:
            for fd in fds.values():
                os.close(fd)

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
        await anyio.to_thread.run_sync(_kill_tree, pid)
        _killpg(pid)
        await anyio.to_thread.run_sync(proc.popen.wait)

    # ----------------------------------------------------------------- files

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        box = _running(sandbox_id)
        path = _abs(box, path)
        with _errors(box, path):
            # O_NONBLOCK: a FIFO is opened without waiting for a writer, then refused.
            fd = _open(box, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectory(f"{path} is a directory", provider=NAME,
                                   sandbox_id=sandbox_id)
            if not stat.S_ISREG(mode):
                raise NotARegularFile(f"{path} is not a regular file (a device, FIFO or "
                                      "socket): it cannot be read", provider=NAME,
                                      sandbox_id=sandbox_id)
            os.set_blocking(fd, True)
            while data := os.read(fd, CHUNK):
                yield data
        finally:
            os.close(fd)

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        """Write to a temporary file beside ``path``, then rename it over ``path``."""
        box = _running(sandbox_id)
        path = _abs(box, path)
        name, tmp = posixpath.basename(path), f".psdk-write-{secrets.token_hex(6)}"
        with _errors(box, path):
            parent = _makedirs(box, posixpath.dirname(path))
        try:
            with _errors(box, path):
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False)
                                    .st_mode):
                        raise IsADirectoryError(errno.EISDIR, "is a directory")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644,
                             dir_fd=parent)
            try:
                with os.fdopen(fd, "wb", buffering=0) as file:
                    async for chunk in chunks:
                        view = memoryview(chunk)
                        while view:
                            view = view[file.write(view) or 0:]
                with _errors(box, path):
                    os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=parent)
        finally:
            os.close(parent)

    async def _list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        box = _running(sandbox_id)
        path = _abs(box, path)
        with _errors(box, path):
            fd = _open(box, path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                found = []
                for name in os.listdir(fd):
                    with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                        found.append(_info(fd, name, posixpath.join(path, name)))
                return found
            finally:
                os.close(fd)

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        box = _running(sandbox_id)
        path = _abs(box, path)
        with _errors(box, path), _parent(box, path) as (parent, name):
            return _info(parent, name, path)

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        box = _running(sandbox_id)
        path = _abs(box, path)
        with _errors(box, path), _parent(box, path, make=parents) as (parent, name):
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                if not (exist_ok and stat.S_ISDIR(os.stat(name, dir_fd=parent).st_mode)):
                    raise

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        box = _running(sandbox_id)
        path = _abs(box, path)
        with _errors(box, path), _parent(box, path) as (parent, name):
            if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=parent)
            elif recursive:
                _remove_tree(parent, name)
            else:
                os.rmdir(name, dir_fd=parent)

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        box = _running(sandbox_id)
        src, dst = _abs(box, src), _abs(box, dst)
        with _errors(box, src), _parent(box, src) as (src_dir, src_name):
            os.stat(src_name, dir_fd=src_dir, follow_symlinks=False)
            with _errors(box, dst), _parent(box, dst, make=True) as (dst_dir, dst_name):
                os.replace(src_name, dst_name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)


# --------------------------------------------------------------- sandboxes


def _make_root(root: str, source: str | None) -> None:
    """A new root directory: a copy of a snapshot's, or a fresh one."""
    if source is not None:
        _copy_tree(source, root)
        return
    os.makedirs(root + WORKDIR)
    os.mkdir(root + "/tmp")
    os.chmod(root + "/tmp", 0o1777)
    for name in SYSTEM_DIRS:
        if os.path.islink("/" + name):  # bubblewrap cannot make them over a bound root
            os.symlink(os.readlink("/" + name), os.path.join(root, name))


def _launch(box: _Box, mounts: list[str]) -> None:
    """Start the bubblewrap that holds the sandbox's namespaces; note its pid 1 and root."""
    argv = [BWRAP, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--bind", box.root, "/", "--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_DIRS:
        if os.path.isdir("/" + name) and not os.path.islink("/" + name):
            argv += ["--ro-bind", "/" + name, "/" + name]
    read, write = os.pipe()
    argv += ["--proc", "/proc", "--dev", "/dev", *mounts, "--info-fd", str(write),
             "--chdir", "/", "--as-pid-1", PYTHON, "-I", "-S", "-c", INIT]
    try:
        box.bwrap = subprocess.Popen(argv, env={"PATH": PATH}, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     pass_fds=(write,), start_new_session=True)
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as info:
        data = info.read()
    assert box.bwrap.stderr is not None
    if not data:
        problem = box.bwrap.stderr.read().decode(errors="replace").strip()
        box.bwrap.wait()
        raise SandboxError(f"bubblewrap failed: {problem}", provider=NAME)
    box.bwrap.stderr.close()
    box.init = json.loads(data)["child-pid"]
    # bubblewrap reports its pid 1 before that has made the sandbox's / its root and
    # working directory (which nsenter's -r and -w take); it runs INIT once it has.
    want = os.stat(box.root)
    for _ in range(10_000):
        with contextlib.suppress(FileNotFoundError):
            seen = [os.stat(f"/proc/{box.init}/{link}") for link in ("root", "cwd")]
            started = Path(f"/proc/{box.init}/cmdline").read_bytes().startswith(
                os.fsencode(PYTHON) + b"\0")
            if started and all((s.st_dev, s.st_ino) == (want.st_dev, want.st_ino)
                               for s in seen):
                break
        time.sleep(0.001)
    else:
        raise SandboxError("bubblewrap did not start the sandbox", provider=NAME)
    box.root_fd = os.open(f"/proc/{box.init}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def _stop(box: _Box) -> None:
    """End every process of the sandbox and remove its root."""
    for pid, proc in box.procs.items():
        if proc.popen.poll() is None:
            _killpg(pid)  # the rest of its tree dies with the sandbox's init, below
        proc.popen.wait()
        if proc.popen.stdin is not None:
            proc.popen.stdin.close()
        for path in (proc.out_path, proc.err_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    if box.bwrap is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(box.init, signal.SIGKILL)
        box.bwrap.wait()
    if box.root_fd >= 0:
        os.close(box.root_fd)
        box.root_fd = -1
    shutil.rmtree(box.root, ignore_errors=True)


def _copy_tree(src: str, dst: str) -> None:
    """Copy a root directory, keeping links, modes and special files (FIFOs)."""
    subprocess.run(["cp", "-a", "--", src, dst], check=True, capture_output=True)


def _members(box: _Box) -> Iterator[str]:
    """The host pids (as /proc entries) of the sandbox's processes."""
    namespace = os.readlink(f"/proc/{box.init}/ns/pid")
    for pid in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if pid.isdigit() and os.readlink(f"/proc/{pid}/ns/pid") == namespace:
                yield pid


def _freeze(box: _Box) -> None:
    """Stop every process of the sandbox, memory kept, sweeping again until a sweep finds
    none it had not stopped (one may fork while the first are stopped)."""
    stopped: set[str] = set()
    while more := set(_members(box)) - stopped:
        for pid in more:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGSTOP)
        while any(_state(pid) not in ("T", "Z", "X", "") for pid in more):
            time.sleep(0.001)  # the signal takes effect a moment later
        stopped |= more


def _state(pid: str) -> str:
    """A process's state letter (``T``: stopped), or empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


def _usage(box: _Box) -> tuple[int, float]:
    """Resident memory (bytes) and CPU time (seconds) of the sandbox's processes."""
    memory, ticks = 0, 0
    for pid in _members(box):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
            memory += next((int(line.split()[1]) << 10 for line in status.splitlines()
                            if line.startswith("VmRSS:")), 0)
    return memory, ticks / os.sysconf("SC_CLK_TCK")


def _disk_usage(root: str) -> int:
    """Bytes the files of a root directory occupy (mounts aside)."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


def _enter(box: _Box, command: Command) -> list[str]:
    """The host argv that runs ``command`` inside the sandbox, in its working directory."""
    cwd = posixpath.normpath(posixpath.join(box.workdir, command.cwd or "."))
    return [NSENTER, "-t", str(box.init), *ENTER, "--", PYTHON, "-I", "-S", "-c", SUBREAPER,
            "/bin/sh", "-c", IN_CWD, cwd, *command.argv]


def _env(box: _Box, command: Command) -> dict[str, str]:
    return {"PATH": PATH, "HOME": WORKDIR, **box.env, **command.env}


def _spawn(argv: list[str], env: dict[str, str], out: int,
           err: int) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                start_new_session=True)
    finally:
        os.close(out)
        os.close(err)


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _kill_holders(box: _Box, pipes: set[int]) -> None:
    """Kill (with their trees) the sandbox's processes that hold one of ``pipes`` (by
    inode) open."""
    links = {f"pipe:[{inode}]" for inode in pipes}
    for pid in _members(box):
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in links
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                _kill_tree(int(pid))


def _kill_tree(pid: int) -> None:
    """Kill the command whose host process (``nsenter``) is ``pid`` and every process it
    started, ``setsid`` and double forks included (the core's tree kill, run on the host:
    the command's orphans are reparented inside its tree, see :data:`SUBREAPER`)."""
    subprocess.run(scripts.kill_tree_argv(pid), stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


# ------------------------------------------------------------------- paths

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_OPENAT2 = 437  # the same number on every architecture
_RESOLVE_NO_MAGICLINKS, _RESOLVE_IN_ROOT = 0x02, 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def _open(box: _Box, path: str, flags: int) -> int:
    """Open ``path`` of the sandbox, every component resolved inside its root."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(box.root_fd),
                       ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                       ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


def _makedirs(box: _Box, path: str) -> int:
    """Open directory ``path`` of the sandbox (``O_PATH``), making what is missing."""
    try:
        return _open(box, path, os.O_PATH | os.O_DIRECTORY)
    except FileNotFoundError:
        if path == "/":
            raise
    parent = _makedirs(box, posixpath.dirname(path))
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(posixpath.basename(path), 0o755, dir_fd=parent)
    finally:
        os.close(parent)
    return _open(box, path, os.O_PATH | os.O_DIRECTORY)


@contextlib.contextmanager
def _parent(box: _Box, path: str, *, make: bool = False) -> Iterator[tuple[int, str]]:
    """The open parent directory of ``path`` and its last component (``.`` for ``/``)."""
    if path == "/":
        parent, name = _open(box, "/", os.O_PATH | os.O_DIRECTORY), "."
    else:
        dirname, name = posixpath.split(path)
        parent = (_makedirs if make else _open_dir)(box, dirname)
    try:
        yield parent, name
    finally:
        os.close(parent)


def _open_dir(box: _Box, path: str) -> int:
    return _open(box, path, os.O_PATH | os.O_DIRECTORY)


_ERRORS: dict[int, Callable[..., SandboxError]] = {
    errno.ENOENT: FileNotFound, errno.ELOOP: FileNotFound, errno.ENOTDIR: NotADirectory,
    errno.EISDIR: IsADirectory, errno.EEXIST: FileExists, errno.ENOTEMPTY: Conflict,
    errno.EACCES: PermissionDenied, errno.EPERM: PermissionDenied,
    errno.EROFS: PermissionDenied, errno.EXDEV: Conflict, errno.EBUSY: Conflict,
}


@contextlib.contextmanager
def _errors(box: _Box, path: str) -> Iterator[None]:
    """OS errors as the SDK's, naming the caller's path (never a temporary file)."""
    try:
        yield
    except SandboxError:
        raise
    except OSError as exc:
        kind = _ERRORS.get(exc.errno or 0, SandboxError)
        raise kind(f"{path}: {os.strerror(exc.errno or errno.EIO)}", provider=NAME,
                   sandbox_id=box.info.id) from None


def _info(parent: int, name: str, path: str) -> FileInfo:
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    modified = dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return FileInfo(path=path, type=FileType.SYMLINK, size=st.st_size, mode=mode,
                        modified_at=modified, symlink_target=os.readlink(name, dir_fd=parent))
    kind = FileType.DIRECTORY if stat.S_ISDIR(st.st_mode) else \
        FileType.FILE if stat.S_ISREG(st.st_mode) else FileType.OTHER
    return FileInfo(path=path, type=kind, size=st.st_size if kind == FileType.FILE else 0,
                    mode=mode, modified_at=modified)


def _remove_tree(parent: int, name: str) -> None:
    """Remove directory ``name`` and everything in it, following no symlink."""
    for _path, dirs, files, fd in os.fwalk(name, topdown=False, dir_fd=parent):
        for entry in files:
            os.unlink(entry, dir_fd=fd)
        for entry in dirs:
            try:
                os.rmdir(entry, dir_fd=fd)
            except NotADirectoryError:  # a symlink to a directory
                os.unlink(entry, dir_fd=fd)
    os.rmdir(name, dir_fd=parent)


def _abs(box: _Box, path: str) -> str:
    path = posixpath.normpath(posixpath.join(box.workdir, path))
    return path[1:] if path.startswith("//") else path


# ----------------------------------------------------------------- records


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
