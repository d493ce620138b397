"""How the E2B and Cube providers are made: the same roles over envd, around one shared
session, with a different control plane; no server is needed to check it."""

from __future__ import annotations

from provider_sdk_e2b import CubeProvider, E2BProvider
from provider_sdk_e2b._control import E2BControl
from provider_sdk_e2b.cube import CubeControl

OPTIONS = {"api_key": "psdk-roles-test-key", "api_url": "http://127.0.0.1:9"}


def test_cube_is_e2b_with_a_cube_control_plane() -> None:
    e2b, cube = E2BProvider(**OPTIONS)._composed(), CubeProvider(**OPTIONS)._composed()
    assert (type(e2b.control), type(cube.control)) == (E2BControl, CubeControl)
    assert [type(role) for role in (cube.commands, cube.files, cube.ports)] == \
        [type(role) for role in (e2b.commands, e2b.files, e2b.ports)]


def test_every_role_of_a_provider_holds_its_one_session() -> None:
    for cls in (E2BProvider, CubeProvider):
        provider = cls(**OPTIONS)
        roles = provider._composed()
        assert {id(role.session) for role in (roles.control, roles.commands, roles.files,
                                              roles.ports)} == \
            {id(provider._session)}  # type: ignore[attr-defined]
