"""Local templates: an image's filesystem as the read-only lower layer of sandboxes.

A template is a directory under the home (``templates/<id>/root``, exported from a
Docker Engine image at build time) plus its ``meta.json`` (name, content hash, the
image's ``ENV``, ``WORKDIR`` and ``USER``). A sandbox made from it never writes there:
its root is an overlay mount (the template below, the sandbox's own ``upper``
directory on top), made in a private mount namespace just before bubblewrap starts,
so it disappears with the sandbox's processes and is made again on restart. Creating a
sandbox copies nothing.

The image need not have Python: the agent runs on the host's interpreter, whose
``/usr`` is shown read-only at :data:`HOST_DIR` and which is started through the
host's dynamic loader with an explicit library path, so nothing of the image's
libraries is mixed in and the commands the agent runs see only the image.

This module knows paths, the template root's preparation and command lines; it starts
nothing and never imports Docker.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import struct
import sysconfig
from collections.abc import Callable
from pathlib import Path

from provider_sdk import errors
from provider_sdk.local import _bwrap, _mounts, _system

HOST_DIR = "/.psdk/host"
"""Where the host's ``/usr`` (and real ``/lib``... directories) appear in a template
sandbox, read-only, for the agent's interpreter."""
TEMPLATE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}-[0-9a-f]{12}$")
_PASSWD_USER = "user:x:1000:1000:user:/home/user:/bin/sh\n"
_GROUP_USER = "user:x:1000:\n"
# Paths bubblewrap mounts over; made in the template so no sandbox's layer gets them.
_MOUNT_FILES = ("etc/psdk/agent.py", "etc/psdk/agent.json", "etc/hosts", "etc/hostname")
_MOUNT_DIRS = ("proc", "dev", "tmp", "home/user")


def template_id(name: str, content_hash: str) -> str:
    """A template's id: its name and the first 12 hex digits of its content hash."""
    return f"{name}-{content_hash[:12]}"


def prepare_root(root: Path) -> None:
    """Make an exported image filesystem ready to be a sandbox's lower layer: a user
    with uid 1000 in ``/etc/passwd`` and ``/etc/group`` if the image has none, its home
    ``/home/user``, ``/tmp`` writable by all, and the mount points bubblewrap needs.

    Nothing here follows a symlink the image has: an image whose ``/etc`` or
    ``/home`` is one is refused (``TemplateBuildError``, step ``export``).
    """
    for name in _MOUNT_DIRS:
        _make_dirs(root, name)
    (root / "tmp").chmod(0o1777)
    for name in _MOUNT_FILES:
        parent, _, base = name.rpartition("/")
        target = _make_dirs(root, parent) / base
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
    for sub in _host_dirs().values():
        _make_dirs(root, sub.lstrip("/"))
    _add_line(root / "etc" / "passwd", _PASSWD_USER, uid_field=2)
    _add_line(root / "etc" / "group", _GROUP_USER, uid_field=2)


def user_uid(root: Path, user: str | None) -> int | None:
    """The uid an image's ``USER`` names (``None`` if its ``/etc/passwd`` lacks it).

    Local sandboxes always run as uid 1000, which owns the image's root-owned files
    inside (as root would), so uid 0 and uid 1000 are both honoured.
    """
    name = (user or "0").partition(":")[0] or "0"
    if name.isdigit():
        return int(name)
    passwd = root / "etc" / "passwd"
    try:
        if not stat.S_ISREG(os.lstat(passwd).st_mode):
            return None
        rows = passwd.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for row in rows:
        fields = row.split(":")
        if len(fields) > 2 and fields[0] == name and fields[2].isdigit():
            return int(fields[2])
    return None


def _make_dirs(root: Path, relative: str) -> Path:
    """``root/relative`` as a real directory, made if missing, refusing symlinks."""
    path = root
    for part in (p for p in relative.split("/") if p):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            path.mkdir(mode=0o755)
            continue
        if not stat.S_ISDIR(mode):
            raise errors.TemplateBuildError(
                f"the image's /{path.relative_to(root)} is not a directory (a symlink?); a "
                "local sandbox needs it to be one", step="export")
    return path


