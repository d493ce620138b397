"""``E2BProvider``: sandboxes on E2B, through the ``e2b`` SDK's async API.

The provider reads its settings and composes its roles around one shared session
(``_session.Session``): the control plane (``_control.E2BControl``, which also describes
the lifecycle mapping), commands (``_commands``), files (``_files``) and ports
(``_ports``).
:class:`~provider_sdk_e2b.cube.CubeProvider` is the same composition with Cube's
control plane.

The pitfalls this module absorbs (each is proven by a test through the emulator):

- envd runs commands as ``bash -l -c``, whose profile resets ``PATH``: the environment
  travels in a script that runs after the profile (see ``provider_sdk_e2b._shell``);
- the SDK decodes command output as UTF-8 and its ``timeout`` (60 s by default) kills
  commands: exec talks to envd's process service directly, with bytes, and no deadline
  unless the caller gives one;
- after create, resume or connect the control plane can say running while the data
  plane answers 502/503/504: the provider probes envd's ``/health`` and retries for
  ``ready_timeout`` seconds, then raises ``Unavailable``; a request the gateway refused
  (so nothing ran) is retried within the same window, never one that reached envd;
- 429s are retried by the SDK's transport honouring ``Retry-After`` (``retries``), then
  raise ``RateLimited``.

Everything vendor-specific about errors happens in one translator
(``_errors.Translator``), which every role calls.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Mapping
from typing import ClassVar, TypeVar

from e2b.api import client_async

from provider_sdk.capabilities import Capability
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.provider import SandboxProvider
from provider_sdk.settings import Settings
from provider_sdk_e2b import _e2b_templates
from provider_sdk_e2b._capabilities import PROVIDER_CAPABILITIES
from provider_sdk_e2b._commands import E2BCommands
from provider_sdk_e2b._control import ENVD_PORT as ENVD_PORT
from provider_sdk_e2b._control import E2BControl
from provider_sdk_e2b._files import E2BFiles
from provider_sdk_e2b._ports import E2BPorts
from provider_sdk_e2b._remote import Remote as Remote
from provider_sdk_e2b._session import PSDK_KEY, Options, Session

__all__ = ["E2BProvider"]

_P = TypeVar("_P", bound="E2BProvider")

def _release_sdk_transports() -> None:
    """Drop the SDK's process-wide HTTP transports while the interpreter is whole.

    The ``e2b`` SDK keeps its connection pools (Rust, on their own runtime threads) in
    module-level caches for the life of the process. Left to the interpreter's final
    garbage collection, their teardown races it and can abort the process after
    ``main`` has returned; released from an exit hook, they shut down cleanly first.
    """
    for name in ("_httpx_transports", "_transports", "_pools"):
        cache = getattr(client_async, name, None)
        if isinstance(cache, dict):
            cache.clear()
    gc.collect()


atexit.register(_release_sdk_transports)

class E2BProvider(SandboxProvider):
    """Sandboxes on E2B, through the ``e2b`` SDK (async API).

    Every option falls back to its setting in the environment (in brackets).

    Args:
        api_key: the API key [``E2B_API_KEY``, required].
        api_url: the control plane's URL [``E2B_API_URL``; default from the domain].
        domain: E2B's domain [``E2B_DOMAIN``; default ``e2b.app``].
        sandbox_url: one URL for every sandbox's data plane, routed by the
            ``E2b-Sandbox-Id`` header [``E2B_SANDBOX_URL``; default per sandbox].
        template: the template when a spec names none (default ``base``).
        ready_timeout: seconds to wait for a sandbox's data plane after create, resume
            or connect, and to retry requests a gateway refused, before raising
            ``Unavailable`` [``PSDK_E2B_READY_TIMEOUT``; default 60].
        max_timeout: the lifetime asked for when ``Lifecycle.idle_timeout`` is ``None``
            (E2B has no "never"), renewed on use [default 3600].
        request_timeout: seconds for one control-plane request (default 60).
        retries: control-plane retries on 429/502/503/504, honouring ``Retry-After``
            (default 3).
    """

    name: ClassVar[str] = "e2b"
    internal_labels: ClassVar[frozenset[str]] = frozenset({PSDK_KEY})
    capabilities: ClassVar[frozenset[Capability]] = PROVIDER_CAPABILITIES["E2BProvider"]
    template_support: ClassVar[TemplateSupport] = _e2b_templates.TEMPLATE_SUPPORT

    #: Where each option is read from when not given.
    SETTINGS: ClassVar[Mapping[str, str]] = {
        "api_key": "E2B_API_KEY", "api_url": "E2B_API_URL", "domain": "E2B_DOMAIN",
        "sandbox_url": "E2B_SANDBOX_URL", "ready_timeout": "PSDK_E2B_READY_TIMEOUT",
    }
    DEFAULT_TEMPLATE: ClassVar[str | None] = "base"

    def __init__(self, *, api_key: str | None = None, api_url: str | None = None,
                 domain: str | None = None, sandbox_url: str | None = None,
                 template: str | None = None, ready_timeout: float | None = None,
                 max_timeout: int = 3600, request_timeout: float = 60.0,
                 retries: int = 3) -> None:
        options = Options.read(
            Settings(self.name, self.SETTINGS), api_key=api_key, api_url=api_url,
            domain=domain, sandbox_url=sandbox_url,
            template=template, default_template=self.DEFAULT_TEMPLATE,
            ready_timeout=ready_timeout, max_timeout=max_timeout,
            request_timeout=request_timeout, retries=retries)
        session = Session(self.name, options, self.SETTINGS)
        self._compose(session, E2BControl(session))

    def _compose(self, session: Session, control: E2BControl) -> None:
        """Hand the base this provider's roles: ``control``, and the commands, files and
        ports over envd, every one holding ``session``."""
        self._session = session
        commands = E2BCommands(session, control)
        super().__init__(control=control, commands=commands,
                         files=E2BFiles(session, control, commands),
                         ports=E2BPorts(session, control))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} api_url={self._session.options.api_url!r}>"

    async def __aenter__(self: _P) -> _P:
        await self._session.tasks.open()
        return self

    async def aclose(self) -> None:
        """Stop the provider's tasks (each closes its stream first) and forget the
        processes and data-plane clients; sandboxes keep running. Safe to call twice."""
        await self._session.aclose()
