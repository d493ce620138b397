"""``DaytonaProvider``: sandboxes on Daytona, through the ``daytona`` SDK's async client.

Mapping, in short (the Daytona page of the docs has the whole table):

- ``pause`` is Daytona's stop: files are kept, processes and memory are not, so
  ``pause.memory`` is not declared. ``resume`` is Daytona's start; both are retried through
  502/503 for ``unavailable_window`` seconds, and ``resume`` returns once the toolbox
  answers. Archive and recover are the extensions :meth:`DaytonaProvider.ex_archive` and
  :meth:`DaytonaProvider.ex_recover`.
- The neutral idle policy is explicit: without ``Lifecycle(idle_timeout=...)`` a sandbox
  never stops by itself (auto-stop 0, auto-delete off), instead of Daytona's silent
  15-minute auto-stop. ``Lifecycle(idle_timeout=T, on_idle="pause")`` is auto-stop after
  ``ceil(T / 60)`` minutes (``lifecycle.auto_pause``); ``on_idle="kill"`` adds immediate
  auto-delete. Daytona counts requests as activity, not processes inside the sandbox.
- Metadata is Daytona's labels, minus the SDK's ``code-toolbox-language`` label and this
  provider's ``provider-sdk.cwd`` (where ``SandboxSpec.cwd`` is kept). ``set_metadata``
  (``metadata.update``) is the SDK's ``set_labels``, sent with the labels kept.
- Commands run through a wrapper (the script is ``_exec``'s, the call ``_commands``') so
  that stdout and stderr stay apart and byte-exact, stdin works, a timeout keeps the
  partial output, and cancelling kills the command's process tree.
- A background process is a Daytona session of its own running one asynchronous
  command (the scripts are ``_processes``', the calls ``_background``'); its pid is the
  real pid inside the sandbox.
- The persistent shell is a Daytona session: every command is sourced into one
  long-lived shell, so ``cd``, ``export``, plain variables and functions carry over;
  ``exit N`` in a command ends that command with ``N``, not the session.
- A snapshot's neutral id is its Daytona snapshot name, which is what Daytona creates
  sandboxes from; ``templates.build`` makes Daytona snapshots too, from
  ``Image.from_dockerfile``. Snapshots taken from a sandbox are the neutral snapshots,
  the others are templates. Volumes are mounted by name (resolved to Daytona's id); Daytona has no
  read-only mounts, so ``VolumeMount(read_only=True)`` is refused.

This module keeps the class: its options, capabilities and client, and the roles it is
made of (:mod:`provider_sdk.roles`), each in a private module: ``_control`` (the control
plane: lifecycle, pause, labels, snapshots, templates, volumes), ``_commands`` (exec,
with background processes from ``_background`` and shells from ``_shell``), ``_files``
(the files API) and ``_ports`` (exposed ports). What the roles share is one
``DaytonaCalls`` (``_calls``): the settings, the SDK's client and handles, the caches,
and the calls that translate SDK errors once, retry 502/503/504 and bound toolbox calls
in time.
"""

from __future__ import annotations

from typing import ClassVar

from daytona import AsyncDaytona

from provider_sdk.capabilities import Capability
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.models import SandboxInfo
from provider_sdk.provider import SandboxProvider
from provider_sdk.settings import Settings
from provider_sdk_daytona import _exec as wrapper
from provider_sdk_daytona._calls import DaytonaCalls
from provider_sdk_daytona._capabilities import PROVIDER_CAPABILITIES
from provider_sdk_daytona._commands import DaytonaCommands
from provider_sdk_daytona._control import DaytonaControl
from provider_sdk_daytona._convert import RESERVED_LABELS
from provider_sdk_daytona._files import DaytonaFiles
from provider_sdk_daytona._ports import DaytonaPorts
from provider_sdk_daytona._shell import DaytonaShell

__all__ = ["DaytonaProvider", "DaytonaShell"]

#: The environment variable each option is read from when not given.
SETTINGS = {"api_key": "DAYTONA_API_KEY", "api_url": "DAYTONA_API_URL",
            "target": "DAYTONA_TARGET"}


class DaytonaProvider(SandboxProvider):
    """Sandboxes on Daytona (or anything that speaks its API, like ``psdk emulate daytona``).

    Args:
        api_key: the API key; default the ``DAYTONA_API_KEY`` setting (required).
        api_url: the API's URL, ending in ``/api``; default ``DAYTONA_API_URL``, else the
            SDK's default (Daytona's cloud).
        target: the region; default ``DAYTONA_TARGET``, else the organisation's default.
        create_timeout: seconds a create, start or stop may take (Daytona's SDK default of
            60 is too short for large images).
        unavailable_window: seconds during which 502/503/504 answers around state changes,
            and from a toolbox that is not reachable yet, are retried.
        request_timeout: seconds one toolbox call may go unanswered (a command's own
            ``timeout`` is added for exec) before it raises ``OperationTimeout``.
    """

    name: ClassVar[str] = "daytona"
    internal_labels: ClassVar[frozenset[str]] = RESERVED_LABELS
    capabilities: ClassVar[frozenset[Capability]] = PROVIDER_CAPABILITIES["DaytonaProvider"]
    template_support: ClassVar[TemplateSupport] = TemplateSupport(
        context=False,
        options={"start_cmd": "Daytona snapshots have no start command; start it in the "
                              "sandbox instead",
                 "ready_cmd": "Daytona snapshots have no readiness command"})

    def __init__(self, *, api_key: str | None = None, api_url: str | None = None,
                 target: str | None = None, create_timeout: float = 300.0,
                 unavailable_window: float = 30.0, request_timeout: float = 60.0) -> None:
        settings = Settings(self.name, SETTINGS)
        key = settings.secret("api_key", api_key)
        assert key is not None  # required
        request, create, window = (
            settings.number(option, value, default=60.0, maximum=wrapper.MAX_SECONDS,
                            unit=" of seconds")
            for option, value in (("request_timeout", request_timeout),
                                  ("create_timeout", create_timeout),
                                  ("unavailable_window", unavailable_window)))
        self._calls = DaytonaCalls(
            api_key=key, api_url=settings.url("api_url", api_url, hint=" ending in /api"),
            target=settings.text("target", target), request_timeout=request,
            create_timeout=create, window=window)
        self._control = DaytonaControl(self._calls)
        files = DaytonaFiles(self._calls)
        self._commands = DaytonaCommands(self._calls, files)
        super().__init__(control=self._control, commands=self._commands, files=files,
                         ports=DaytonaPorts(self._calls))

    def __repr__(self) -> str:
        return (f"<DaytonaProvider api_url={self._calls.api_url!r} "
                f"target={self._calls.target!r}>")

    @property
    def client(self) -> AsyncDaytona:
        """The SDK's async client (made on first use), for what has no neutral call."""
        return self._calls.client

    async def aclose(self) -> None:
        await self._commands.remove_litter()
        await self._calls.close()

    async def ex_archive(self, sandbox_id: str) -> SandboxInfo:
        """Archive a sandbox (Daytona only): its files move to cheaper storage; a running
        sandbox is stopped first. ``resume`` starts it again (slower than from stopped)."""
        return self._visible(await self._control.ex_archive(sandbox_id))

    async def ex_recover(self, sandbox_id: str) -> SandboxInfo:
        """Recover a sandbox from a recoverable error state (Daytona only)."""
        return self._visible(await self._control.ex_recover(sandbox_id))
