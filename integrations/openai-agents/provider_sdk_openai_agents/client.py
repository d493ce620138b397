"""``ProviderSandboxClient``: the Agents SDK's ``BaseSandboxClient`` over provider-sdk,
``backend_id`` ``"psdk"``.

It makes sessions (:mod:`~provider_sdk_openai_agents.session`) in sandboxes of a
provider opened by name, a provider object, or a ``SandboxManager``'s owner; it
serialises their state into a ``RunState`` and resumes it, in this process or another:
the same sandbox if it still lives (resumed if paused), else a new one whose workspace
the Agents SDK restores from the run's snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from agents.sandbox.errors import MountConfigError
from agents.sandbox.manifest import Manifest
from agents.sandbox.session import (
    BaseSandboxClient,
    Dependencies,
    Instrumentation,
    SandboxSession,
    SandboxSessionState,
)
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot

from provider_sdk.errors import ConfigError
from provider_sdk.manager import SandboxManager
from provider_sdk.models import SandboxSpec
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk_openai_agents._source import ProviderSource
from provider_sdk_openai_agents.options import (
    ProviderSandboxClientOptions,
    ProviderSandboxSessionState,
)
from provider_sdk_openai_agents.session import ProviderSandboxSession

__all__ = ["TAG", "ProviderSandboxClient"]

TAG = "openai-agents-session"
"""Metadata key on every sandbox the client creates: the Agents SDK session's id."""

_DEFAULT_ROOT = Manifest.model_fields["root"].default


