"""The emulator's front door: which plane a request is for, auth, faults, and routing.

A request is for a sandbox's data plane when its ``Host`` is ``<port>-<id>.<domain>``
(as CubeProxy and E2B's edge route), it carries ``E2b-Sandbox-Id`` (as the e2b SDK
sends to one sandbox URL), it is a ``/files`` request signed with the sandbox's access
token (a signed URL made for that one sandbox URL), or, on Cube, its path is
``/sandbox/<id>/<port>/...`` (CubeProxy's path form); everything else is the control
plane, or the admin API under ``/_emulator/``. A port other than envd's and the code
interpreter's is the server listening on it inside the sandbox (``_ports``).

Every port of a sandbox is guarded as the vendor guards it: on E2B, envd's API and the
code interpreter need the sandbox's ``X-Access-Token`` (``/files`` also takes a
signature, ``/health`` nothing); on Cube, whose envd has no token, every data-plane
request carries the API key, as CubeAPI asks once it has one. A sandbox created with
``allowPublicTraffic: false`` also needs its traffic access token on its own ports (on
Cube, on envd's too).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager

import anyio

from provider_sdk import errors
from provider_sdk.config import open_provider
from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.secret import Secret
from provider_sdk.settings import Settings
from provider_sdk_emulators.e2b import _ports as ports
from provider_sdk_emulators.e2b._records import SandboxRecord
from provider_sdk_emulators.e2b._templates_e2b import UPLOAD_PREFIX
from provider_sdk_emulators.e2b._world import FAULT_DEFAULTS, FAULTS, ApiError, World
from provider_sdk_emulators.e2b.control import ControlPlane
from provider_sdk_emulators.e2b.envd import Envd, signed_by
from provider_sdk_emulators.e2b.flavors import ENVD_PORT, Flavor
from provider_sdk_emulators.e2b.interpreter import INTERPRETER_PORT, Interpreters
from provider_sdk_emulators.kit import http as _http
from provider_sdk_emulators.kit import service
from provider_sdk_emulators.kit.bodies import BodyTooLarge
from provider_sdk_emulators.kit.faults import Faults
from provider_sdk_emulators.kit.http import Request, Response, Takeover, json_response
from provider_sdk_emulators.kit.routing import Router

__all__ = ["App", "serve"]

log = logging.getLogger(__name__)

_HOST = re.compile(r"^(\d+)-([a-z0-9]+)\.")
_PATH = re.compile(r"^/sandbox/([a-z0-9]+)/(\d+)(/.*)?$")


def _api_error(exc: errors.SandboxError) -> ApiError:
    """The control-plane status for a neutral error from the backend, with its message
    alone (the backend's ``[provider id]`` prefix is not the service's)."""
    if isinstance(exc, BodyTooLarge):
        return ApiError(413, exc.message)
    if isinstance(exc, errors.NotFound):
        return ApiError(404, exc.message)
    if isinstance(exc, (errors.InvalidInput, errors.UnsupportedCapability)):
        return ApiError(400, exc.message)
    if isinstance(exc, (errors.Conflict, errors.SandboxNotRunning)):
        return ApiError(409, exc.message)
    if isinstance(exc, errors.Unavailable):
        return ApiError(503, exc.message)
    return ApiError(500, exc.message)


class App:
    """Dispatches requests for one flavor over one :class:`World`."""

    def __init__(self, world: World, api_key: Secret) -> None:
        self.world = world
        self.flavor = world.flavor
        self.api_key = api_key
        self.control = ControlPlane(world)
        self.envd = Envd(world)
        self.interpreters = Interpreters()
        # The routes left out come first: a served pattern (DELETE /templates/{id})
        # must not take a path the service gives to another feature (/templates/tags).
        self.router = Router((method, pattern, self._not_served(feature))
                             for method, pattern, feature in self.flavor.not_served)
        for method, pattern, handler in self.control.routes():
            self.router.add(method, pattern, handler)

    async def __call__(self, request: Request) -> Response | Takeover:
        await service.inject_latency(self.world.faults)
        target = self._sandbox_target(request)
        if target is not None:
            return await self.data_plane(request, *target)
        if request.path.startswith(service.ADMIN_PREFIX):
            return await self.admin(request)
        return await self.control_plane(request)

    def _sandbox_target(self, request: Request) -> tuple[str, int] | None:
        if self.flavor.path_routing and (path := _PATH.match(request.path)):
            request.path = path.group(3) or "/"  # CubeProxy's /sandbox/<id>/<port>/...
            return path.group(1), int(path.group(2))
        host = request.headers.get("host", "").lower()
        match = _HOST.match(host)
        if match is not None and host.split(":")[0].endswith("." + self.flavor.domain):
            return match.group(2), int(match.group(1))
        sandbox_id = request.headers.get("e2b-sandbox-id")
        if sandbox_id:
            port = request.headers.get("e2b-sandbox-port", str(ENVD_PORT))
            return sandbox_id, int(port) if port.isdigit() else ENVD_PORT
        if request.path == "/files" and "signature" in request.query:
            # A signed URL made with E2B_SANDBOX_URL names no sandbox (it is opened
            # without the SDK's headers): the sandbox is the one whose token signed it.
            for record in list(self.world.sandboxes.values()):
                if record.access_token is not None and signed_by(request,
                                                                 record.access_token):
                    return record.id, ENVD_PORT
        return None

    def _key_ok(self, request: Request) -> bool:
        given = service.presented_key(request, header="x-api-key")
        return service.key_matches(given, self.api_key)

    # ------------------------------------------------------------ control plane

    async def control_plane(self, request: Request) -> Response:
        found = self.router.resolve(request.method, request.path)
        if found.handler is None:
            if found.allowed:
                return Response(405, (("allow", ", ".join(found.allowed)),))
            return self.unknown_route()
        if request.path != "/health" and not request.path.startswith(UPLOAD_PREFIX) \
                and not self._key_ok(request):
            return json_response(401, {"code": 401, "message": "invalid or missing API key: "
                                       f"send it in the X-API-Key header "
                                       f"({self.flavor.api_key_setting})"})
        handler = found.handler
        request.params = found.params
        try:
            try:
                return await handler(request)
            except errors.SandboxError as exc:
                raise _api_error(exc) from exc
        except ApiError as exc:
            return json_response(exc.status, {"code": exc.status, "message": exc.message},
                                 exc.headers)

    def unknown_route(self, feature: str | None = None) -> Response:
        """The service's answer to a route it does not know; ``feature`` names what a
        route the emulator leaves out belongs to."""
        note = f"{feature}: not served by this emulator" if feature else None
        message = self.flavor.unknown_route_message
        if message is not None:
            return json_response(404, {"code": 404,
                                       "message": f"{message} ({note})" if note else message})
        return Response(404, (("content-type", "text/plain; charset=utf-8"),) if note else (),
                        (note or "").encode())

    def _not_served(self, feature: str) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            return self.unknown_route(feature)
        return handler

    # --------------------------------------------------------------- data plane

    async def data_plane(self, request: Request, sandbox_id: str,
                         port: int) -> Response | Takeover:
        world = self.world
        record = world.sandboxes.get(sandbox_id)
        if record is not None and record.state in ("paused", "pausing") and record.auto_resume:
            try:
                await world.resume(record, None)
            except (ApiError, errors.SandboxError) as exc:
                return json_response(503, {"code": 503, "message": f"resume failed: {exc}"},
                                     {"Retry-After": "1"})
        if record is None or record.state != "running":
            status = self.flavor.killed_status if sandbox_id in world.killed else 502
            return json_response(status, {"sandboxId": sandbox_id,
                                          "message": "The sandbox was not found",
                                          "code": status})
        if record.unavailable_left > 0:
            record.unavailable_left -= 1
            world.faults.served("resume_504")
            return json_response(504, {"sandboxId": sandbox_id, "code": 504,
                                       "message": "upstream timed out after resume "
                                                  "(emulated fault resume_504)"})
        if denied := self._data_plane_denied(record, request, port):
            return denied
        if (port != ENVD_PORT or self.flavor.traffic_token_on_envd) and (
                denied := ports.traffic_denied(record, request)):
            return denied
        if port == INTERPRETER_PORT:
            world.touch(record)
            if not self.envd.token_ok(record, request):
                return json_response(401, {"code": 401, "message": "invalid or missing "
                                                                   "X-Access-Token"})
            return await self.interpreters.handle(record, request)
        if port != ENVD_PORT:
            world.touch(record)
            return await ports.relay(record, port, request, ports.credentials(
                self.api_key, world.sandboxes.values()))
        world.touch(record)
        try:
            return await self.envd.handle(record, request)
        finally:
            world.touch(record)

    def _data_plane_denied(self, record: SandboxRecord, request: Request,
                           port: int) -> Response | None:
        """A 401 when the flavor wants the API key on the data plane and it is not
        there (envd's ``/health`` is open, as the probes that call it are)."""
        if not self.flavor.data_plane_api_key or self._key_ok(request):
            return None
        if port == ENVD_PORT and request.path == "/health":
            return None
        return json_response(401, {"code": 401, "message": "invalid or missing API key: "
                                   "send it in the X-API-Key header "
                                   f"({self.flavor.api_key_setting})"})

    # -------------------------------------------------------------------- admin

    async def admin(self, request: Request) -> Response:
        if not self._key_ok(request):
            return json_response(401, {"code": 401, "message": "invalid or missing API key"})
        return await service.admin(request, self.world.faults, _error,
                                   set_fault=self.world.set_fault)


def _error(_request: Request, status: int, message: str) -> Response:
    """The emulator's own error answer (the admin API's)."""
    return json_response(status, {"code": status, "message": message})


@asynccontextmanager
async def serve(flavor: Flavor, options: EmulatorOptions) -> AsyncIterator[RunningEmulator]:
    """Run an emulator of ``flavor`` until the block exits; its sandboxes are killed then.

    Raises:
        ConfigError: no API key was given and the flavor's setting is unset, a fault
            is unknown, or the backend is not installed.
    """
    api_key = Settings(flavor.name, {"api_key": flavor.api_key_setting}).secret(
        "api_key", options.api_key)
    assert api_key is not None  # required
    faults = Faults(FAULTS, {**FAULT_DEFAULTS, **options.faults})
    async with open_provider(options.backend) as provider, anyio.create_task_group() as tg:
        world = World(flavor, provider, faults, tg)
        app = App(world, api_key)
        tg.start_soon(world.reap)
        try:
            async with _http.serve(app, port=options.port) as port:
                url = f"http://127.0.0.1:{port}"
                settings: Mapping[str, str] = flavor.settings(url, port)
                log.info("%s emulator on %s", flavor.name, url)
                yield RunningEmulator(name=flavor.name, url=url,
                                      # (mypy cannot solve attrs' dict converter)
                                      settings=settings,  # type: ignore[arg-type]
                                      api_key_settings=(flavor.api_key_setting,),
                                      api_key=api_key)
        finally:
            with anyio.CancelScope(shield=True):
                await app.interpreters.aclose()
                for record in list(world.sandboxes.values()):
                    try:
                        await world.kill(record)
                    except errors.SandboxError:
                        log.warning("emulator: could not kill sandbox %s", record.id)
                # The templates built through it go with it, their backend images too.
                for template in list(world.templates.values()):
                    try:
                        await world.delete_template(template)
                    except errors.SandboxError:
                        log.warning("emulator: could not delete template %s", template.id)
            tg.cancel_scope.cancel()

