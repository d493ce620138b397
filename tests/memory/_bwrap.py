"""Starting and ending a memory sandbox, and entering it: the bubblewrap that holds its
namespaces (user, mount, PID, IPC, UTS, cgroup, and a network with loopback only) while
it lives, with ``/usr`` read-only from the host (and a ``python`` beside ``python3``),
its own ``/proc`` and ``/dev`` and its volumes bound in; and the ``nsenter`` command line
that runs a command inside."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import posixpath
import shutil
import signal
import subprocess
import time
from pathlib import Path

from provider_sdk.commands import Command
from provider_sdk.errors import SandboxError
from provider_sdk.local._system import python_alias_argv

from ._box import NAME, PATH, WORKDIR, Box
from ._procs import END_GRACE, kill_inside, killpg

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
# bubblewrap dies with the thread that started it: one that lives as long as the process.
SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="psdk-memory")


def make_root(root: str, source: str | None) -> None:
    """A new root directory: a copy of a snapshot's, or a fresh one."""
    if source is not None:
        copy_tree(source, root)
        return
    os.makedirs(root + WORKDIR)
    os.mkdir(root + "/tmp")
    os.chmod(root + "/tmp", 0o1777)
    for name in SYSTEM_DIRS:
        if os.path.islink("/" + name):  # bubblewrap cannot make them over a bound root
            os.symlink(os.readlink("/" + name), os.path.join(root, name))


def launch(box: Box, mounts: list[str]) -> None:
    """Start the bubblewrap that holds the sandbox's namespaces; note its pid 1 and root.
    Run it in :data:`SPAWNER`'s thread."""
    argv = [BWRAP, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--bind", box.root, "/", "--ro-bind", "/usr", "/usr",
            *python_alias_argv()]  # `python`, as in every provider's default template
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


def stop(box: Box) -> None:
    """End every process of the sandbox and remove its root."""
    for pid, proc in box.procs.items():
        if proc.popen.poll() is None:
            if kill_inside(pid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(END_GRACE)
            killpg(pid)  # the rest of its tree dies with the sandbox's init, below
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


def copy_tree(src: str, dst: str) -> None:
    """Copy a root directory, keeping links, modes and special files (FIFOs)."""
    subprocess.run(["cp", "-a", "--", src, dst], check=True, capture_output=True)


def enter(box: Box, command: Command) -> list[str]:
    """The host argv that runs ``command`` inside the sandbox, in its working directory."""
    cwd = posixpath.normpath(posixpath.join(box.workdir, command.cwd or "."))
    return [NSENTER, "-t", str(box.init), *ENTER, "--", PYTHON, "-I", "-S", "-c", SUBREAPER,
            "/bin/sh", "-c", IN_CWD, cwd, *command.argv]


def environment(box: Box, command: Command) -> dict[str, str]:
    """The environment ``command`` runs with: the sandbox's, then the command's."""
    return {"PATH": PATH, "HOME": WORKDIR, **box.env, **command.env}