def _add_line(path: Path, line: str, *, uid_field: int) -> None:
    """Append ``line`` to a passwd-style file unless an entry has its id already."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return  # a symlink or something odd: leave the image's choice alone
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        text = ""
    wanted = line.split(":")[uid_field]
    if any(row.split(":")[uid_field:uid_field + 1] == [wanted] for row in text.splitlines()):
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "a") as f:
        f.write(("" if not text or text.endswith("\n") else "\n") + line)


def make_cwd(lower: Path, upper: Path, cwd: str,
             owner: Callable[[int], int] | None = None) -> None:
    """Make the working directory in a sandbox's own layer if the template lacks it.

    Stops (leaving the directory missing) where the template has something other than
    a directory on the way: writing a directory over it would hide a symlink such as
    ``/lib``. ``owner`` gives the host id that a template's id shows as in the sandbox
    (where the provider runs as root); a directory made here belongs to the one the
    template's root shows as, a copy of the template's to whom the original shows as.
    """
    parts = [p for p in cwd.split("/") if p]
    below, above = lower, upper
    for index, part in enumerate(parts):
        below, above = below / part, above / part
        try:
            found = os.lstat(below)
        except FileNotFoundError:
            found = None
        if found is not None and not stat.S_ISDIR(found.st_mode):
            return
        if found is not None and not os.path.lexists(above):
            continue  # the template has it: nothing to make here
        try:
            above_mode = os.lstat(above).st_mode
        except FileNotFoundError:
            _make_parents(lower, upper, parts[:index], owner)
            _make_dir(above, found, owner)
            continue
        if not stat.S_ISDIR(above_mode):
            return  # deleted in this layer (a whiteout): leave it deleted


def _make_parents(lower: Path, upper: Path, parts: list[str],
                  owner: Callable[[int], int] | None) -> None:
    """The upper layer's directories on the way to ``parts``, looking like the
    template's."""
    below, above = lower, upper
    for part in parts:
        below, above = below / part, above / part
        if not os.path.lexists(above):
            try:
                found: os.stat_result | None = os.lstat(below)
            except FileNotFoundError:
                found = None
            _make_dir(above, found, owner)


def _make_dir(path: Path, found: os.stat_result | None,
              owner: Callable[[int], int] | None) -> None:
    """A directory of the sandbox's layer: like the template's ``found`` (shadowing
    it must change nothing the sandbox sees), else new, as the template's root's."""
    path.mkdir(mode=0o755)
    if found is not None:
        if os.geteuid() == 0:
            os.lchown(path, *(owner(i) if owner else i for i in (found.st_uid, found.st_gid)))
        os.chmod(path, stat.S_IMODE(found.st_mode))
        os.utime(path, ns=(found.st_atime_ns, found.st_mtime_ns))
    elif owner is not None:
        os.lchown(path, owner(0), owner(0))


def _host_dirs() -> dict[str, str]:
    """Host directory -> where it appears in a template sandbox."""
    dirs = {"/usr": f"{HOST_DIR}/usr"}
    for name in _system.SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_dir() and not host.is_symlink():
            dirs[str(host)] = f"{HOST_DIR}/{name}"
    return dirs


def _inside(path: str) -> str | None:
    """Where a host path appears in a template sandbox, if it is shown at all."""
    for host, shown in _host_dirs().items():
        if path == host or path.startswith(host + "/"):
            return shown + path[len(host):]
    return None


PSDK_DIR = "/.psdk"
"""Where the host's directories for the agent appear (HOST_DIR below it): a read-only
tmpfs of its own, so that nothing beside or above them (where the interpreter looks for
its standard library) is the image's, which is the sandbox user's."""


def host_binds() -> list[str]:
    """bubblewrap arguments showing the host's system directories under HOST_DIR, on a
    read-only tmpfs at :data:`PSDK_DIR`."""
    argv: list[str] = ["--perms", "0755", "--tmpfs", PSDK_DIR]
    for host, shown in _host_dirs().items():
        argv += ["--ro-bind", host, shown]
    return [*argv, "--remount-ro", PSDK_DIR]


def agent_interpreter() -> list[str]:
    """How the host's Python is started inside a template sandbox: its dynamic loader,
    by path under HOST_DIR, with the host's library directories.

    Raises ``ConfigError`` where the host's interpreter cannot be run that way.
    """
    python = os.path.realpath(_bwrap.SANDBOX_PYTHON)
    interp = _elf_interpreter(python)
    loader = _inside(os.path.realpath(interp)) if interp else None
    shown_python = _inside(python)
    if loader is None or shown_python is None:
        raise errors.ConfigError(
            f"local templates run the agent with the host's {_bwrap.SANDBOX_PYTHON} through "
            "its dynamic loader, which is not under /usr or a system directory here",
            provider="local")
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    candidates = [os.path.dirname(os.path.realpath(interp or ""))]
    for base in ("/usr/lib", "/lib"):
        if arch:
            candidates.append(f"{base}/{arch}")
        candidates += [f"{base}64", base]
    library: list[str] = []
    for candidate in candidates:
        real = os.path.realpath(candidate)
        shown = _inside(real) if os.path.isdir(real) else None
        if shown is not None and shown not in library:
            library.append(shown)
    return [loader, "--library-path", ":".join(library), shown_python]


