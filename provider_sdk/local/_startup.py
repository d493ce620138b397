"""How a local sandbox starts: its writable layer and root, the shared read-only
``/etc``, the agent's launch inside bubblewrap (or without it), and the wait until the
agent and a template's ``ready_cmd`` answer.

``Startup`` holds these for the control plane of ``LocalProvider``, at create and when
``resume`` starts a stopped sandbox again from its files.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from provider_sdk import disks, errors
from provider_sdk.local import (
    _bwrap,
    _disk,
    _ids,
    _launch,
    _plan,
    _system,
    _templates,
    _users,
)
from provider_sdk.local._commands import LocalCommands
from provider_sdk.local._home import write_meta
from provider_sdk.local._records import SandboxRecord
from provider_sdk.local._sandboxes import Sandboxes
from provider_sdk.local._storage import LocalStorage
from provider_sdk.local._trees import copy_tree, make_dirs_within
from provider_sdk.provider import Command

__all__ = ["WORKDIR", "Startup"]

WORKDIR = "/home/user"
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": WORKDIR,
    "USER": "user",
    "LOGNAME": "user",
    "SHELL": "/bin/bash",
    "LANG": "C.UTF-8",
}
PASSWD = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
GROUP = "root:x:0:\nuser:x:1000:\n"
HOSTS = "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"
# Host /etc entries a shell and Python need, copied once into the shared read-only /etc.
ETC_COPIED = ("nsswitch.conf", "localtime", "bash.bashrc", "profile", "inputrc", "mime.types")
READY_CMD_TIMEOUT = 120.0  # seconds a template's ready_cmd may take to succeed
READY_TIMEOUT = 15.0


class Startup:
    """The start of a sandbox's processes, for the control plane of ``LocalProvider``.

    Args:
        sandboxes: the provider's sandboxes.
        storage: their snapshots and volumes (a new root copies a snapshot's files, a
            start mounts volumes).
        commands: the commands role (a template's ``start_cmd`` and ``ready_cmd``).
    """

    def __init__(self, sandboxes: Sandboxes, storage: LocalStorage,
                 commands: LocalCommands) -> None:
        self._sandboxes = sandboxes
        self._shared = sandboxes.shared
        self._storage = storage
        self._commands = commands

    def check_can_launch(self) -> str | None:
        if self._shared.unisolated:
            return None
        bwrap = _bwrap.bwrap_path()
        if bwrap is None:
            raise errors.ConfigError(
                "the local provider needs bubblewrap (bwrap) to isolate sandboxes: install "
                "it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
                "bubblewrap), or pass unisolated=True to run WITHOUT isolation",
                provider=self._shared.name)
        if os.geteuid() == 0 and not self._shared.separate:
            raise errors.ConfigError(
                "run as root, the local provider gives each sandbox host ids of its own "
                "(none of them root's), which cannot be done here: "
                f"{_users.separation_problem()}; fix that, or run the provider as a user "
                "other than root", provider=self._shared.name)
        if not Path(_bwrap.SANDBOX_PYTHON).is_file():
            raise errors.ConfigError(
                f"the local provider runs its agent with {_bwrap.SANDBOX_PYTHON}, which is "
                "missing: install python3 from the system's packages", provider=self._shared.name)
        return bwrap

    def _id_range(self) -> _ids.IdRange:
        """This host's range of sandbox ids (only where sandboxes have ids of their own)."""
        return _ids.host_range()

    def _hold_ids(self, directory: Path, meta: SandboxRecord) -> None:
        """Hold the sandbox's slot again as it starts. Where the registry gives it
        another (its slot was taken meanwhile, or the host's range changed), and for a
        sandbox made by a version that ran its user as the host's root, its own files
        move to the ids of the slot it gets."""
        assert self._shared.registry is not None
        base = self._shared.registry.claim(directory, meta.ids)
        if base == meta.ids:
            return
        files = _disk.own_files(directory, meta)
        try:
            _ids.shift_tree(files, _ids.legacy(base) if meta.ids is None
                            else _ids.rebase(meta.ids, base))
        except OSError as exc:  # a tree too deep, no descriptor to be had
            raise errors.SandboxError(
                f"the sandbox's files could not be moved to its ids: {exc.strerror or exc}",
                provider=self._shared.name, sandbox_id=meta.id) from exc
        meta.ids = base
        write_meta(directory, meta.to_json())

    def make_layer(self, directory: Path, meta: SandboxRecord) -> None:
        """A new sandbox's writable layer: its quota'd image mounted (where quotas
        hold), then its root's first files, owned by the sandbox's own ids."""
        if meta.resources.disk_mb and _disk.has_quota(meta):
            blank = disks.blank(self._shared.home.path / "base", meta.resources.disk_mb)
            _disk.make(directory, meta.template, blank)
        self._make_root(directory, meta)

    async def start_command(self, sandbox_id: str, meta: SandboxRecord) -> None:
        """Start a template's ``start_cmd`` in the background and wait until its
        ``ready_cmd`` exits 0 (at create, and when a stopped sandbox is started again)."""
        if meta.start_cmd:
            await self._commands.start(sandbox_id, Command(argv=("/bin/sh", "-c", meta.start_cmd)))
        if not meta.ready_cmd:
            return
        probe = Command(argv=("/bin/sh", "-c", meta.ready_cmd), timeout=10)
        with anyio.move_on_after(READY_CMD_TIMEOUT):
            while (await self._commands.exec(sandbox_id, probe)).exit_code != 0:  # noqa: ASYNC110
                await anyio.sleep(0.1)  # a command's result: there is no event to wait on
            return
        raise errors.OperationTimeout(
            f"the template's ready_cmd did not succeed within {READY_CMD_TIMEOUT:.0f}s",
            provider=self._shared.name, sandbox_id=sandbox_id)

    def _make_root(self, directory: Path, meta: SandboxRecord) -> None:
        root = directory / "root"
        snapshot = meta.snapshot
        if meta.template != "default":
            # The template is the overlay's lower layer; the sandbox writes to upper/.
            upper, work = _disk.overlay_dirs(directory, meta)
            if snapshot is not None:
                copy_tree(self._shared.home.snapshot(snapshot) / "root", upper)
                self._move_snapshot_files(upper, snapshot, meta.ids)
            else:
                upper.mkdir()
                if meta.ids is not None:  # the merged root is the template's root's
                    os.lchown(upper, meta.ids + _users.SANDBOX_UID,
                              meta.ids + _users.SANDBOX_UID)
            work.mkdir()
            root.mkdir()
            owner = None if meta.ids is None else _users.template_owner(meta.ids)
            _templates.make_cwd(self._shared.home.template(meta.template) / "root", upper, meta.cwd,
                                owner)
            return
        if snapshot is not None:
            if _disk.has_quota(meta):
                disks.copy_into(self._shared.home.snapshot(snapshot) / "root", root)
            else:
                copy_tree(self._shared.home.snapshot(snapshot) / "root", root)
            self._move_snapshot_files(root, snapshot, meta.ids)
        else:
            # Mount points first (bubblewrap would make them anyway), then the writable
            # directories every sandbox has.
            for name in ("etc", "usr", "proc", "dev", "home/user", "root"):
                (root / name).mkdir(parents=True)
            for name in ("tmp", "var/tmp"):
                (root / name).mkdir(parents=True)
                (root / name).chmod(0o1777)
            for name, target in _system.system_links().items():
                (root / name).symlink_to(target)
            if meta.ids is not None:  # the sandbox's root's, its home its user's
                base = meta.ids
                _ids.shift_tree(root, lambda _ident: base)
                user = base + _users.SANDBOX_UID
                os.lchown(root / "home" / "user", user, user)
        user_ids = None if meta.ids is None else (meta.ids + _users.SANDBOX_UID,) * 2
        make_dirs_within(root, meta.cwd, owner=user_ids)

    def _move_snapshot_files(self, files: Path, snapshot: str, base: int | None) -> None:
        """Give a snapshot's files, copied to a new sandbox's ``files``, the new
        sandbox's ids: they are owned by the ids of the sandbox it was taken of (or, made
        by an earlier version, by the host's root as that sandbox's user)."""
        if base is None:
            return
        taken = self._storage.snapshot_record(snapshot).ids
        try:
            _ids.shift_tree(files, _ids.rebase(taken, base) if taken is not None
                            else _ids.legacy(base))
        except OSError as exc:  # a tree too deep, no descriptor to be had
            raise errors.SandboxError(
                f"snapshot {snapshot!r}'s files could not be moved to the new sandbox's "
                f"ids: {exc.strerror or exc}", provider=self._shared.name) from exc

    def _base_etc(self) -> Path:
        """The read-only /etc every sandbox of this home shares, made once."""
        etc = self._shared.home.path / "base" / "etc"
        if etc.is_dir():
            return etc
        # Unique per call: concurrent first creates, in one process or several, race here.
        staging = self._shared.home.path / "base" / f".etc-{os.getpid()}-{secrets.token_hex(6)}"
        staging.mkdir(parents=True)
        for name in ETC_COPIED:
            src = Path("/etc") / name
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, staging / name, symlinks=True)
            elif src.exists() or src.is_symlink():
                shutil.copy2(src, staging / name, follow_symlinks=False)
        for name in _bwrap.ETC_LIVE:  # mount points for the live host entries
            src = Path("/etc") / name
            if src.is_dir():
                (staging / name).mkdir()
            elif src.exists():
                (staging / name).touch()
        (staging / "psdk").mkdir()
        for name in (_bwrap.SANDBOX_AGENT, _bwrap.SANDBOX_PROCS, _bwrap.SANDBOX_FILEOPS,
                     _bwrap.SANDBOX_SPAWNER, _bwrap.SANDBOX_CONFIG):
            (staging / "psdk" / name.rsplit("/", 1)[1]).touch()
        (staging / "passwd").write_text(PASSWD)
        (staging / "group").write_text(GROUP)
        (staging / "hosts").write_text(HOSTS)
        (staging / "hostname").write_text("sandbox\n")
        try:
            staging.rename(etc)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
        return etc

    async def start_sandbox(self, sandbox_id: str, meta: SandboxRecord,
                             bwrap: str | None) -> None:
        """Start the sandbox's processes and wait until its agent answers."""
        directory = self._shared.home.sandbox(sandbox_id)
        config: dict[str, Any] = {
            "workdir": meta.cwd,
            "env": {**BASE_ENV, **meta.image_env, **meta.env},
            "idle_timeout": meta.idle_timeout,
            "root": str(directory / "root") if meta.unisolated else "",
        }
        separate = self._shared.separate and bwrap is not None
        if separate:
            # The agent is uid 0 inside (the first host id of the sandbox's slot); it
            # runs commands, and acts on files, as the sandbox user.
            config["user"] = [_users.SANDBOX_UID, _users.SANDBOX_UID]
        _write_json(directory / "agent.json", config)  # unisolated agents read it there
        config_bytes = json.dumps(config).encode()
        # Mounted already at create; after a host restart, mounted again here.
        await anyio.to_thread.run_sync(_disk.ensure_mounted, directory, meta)
        if separate:
            await anyio.to_thread.run_sync(self._hold_ids, directory, meta)
        listener = _listen(directory / "agent.sock")
        token = secrets.token_hex(6)
        launch: _plan.Plan | None = None
        try:
            if bwrap is not None:
                for mount in meta.volumes:
                    await anyio.to_thread.run_sync(self._storage.ready_volume, mount.volume)
                volumes = [(self._shared.home.volume(m.volume) / "data", m.path, m.read_only)
                           for m in meta.volumes]
                etc = await anyio.to_thread.run_sync(self._base_etc)
                template_root = self._shared.home.template(meta.template) / "root"
                ids = self._id_range() if separate else None
                launch = await anyio.to_thread.run_sync(lambda: _plan.make(
                    directory=directory, meta=meta, bwrap=bwrap, etc=etc,
                    template_root=template_root, volumes=volumes, config=config_bytes,
                    ids=ids, provider=self._shared.name))
                argv, args, data = launch.argv, launch.args, launch.data
                userns = launch.userns
            else:
                argv = _bwrap.agent_command(_launch.host_python(),
                                             agent=str(_bwrap.AGENT_SOURCE),
                                             config=str(directory / "agent.json"))
                args, data, userns = None, {}, None
            cgroup = self._shared.cgroup(sandbox_id) if self._shared.cgroups else None
            resources = meta.resources
            status = self._shared.status_path(sandbox_id, token)
            started = await anyio.to_thread.run_sync(lambda: _launch.start(
                argv=argv, args=args, listener=listener, data=data, status=status,
                cgroup=cgroup, resources=resources, userns=userns))
        except BaseException:
            if launch is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(launch.close)
            raise
        finally:
            listener.close()
        try:
            launched = attrs.evolve(started.launched, token=token)
            meta.launch = launched
            write_meta(directory, meta.to_json())
            (directory / "paused").unlink(missing_ok=True)
            await self.wait_ready(sandbox_id, launched, started)
        finally:
            started.close()  # from now on the sandbox writes to no one
            if launch is not None:
                # The agent answers, so bubblewrap has its root and mounts: the staged
                # ones can go (removing their directories earlier would unmount its
                # copies too).
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(launch.close)
        meta.launch = _launch.find_agent(launched)
        write_meta(directory, meta.to_json())

    async def wait_ready(self, sandbox_id: str, launched: _launch.Launched,
                          started: _launch.Started | None = None) -> None:
        """Ping the agent. Its socket listens from before the launch, so the ping waits
        in the socket's backlog until the agent serves it: no polling delay."""
        client = self._sandboxes.client(sandbox_id)
        with anyio.move_on_after(READY_TIMEOUT):
            while True:
                try:
                    await client.call("ping")
                    return
                except errors.Unavailable:
                    if not _launch.alive(launched):
                        said = started.output_text() if started else "(no output)"
                        raise errors.SandboxError(f"the sandbox exited at start; {said}",
                                                  provider=self._shared.name,
                                                  sandbox_id=sandbox_id) from None
                await anyio.sleep(0.005)
        raise errors.OperationTimeout(f"the sandbox's agent did not answer in {READY_TIMEOUT}s",
                                      provider=self._shared.name, sandbox_id=sandbox_id)


def _listen(path: Path) -> socket.socket:
    """A listening socket at ``path`` (bound through /proc when the path is too long)."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(str(path)) <= 100:
            sock.bind(str(path))
        else:
            fd = os.open(path.parent, os.O_PATH)
            try:
                sock.bind(f"/proc/self/fd/{fd}/{path.name}")
            finally:
                os.close(fd)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write a JSON file readable only by its owner."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
