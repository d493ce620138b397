"""``Sandboxes``: the local sandboxes as their home holds them: each one's record and
state (read fresh each time: another process may have changed them), its agent while it
runs, and the end of its processes and files.

Every role of a ``LocalProvider`` holds the one ``Sandboxes`` the provider made, and
reads the shared settings through it (:attr:`Sandboxes.shared`). A record that does not
read is ``SandboxNotRunning`` (state ``error``), a missing one ``SandboxNotFound``; an
agent that does not answer is ``Unavailable``, saying why when its process tells.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from provider_sdk import errors
from provider_sdk.local import _disk, _launch, _records
from provider_sdk.local._client import AgentClient
from provider_sdk.local._records import SandboxRecord
from provider_sdk.local._shared import Shared
from provider_sdk.local._trees import remove_tree
from provider_sdk.models import SandboxInfo, SandboxState

__all__ = ["Sandboxes", "started"]

STOPPED_AGENT = "the sandbox's agent is stopped (SIGSTOP or a tracer); resume() continues it"


class Sandboxes:
    """The records, states and agents of a home's sandboxes."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def read(self, sandbox_id: str) -> SandboxRecord:
        """The sandbox's good record; a sandbox that ended after its idle timeout is
        removed here, and is not found."""
        meta, reason = _records.read(self.shared.home.sandbox(sandbox_id), sandbox_id)
        if reason is not None:
            if self.shared.home.busy(self.shared.home.sandbox(sandbox_id)):
                raise errors.SandboxNotRunning("the sandbox is being created",
                                               state=str(SandboxState.STARTING),
                                               provider=self.shared.name, sandbox_id=sandbox_id)
            raise errors.SandboxNotRunning(
                f"the sandbox's state record is broken: {reason}; kill it to remove it",
                state=str(SandboxState.ERROR), provider=self.shared.name, sandbox_id=sandbox_id)
        if meta is not None and self.ended_by_idle(sandbox_id, meta):
            self.kill_blocking(sandbox_id, self.shared.home.sandbox(sandbox_id))
            meta = None
        if meta is None:
            raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r} in {self.shared.home.path}",
                                         provider=self.shared.name, sandbox_id=sandbox_id)
        return meta

    def ended_by_idle(self, sandbox_id: str, meta: SandboxRecord) -> bool:
        """Whether the sandbox ended itself after its idle timeout: its agent exited with
        the idle status, as recorded by the host-side launcher in a file the sandbox
        cannot write. Such a sandbox is gone, and its files are removed lazily.

        The file is this launch's own (named by its token) and is written only once the
        sandbox's init has exited, so it alone decides: the init's process may still
        show in ``/proc`` for a moment, not yet reaped."""
        launched = meta.launch
        if not (meta.idle_timeout and launched and launched.token):
            return False
        return _launch.exit_status(
            self.shared.status_path(sandbox_id, launched.token)) == _launch.IDLE_EXIT

    def state(self, sandbox_id: str, meta: SandboxRecord) -> SandboxState:
        """The sandbox's state from its processes. Its agent gone while other processes
        of it linger is ``ERROR``: nothing serves it (``resume()`` starts it again)."""
        return self._state(sandbox_id, meta)[0]

    def _state(self, sandbox_id: str, meta: SandboxRecord) -> tuple[SandboxState, str | None]:
        """The sandbox's state, and its agent's process state where it was read (see
        ``_launch.agent_state``; ``None`` otherwise)."""
        launched = meta.launch
        if launched is None:
            return SandboxState.STARTING, None
        if not _launch.alive(launched):
            return SandboxState.STOPPED, None
        if self.paused(sandbox_id):
            return SandboxState.PAUSED, None
        agent = _launch.agent_state(launched)
        if agent is None:
            if launched.pid_namespace is not None:  # nothing would contain them now
                _launch.end_unsupervised(launched, self.shared.cgroup(sandbox_id)
                                         if self.shared.cgroups else None)
            return SandboxState.ERROR, None
        if self.legacy(meta):
            return SandboxState.ERROR, agent
        return SandboxState.RUNNING, agent

    def legacy(self, meta: SandboxRecord) -> bool:
        """Whether an isolated sandbox was started by a version that ran its user as the
        host's root (it must start again, with ids of its own, before it serves)."""
        return self.shared.separate and not meta.unisolated and meta.ids is None

    def not_running(self, sandbox_id: str, state: SandboxState) -> errors.SandboxNotRunning:
        """The error of a call that needs the sandbox running, in ``state``, with a hint."""
        hint = " (resume it first)" if state in (SandboxState.PAUSED,
                                                 SandboxState.STOPPED) else ""
        if state == SandboxState.ERROR:
            hint = " (its agent is gone; resume() starts it again from its files)"
            meta, _reason = _records.read(self.shared.home.sandbox(sandbox_id), sandbox_id)
            if meta is not None and self.legacy(meta):
                hint = (" (an earlier version started it with its user as the host's root; "
                        "resume() starts it again from its files, with ids of its own)")
        return errors.SandboxNotRunning(f"the sandbox is {state}{hint}", state=str(state),
                                        provider=self.shared.name, sandbox_id=sandbox_id)

    def to_info(self, meta: SandboxRecord, state: SandboxState) -> SandboxInfo:
        """A record and a state as the neutral info."""
        return SandboxInfo(
            id=meta.id, provider=self.shared.name, state=state, template=meta.template,
            metadata=meta.metadata, created_at=meta.created_at,
            expires_at=None, resources=meta.resources,
            extra={"home": str(self.shared.home.path), "unisolated": meta.unisolated,
                   "idle_timeout": meta.idle_timeout, "snapshot": meta.snapshot},
        )

    def broken(self, sandbox_id: str, *, warn: bool = False) -> SandboxInfo | None:
        """The ``ERROR`` info of a broken record, else ``None``."""
        return _records.broken_info(self.shared.home, sandbox_id, provider=self.shared.name,
                                    warn=warn)

    def kill_blocking(self, sandbox_id: str, directory: Path) -> None:
        """End the sandbox's processes and remove its mounts, ids and files."""
        with self.shared.home.lock(directory):
            # A broken record is trusted for nothing: its cgroups and mounts are found
            # by name, its processes through its cgroups.
            meta, _reason = _records.read(directory, sandbox_id)
            self.stop_processes(sandbox_id, meta)
            _disk.unmount_all(directory)
            if self.shared.registry is not None and meta is not None and meta.ids is not None:
                self.shared.registry.release(meta.ids, directory)
            remove_tree(directory)  # moved aside first: no lister sees it half removed

    def stop_processes(self, sandbox_id: str, meta: SandboxRecord | None) -> None:
        """End every process of the sandbox, and its cgroups."""
        launch = meta.launch if meta else None
        cgroup = self.shared.cgroup(sandbox_id)
        if cgroup.exists() and cgroup.frozen():
            cgroup.freeze(False)  # a frozen process takes no signal, SIGKILL included
        if launch:
            _launch.kill(launch)
        cgroup.destroy()

    def client(self, sandbox_id: str, launched: _launch.Launched | None = None) -> AgentClient:
        """A client of the sandbox's agent; with ``launched``, one that says why the
        agent does not answer when its process tells."""
        health = None if launched is None else (
            lambda: self.agent_trouble(sandbox_id, launched))
        return AgentClient(str(self.shared.home.sandbox(sandbox_id) / "agent.sock"),
                           provider=self.shared.name, sandbox_id=sandbox_id,
                           accept_timeout=self.shared.agent_timeout, health=health)

    def agent_trouble(self, sandbox_id: str, launched: _launch.Launched) -> str | None:
        """Why the agent cannot answer, if its process says so: gone, or stopped by a
        signal while the sandbox is not paused (a pause waits for resume instead)."""
        state = _launch.agent_state(launched)
        if state is None:
            return ("the sandbox's agent is gone (state: error); resume() starts the "
                    "sandbox again from its files")
        if state == "stopped" and not self.paused(sandbox_id):
            return STOPPED_AGENT
        return None

    def paused(self, sandbox_id: str) -> bool:
        """Whether the sandbox is paused (frozen, or stopped by signals)."""
        return self.shared.cgroup(sandbox_id).frozen() or (
            self.shared.home.sandbox(sandbox_id) / "paused").exists()

    def running(self, sandbox_id: str) -> AgentClient:
        """A client for a running sandbox; a typed error for any other state, and
        ``Unavailable`` at once if its agent is stopped."""
        # Read fresh each time: another process may have paused, resumed or killed it.
        meta = self.read(sandbox_id)
        state, agent = self._state(sandbox_id, meta)
        if state != SandboxState.RUNNING:
            raise self.not_running(sandbox_id, state)
        if agent == "stopped":  # running, so not paused: the agent was stopped
            raise errors.Unavailable(STOPPED_AGENT, provider=self.shared.name,
                                     sandbox_id=sandbox_id)
        return self.client(sandbox_id, started(meta))

    async def agent(self, sandbox_id: str, call: Callable[[AgentClient], Any]) -> Any:
        """Run ``call`` against the agent; if it fails to answer, say why."""
        client = self.running(sandbox_id)
        try:
            return await call(client)
        except errors.Unavailable:
            self.running(sandbox_id)  # raises SandboxNotFound/NotRunning if that is why
            raise


def started(meta: SandboxRecord) -> _launch.Launched:
    """The launch of a sandbox whose state says it started."""
    if meta.launch is None:
        raise errors.SandboxNotRunning("the sandbox is being created",
                                       state=str(SandboxState.STARTING), sandbox_id=meta.id)
    return meta.launch
