"""The bubblewrap command line of a local sandbox: its namespaces and seal, its root,
``/proc``, ``/dev``, ``/etc`` and volumes, and the agent copied in through descriptors
(``*_FD`` placeholders, filled in by ``_launch.start``), so that no host path of the
home shows inside. Pure functions of their arguments and the host's files; they start
nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePosixPath

from provider_sdk.local import _seccomp
from provider_sdk.local._system import SYSTEM_DIRS, python_alias_argv
from provider_sdk.local._users import AGENT_CAPS, SANDBOX_UID

SHM_MB = 64
"""The size of a sandbox's ``/dev/shm`` (a tmpfs; what it holds counts as the
sandbox's memory too)."""
AGENT_SOURCE = Path(__file__).with_name("_agent.py")
SANDBOX_PYTHON = "/usr/bin/python3"
SANDBOX_AGENT = "/etc/psdk/agent.py"
SANDBOX_CONFIG = "/etc/psdk/agent.json"
# The agent's process model and file operations, beside the agent (which imports them
# from its own directory).
PROCS_SOURCE = AGENT_SOURCE.with_name("_procs.py")
SANDBOX_PROCS = "/etc/psdk/_procs.py"
FILEOPS_SOURCE = AGENT_SOURCE.with_name("_fileops.py")
SANDBOX_FILEOPS = "/etc/psdk/_fileops.py"
SPAWNER_SOURCE = AGENT_SOURCE.with_name("_spawner.py")
SANDBOX_SPAWNER = "/etc/psdk/_spawner.py"
# Host /etc entries that change as packages are installed: shown read-only, live.
ETC_LIVE = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")


def bwrap_path() -> str | None:
    """The bubblewrap executable, if installed."""
    return shutil.which("bwrap")


INFO_FD = "{info_fd}"
LISTEN_FD = "{listen_fd}"
ARGS_FD = "{args_fd}"
SECCOMP_FD = "{seccomp_fd}"
AGENT_FD = "{agent_fd}"
CONFIG_FD = "{config_fd}"
PROCS_FD = "{procs_fd}"
FILEOPS_FD = "{fileops_fd}"
SPAWNER_FD = "{spawner_fd}"
USERNS_FD = "{userns_fd}"
EMPTY_FD = "{empty}"
"""An empty file's placeholder (``data`` maps it to ``b""``)."""


def seal_args(*, separate: bool) -> list[str]:
    """bubblewrap options that seal the sandbox: its own namespaces, a user namespace
    in which no further one can be made, and the seccomp filter (where the architecture
    is known). ``separate``: bubblewrap runs as the sandbox's own uid 0 in the
    namespace :func:`~provider_sdk.local._users.namespaces` made for it: the agent keeps
    ``AGENT_CAPS`` and runs commands as the sandbox user."""
    if separate:
        # Every namespace --unshare-all makes but the user namespace, which is given.
        args = ["--userns", USERNS_FD, "--unshare-ipc", "--unshare-pid", "--unshare-net",
                "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL"]
        for cap in AGENT_CAPS:
            args += ["--cap-add", cap]
    else:
        args = ["--unshare-all", "--unshare-user", "--disable-userns",
                "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    if _seccomp.supported():
        args += ["--seccomp", SECCOMP_FD]
    return args


def bwrap_argv(*, bwrap: str, root: Path, etc: Path, volumes: list[tuple[Path, str, bool]],
               separate: bool, devices: Path | None = None) -> list[str]:
    """The bubblewrap command line for a sandbox whose writable root is ``root``
    (:func:`start` fills in the ``*_FD`` placeholders). The agent and its configuration
    are copied in (``--ro-bind-data``), not bound from host paths."""
    argv = [
        bwrap, *seal_args(separate=separate), "--hostname", "sandbox", "--new-session",
        "--info-fd", INFO_FD, "--bind", str(root), "/",
        "--ro-bind", "/usr", "/usr", *python_alias_argv(),
    ]
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_dir() and not host.is_symlink():
            argv += ["--ro-bind", str(host), f"/{name}"]
    argv += [*proc_argv(), *device_argv(devices), *shm_argv(), *etc_args(etc)]
    for name in ETC_LIVE:
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    argv += [*agent_data_args(), "--remount-ro", "/etc", *volume_args(volumes)]
    return argv


def volume_args(volumes: list[tuple[Path, str, bool]]) -> list[str]:
    """bubblewrap options that bind each volume at its target. Missing directories on
    the way are made ``0755`` first: bubblewrap would make them ``0700`` for its own
    user, which the sandbox user is not where users are separate. Existing ones are
    left as they are."""
    argv: list[str] = []
    for source, target, read_only in volumes:
        parts = PurePosixPath(target).parts[1:]
        for depth in range(1, len(parts) + 1):
            argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[:depth])]
        argv += ["--ro-bind" if read_only else "--bind", str(source), target]
    return argv


