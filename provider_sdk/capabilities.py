"""Capabilities: what a provider can do beyond the required core, declared as data.

A provider class lists its capabilities in ``capabilities``. Some capabilities are
backed by provider hooks (``HOOKS``): the registry checks, when it loads a provider, that
a declared capability's hooks are implemented and that no hook is implemented without
its capability being declared. The others are behaviours (``pause.memory``: memory
survives a pause) or parts of a spec or call (``volumes.read_only``: a
``VolumeMount(read_only=True)``) that the contract suite exercises.

The core checks every call and every spec against what the provider declares before
any hook runs, in one place (the public methods of
:class:`~provider_sdk.provider.SandboxProvider` and the handles): something the provider
does not declare raises :class:`~provider_sdk.errors.UnsupportedCapability` naming the
capability, so ``supports()`` never says yes to a call that is then refused. An instance
may hold fewer than its class declares, where its mode or host decides (the local
provider unisolated, Docker without host control); ``supports()`` and ``capabilities``
on an instance answer for that instance.
"""

from __future__ import annotations

import enum

__all__ = ["HOOKS", "IMPLIES", "Capability"]


class Capability(str, enum.Enum):
    """A named capability; the value is the dotted name used in docs and on the CLI."""

    EXEC_STREAM = "exec.stream"
    """``on_stdout``/``on_stderr`` callbacks receive output while the command runs."""
    EXEC_USER = "exec.user"
    """``exec(user=...)`` runs the command as another user."""
    PROCESS_BACKGROUND = "process.background"
    """``start()`` runs a background process: stream its output, write its stdin,
    kill it, and reattach to it by pid from another handle."""
    SHELL_PERSISTENT = "shell.persistent"
    """``shell()`` gives a session in which ``cd`` and ``export`` carry over."""
    SHELL_STDIN = "shell.stdin"
    """``Shell.run(stdin=...)`` feeds the bytes to the command's standard input."""
    CODE_INTERPRETER = "code.interpreter"
    """``sandbox.code``: stateful Python contexts: names one run defines are there in the
    next, the last expression's value comes back as text, a timeout interrupts the code
    and keeps the context."""
    PYTHON = "python"
    """The default template runs Python 3 by two names, ``python3`` and ``python``, both
    found on its default ``PATH``: a program written for one sandbox runs in another."""
    PAUSE = "pause"
    """``pause()``/``resume()``; the filesystem is kept."""
    PAUSE_MEMORY = "pause.memory"
    """Memory survives a pause: a running process keeps running after ``resume()``."""
    LIFECYCLE_AUTO_PAUSE = "lifecycle.auto_pause"
    """``Lifecycle(on_idle="pause")``: the backend pauses an idle sandbox itself."""
    LIFECYCLE_AUTO_RESUME = "lifecycle.auto_resume"
    """``Lifecycle(auto_resume=True)``: a paused sandbox resumes on the next request."""
    LIFECYCLE_AUTO_KILL = "lifecycle.auto_kill"
    """``Lifecycle(idle_timeout=..., on_idle="kill")``: the backend kills an idle sandbox
    itself."""
    SNAPSHOT_FILESYSTEM = "snapshot.filesystem"
    """``snapshot()`` captures the filesystem; new sandboxes can start from it."""
    SNAPSHOT_MEMORY = "snapshot.memory"
    """Snapshots capture memory too: processes resume where they were."""
    SNAPSHOT_ROLLBACK = "snapshot.rollback"
    """``rollback(snapshot)`` restores a sandbox in place."""
    VOLUMES = "volumes"
    """Named volumes: create, get, list, delete, and mount at create."""
    VOLUMES_SHARED = "volumes.shared"
    """One volume mounted in several sandboxes at once sees every sandbox's writes."""
    VOLUMES_READ_ONLY = "volumes.read_only"
    """``VolumeMount(read_only=True)`` mounts the volume read-only: writes through it fail,
    from the files API and from commands."""
    NETWORK_POLICY = "network.policy"
    """``SandboxSpec.network`` is honoured at create: by default a sandbox has loopback
    only. What a policy opens needs the capabilities below."""
    NETWORK_INTERNET = "network.internet"
    """``NetworkPolicy(allow_internet=True)`` gives the sandbox outbound access."""
    NETWORK_ALLOW_OUT = "network.allow_out"
    """``NetworkPolicy.allow_out``: the listed addresses or hosts stay reachable while
    internet access is off."""
    NETWORK_DENY_OUT = "network.deny_out"
    """``NetworkPolicy.deny_out``: the listed addresses or hosts are blocked while
    internet access is on."""
    NETWORK_UPDATE = "network.update"
    """``update_network(policy)`` changes a running sandbox's policy."""
    FILES_PERMISSIONS = "files.permissions"
    """The files API honours permission bits as the kernel does for the sandbox's
    unprivileged user: reading a file that user may not read, or writing over one it may
    not write, raises ``PermissionDenied`` and leaves the file as it was; writing over a
    file keeps its mode."""
    METADATA_UPDATE = "metadata.update"
    """``set_metadata(labels)`` changes a sandbox's labels after create: ``info`` and
    ``list(metadata=...)`` (from any process) see the new ones."""
    LIST_METADATA = "list.metadata"
    """``list(metadata=...)`` filters on the backend, not by fetching everything."""
    METRICS = "metrics"
    """``metrics()`` reports cpu, memory and disk use."""
    RESOURCES_CPU = "resources.cpu"
    """``Resources.cpu`` sets the sandbox's CPU limit."""
    RESOURCES_MEMORY = "resources.memory"
    """``Resources.memory_mb`` sets the sandbox's memory limit."""
    RESOURCES_DISK = "resources.disk"
    """``Resources.disk_mb`` sets how much the sandbox may write: writes past it fail
    inside with ENOSPC (where a provider bounds only some directories, its page says
    which)."""
    TEMPLATES = "templates"
    """``SandboxSpec.template`` starts a sandbox from a template other than the
    provider's default."""
    TEMPLATES_BUILD = "templates.build"
    """``build_template()`` turns a :class:`~provider_sdk.models.TemplateSpec` into a template."""
    PORTS_EXPOSE = "ports.expose"
    """``sandbox.expose(port)`` reaches a server listening on that port inside the sandbox
    with an access token (in ``url``, or in the header ``ExposedPort.token_header``);
    anything without the token is refused, WebSockets pass through, and killing the
    sandbox ends it."""
    PORTS_URL_TOKEN = "ports.url_token"
    """The exposed ``url`` carries its token: it opens as it is, in a browser or with
    curl, and so do the pages it leads to (E2B's and Cube's routes take the token in a
    header only)."""
    PORTS_REVOKE = "ports.revoke"
    """``unexpose(port)`` ends the address and its token: exposing the port again gives a
    new token, and the old one is refused (E2B and Cube route every port of a sandbox,
    with one token, for the sandbox's life)."""
    TERMINAL_PTY = "terminal.pty"
    """``sandbox.terminal.open()`` runs a program (a shell by default) on a
    pseudo-terminal: type into it, read what it prints, resize it (the program gets
    ``SIGWINCH``), close it, and wait for its exit code."""

    # Containment: what holds against code that attacks the sandbox (docs/security.md).
    EXEC_CONTAINED = "exec.contained"
    """A timeout, a cancelled exec or ``Process.kill()`` ends every process the command
    started, whatever it does (``setsid``, double forks, a cleared environment, closed
    stdio, another user), within the timeout plus a small grace."""
    LIMITS_MEMORY = "limits.memory"
    """Sandboxes have a memory limit without being asked for one
    (``Resources.memory_mb`` overrides it), and a command killed for memory says so
    (``ExecResult.oom_killed``)."""
    LIMITS_PIDS = "limits.pids"
    """The number of processes in a sandbox is bounded: a fork bomb stops at the limit
    and its timeout still kills it."""
    LIMITS_DISK = "limits.disk"
    """The sandbox's writable filesystem has a quota without being asked for one
    (``Resources.disk_mb`` overrides it): writes past it fail inside with ENOSPC, and the
    host's disk is untouched."""
    SEAL_SYSCALLS = "seal.syscalls"
    """A seccomp filter applies, and nested user namespaces are refused inside."""
    SEAL_HOST = "seal.host"
    """Nothing of the host inside: no descriptor to a host file, no host path, no way to
    ptrace, signal or take descriptors from the process that runs the sandbox's
    commands, and nothing made inside appears on the host as a root-owned setuid or
    setgid file."""
    SEAL_IDS = "seal.ids"
    """No id inside is a privileged host id: no uid or gid the sandbox's user namespace
    maps is the host's root, the provider's own, a host account's or group's, or
    another sandbox's; files made inside are owned by none of them on the host."""
    SEAL_KNOBS = "seal.knobs"
    """Nothing host-global is writable inside: ``/proc/sys`` and the kernel's other
    knobs are read-only, every other path a command may write is the sandbox's own,
    and device nodes are the standard ones, those of the host's unchangeable."""

    def __str__(self) -> str:
        return self.value


