"""Exposed ports of ``DaytonaProvider`` (``ports.expose``): Daytona's signed preview URLs.

``expose(port)`` asks Daytona for a signed preview URL of the port
(``create_signed_preview_url``), ``https://PORT-TOKEN.<proxy domain>``: the token is part
of the URL, which opens as it is in a browser or with curl (``ports.url_token``), and
Daytona's proxy refuses any other token. What an
:class:`~provider_sdk.models.ExposedPort` means here, then:

- ``url`` is the signed URL; ``token`` is its token, for this port only;
- ``base_url`` is the port's preview URL by sandbox id (``get_preview_link``), which
  answers only requests with the sandbox's own preview token (not handed out) or the
  API key: the signed token does not go in a header (``token_header`` is ``None``);
- ``unexpose(port)`` expires the signed URL at Daytona (``expire_signed_preview_url``):
  it is refused from then on, and exposing again gives a new one (``ports.revoke``).
  Only the provider instance that exposed a port knows its token, so only it can
  unexpose it; the URL expires by itself after :data:`LIFETIME` seconds (Daytona's
  longest), and killing the sandbox ends it.
"""

from __future__ import annotations

import time

import anyio

from provider_sdk.models import ExposedPort
from provider_sdk_daytona._calls import DaytonaCalls, translate

__all__ = ["LIFETIME", "DaytonaPorts"]

LIFETIME = 24 * 60 * 60
"""Seconds a signed preview URL lives (Daytona allows 1 s to 24 h)."""
_RENEW_BEFORE = 60 * 60
"""An exposed URL with less than this left is replaced by a new one on ``expose``."""


class DaytonaPorts:
    """The ports role of ``DaytonaProvider`` (a :class:`provider_sdk.roles.Ports`); what
    it exposed is kept in the shared calls, which forget a killed sandbox's ports."""

    def __init__(self, calls: DaytonaCalls) -> None:
        self._calls = calls

    async def expose(self, sandbox_id: str, port: int) -> ExposedPort:
        known = self._calls.exposed.get((sandbox_id, port))
        if known is not None and known[1] - time.monotonic() > _RENEW_BEFORE:
            return known[0]
        sandbox = await self._calls.sandbox(sandbox_id)
        until = time.monotonic() + LIFETIME
        with translate(sandbox_id):
            signed = await self._calls.retrying(lambda: sandbox.create_signed_preview_url(
                port, expires_in_seconds=LIFETIME))
            link = await self._calls.retrying(lambda: sandbox.get_preview_link(port))
        known = self._calls.exposed.get((sandbox_id, port))
        if known is not None and known[1] - time.monotonic() > _RENEW_BEFORE:
            # exposed meanwhile by another task: keep that one, expire this one
            with anyio.CancelScope(shield=True), translate(sandbox_id):
                await self._calls.retrying(lambda: sandbox.expire_signed_preview_url(
                    port, signed.token))
            return known[0]
        exposed = ExposedPort(port=port, url=signed.url, base_url=link.url,
                              token=signed.token, token_header=None)
        self._calls.exposed[(sandbox_id, port)] = (exposed, until)
        return exposed

    async def unexpose(self, sandbox_id: str, port: int) -> None:
        known = self._calls.exposed.pop((sandbox_id, port), None)
        if known is None:
            return
        sandbox = await self._calls.sandbox(sandbox_id)
        token = known[0].token.reveal()
        with anyio.CancelScope(shield=True), translate(sandbox_id):
            await self._calls.retrying(lambda: sandbox.expire_signed_preview_url(port, token))