READ_ONLY_PROC = ("sys", "sysrq-trigger", "irq", "bus", "fs", "pressure")
"""What of ``/proc`` is read-only inside: the host-global knobs (Docker's list, and the
pressure files, where any user may register a trigger). The kernel refuses most of
their writes to every id a sandbox has already; this holds whoever runs it."""


def proc_argv() -> list[str]:
    """bubblewrap arguments mounting the sandbox's ``/proc`` with
    :data:`READ_ONLY_PROC` read-only (the binds show the same files, from the host's
    ``/proc``, whose ``sys`` answers for the reader's own namespaces as the sandbox's
    would)."""
    argv = ["--proc", "/proc"]
    for name in READ_ONLY_PROC:
        argv += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    return argv


DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8),
           "urandom": (1, 9), "tty": (5, 0)}
"""The device nodes a sandbox has (bubblewrap's ``--dev`` set), by name: major, minor."""


def device_argv(devices: Path | None) -> list[str]:
    """bubblewrap arguments for ``/dev``: bubblewrap's own (a tmpfs, the sandbox's
    terminals, the standard nodes bound from the host), and over each standard node,
    where ``devices`` holds the sandbox's own copies of them, its own."""
    argv = ["--dev", "/dev"]
    for name in DEVICES if devices is not None else ():
        argv += ["--dev-bind", f"{devices}/{name}", f"/dev/{name}"]
    return argv


def shm_argv() -> list[str]:
    """bubblewrap arguments making ``/dev/shm`` a tmpfs of :data:`SHM_MB`, writable by
    every user as on any Linux (after ``--dev``)."""
    return ["--perms", "1777", "--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm"]


def _etc_entries(etc: Path) -> list[Path]:
    """The shared ``etc`` directory's own entries (not the mount points for the host's
    live entries, which bubblewrap makes on the tmpfs)."""
    if not etc.is_dir():
        return []
    return sorted(e for e in etc.iterdir() if e.name not in ETC_LIVE)


def etc_args(etc: Path) -> list[str]:
    """bubblewrap options that make ``/etc`` a copy of the shared ``etc`` directory on
    a tmpfs (files through descriptors, see :func:`etc_data`), so that no host path of
    the home shows in the sandbox's mount table. The caller remounts it read-only."""
    argv = ["--tmpfs", "/etc"]
    for entry in _etc_entries(etc):
        inside = f"/etc/{entry.name}"
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry), inside]
        elif entry.is_dir():
            argv += ["--dir", inside]
        elif entry.is_file():
            argv += ["--perms", "0644", "--ro-bind-data", "{etc:" + entry.name + "}", inside]
    return argv


def etc_data(etc: Path, names: tuple[str, ...] | None = None) -> dict[str, bytes]:
    """The contents :func:`etc_args` (or one of its ``names``) refers to."""
    return {"{etc:" + e.name + "}": e.read_bytes() for e in _etc_entries(etc)
            if e.is_file() and not e.is_symlink() and (names is None or e.name in names)}


def agent_data_args() -> list[str]:
    """bubblewrap options that copy the agent and its configuration into the sandbox."""
    return ["--ro-bind-data", AGENT_FD, SANDBOX_AGENT, "--ro-bind-data", PROCS_FD,
            SANDBOX_PROCS, "--ro-bind-data", FILEOPS_FD, SANDBOX_FILEOPS,
            "--ro-bind-data", SPAWNER_FD, SANDBOX_SPAWNER,
            "--ro-bind-data", CONFIG_FD, SANDBOX_CONFIG]



def agent_command(python: str, *, agent: str, config: str) -> list[str]:
    """How the agent is started (:func:`start` fills in ``LISTEN_FD``)."""
    return [python, "-I", "-S", "-B", agent, config, LISTEN_FD]
