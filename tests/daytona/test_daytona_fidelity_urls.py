"""The unmodified ``daytona`` SDK's signed URLs against the emulator: file URLs signed
with the sandbox's key, which work without the API key, and preview URLs that reach a
server listening inside the sandbox."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import aiohttp
import pytest
from daytona import AsyncDaytona, DaytonaError, Sandbox, SessionExecuteRequest
from daytona._utils.file_url_signing import compute_file_url_signature
from daytona_emulator_fixtures import sdk_config


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``url`` (127.0.0.1 only) with no credentials but ``headers``."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _post_file(url: str, name: str, data: bytes) -> int:
    boundary = uuid.uuid4().hex
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n').encode() \
        + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(
        url, data=body, method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


# ------------------------------------------------------------------ signed file URLs

def test_a_signed_download_url_serves_the_file_without_the_api_key(sandbox: Sandbox) -> None:
    sandbox.fs.upload_file(b"signed bytes\x00\xff", "signed/down.bin")
    url = sandbox.download_url("signed/down.bin")
    assert "signature=v1_" in url
    assert _get(url) == (200, b"signed bytes\x00\xff")


def test_a_signed_upload_url_takes_a_file_without_the_api_key(sandbox: Sandbox) -> None:
    url = sandbox.upload_url("signed/up/new.txt")
    assert _post_file(url, "new.txt", b"uploaded") == 200
    assert sandbox.fs.download_file("signed/up/new.txt") == b"uploaded"


def test_a_tampered_or_unsigned_file_url_is_refused(sandbox: Sandbox) -> None:
    sandbox.fs.upload_file(b"secret", "signed/other.txt")
    url = sandbox.download_url("signed/other.txt")
    assert _get(url.replace("other.txt", "down.bin"))[0] == 401  # another path
    assert _get(url.split("&signature=")[0])[0] == 401  # no signature: the API key
    # a URL for downloads does not upload
    assert _post_file(url.replace("/files/download", "/files/upload-v2"), "x", b"x") == 401


def test_an_expired_signed_url_is_refused_and_zero_never_expires(sandbox: Sandbox) -> None:
    sandbox.fs.upload_file(b"timed", "signed/timed.txt")
    assert _get(sandbox.download_url("signed/timed.txt", ttl_seconds=-5))[0] == 200
    stale = sandbox.download_url("signed/timed.txt", ttl_seconds=1)
    past = int(stale.split("expires=")[1].split("&")[0]) - 10
    # (signed by hand, as the SDK signs, for a time already past)
    key = sandbox._ensure_signing_key()
    expired = (f"{stale.split('?')[0]}?path=signed%2Ftimed.txt&expires={past}&signature="
               f"{compute_file_url_signature(key, 'GET', 'signed/timed.txt', past)}")
    status, body = _get(expired)
    assert status == 401
    assert b"expired" in body


def test_rotating_the_signing_key_refuses_older_urls(sandbox: Sandbox) -> None:
    sandbox.fs.upload_file(b"rotated", "signed/rotated.txt")
    old = sandbox.download_url("signed/rotated.txt")
    assert _get(old)[0] == 200
    sandbox.rotate_signing_key()
    assert _get(old)[0] == 401
    assert _get(sandbox.download_url("signed/rotated.txt")) == (200, b"rotated")


def test_a_signed_download_of_a_missing_file_is_not_found(sandbox: Sandbox) -> None:
    assert _get(sandbox.download_url("signed/missing.txt"))[0] == 404


@pytest.mark.anyio
async def test_async_signed_urls(async_client: AsyncDaytona, sandbox: Sandbox) -> None:
    twin = await async_client.get(sandbox.id)
    url = await twin.upload_url("signed/async.txt")
    form = aiohttp.FormData()
    form.add_field("file", b"async upload", filename="async.txt")
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=form) as answer:
            assert answer.status == 200
        async with session.get(await twin.download_url("signed/async.txt")) as answer:
            assert (answer.status, await answer.read()) == (200, b"async upload")


# ----------------------------------------------------------------------- preview URLs

_PORT = 8321


@pytest.fixture(scope="module")
def server(sandbox: Sandbox) -> Sandbox:
    """A web server on 127.0.0.1:8321 inside the sandbox, serving ``site/``."""
    sandbox.fs.upload_file(b"<h1>inside</h1>", "site/index.html")
    sandbox.process.create_session("web")
    sandbox.process.execute_session_command("web", SessionExecuteRequest(
        command=f"cd site && python3 -m http.server {_PORT} --bind 127.0.0.1",
        run_async=True))
    link = sandbox.get_preview_link(_PORT)
    deadline = time.monotonic() + 30
    while _get(f"{link.url}/index.html", {"X-Daytona-Preview-Token": link.token})[0] != 200:
        assert time.monotonic() < deadline, "the server in the sandbox never answered"
        time.sleep(0.1)
    return sandbox


def test_a_preview_link_reaches_the_server_with_its_token(server: Sandbox) -> None:
    link = server.get_preview_link(_PORT)
    assert link.sandbox_id == server.id
    assert _get(f"{link.url}/index.html", {"X-Daytona-Preview-Token": link.token}) == (
        200, b"<h1>inside</h1>")
    assert _get(f"{link.url}/index.html?DAYTONA_SANDBOX_AUTH_KEY={link.token}")[0] == 200
    api_key = sdk_config().api_key
    assert _get(f"{link.url}/index.html", {"Authorization": f"Bearer {api_key}"})[0] == 200
    assert _get(f"{link.url}/missing.html", {"X-Daytona-Preview-Token": link.token})[0] == 404


def test_a_preview_link_without_or_with_a_wrong_token_is_refused(server: Sandbox) -> None:
    link = server.get_preview_link(_PORT)
    assert _get(f"{link.url}/index.html")[0] == 401
    assert _get(f"{link.url}/index.html", {"X-Daytona-Preview-Token": "wrong"})[0] == 401
    assert _get(f"{link.url}/index.html", {"Authorization": "Bearer wrong"})[0] == 401


def test_a_signed_preview_url_needs_no_token_until_it_is_expired(server: Sandbox) -> None:
    signed = server.create_signed_preview_url(_PORT, expires_in_seconds=600)
    assert (signed.sandbox_id, signed.port) == (server.id, _PORT)
    assert signed.token in signed.url
    assert _get(f"{signed.url}/index.html") == (200, b"<h1>inside</h1>")
    other_port = signed.url.replace(f"/{_PORT}-", f"/{_PORT + 1}-")
    assert _get(f"{other_port}/index.html")[0] == 401  # the token is for one port
    server.expire_signed_preview_url(_PORT, signed.token)
    assert _get(f"{signed.url}/index.html")[0] == 401


def test_a_signed_preview_url_stops_working_when_its_time_is_up(server: Sandbox) -> None:
    signed = server.create_signed_preview_url(_PORT, expires_in_seconds=1)
    assert _get(f"{signed.url}/index.html")[0] == 200
    deadline = time.monotonic() + 10
    while _get(f"{signed.url}/index.html")[0] == 200:
        assert time.monotonic() < deadline, "the signed URL did not expire"
        time.sleep(0.2)
    assert _get(f"{signed.url}/index.html")[0] == 401


def test_a_signed_preview_url_lives_between_a_second_and_a_day(sandbox: Sandbox) -> None:
    for seconds in (0, 24 * 60 * 60 + 1):
        with pytest.raises(DaytonaError, match="between 1 second and 24 hours") as caught:
            sandbox.create_signed_preview_url(_PORT, expires_in_seconds=seconds)
        assert caught.value.status_code == 400


def test_a_preview_of_a_port_nothing_listens_on_is_a_bad_gateway(sandbox: Sandbox) -> None:
    signed = sandbox.create_signed_preview_url(9, expires_in_seconds=60)
    assert _get(signed.url)[0] == 502


@pytest.mark.anyio
async def test_async_preview_links(async_client: AsyncDaytona, server: Sandbox) -> None:
    twin = await async_client.get(server.id)
    link = await twin.get_preview_link(_PORT)
    signed = await twin.create_signed_preview_url(_PORT)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{link.url}/index.html",
                               headers={"X-Daytona-Preview-Token": link.token}) as answer:
            assert (answer.status, await answer.read()) == (200, b"<h1>inside</h1>")
        async with session.get(f"{signed.url}/index.html") as answer:
            assert answer.status == 200
