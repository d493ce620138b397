"""The local sandbox's users where the host runs as root: ids of its own, none of them
privileged, and the agent apart from commands.

A sandbox's user namespace is made beforehand (:func:`namespaces`) and maps uids and
gids ``0..65535`` onto the sandbox's slot of host ids (``_ids``): uid 0 inside, which
owns the namespace, is the slot's first id, the sandbox user (:data:`SANDBOX_UID`) the
1001st. bubblewrap runs as that first id (:func:`as_agent`), so its init, the agent and
the supervisors are uid 0 inside, out of the reach of commands, which run as the
sandbox user without capabilities; and no id inside is the host's root, this process's
own id, a host account's or another sandbox's. :func:`separate_users` says whether this
host allows it, :func:`separation_problem` why not. This module makes namespaces and
probes; it builds no bubblewrap command line and starts no sandbox.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from provider_sdk.local import _ids, _seccomp, _system

__all__ = ["AGENT_CAPS", "SANDBOX_UID", "Namespace", "as_agent", "namespaces",
           "sandbox_map", "separate_users", "separation_problem", "shared_map",
           "template_map", "template_owner"]

SANDBOX_UID = 1000
"""The uid and gid commands run as inside a sandbox (``user``)."""
AGENT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_OVERRIDE",
              "CAP_DAC_READ_SEARCH")
"""What the agent keeps in the sandbox's user namespace where it runs as a user of its
own: switching to the sandbox user (for commands and file operations), signalling its
commands, and reaching a command's working directory. Commands get none of them."""
_NAMESPACE_WAIT = 10.0


def separate_users() -> bool:
    """Whether sandboxes started here get host ids of their own, with the agent apart
    from commands (:func:`separation_problem` is ``None``)."""
    return separation_problem() is None


def separation_problem() -> str | None:
    """Why sandboxes started here cannot get host ids of their own, or ``None``.

    That takes root (to map a slot of host ids into each sandbox's user namespace and
    to start bubblewrap as the slot's first id), util-linux's ``unshare`` and
    ``setpriv``, the seccomp filter (it refuses nested user namespaces in place of
    bubblewrap's ``--disable-userns``, whose own nested namespace maps one user only),
    a range of host ids no account uses (``_ids.host_range``), and a kernel that lets
    such an id make and use a user namespace: a throwaway bubblewrap run as the probe's
    id tells, once per process.
    """
    if os.geteuid() != 0:
        return "the provider does not run as root"
    missing = [tool for tool in ("unshare", "setpriv", "bwrap") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
    if not _seccomp.supported():
        return "the seccomp filter does not know this architecture"
    try:
        ids = _ids.host_range()
    except OSError as exc:
        return str(exc)
    if not _probe(ids.probe):
        return ("an unprivileged id cannot make and use a user namespace here (a kernel "
                "or security policy forbids it)")
    return None


@functools.cache
def _probe(base: int) -> bool:
    bwrap = shutil.which("bwrap")
    try:
        userns, = namespaces(Namespace(owner=base, uid_map=sandbox_map(base)))
    except OSError:
        return False
    try:
        caps = [arg for cap in AGENT_CAPS for arg in ("--cap-add", cap)]
        probe = subprocess.run(
            [*as_agent(base), str(bwrap), "--userns", str(userns), "--unshare-pid",
             "--cap-drop", "ALL", *caps, *_system.system_argv(), "--proc", "/proc", "true"],
            pass_fds=(userns,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        os.close(userns)
    return probe.returncode == 0


def as_agent(base: int) -> list[str]:
    """A command prefix that runs the rest as host id ``base`` (a sandbox's uid 0),
    without groups or capabilities on the host."""
    setpriv = shutil.which("setpriv") or "setpriv"
    return [setpriv, f"--reuid={base}", f"--regid={base}", "--clear-groups",
            "--inh-caps=-all", "--"]


def sandbox_map(base: int) -> str:
    """A sandbox's own map: ids ``0..65535`` inside to its slot."""
    return f"0 {base} {_ids.SLOT_SIZE}\n"


def shared_map(ids: _ids.IdRange, base: int) -> str:
    """The map that shows files stored with the shared slot's ids (volumes) as the
    sandbox's own: the shared slot's ids to the sandbox's."""
    return f"{ids.storage} {base} {_ids.SLOT_SIZE}\n"


def template_map(base: int) -> str:
    """The map that shows a template's files (stored with the image's own ids) to a
    sandbox: the image's root owns nothing inside and its files are the sandbox
    user's, as the image's root's would be its own; the image's other ids are the
    sandbox's same ids, but for uid 1000 itself, which no id inside shows."""
    user = SANDBOX_UID
    return (f"0 {base + user} 1\n1 {base + 1} {user - 1}\n"
            f"{user + 1} {base + user + 1} {_ids.SLOT_SIZE - user - 1}\n")


def template_owner(base: int) -> Callable[[int], int]:
    """The host id that a template's id shows as in the sandbox whose slot starts at
    ``base`` (:func:`template_map`), for the directories made in its layer; an id no
    id inside shows is the sandbox's ``nobody`` (65534)."""
    nobody = base + 65534

    def owner(ident: int) -> int:
        if ident == 0:
            return base + SANDBOX_UID
        return nobody if ident == SANDBOX_UID or ident >= _ids.SLOT_SIZE else base + ident

    return owner


@attrs.frozen
class Namespace:
    """A user namespace to make: the host id that owns it, and its uid (and gid) map."""

    owner: int
    uid_map: str


def namespaces(*wanted: Namespace) -> list[int]:
    """Descriptors of new user namespaces (for ``--userns`` or an idmapped mount), one
    for each of ``wanted``, made side by side.

    A helper per namespace (util-linux's ``unshare``, run as its owner) makes it; this
    process, privileged in the parent namespace, writes its maps, which no helper could.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        raise OSError("util-linux's unshare is not installed")
    helpers: list[subprocess.Popen[bytes]] = []
    fds: list[int] = []
    try:
        for spec in wanted:
            helpers.append(subprocess.Popen(
                [unshare, "--user", "--", "sleep", "60"], user=spec.owner, group=spec.owner,
                extra_groups=[], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        mine = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + _NAMESPACE_WAIT
        for spec, helper in zip(wanted, helpers, strict=True):
            while _namespace_of(helper.pid) in (mine, None):
                if helper.poll() is not None or time.monotonic() > deadline:
                    raise OSError("cannot make the sandbox's user namespace (are user "
                                  "namespaces allowed for unprivileged users here?)")
                time.sleep(0.0005)
            for name in ("uid_map", "gid_map"):
                Path(f"/proc/{helper.pid}/{name}").write_text(spec.uid_map)
            fds.append(os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        for helper in helpers:
            helper.kill()
            helper.wait()
    return fds


def _namespace_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/user")
    except OSError:
        return None
