"""The local sandbox's users where the host runs as root: the agent apart from commands.

A sandbox's user namespace is made beforehand (:func:`user_namespace`) with two ids: the
sandbox user (:data:`SANDBOX_UID`) is the host's own, and uid 0 inside is
:data:`AGENT_HOST_ID`, which owns the namespace. bubblewrap runs as that id
(:func:`as_agent`), so its init, the agent and the supervisors are uid 0 inside, out of
the reach of commands, which run as the sandbox user without capabilities.
:func:`separate_users` says whether this host allows it. This module makes namespaces
and probes; it builds no bubblewrap command line and starts no sandbox.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

from provider_sdk.local import _seccomp

__all__ = ["AGENT_CAPS", "AGENT_HOST_ID", "SANDBOX_UID", "as_agent", "separate_users",
           "user_namespace"]

SANDBOX_UID = 1000
"""The uid and gid commands run as inside a sandbox (``user``)."""
AGENT_HOST_ID = 2147483646
"""The host uid and gid of a sandbox's agent and its supervisors where they run as a
user of their own (:func:`separate_users`): an id no host account has, so that nothing
on the host or in any sandbox shares it."""
AGENT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_OVERRIDE",
              "CAP_DAC_READ_SEARCH")
"""What the agent keeps in the sandbox's user namespace where it runs as a user of its
own: switching to the sandbox user (for commands and file operations), signalling its
commands, and reaching a command's working directory. Commands get none of them."""


def separate_users() -> bool:
    """Whether sandboxes started here run their agent as a user of its own.

    That takes root (to map two host ids into the sandbox's user namespace: the
    sandbox user to this process's own, the agent to :data:`AGENT_HOST_ID`),
    util-linux's ``unshare`` and ``setpriv`` (to make that namespace, and to start
    bubblewrap as its owner) and the seccomp filter, which refuses nested user
    namespaces in place of bubblewrap's ``--disable-userns`` (whose own nested namespace
    maps one user only). Commands then cannot signal, trace or read the agent, the
    supervisors that contain them, or the sandbox's init.

    The host must also let that id make and use a user namespace (a kernel or security
    policy may forbid it to unprivileged users): a throwaway bubblewrap run in one, as
    a sandbox would be started, tells, once per process.
    """
    return os.geteuid() == 0 and shutil.which("unshare") is not None \
        and shutil.which("setpriv") is not None and _seccomp.supported() \
        and shutil.which("bwrap") is not None and _separate_users_work()


@functools.cache
def _separate_users_work() -> bool:
    bwrap = shutil.which("bwrap")
    try:
        userns = user_namespace()
    except OSError:
        return False
    try:
        caps = [arg for cap in AGENT_CAPS for arg in ("--cap-add", cap)]
        probe = subprocess.run(
            [*as_agent(), str(bwrap), "--userns", str(userns), "--unshare-pid",
             "--cap-drop", "ALL", *caps, "--ro-bind", "/", "/", "--proc", "/proc", "true"],
            pass_fds=(userns,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        os.close(userns)
    return probe.returncode == 0


def as_agent() -> list[str]:
    """A command prefix that runs the rest as :data:`AGENT_HOST_ID`, without groups or
    capabilities on the host (see :func:`separate_users`)."""
    setpriv = shutil.which("setpriv") or "setpriv"
    return [setpriv, f"--reuid={AGENT_HOST_ID}", f"--regid={AGENT_HOST_ID}",
            "--clear-groups", "--inh-caps=-all", "--"]


def user_namespace() -> int:
    """A descriptor of a new user namespace (for ``--userns``), owned by
    :data:`AGENT_HOST_ID`, that maps uid and gid 0 to that id and :data:`SANDBOX_UID`
    to this process's own (root).

    A helper (util-linux's ``unshare``, run as that id) makes it; this process,
    privileged in the parent namespace, writes the maps, which bubblewrap could not (it
    maps one id only).
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        raise OSError("util-linux's unshare is not installed")
    helper = subprocess.Popen([*as_agent(), unshare, "--user", "--", "sleep", "60"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        mine = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{helper.pid}/ns/user") == mine:
            if helper.poll() is not None or time.monotonic() > deadline:
                raise OSError("cannot make the sandbox's user namespace (are user "
                              "namespaces allowed for unprivileged users here?)")
            time.sleep(0.0005)
        for name, own in (("uid_map", os.geteuid()), ("gid_map", os.getegid())):
            Path(f"/proc/{helper.pid}/{name}").write_text(
                f"0 {AGENT_HOST_ID} 1\n{SANDBOX_UID} {own} 1\n")
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill()
        helper.wait()