#: Provider hooks that a capability needs; each is implemented if and only if declared.
HOOKS: dict[Capability, tuple[str, ...]] = {
    Capability.PROCESS_BACKGROUND: (
        "_start", "_process_events", "_send_stdin", "_close_stdin", "_kill_process",
    ),
    Capability.SHELL_PERSISTENT: ("_open_shell",),
    Capability.CODE_INTERPRETER: ("_create_code_context", "_run_code", "_close_code_context"),
    Capability.PAUSE: ("_pause", "_resume"),
    Capability.SNAPSHOT_FILESYSTEM: ("_snapshot", "_list_snapshots", "_delete_snapshot"),
    Capability.SNAPSHOT_ROLLBACK: ("_rollback",),
    Capability.VOLUMES: ("_create_volume", "_get_volume", "_list_volumes", "_delete_volume"),
    Capability.NETWORK_UPDATE: ("_update_network",),
    Capability.METADATA_UPDATE: ("_set_metadata",),
    Capability.METRICS: ("_metrics",),
    Capability.TEMPLATES_BUILD: ("_template_builder",),
    Capability.PORTS_EXPOSE: ("_expose", "_unexpose"),
    Capability.TERMINAL_PTY: ("_open_terminal",),
}

#: A capability on the left is meaningless without those on the right.
IMPLIES: dict[Capability, frozenset[Capability]] = {
    Capability.PAUSE_MEMORY: frozenset({Capability.PAUSE}),
    Capability.LIFECYCLE_AUTO_PAUSE: frozenset({Capability.PAUSE}),
    Capability.LIFECYCLE_AUTO_RESUME: frozenset({Capability.PAUSE}),
    Capability.SNAPSHOT_MEMORY: frozenset({Capability.SNAPSHOT_FILESYSTEM}),
    Capability.SNAPSHOT_ROLLBACK: frozenset({Capability.SNAPSHOT_FILESYSTEM}),
    Capability.VOLUMES_SHARED: frozenset({Capability.VOLUMES}),
    Capability.VOLUMES_READ_ONLY: frozenset({Capability.VOLUMES}),
    Capability.NETWORK_UPDATE: frozenset({Capability.NETWORK_POLICY}),
    Capability.NETWORK_INTERNET: frozenset({Capability.NETWORK_POLICY}),
    Capability.NETWORK_ALLOW_OUT: frozenset({Capability.NETWORK_POLICY}),
    Capability.NETWORK_DENY_OUT: frozenset({Capability.NETWORK_POLICY}),
    Capability.SHELL_STDIN: frozenset({Capability.SHELL_PERSISTENT}),
    Capability.TEMPLATES_BUILD: frozenset({Capability.TEMPLATES}),
    Capability.LIMITS_MEMORY: frozenset({Capability.RESOURCES_MEMORY}),
    Capability.LIMITS_DISK: frozenset({Capability.RESOURCES_DISK}),
    Capability.PORTS_URL_TOKEN: frozenset({Capability.PORTS_EXPOSE}),
    Capability.PORTS_REVOKE: frozenset({Capability.PORTS_EXPOSE}),
}
