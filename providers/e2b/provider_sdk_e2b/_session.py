"""What the roles of one ``E2BProvider`` (or ``CubeProvider``) share: the settings, the
SDK's connection options, the error translator, the data-plane clients opened so far,
the background processes kept, and the task owner that runs their pumps.

The provider makes one :class:`Session` from its settings and hands it to every role;
no role reaches into the provider. This module makes no request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import attrs
from e2b.connection_config import ConnectionConfig

from provider_sdk.secret import Secret
from provider_sdk.settings import Settings
from provider_sdk.tasks import TaskOwner
from provider_sdk_e2b._errors import Translator, retrying, wait_ready
from provider_sdk_e2b._procs import Proc
from provider_sdk_e2b._remote import _Handle

__all__ = ["PSDK_KEY", "Options", "Session", "psdk_metadata"]

T = TypeVar("T")

PSDK_KEY = "psdk"
"""Metadata key the provider reserves: the sandbox's working directory and idle window,
so a handle opened in another process behaves the same. Never shown in ``metadata``."""


@attrs.frozen
class Options:
    """The provider's settings, read once (see ``E2BProvider`` for each)."""

    api_key: Secret
    api_url: str | None
    domain: str | None
    sandbox_url: str | None
    template: str | None
    ready_timeout: float
    max_timeout: int
    request_timeout: float
    retries: int

    @classmethod
    def read(cls, settings: Settings, *, api_key: str | None, api_url: str | None,
             domain: str | None, sandbox_url: str | None, template: str | None,
             default_template: str | None, ready_timeout: float | None, max_timeout: int,
             request_timeout: float, retries: int) -> Options:
        """The options given, each falling back to its setting (``ConfigError`` for
        one that is missing where required, or malformed)."""
        key = settings.secret("api_key", api_key)
        assert key is not None  # required
        return cls(
            api_key=key, api_url=settings.url("api_url", api_url),
            domain=settings.text("domain", domain),
            sandbox_url=settings.url("sandbox_url", sandbox_url),
            template=settings.text("template", template) or default_template,
            ready_timeout=settings.number("ready_timeout", ready_timeout, default=60.0,
                                          unit=" of seconds"),
            max_timeout=settings.integer("max_timeout", max_timeout, default=3600),
            request_timeout=settings.number("request_timeout", request_timeout,
                                            default=60.0, unit=" of seconds"),
            retries=settings.integer("retries", retries, default=3, minimum=0))


@attrs.define(eq=False)
class Session:
    """The state the roles share (see the module)."""

    name: str
    """The provider's name, which every error carries."""
    options: Options
    sources: Mapping[str, str]
    """Where each option was read from when not given (the provider's ``SETTINGS``)."""
    translate: Translator = attrs.field(init=False, default=attrs.Factory(
        lambda s: Translator(s.name, key_setting=s.sources["api_key"]), takes_self=True))
    """The one error translation: ``with session.translate(sandbox_id, what=...):``."""
    handles: dict[str, _Handle] = attrs.field(init=False, factory=dict)
    """The data-plane clients of each sandbox used, by id."""
    procs: dict[tuple[str, int], Proc] = attrs.field(init=False, factory=dict)
    """The background processes started or attached to, by sandbox and pid."""
    tasks: TaskOwner = attrs.field(init=False, default=attrs.Factory(
        lambda s: TaskOwner(s.name), takes_self=True))
    """Owns every task the provider starts: process pumps, lease renewals."""

    def params(self) -> dict[str, Any]:
        """The SDK's connection options (``ApiParams``), key revealed only here."""
        options = self.options
        params: dict[str, Any] = {"api_key": options.api_key.reveal(),
                                  "request_timeout": options.request_timeout,
                                  "retries": options.retries}
        for option, value in (("api_url", options.api_url), ("domain", options.domain),
                              ("sandbox_url", options.sandbox_url)):
            if value:
                params[option] = value
        return params

    def config(self, **extra: Any) -> ConnectionConfig:
        """The SDK's connection config, with ``extra`` options."""
        return ConnectionConfig(**self.params(), **extra)

    async def wait_ready(self, sandbox_id: str, handle: _Handle) -> None:
        """Return once the sandbox's envd answers, within ``ready_timeout``."""
        await wait_ready(handle, sandbox_id, timeout=self.options.ready_timeout,
                         provider=self.name)

    async def retrying(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op``, retrying what a gateway refused within ``ready_timeout``."""
        return await retrying(op, timeout=self.options.ready_timeout)

    def forget(self, sandbox_id: str) -> None:
        """Drop a sandbox's clients and stop keeping its processes' events."""
        self.handles.pop(sandbox_id, None)
        for key in [k for k in self.procs if k[0] == sandbox_id]:
            proc = self.procs.pop(key)
            if proc.pump is not None:
                proc.pump.cancel()

    async def aclose(self) -> None:
        """Stop the tasks (each closes its stream first), forget processes and clients."""
        await self.tasks.aclose()
        self.procs.clear()
        self.handles.clear()


def psdk_metadata(metadata: Mapping[str, str]) -> dict[str, Any]:
    """What the provider keeps under :data:`PSDK_KEY` in a sandbox's metadata."""
    try:
        data = json.loads(metadata.get(PSDK_KEY) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
