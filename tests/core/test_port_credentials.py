"""What a relay to a sandbox's port takes off a request (provider_sdk.port_credentials):
the credentials' headers, cookies and parameters, and their values wherever a client
echoes them, percent-encoded or not."""

from __future__ import annotations

import pytest

from provider_sdk.port_credentials import CredentialInTarget, Credentials, carries, scrub

TOKEN = "tok_en-0123456789abcdefghij"
CREDENTIALS = Credentials(headers={"X-Token"}, cookies=("auth_",), params={"key"},
                          values=[TOKEN])


def _forwarded(target: str, *headers: tuple[str, str]) -> tuple[str, list[tuple[str, str]]]:
    return scrub(target, list(headers), CREDENTIALS)


def test_the_named_header_cookie_and_parameter_go_and_the_rest_stays() -> None:
    target, headers = _forwarded("/p?a=1&key=anything&b=2", ("x-token", "anything"),
                                 ("Cookie", "app=1; AUTH_x=anything; other=2"),
                                 ("X-App", "kept"))
    assert target == "/p?a=1&b=2"
    assert headers == [("Cookie", "app=1; other=2"), ("X-App", "kept")]


@pytest.mark.parametrize("name", ["key", "k%65y", "%6B%65%79", "%6b%65%79"])
def test_a_parameter_is_named_once_decoded(name: str) -> None:
    target, _ = _forwarded(f"/p?{name}={TOKEN}&a=1")
    assert target == "/p?a=1"


def test_a_parameter_whose_value_carries_a_credential_goes() -> None:
    encoded = TOKEN.replace("_", "%5F").replace("-", "%2D")
    target, _ = _forwarded(f"/p?next=%2F%3Fx%3D{encoded}&a=1&other={TOKEN}")
    assert target == "/p?a=1"


@pytest.mark.parametrize("target", [f"/{TOKEN}/x", f"/p;key={TOKEN}?a=1",
                                    f"/{TOKEN.replace('_', '%255F')}"])
def test_a_target_that_carries_a_credential_elsewhere_is_refused(target: str) -> None:
    with pytest.raises(CredentialInTarget) as caught:
        _forwarded(target)
    assert TOKEN not in str(caught.value)


def test_a_referer_loses_the_parameter_and_keeps_its_page() -> None:
    _, headers = _forwarded("/", ("Referer", f"http://127.0.0.1:5/page?x=1&k%65y={TOKEN}"))
    assert headers == [("Referer", "http://127.0.0.1:5/page?x=1")]


def test_a_referer_that_carries_a_credential_in_its_path_is_cut_to_its_origin() -> None:
    _, headers = _forwarded("/", ("Referer", f"http://127.0.0.1:5/preview/1-{TOKEN}/page"))
    assert headers == [("Referer", "http://127.0.0.1:5/")]


def test_a_referer_whose_host_carries_a_credential_goes() -> None:
    _, headers = _forwarded("/", ("Referer", f"http://1-{TOKEN}.localhost/page"))
    assert headers == []


def test_any_other_header_that_carries_a_credential_goes() -> None:
    _, headers = _forwarded("/", ("Authorization", f"Bearer {TOKEN}"),
                            ("Authorization", "Bearer the-application's"),
                            ("X-Original-Url", f"/?x={TOKEN.replace('-', '%2d')}"),
                            ("Cookie", f"app=1; session={TOKEN}"))
    assert headers == [("Authorization", "Bearer the-application's"), ("Cookie", "app=1")]


def test_a_value_is_found_through_several_encodings() -> None:
    twice = TOKEN.replace("_", "%255F")
    assert carries(twice, CREDENTIALS.values)
    assert not carries(TOKEN[:-1], CREDENTIALS.values)


def test_credentials_never_show_their_values() -> None:
    assert TOKEN not in repr(CREDENTIALS)
    assert TOKEN not in str(CREDENTIALS)