class ProviderSandboxClient(BaseSandboxClient[ProviderSandboxClientOptions]):
    """A sandbox client of the Agents SDK on any provider-sdk provider::

        client = ProviderSandboxClient(provider="docker")   # or "local", "e2b", ...
        result = await Runner.run(agent, "...", run_config=RunConfig(
            sandbox=SandboxRunConfig(client=client)))

    Args:
        provider: a provider's name (``None``: ``PSDK_PROVIDER``, ``psdk.toml``, else
            ``"local"``), opened on first use in the loop that uses it and closed by
            :meth:`aclose`; a :class:`~provider_sdk.SandboxProvider` the caller owns; or
            a :class:`~provider_sdk.manager.SandboxManager`, whose ``owner``'s resident
            sandbox every session runs in.
        provider_options: options for a provider opened by name, over its
            ``psdk.toml`` table (``home``, ``api_url``, ...).
        owner: the owner, with a ``SandboxManager``.
        instrumentation: the Agents SDK's session events.
        dependencies: the Agents SDK's per-session dependencies.

    Raises:
        ConfigError: ``owner`` without a manager or a manager without ``owner``, or
            ``provider_options`` with a provider object.
    """

    backend_id = "psdk"
    supports_default_options = True

    def __init__(self, provider: str | SandboxProvider | SandboxManager | None = None, *,
                 provider_options: Mapping[str, Any] | None = None, owner: str | None = None,
                 instrumentation: Instrumentation | None = None,
                 dependencies: Dependencies | None = None) -> None:
        self._source = ProviderSource(provider, provider_options=provider_options, owner=owner)
        self._instrumentation = instrumentation or Instrumentation()
        self._dependencies = dependencies

    @property
    def provider_name(self) -> str:
        """The name of the provider the client's sandboxes run on."""
        return self._source.name

    def __repr__(self) -> str:
        owner = f" owner={self._source.owner!r}" if self._source.owner is not None else ""
        return f"<ProviderSandboxClient provider={self._source.name!r}{owner}>"

    async def create(self, *, snapshot: SnapshotSpec | SnapshotBase | None = None,
                     manifest: Manifest | None = None,
                     options: ProviderSandboxClientOptions | None = None) -> SandboxSession:
        """Create a sandbox (or take the owner's) and a session in it; the runner starts
        the session, which writes the manifest into the workspace.

        Raises:
            MountConfigError: the manifest mounts cloud storage, which this client does
                not do.
        """
        options = options or ProviderSandboxClientOptions()
        manifest = self._validate_manifest_for_create(manifest or Manifest())
        _refuse_mounts(manifest)
        session_id = uuid.uuid4()
        metadata = {**options.metadata, TAG: session_id.hex}
        spec = SandboxSpec(template=options.template, env=options.env, metadata=metadata,
                           network=options.network.policy())
        sandbox = await self._source.create(spec)
        try:
            manifest = await _place_workspace(sandbox, manifest, options.workspace_root)
        except BaseException:
            await self._source.let_go(sandbox, "kill")
            raise
        state = ProviderSandboxSessionState(
            session_id=session_id, manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            exposed_ports=options.exposed_ports, provider=self._source.name,
            sandbox_id=sandbox.id, owner=self._source.owner, template=options.template,
            env=dict(options.env), command_timeout=options.timeout, network=options.network,
            metadata=metadata, on_exit=options.on_exit,
            workspace_persistence=options.workspace_persistence)
        inner = ProviderSandboxSession(state=state, sandbox=sandbox, source=self._source)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Let go of the session's sandbox as its ``on_exit`` says (the runner has
        shut the session down already; doing it again is harmless)."""
        inner = session._inner
        if not isinstance(inner, ProviderSandboxSession):
            raise TypeError("ProviderSandboxClient.delete expects a ProviderSandboxSession")
        await self._source.let_go(inner.sandbox, inner.state.on_exit)
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """A session for ``state``: in its sandbox if that still lives (resumed if
        paused), else in a new one, whose workspace the runner restores from the
        state's snapshot as it starts the session.

        Raises:
            ConfigError: the state is another provider's, or another owner's.
        """
        if not isinstance(state, ProviderSandboxSessionState):
            raise TypeError("ProviderSandboxClient.resume expects a ProviderSandboxSessionState")
        state.assert_path_grants_rebound()
        _refuse_mounts(state.manifest)
        if state.provider != self._source.name:
            raise ConfigError(f"the session ran on provider {state.provider!r}; this client's "
                              f"is {self._source.name!r}")
        if state.owner != self._source.owner:
            raise ConfigError(f"the session was owner {state.owner!r}'s; this client's owner "
                              f"is {self._source.owner!r}")
        sandbox = await self._source.reattach(state.sandbox_id)
        reattached = sandbox is not None and sandbox.id == state.sandbox_id
        if sandbox is None:
            sandbox = await self._source.create(SandboxSpec(
                template=state.template, env=state.env, metadata=state.metadata,
                network=state.network.policy()))
        if not reattached:
            state.sandbox_id = sandbox.id
            state.workspace_root_ready = False
        inner = ProviderSandboxSession(state=state, sandbox=sandbox, source=self._source)
        inner._set_start_state_preserved(reattached)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        """A :class:`ProviderSandboxSessionState` from what ``RunState.to_json`` kept."""
        return self._deserialize_session_state_payload(payload, ProviderSandboxSessionState)

    async def aclose(self) -> None:
        """Close the provider, if the client opened it by name. Sandboxes kept running
        (``on_exit``) stay so."""
        await self._source.aclose()

    async def __aenter__(self) -> ProviderSandboxClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _refuse_mounts(manifest: Manifest) -> None:
    mounts = manifest.mount_targets()
    if mounts:
        entry, path = mounts[0]
        raise MountConfigError(
            message=(f"the psdk sandbox client does not mount cloud storage "
                     f"({type(entry).__name__} at {path.as_posix()}): copy the data in with "
                     "a LocalDir or File entry, or use a volume of the provider"),
            context={"backend": "psdk", "mount_type": type(entry).__name__})


async def _place_workspace(sandbox: Sandbox, manifest: Manifest,
                           workspace_root: str | None) -> Manifest:
    """The manifest with its root where this sandbox can have it (see
    ``ProviderSandboxClientOptions.workspace_root``)."""
    if manifest.root != _DEFAULT_ROOT:
        return manifest
    if workspace_root is None:
        made = await sandbox.exec(["mkdir", "-p", "--", _DEFAULT_ROOT], timeout=60)
        if made.exit_code == 0:
            return manifest
        here = await sandbox.exec(["pwd"], timeout=60)
        workspace_root = f"{here.stdout.strip().rstrip('/')}/workspace"
    return manifest.model_copy(update={"root": workspace_root})
