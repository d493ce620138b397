"""What a ``psdk`` session is made with (:class:`ProviderSandboxClientOptions`) and what
it keeps across processes (:class:`ProviderSandboxSessionState`).

Both are pydantic models the Agents SDK serialises into a ``RunState``; they are
registered with it by their ``type``, ``"psdk"``. Neither holds a provider's settings
(API keys, URLs): the client that resumes a state brings its own provider.
"""

from __future__ import annotations

from typing import Literal

from agents.sandbox.session import BaseSandboxClientOptions, SandboxSessionState
from pydantic import BaseModel, ConfigDict, Field

from provider_sdk.models import NetworkPolicy

__all__ = ["DEFAULT_COMMAND_TIMEOUT", "NetworkOptions", "OnExit", "ProviderSandboxClientOptions",
           "ProviderSandboxSessionState", "WorkspacePersistence"]

DEFAULT_COMMAND_TIMEOUT = 30 * 60.0
"""Seconds a command may run when the Agents SDK gives it no timeout."""

OnExit = Literal["kill", "pause", "keep"]
"""What a session's sandbox becomes when its run ends (``shutdown``)."""

WorkspacePersistence = Literal["auto", "snapshot", "archive"]
"""How ``persist_workspace`` saves the workspace: a tar archive (the default: it lives
wherever the run keeps its snapshot, and leaves nothing on the provider), a provider
snapshot (which outlives the run, for its owner to delete), or (``auto``) a snapshot
where the provider declares ``snapshot.filesystem``."""


class NetworkOptions(BaseModel):
    """Outbound network access of the sandbox (:class:`provider_sdk.NetworkPolicy`).
    The default is none: the sandbox has only loopback."""

    model_config = ConfigDict(frozen=True)

    allow_internet: bool = False
    """Allow outbound traffic (subject to the lists below)."""
    allow_out: tuple[str, ...] = ()
    """CIDRs or host names that stay reachable when internet is off."""
    deny_out: tuple[str, ...] = ()
    """CIDRs or host names blocked even when internet is on."""

    def policy(self) -> NetworkPolicy:
        """The neutral policy."""
        return NetworkPolicy(allow_internet=self.allow_internet, allow_out=self.allow_out,
                             deny_out=self.deny_out)


class ProviderSandboxClientOptions(BaseSandboxClientOptions):
    """How :class:`~provider_sdk_openai_agents.ProviderSandboxClient` makes a sandbox::

        RunConfig(sandbox=SandboxRunConfig(
            client=ProviderSandboxClient(provider="docker"),
            options=ProviderSandboxClientOptions(template="python:3.12", timeout=120)))

    Every field has a default, so ``options`` may be left out.
    """

    type: Literal["psdk"] = "psdk"
    template: str | None = None
    """The provider's template (image, template id); ``None``: the provider's default."""
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """Environment for every command (under the manifest's ``environment``); never shown
    in a ``repr``. It is kept in the session's state, which a ``RunState`` carries: put
    no secret here that the serialised run must not hold."""
    timeout: float = Field(default=DEFAULT_COMMAND_TIMEOUT, gt=0)
    """Seconds a command may run when the Agents SDK gives it no timeout; past it the
    whole process tree is killed and the call raises ``ExecTimeoutError``."""
    network: NetworkOptions = Field(default_factory=NetworkOptions)
    """Outbound network access (none by default)."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """Labels on the sandbox, to find it by (``provider.list(metadata=...)``)."""
    exposed_ports: tuple[int, ...] = ()
    """Ports ``resolve_exposed_port`` may open (the provider's ``ports.expose``)."""
    workspace_root: str | None = None
    """Where the workspace lives when the manifest keeps the Agents SDK's default root
    (``/workspace``): ``None`` keeps ``/workspace`` where the sandbox user may create it,
    else uses ``workspace`` under the sandbox's working directory. A manifest with a
    root of its own keeps it."""
    on_exit: OnExit = "kill"
    """What the sandbox becomes when a run ends: ``kill``; ``pause`` (where the provider
    declares ``pause``, else it is kept running), for a run resumed later to find it;
    ``keep``, running. A sandbox of a ``SandboxManager`` always stays its owner's."""
    workspace_persistence: WorkspacePersistence = "archive"
    """How ``persist_workspace`` saves the workspace (see :data:`WorkspacePersistence`)."""


class ProviderSandboxSessionState(SandboxSessionState):
    """A ``psdk`` session as a ``RunState`` keeps it: the sandbox to reattach to and
    how to make another like it."""

    type: Literal["psdk"] = "psdk"
    provider: str
    """The provider's name; a client of another provider refuses the state."""
    sandbox_id: str
    """The sandbox the session last ran in."""
    owner: str | None = None
    """The ``SandboxManager`` owner whose sandbox this is, if any."""
    template: str | None = None
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    network: NetworkOptions = Field(default_factory=NetworkOptions)
    metadata: dict[str, str] = Field(default_factory=dict)
    on_exit: OnExit = "kill"
    workspace_persistence: WorkspacePersistence = "archive"
