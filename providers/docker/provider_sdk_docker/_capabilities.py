"""What the Docker Engine provider can do, declared as data.

The package exports it; the registry reads it without importing a provider class (or
its vendor SDK); each class declares exactly this, checked when it loads.
"""

from __future__ import annotations

from provider_sdk.capabilities import Capability

#: What every sandbox has, wherever the Engine runs.
BASE_CAPABILITIES = frozenset({
    Capability.EXEC_STREAM,
    Capability.EXEC_USER,
    Capability.PROCESS_BACKGROUND,
    # The core's terminal relay, run on the image's python3 (the default image has it;
    # a template without it ends the terminal at once). Not the code interpreter: see
    # provider._WHY_LACKING.
    Capability.TERMINAL_PTY,
    # The default image's python3, and python naming it (build-base-image).
    Capability.PYTHON,
    Capability.SHELL_PERSISTENT,
    Capability.SHELL_STDIN,
    Capability.PAUSE,
    Capability.PAUSE_MEMORY,
    Capability.SNAPSHOT_FILESYSTEM,
    Capability.VOLUMES,
    Capability.VOLUMES_SHARED,
    Capability.VOLUMES_READ_ONLY,
    # Internet on or off; the Engine has no per-destination egress rules (allow_out,
    # deny_out), and a container no idle notion (lifecycle.auto_kill).
    Capability.NETWORK_POLICY,
    Capability.NETWORK_INTERNET,
    Capability.LIST_METADATA,
    Capability.METRICS,
    Capability.RESOURCES_CPU,
    Capability.RESOURCES_MEMORY,
    Capability.TEMPLATES,
    Capability.TEMPLATES_BUILD,
    Capability.PORTS_EXPOSE,
    Capability.PORTS_URL_TOKEN,
    Capability.PORTS_REVOKE,
    Capability.LIMITS_PIDS,
    # The Engine's default seccomp profile (no nested user namespaces without
    # CAP_SYS_ADMIN, which containers never get here).
    Capability.SEAL_SYSCALLS,
})
#: What holds only where the provider controls the containers from the Engine's host.
HOST_CAPABILITIES = frozenset({Capability.EXEC_CONTAINED, Capability.LIMITS_MEMORY})
#: What holds only where the Engine's storage has quotas (overlay2 on XFS with pquota).
QUOTA_CAPABILITIES = frozenset({Capability.LIMITS_DISK, Capability.RESOURCES_DISK})
#: What holds where, without quotas, a sandbox's own directories are bounded instead
#: (``bounded_dirs``).
BOUNDED_CAPABILITIES = frozenset({Capability.RESOURCES_DISK})

PROVIDER_CAPABILITIES: dict[str, frozenset[Capability]] = {
    "DockerProvider": BASE_CAPABILITIES | HOST_CAPABILITIES | QUOTA_CAPABILITIES}
"""What :class:`DockerProvider` declares; an instance may hold fewer (see its docs)."""
