"""The ports role of ``DockerProvider`` (:class:`DockerPorts`, ``ports.expose``).

A sandbox keeps network mode ``none``: nothing is published. The provider's
:class:`~provider_sdk.ports.PortProxy` (held in ``Shared``, so a kill stops serving a
sandbox's ports) listens on 127.0.0.1, and each connection it lets through becomes an
exec in the container that relays its stdin and stdout to ``127.0.0.1:PORT`` there
(``_scripts.RELAY``: bash's ``/dev/tcp``), over the Engine's attached exec stream. A
template without bash cannot relay: such connections are answered 502.

Openers run on the proxy's own event loop, so the exec is created with the ``docker``
package in a worker thread of that loop, not through the Engine's shared limiter.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator

import anyio
import anyio.abc
import docker.errors
import requests.exceptions

from provider_sdk import errors
from provider_sdk.models import ExposedPort, SandboxState
from provider_sdk.roles import ControlPlane
from provider_sdk_docker import _scripts
from provider_sdk_docker._engine import ExecStream, Frame
from provider_sdk_docker._labels import container_name
from provider_sdk_docker._shared import Shared

__all__ = ["DockerPorts"]

#: Seconds the relay has to be created and started by the Engine, connect to the port
#: inside and say so: less than a client's patience (the contract's 15 s), so an Engine
#: slow to start it comes back as a ``502`` that says so, not as silence.
CONNECT_DEADLINE = 10.0


class DockerPorts:
    """Exposes the ports of one ``DockerProvider``'s sandboxes through relay execs.

    Args:
        shared: the provider's Engine, settings and port proxy.
        control: its control plane, which tells whether a sandbox runs.
    """

    def __init__(self, shared: Shared, control: ControlPlane) -> None:
        self._shared = shared
        self._engine = shared.engine
        self._control = control
        self.name = shared.name

    async def expose(self, sandbox_id: str, port: int) -> ExposedPort:
        """Serve a running sandbox's port through the proxy."""
        info = await self._control.info(sandbox_id)
        if info.state != SandboxState.RUNNING:
            raise errors.SandboxNotRunning(f"sandbox {sandbox_id!r} is {info.state}",
                                           state=str(info.state), provider=self.name,
                                           sandbox_id=sandbox_id)
        return await self._shared.proxy.expose(sandbox_id, port,
                                               lambda: self._relay(sandbox_id, port))

    async def unexpose(self, sandbox_id: str, port: int) -> None:
        """Stop serving the port."""
        await self._shared.proxy.unexpose(sandbox_id, port)

    @contextlib.asynccontextmanager
    async def _relay(self, sandbox_id: str, port: int) -> AsyncIterator[anyio.abc.ByteStream]:
        """A byte stream to ``127.0.0.1:port`` in the container, through an exec."""
        tunnel: _ExecTunnel | None = None
        with anyio.move_on_after(CONNECT_DEADLINE):
            tunnel = await self._open_relay(sandbox_id, port)
        if tunnel is None:
            raise errors.Unavailable(
                f"the relay to port {port} did not start and connect within "
                f"{CONNECT_DEADLINE:g} s", provider=self.name, sandbox_id=sandbox_id)
        try:
            yield tunnel
        finally:
            with anyio.CancelScope(shield=True):
                await tunnel.aclose()

    async def _open_relay(self, sandbox_id: str, port: int) -> _ExecTunnel:
        """The relay's exec, created, started and connected to the port; whatever it
        made is closed if it fails or is cancelled."""
        try:
            # Abandoned on cancel: an Engine that does not answer holds only the thread.
            created = await anyio.to_thread.run_sync(functools.partial(
                self._engine.client.exec_create, container_name(sandbox_id),
                ["/bin/bash", "-c", _scripts.RELAY, "psdk", str(port)], stdin=True),
                abandon_on_cancel=True)
        except docker.errors.DockerException as exc:
            raise self._engine.translate(exc, kind="sandbox", what=sandbox_id,
                                         sandbox_id=sandbox_id) from exc
        except requests.exceptions.ConnectionError as exc:
            raise self._engine.unavailable(exc) from exc
        tunnel = _ExecTunnel(await self._engine.attach(str(created["Id"]),
                                                        sandbox_id=sandbox_id))
        try:
            if not await tunnel.connected():
                raise errors.Unavailable(
                    f"nothing answers on port {port} in the sandbox (or the template has "
                    "no bash to relay with)", provider=self.name, sandbox_id=sandbox_id)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await tunnel.aclose()
            raise
        return tunnel


class _ExecTunnel(anyio.abc.ByteStream):
    """The relay exec's stdin and stdout as one byte stream."""

    def __init__(self, stream: ExecStream) -> None:
        self._stream = stream
        self._frames: AsyncIterator[Frame] = stream.frames()
        self._closed = False

    async def connected(self) -> bool:
        """Whether the relay reported its connection (``+`` on stderr) before it ended."""
        async for name, data in self._frames:
            if name == "stderr":
                return data.startswith(b"+")
        return False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        async for name, data in self._frames:
            if name == "stdout":
                return data
        raise anyio.EndOfStream

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        """Nothing: bash cannot half-close the port's socket, and closing the relay's
        stdin would end the answer too. The port's side ends the connection, or the
        client's going away does (:meth:`aclose`)."""

    async def aclose(self) -> None:
        """End the relay: its stdin closes, which stops both directions inside."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                 OSError):
            await self._stream.close_stdin()
        await self._stream.aclose()
