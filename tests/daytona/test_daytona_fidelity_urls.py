"""The unmodified ``daytona`` SDK's signed URLs against the emulator: file URLs signed
with the sandbox's key, which work without the API key, and preview URLs that reach a
server listening inside the sandbox."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import aiohttp
import pytest
from daytona import AsyncDaytona, Daytona, Sandbox
from daytona._utils.file_url_signing import compute_file_url_signature
from daytona_emulator_fixtures import sdk_config


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    client = Daytona(sdk_config())
    made = client.create()
    yield made
    client.delete(made)


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
