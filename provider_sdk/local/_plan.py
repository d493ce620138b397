"""What one start of an isolated local sandbox runs: bubblewrap's command line, what it
copies in, and the mounts it binds.

:func:`make` turns a sandbox's record into a :class:`Plan`: the command that starts it
(a template's overlay prefix, the switch to the sandbox's own host id where the
provider runs as root, bubblewrap, the agent), bubblewrap's own options (handed over on
a descriptor by ``_launch.start``, so the command line inside names no host path), the
files copied in, and, where the sandbox has host ids of its own, its user namespace and
the :class:`~provider_sdk.local._mounts.Staging` directory its root, volumes and
template are bound in, idmapped where their files are not stored with its ids. The
caller starts the plan and closes it as soon as bubblewrap runs (bubblewrap keeps its
own copies of the mounts). Blocking; this module starts no process but the namespaces'
helpers.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import attrs

from provider_sdk.local import _bwrap, _disk, _ids, _mountpoints, _mounts, _templates, _users
from provider_sdk.local._records import SandboxRecord

__all__ = ["Plan", "make"]


@attrs.define
class Plan:
    """A sandbox's start, ready to run (see :func:`make`)."""

    argv: list[str]
    """The command to start, with ``_bwrap``'s descriptor placeholders."""
    args: list[str]
    """bubblewrap's options and command (after its executable)."""
    data: dict[str, bytes]
    """The contents the ``data`` placeholders stand for."""
    userns: int | None = None
    """The sandbox's user namespace, for ``--userns`` (where it has ids of its own)."""
    staging: _mounts.Staging | None = None

    def close(self) -> None:
        """Detach the staged mounts and close the namespace's descriptor (idempotent)."""
        if self.staging is not None:
            self.staging.close()
            self.staging = None
        if self.userns is not None:
            with contextlib.suppress(OSError):
                os.close(self.userns)
            self.userns = None


def make(*, directory: Path, meta: SandboxRecord, bwrap: str, etc: Path, template_root: Path,
         volumes: list[tuple[Path, str, bool]], config: bytes, ids: _ids.IdRange | None,
         provider: str) -> Plan:
    """The start of the sandbox at ``directory``. ``volumes``: each volume's data
    directory, where it is mounted inside, and whether read-only. ``ids``: the host's
    range where the sandbox's record names its slot (``meta.ids``), else ``None``
    (bubblewrap maps this process's own id only). Every place bubblewrap mounts on in
    the sandbox's own files is checked first (``_mountpoints``)."""
    _check_mount_points(directory, meta, template_root, volumes, provider)
    plan = Plan(argv=[], args=[], data={})
    root = directory / "root"
    lower = template_root
    devices: Path | None = None
    try:
        if ids is not None and meta.ids is not None:
            plan.userns, root, lower, devices, volumes = _stage(
                plan, directory, meta, meta.ids, template_root, volumes, ids)
        separate = plan.userns is not None
        if meta.template == "default":
            prefix: list[str] = []
            args = _bwrap.bwrap_argv(bwrap=bwrap, root=root, etc=etc, volumes=volumes,
                                      separate=separate, devices=devices)
            python = [_bwrap.SANDBOX_PYTHON]
        else:
            upper, work = _disk.overlay_dirs(directory, meta)
            prefix = _templates.overlay_prefix(lower=lower, upper=upper, work=work, root=root,
                                               base=directory)
            args = _templates.bwrap_argv(bwrap=bwrap, root=root, etc=etc, volumes=volumes,
                                         separate=separate, devices=devices)
            python = _templates.agent_interpreter()
        agent = _users.as_agent(meta.ids) if separate and meta.ids is not None else []
        plan.argv = [*prefix, *agent, args[0], "--args", _bwrap.ARGS_FD, *python[:-1],
                     *_bwrap.agent_command(python[-1], agent=_bwrap.SANDBOX_AGENT,
                                            config=_bwrap.SANDBOX_CONFIG)]
        plan.args = args[1:]
        plan.data = {_bwrap.AGENT_FD: _bwrap.AGENT_SOURCE.read_bytes(),
                     _bwrap.PROCS_FD: _bwrap.PROCS_SOURCE.read_bytes(),
                     _bwrap.FILEOPS_FD: _bwrap.FILEOPS_SOURCE.read_bytes(),
                     _bwrap.SPAWNER_FD: _bwrap.SPAWNER_SOURCE.read_bytes(),
                     _bwrap.CONFIG_FD: config, _bwrap.EMPTY_FD: b"",
                     **_bwrap.etc_data(etc, None if meta.template == "default"
                                        else ("hosts", "hostname"))}
    except BaseException:
        plan.close()
        raise
    return plan


def _check_mount_points(directory: Path, meta: SandboxRecord, template_root: Path,
                        volumes: list[tuple[Path, str, bool]], provider: str) -> None:
    """Refuse a start whose mounts would lead through a symlink of the sandbox's own
    (see ``_mountpoints``): in a default sandbox only its volumes' places are in files
    its code may change; in a template sandbox (the image's files are its user's) every
    place bubblewrap mounts on is."""
    targets = [target for _source, target, _ro in volumes]
    _mountpoints.check_volume_targets(targets, provider=provider, sandbox_id=meta.id)
    if meta.template == "default":
        layers, directories, files = [directory / "root"], [], []
    else:
        layers = [_disk.overlay_dirs(directory, meta)[0], template_root]
        directories = _templates.mounted_directories()
        files = list(_templates.MOUNTED_FILES)
    _mountpoints.check(layers, directories=directories, files=files, volumes=targets,
                       provider=provider, sandbox_id=meta.id)


def _stage(plan: Plan, directory: Path, meta: SandboxRecord, base: int, template_root: Path,
           volumes: list[tuple[Path, str, bool]], ids: _ids.IdRange
           ) -> tuple[int, Path, Path, Path, list[tuple[Path, str, bool]]]:
    """Make the sandbox's user namespace and bind what bubblewrap needs into a staging
    directory only the sandbox's uid 0 may enter: its root (a template sandbox's is
    the overlay's mount point, mounted by the prefix), its template's filesystem and its
    volumes, idmapped, and its own device nodes. The namespace's descriptor, then the
    root's, the template's, the devices' and the volumes' paths in the staging
    directory."""
    wanted = [_users.Namespace(owner=base, uid_map=_users.sandbox_map(base))]
    if meta.template != "default":
        wanted.append(_users.Namespace(owner=base, uid_map=_users.template_map(base)))
    if volumes:
        wanted.append(_users.Namespace(owner=base, uid_map=_users.shared_map(ids, base)))
    made = _users.namespaces(*wanted)
    userns, maps = made[0], made[1:]
    plan.userns = userns
    try:
        staging = plan.staging = _mounts.Staging.open(base)
        lower = template_root
        if meta.template == "default":
            root = staging.bind("root", directory / "root")
        else:
            root = staging.place("root")
            lower = staging.bind("template", template_root, userns=maps.pop(0),
                                 read_only=True)
        devices = staging.devices("dev", _bwrap.DEVICES)
        staged = [(staging.bind(f"volume-{index}", source, userns=maps[0],
                                read_only=read_only), target, read_only)
                  for index, (source, target, read_only) in enumerate(volumes)]
    finally:
        for fd in made[1:]:  # each idmapped mount holds its namespace
            os.close(fd)
    return userns, root, lower, devices, staged
