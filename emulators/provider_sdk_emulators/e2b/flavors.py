"""The two flavors the emulator serves, E2B and CubeSandbox, as data.

Everything in which the Cube flavor differs from the E2B one is a field here; the
server reads these fields and never tests a flavor's name. Each difference is what a
released CubeSandbox does (see the docs page on emulators for the list).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

__all__ = ["CUBE", "E2B", "ENVD_PORT", "ENVD_VERSION", "Flavor", "NotServed"]

ENVD_PORT = 49983
ENVD_VERSION = "0.6.13"

NotServed = tuple[str, str, str]
"""``(method, route pattern, feature)``: a route of the service the emulator leaves out."""

_E2B_NOT_SERVED: tuple[NotServed, ...] = (
    ("GET", "/secrets", "secrets"),
    ("POST", "/secrets", "secrets"),
    ("GET", "/secrets/{id}", "secrets"),
    ("POST", "/secrets/{id}", "secrets"),
    ("DELETE", "/secrets/{id}", "secrets"),
    ("GET", "/volumes", "volumes"),
    ("POST", "/volumes", "volumes"),
    ("GET", "/volumes/{id}", "volumes"),
    ("DELETE", "/volumes/{id}", "volumes"),
    ("GET", "/sandboxes/{id}/logs", "sandbox logs"),
    ("GET", "/v2/sandboxes/{id}/logs", "sandbox logs"),
    ("GET", "/sandboxes/metrics", "metrics of several sandboxes at once"),
    ("POST", "/templates/tags", "template tags"),
    ("DELETE", "/templates/tags", "template tags"),
    ("GET", "/templates/{id}/tags", "template tags"),
    ("GET", "/templates/{id}/tags/count", "template tags"),
    ("GET", "/templates/{id}/tags/exists", "template tags"),
    ("GET", "/templates/{id}/tags/groups", "template tags"),
    ("GET", "/templates/{id}/tags/{tag}/assignments", "template tags"),
    ("GET", "/templates/{id}", "a template's details"),
    ("PATCH", "/templates/{id}", "updating a template"),
    ("PATCH", "/v2/templates/{id}", "updating a template"),
    ("GET", "/v2/templates", "the v2 template listing"),
    ("GET", "/default-templates", "the default template listing"),
    ("GET", "/templates/{id}/builds/{build}/logs", "build log pages (the status has them)"),
)
_CUBE_NOT_SERVED: tuple[NotServed, ...] = (
    ("GET", "/sandboxes/{id}/logs", "sandbox logs"),
    ("GET", "/v2/sandboxes/{id}/logs", "sandbox logs"),
)


@attrs.frozen(kw_only=True)
class Flavor:
    """How one vendor's service behaves, where the two differ."""

    name: str
    api_key_setting: str
    """The environment variable the vendor's SDK reads its key from."""
    domain: str
    """The sandbox domain: data-plane hosts are ``<port>-<id>.<domain>``."""
    default_templates: frozenset[str]
    """Template ids that mean "the backend's default template"."""
    template_setting: tuple[str, str] | None
    """A setting naming the default template, and its value, if the SDK needs one."""
    v2_create: bool
    """``POST /v2/sandboxes`` and ``POST /v2/sandboxes/{id}/connect`` are served
    (Cube: not on released versions: 405 and 404)."""
    connect_resumed_status: int
    """Status of a connect that resumed a paused sandbox (E2B 201, Cube always 200)."""
    default_timeout: float | None
    """Seconds when create omits ``timeout``; ``None``: never expires."""
    idle_timeout: bool
    """The timeout is an idle window that every request slides (Cube), not a deadline."""
    never_timeout: bool
    """``timeout: -1`` means never (Cube); ``endAt`` is then omitted from info."""
    pausing_state: bool
    """Pause answers at once and the sandbox shows ``pausing`` before ``paused``."""
    pausing_seconds: float
    """How long, at least, a pause stays in ``pausing``."""
    filesystem_pause: bool
    """A pause may drop memory (E2B's ``memory: false``); Cube's always keeps it."""
    envd_access_token: bool
    """Create returns an ``envdAccessToken`` that the data plane then requires."""
    traffic_token_on_connect: bool
    """Connect answers the ``trafficAccessToken`` too (Cube: only create does)."""
    traffic_token_on_envd: bool
    """envd's port also needs the traffic token (CubeProxy checks every port; E2B's
    edge leaves envd, guarded by its access token, out)."""
    data_plane_api_key: bool
    """Every data-plane request but envd's ``/health`` carries the API key (``X-API-Key``
    or ``Authorization: Bearer``), as CubeAPI's auth middleware asks once it is given a
    key; the flavor's envd has no access token, so the key is what guards it."""
    snake_case_info: bool
    """Sandbox info carries snake_case keys beside the camelCase ones."""
    killed_status: int
    """Data-plane status for a sandbox that was killed (E2B 502, CubeProxy 410)."""
    metrics: bool
    """``GET /sandboxes/{id}/metrics`` is served."""
    cube_extras: bool
    """CubeAPI's extras: rollback and volumes are served, snapshot ids read ``snap-…``,
    and create and connect name the sandbox domain (E2B's say ``null``)."""
    list_next_token: bool
    """``GET /v2/sandboxes`` pages with ``x-next-token`` (Cube returns one page)."""
    path_routing: bool
    """``/sandbox/<id>/<port>/...`` reaches a sandbox's port (CubeProxy's path form)."""
    template_builds: bool
    """E2B's template build API (``POST /v3/templates``, file uploads, builds from steps,
    status) is served (Cube's is unconfirmed, and does not run ``RUN`` steps)."""
    id_prefix: str
    environment: Callable[[Flavor, str, int], dict[str, str]]
    """The settings that point the vendor's SDK at an emulator (URL, port)."""
    image_templates: bool = False
    """CubeAPI's template API: templates made from OCI images pulled from a registry."""
    unknown_route_message: str | None = None
    """The message of the service's JSON 404 for a route it does not know (E2B's API
    validates requests against its OpenAPI spec); ``None``: an empty 404 (CubeAPI's
    axum router)."""
    not_served: tuple[NotServed, ...] = ()
    """The service's routes the emulator leaves out: each answers as an unknown route,
    naming its feature (docs/emulators.md has the same tables)."""

    def settings(self, url: str, port: int) -> dict[str, str]:
        """The environment that points this vendor's SDK at an emulator on ``url``."""
        env = self.environment(self, url, port)
        if self.template_setting is not None:
            env[self.template_setting[0]] = self.template_setting[1]
        return env


