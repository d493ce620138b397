"""What a memory sandbox is on the host: its record (:class:`Box`) and those of its
background processes (:class:`Proc`)."""

from __future__ import annotations

import posixpath
import subprocess
from pathlib import Path

import attrs

from provider_sdk.models import SandboxInfo

NAME = "memory"
WORKDIR = "/home/user"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHUNK = 1 << 20


@attrs.define(eq=False)
class Proc:
    """A background process: its host process (``nsenter``) and the host files its
    output goes to."""

    popen: subprocess.Popen[bytes]
    out_path: str
    err_path: str


@attrs.define(eq=False)
class Box:
    """A sandbox: its info, its root directory on the host and the bubblewrap that holds
    its namespaces."""

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
    procs: dict[int, Proc] = attrs.field(factory=dict)

    def host(self, path: str) -> Path:
        """Where ``path`` of the sandbox is in its root directory on the host (not under
        a mount): for tests that look at a sandbox from outside."""
        return Path(self.root, posixpath.normpath(posixpath.join(self.workdir, path))[1:])


def public(info: SandboxInfo) -> SandboxInfo:
    """``info`` as callers see it: of its extras, only why a broken record is broken."""
    broken = info.extra.get("broken")
    return attrs.evolve(info, extra={} if broken is None else {"broken": broken})
