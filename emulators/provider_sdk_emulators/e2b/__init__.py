"""An E2B- and CubeSandbox-compatible emulator, for offline tests.

It serves, on 127.0.0.1 only, the control plane (E2B's REST API, or CubeAPI's) and each
sandbox's envd (Connect-RPC process and filesystem services, ``/files``), so that the
unmodified ``e2b`` and ``cubesandbox`` SDKs work against it. Every sandbox is a real
sandbox of a neutral provider (``local`` by default). Each flavor keeps its vendor's
documented quirks, and faults can be injected (see :data:`FAULTS`).

Run it with ``psdk emulate e2b`` (or ``cube``), or in-process::

    async with e2b_emulator(EmulatorOptions(api_key="k")) as running:
        os.environ.update(running.environment())

or, for tests that use the vendors' blocking SDKs, in a thread of its own::

    with run_in_thread("e2b", EmulatorOptions(api_key="k")) as running:
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from anyio.from_thread import start_blocking_portal

from provider_sdk import emulators
from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk_emulators.e2b._world import FAULTS
from provider_sdk_emulators.e2b.app import serve
from provider_sdk_emulators.e2b.flavors import CUBE, E2B, Flavor

__all__ = ["CUBE", "E2B", "FAULTS", "Flavor", "cube_emulator", "e2b_emulator", "run_in_thread"]


@asynccontextmanager
async def e2b_emulator(options: EmulatorOptions) -> AsyncIterator[RunningEmulator]:
    """The E2B flavor (entry point ``e2b``): E2B's v1 and v2 routes, envd with access
    tokens, absolute timeouts."""
    async with serve(E2B, options) as running:
        yield running


@asynccontextmanager
async def cube_emulator(options: EmulatorOptions) -> AsyncIterator[RunningEmulator]:
    """The CubeSandbox flavor (entry point ``cube``): CubeAPI's routes (no
    ``/v2/sandboxes`` create), idle timeouts, a ``pausing`` state, volumes, rollback."""
    async with serve(CUBE, options) as running:
        yield running


@contextmanager
def run_in_thread(name: str, options: EmulatorOptions | None = None) -> Iterator[
        RunningEmulator]:
    """Run the emulator ``name`` on an event loop in a thread of its own, so blocking
    code (the vendors' sync SDKs) can call it; it stops when the block exits."""
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(
            emulators.run(name, options)) as running:
        yield running