def _elf_interpreter(path: str) -> str | None:
    """The program interpreter (``PT_INTERP``) an ELF executable names, if any."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return None  # only 64-bit executables are looked into
            order = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack_from(order + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
            for index in range(phnum):
                f.seek(phoff + index * phentsize)
                kind, _flags, offset, _vaddr, _paddr, size = struct.unpack(
                    order + "IIQQQQ", f.read(40))
                if kind == 3:  # PT_INTERP
                    f.seek(offset)
                    return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def overlay_prefix(*, lower: Path, upper: Path, work: Path, root: Path,
                   base: Path) -> list[str]:
    """A command prefix that mounts the sandbox's overlay root at ``root`` in a mount
    namespace of its own, then runs the rest of the command line (bubblewrap) there.

    The layers are named relative to ``base`` (the sandbox's directory): the mount's
    options show in the sandbox's mount table, and must not name the home (a template
    staged outside the home, see ``_mounts``, keeps its staging path). As root the mount is
    a plain overlay; otherwise it is made in a user namespace (``userxattr``), which the
    kernel allows since Linux 5.11.
    """
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if unshare is None or mount is None:
        raise errors.ConfigError(
            "local templates need util-linux's unshare and mount to make each sandbox's "
            "overlay root: install util-linux", provider="local")
    names = [str(path) if path.is_relative_to(_mounts.STAGING_ROOT)
             else os.path.relpath(path, base) for path in (lower, upper, work)]
    for name in names:
        if any(c in name for c in ",:\\"):
            raise errors.ConfigError(
                f"the local provider's home path {name!r} has ',', ':' or '\\', "
                "which an overlay mount cannot name: use another home", provider="local")
    options = "nosuid,nodev,lowerdir={},upperdir={},workdir={}".format(*names)
    user: list[str] = []
    if os.geteuid() != 0:
        options += ",userxattr"
        user = ["--user", "--map-root-user"]
    script = 'cd "$4" && "$1" -t overlay psdk -o "$2" "$3" || exit 125; shift 4; exec "$@"'
    return [unshare, *user, "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", script, "sh", mount, options, str(root), str(base)]


MOUNTED_FILES = ("/etc/hosts", "/etc/hostname", "/etc/ld.so.preload")
"""Files of a template sandbox's root that bubblewrap binds over (see :func:`bwrap_argv`)."""
AGENT_DIR = "/etc/psdk"
"""The agent's directory: a read-only tmpfs of its own holding the agent's copies."""


def mounted_directories() -> list[str]:
    """Directories of a template sandbox's root that bubblewrap mounts on."""
    return ["/proc", "/dev", AGENT_DIR, PSDK_DIR]


def bwrap_argv(*, bwrap: str, root: Path, etc: Path, volumes: list[tuple[Path, str, bool]],
               separate: bool, devices: Path | None = None) -> list[str]:
    """The bubblewrap command line for a template sandbox whose (overlay) root is
    ``root``: the image's own ``/usr`` and ``/etc``, the host's system directories under
    HOST_DIR for the agent, and ``hosts``/``hostname`` from the shared ``etc``.

    The image's files are the sandbox user's (see :func:`user_uid`), so nothing the
    agent starts from may lie in them: its modules sit on a read-only tmpfs of their
    own, and ``/etc/ld.so.preload``, which the dynamic loader that starts it reads, is
    an empty read-only file (a template's own is not honoured)."""
    argv = [
        bwrap, *_bwrap.seal_args(separate=separate),
        "--hostname", "sandbox", "--new-session", "--info-fd", _bwrap.INFO_FD,
        "--bind", str(root), "/",
        *host_binds(),
        *_bwrap.proc_argv(), *_bwrap.device_argv(devices), *_bwrap.shm_argv(),
        "--perms", "0644", "--ro-bind-data", "{etc:hosts}", "/etc/hosts",
        "--perms", "0644", "--ro-bind-data", "{etc:hostname}", "/etc/hostname",
        "--perms", "0644", "--ro-bind-data", _bwrap.EMPTY_FD, "/etc/ld.so.preload",
        "--perms", "0755", "--tmpfs", AGENT_DIR, *_bwrap.agent_data_args(),
        "--remount-ro", AGENT_DIR,
        *_bwrap.volume_args(volumes),
    ]
    return argv