def _e2b_settings(flavor: Flavor, url: str, port: int) -> dict[str, str]:
    # E2B_SANDBOX_URL sends every sandbox's envd traffic to one address; the SDK adds
    # the E2b-Sandbox-Id header, by which the emulator routes, as E2B's edge does.
    # The domain names the emulator's port, so the SDK's get_host(port),
    # <port>-<id>.<domain>, is an address that reaches it (routed by Host, as E2B's edge).
    return {"E2B_API_URL": url, "E2B_SANDBOX_URL": url,
            "E2B_DOMAIN": f"{flavor.domain}:{port}"}


def _cube_settings(flavor: Flavor, url: str, port: int) -> dict[str, str]:
    # The cubesandbox SDK dials CUBE_PROXY_NODE_IP:CUBE_PROXY_PORT_HTTP with the Host
    # header <port>-<id>.<domain>, by which the emulator routes, as CubeProxy does.
    return {"CUBE_API_URL": url, "CUBE_SANDBOX_DOMAIN": flavor.domain,
            "CUBE_PROXY_NODE_IP": "127.0.0.1", "CUBE_PROXY_PORT_HTTP": str(port)}


E2B = Flavor(
    name="e2b",
    api_key_setting="E2B_API_KEY",
    domain="e2b.localhost",
    default_templates=frozenset({"base"}),
    template_setting=None,
    v2_create=True,
    connect_resumed_status=201,
    default_timeout=300.0,
    idle_timeout=False,
    never_timeout=False,
    pausing_state=False,
    pausing_seconds=0.0,
    filesystem_pause=True,
    envd_access_token=True,
    traffic_token_on_connect=True,
    traffic_token_on_envd=False,
    data_plane_api_key=False,
    snake_case_info=False,
    killed_status=502,
    metrics=True,
    cube_extras=False,
    list_next_token=True,
    path_routing=False,
    template_builds=True,
    id_prefix="i",
    environment=_e2b_settings,
    unknown_route_message="no matching operation was found",
    not_served=_E2B_NOT_SERVED,
)

CUBE = Flavor(
    name="cube",
    api_key_setting="CUBE_API_KEY",
    domain="cube.localhost",
    default_templates=frozenset({"base", "tpl-base"}),
    template_setting=("CUBE_TEMPLATE_ID", "tpl-base"),
    v2_create=False,
    connect_resumed_status=200,
    default_timeout=None,
    idle_timeout=True,
    never_timeout=True,
    pausing_state=True,
    pausing_seconds=0.3,
    filesystem_pause=False,
    envd_access_token=False,
    traffic_token_on_connect=False,
    traffic_token_on_envd=True,
    data_plane_api_key=True,
    snake_case_info=True,
    killed_status=410,
    metrics=False,
    cube_extras=True,
    list_next_token=False,
    path_routing=True,
    template_builds=False,
    id_prefix="c",
    environment=_cube_settings,
    image_templates=True,
    not_served=_CUBE_NOT_SERVED,
)
