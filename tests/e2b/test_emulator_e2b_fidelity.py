"""The emulator's E2B flavor behaves as E2B's API and envd do where a client can tell:
each test drives the unmodified ``e2b`` SDK and checks one behaviour of the real
service."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import httpx
import pytest
from e2b import FilesystemEventType, FileType, Sandbox, SandboxQuery, Secret
from e2b.exceptions import SandboxException, SecretException

from provider_sdk.emulators import RunningEmulator


@pytest.fixture
def sandbox(e2b_emulator: RunningEmulator) -> Iterator[Sandbox]:
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def _ids(query: SandboxQuery | None = None, **options: object) -> list[str]:
    paginator = Sandbox.list(query=query, **options)  # type: ignore[arg-type]
    found: list[str] = []
    while paginator.has_next:
        found += [s.sandbox_id for s in paginator.next_items()]
    return found


def test_list_pages_newest_first_by_default(e2b_emulator: RunningEmulator) -> None:
    first = Sandbox.create(metadata={"fidelity": "order"})
    second = Sandbox.create(metadata={"fidelity": "order"})
    try:
        query = SandboxQuery(metadata={"fidelity": "order"})
        assert _ids(query) == [second.sandbox_id, first.sandbox_id]
        assert _ids(query, limit=1) == [second.sandbox_id, first.sandbox_id]
        assert _ids(query, order="asc") == [first.sandbox_id, second.sandbox_id]
    finally:
        first.kill()
        second.kill()


def test_started_after_includes_a_sandbox_started_at_that_instant(
        e2b_emulator: RunningEmulator) -> None:
    # The API's startedAfter is "at or after": a sandbox's own startedAt finds it.
    sandbox = Sandbox.create()
    try:
        started = Sandbox.get_info(sandbox.sandbox_id).started_at
        assert _ids(SandboxQuery(started_after=started)) == [sandbox.sandbox_id]
        later = started + dt.timedelta(microseconds=1)
        assert _ids(SandboxQuery(started_after=later)) == []
    finally:
        sandbox.kill()


def test_recursive_list_walks_depth_first_in_name_order(sandbox: Sandbox) -> None:
    # envd walks with Go's filepath.WalkDir: a directory's contents follow it at once.
    sandbox.commands.run("mkdir -p /tmp/walk/a/sub && touch /tmp/walk/a/sub/deep "
                         "/tmp/walk/a/z /tmp/walk/b && mkdir /tmp/walk/c")
    listed = [e.path for e in sandbox.files.list("/tmp/walk", depth=3)]
    assert listed == ["/tmp/walk/a", "/tmp/walk/a/sub", "/tmp/walk/a/sub/deep",
                      "/tmp/walk/a/z", "/tmp/walk/b", "/tmp/walk/c"]
    assert [e.path for e in sandbox.files.list("/tmp/walk", depth=2)] == [
        "/tmp/walk/a", "/tmp/walk/a/sub", "/tmp/walk/a/z", "/tmp/walk/b", "/tmp/walk/c"]


def test_symlink_entry_reports_its_target(sandbox: Sandbox) -> None:
    # envd gives a link the type and mode of what it leads to, and the target's
    # resolved absolute path; a link that leads nowhere has no type and names itself.
    sandbox.commands.run(
        "mkdir -p /tmp/target/dir /tmp/links && echo hi > /tmp/target/file.txt && "
        "chmod 640 /tmp/target/file.txt && ln -s ../target/file.txt /tmp/links/to-file && "
        "ln -s /tmp/target/dir /tmp/links/to-dir && ln -s /tmp/links/to-dir /tmp/links/hop "
        "&& ln -s /tmp/nowhere /tmp/links/broken")
    entries = {e.name: e for e in sandbox.files.list("/tmp/links")}
    to_file = entries["to-file"]
    assert (to_file.type, to_file.path, to_file.symlink_target) == (
        FileType.FILE, "/tmp/links/to-file", "/tmp/target/file.txt")
    assert to_file.mode == 0o640
    assert to_file.size == len("../target/file.txt")
    assert to_file.permissions == "Lrwxrwxrwx"
    assert (entries["to-dir"].type, entries["to-dir"].symlink_target) == (
        FileType.DIR, "/tmp/target/dir")
    assert (entries["hop"].type, entries["hop"].symlink_target) == (
        FileType.DIR, "/tmp/target/dir")
    assert "broken" not in entries  # the SDK leaves out entries of no type
    broken = sandbox.files.get_info("/tmp/links/broken")
    assert (broken.type, broken.symlink_target) == (None, "/tmp/links/broken")
    info = sandbox.files.get_info("/tmp/links/to-file")
    assert (info.type, info.symlink_target) == (FileType.FILE, "/tmp/target/file.txt")
    assert [e.path for e in sandbox.files.list("/tmp/links/hop")] == []
    sandbox.files.write("/tmp/target/dir/inner", "x")
    assert [e.path for e in sandbox.files.list("/tmp/links/hop")] == ["/tmp/links/hop/inner"]


def test_remove_of_a_missing_path_does_nothing(sandbox: Sandbox) -> None:
    # envd removes with os.RemoveAll, for which a missing path is already removed.
    sandbox.files.remove("/tmp/never-there")
    sandbox.files.remove("/tmp/no-parent/never-there")
    sandbox.files.write("/tmp/there", "x")
    sandbox.files.remove("/tmp/there")
    assert sandbox.files.exists("/tmp/there") is False


def test_write_over_a_read_only_file_succeeds_and_keeps_its_mode(sandbox: Sandbox) -> None:
    # envd writes as root, opening the file with O_TRUNC: the file keeps its mode.
    sandbox.files.write("/tmp/read-only.txt", "original")
    sandbox.commands.run("chmod 444 /tmp/read-only.txt")
    sandbox.files.write("/tmp/read-only.txt", "replaced")
    assert sandbox.files.read("/tmp/read-only.txt") == "replaced"
    assert sandbox.files.get_info("/tmp/read-only.txt").mode & 0o777 == 0o444


def test_metrics_keep_to_the_requested_range(sandbox: Sandbox) -> None:
    # E2B's API answers the readings it kept between start and end (by default the
    # sandbox's whole life), not a reading of the moment whatever the range.
    started = Sandbox.get_info(sandbox.sandbox_id).started_at
    assert len(sandbox.get_metrics()) == 1
    assert len(sandbox.get_metrics()) == 2
    before = started - dt.timedelta(minutes=2)
    assert sandbox.get_metrics(start=before, end=started - dt.timedelta(minutes=1)) == []
    around = sandbox.get_metrics(start=before, end=started + dt.timedelta(hours=1))
    assert len(around) == 4  # each request took a reading, the past one's too
    assert [m.timestamp for m in around] == sorted(m.timestamp for m in around)
    with pytest.raises(SandboxException, match="Invalid time range"):
        sandbox.get_metrics(start=started + dt.timedelta(hours=1), end=started)


def test_watch_tells_an_upload_as_create_chown_then_write(sandbox: Sandbox) -> None:
    # inotify reports the file's creation, envd's chown of it (a chmod) and the write
    # of its content apart, in that order.
    sandbox.files.write("/tmp/watched/old.txt", "old")
    handle = sandbox.files.watch_dir("/tmp/watched")
    sandbox.files.write("/tmp/watched/new.txt", "new")
    sandbox.files.remove("/tmp/watched/old.txt")
    events = [(e.name, e.type) for e in handle.get_new_events()]
    handle.stop()
    assert events == [("new.txt", FilesystemEventType.CREATE),
                      ("new.txt", FilesystemEventType.CHMOD),
                      ("new.txt", FilesystemEventType.WRITE),
                      ("old.txt", FilesystemEventType.REMOVE)]


def test_watch_tells_an_upload_over_a_file_with_metadata(sandbox: Sandbox) -> None:
    # Over an existing file envd chowns first, then writes, then sets the metadata.
    sandbox.files.write("/tmp/watched/file.txt", "old")
    handle = sandbox.files.watch_dir("/tmp/watched")
    sandbox.files.write("/tmp/watched/file.txt", "newer", metadata={"k": "v"})
    events = [(e.name, e.type) for e in handle.get_new_events()]
    handle.stop()
    assert events == [("file.txt", FilesystemEventType.CHMOD),
                      ("file.txt", FilesystemEventType.WRITE),
                      ("file.txt", FilesystemEventType.CHMOD)]


def test_watch_with_include_entry_sends_the_entry(sandbox: Sandbox) -> None:
    # envd stats the path of each create, write and chmod; a removed path has none.
    sandbox.files.write("/tmp/watched/old.txt", "old")
    handle = sandbox.files.watch_dir("/tmp/watched", include_entry=True)
    sandbox.files.write("/tmp/watched/new.txt", "new")
    sandbox.files.remove("/tmp/watched/old.txt")
    events = handle.get_new_events()
    handle.stop()
    for event in events:
        if event.name == "new.txt":
            assert event.entry is not None
            assert (event.entry.name, event.entry.path, event.entry.type,
                    event.entry.size) == ("new.txt", "/tmp/watched/new.txt", FileType.FILE, 3)
        else:
            assert (event.name, event.type, event.entry) == (
                "old.txt", FilesystemEventType.REMOVE, None)
    assert len(events) == 4


def test_watch_reports_no_event_for_a_directory_whose_contents_change(
        sandbox: Sandbox) -> None:
    # A file made in a watched subdirectory is an event for the file, not the directory.
    sandbox.files.make_dir("/tmp/watched/nested")
    handle = sandbox.files.watch_dir("/tmp/watched", recursive=True)
    sandbox.files.write("/tmp/watched/nested/file.txt", "x")
    events = [(e.name, e.type) for e in handle.get_new_events()]
    handle.stop()
    assert events == [("nested/file.txt", FilesystemEventType.CREATE),
                      ("nested/file.txt", FilesystemEventType.CHMOD),
                      ("nested/file.txt", FilesystemEventType.WRITE)]


def test_signed_urls_made_with_one_sandbox_url_reach_their_sandbox(
        sandbox: Sandbox, e2b_emulator: RunningEmulator) -> None:
    # With E2B_SANDBOX_URL the SDK's signed URLs name no sandbox, and are opened without
    # its headers: the signature, made with the sandbox's token, says which one.
    assert e2b_emulator.settings["E2B_SANDBOX_URL"] == e2b_emulator.url
    sandbox.files.write("/tmp/signed.txt", "signed")
    url = sandbox.download_url("/tmp/signed.txt", use_signature_expiration=60)
    assert url.startswith(e2b_emulator.url + "/files?")
    answer = httpx.get(url)
    assert (answer.status_code, answer.content) == (200, b"signed")
    upload = sandbox.upload_url("/tmp/uploaded.txt", use_signature_expiration=60)
    assert httpx.post(upload, files={"file": ("uploaded.txt", b"up")}).status_code == 200
    assert sandbox.files.read("/tmp/uploaded.txt") == "up"
    expired = sandbox.download_url("/tmp/signed.txt", use_signature_expiration=-60)
    assert httpx.get(expired).status_code == 401
    forged = url.replace("signature=v1_", "signature=v1_x")
    assert httpx.get(forged).status_code == 404


def test_expired_signed_url_says_so(sandbox: Sandbox) -> None:
    # envd checks a signature, then its expiration, and names that reason in the 401.
    sandbox.files.write("/tmp/expired.txt", "old")
    expired = httpx.get(sandbox.download_url("/tmp/expired.txt", use_signature_expiration=-60))
    assert (expired.status_code, expired.json()) == (
        401, {"code": 401, "message": "signature is already expired"})


def test_entries_name_their_owner_and_group(sandbox: Sandbox) -> None:
    # envd's EntryInfo names the owner and group of each entry, in Stat and ListDir.
    sandbox.files.write("/home/user/owned/file.txt", "mine")
    [entry] = sandbox.files.list("/home/user/owned")
    info = sandbox.files.get_info("/home/user/owned/file.txt")
    assert (entry.owner, entry.group) == (info.owner, info.group) == ("user", "user")


def test_upload_metadata_is_kept_as_extended_attributes(sandbox: Sandbox) -> None:
    # X-Metadata-* headers become user.e2b.* attributes of the file: the write answers
    # them, Stat, ListDir and Move show them, and attributes set inside show too.
    written = sandbox.files.write("/tmp/meta/a.txt", "a", metadata={"author": "me"})
    assert written.metadata == {"author": "me"}
    assert sandbox.files.get_info("/tmp/meta/a.txt").metadata == {"author": "me"}
    sandbox.files.rename("/tmp/meta/a.txt", "/tmp/meta/b.txt")
    [listed] = sandbox.files.list("/tmp/meta")
    assert (listed.name, listed.metadata) == ("b.txt", {"author": "me"})
    attrs = sandbox.commands.run(
        "python3 -c \"import os; print(sorted(os.listxattr('/tmp/meta/b.txt')))\"")
    assert attrs.stdout == "['user.e2b.author']\n"
    sandbox.commands.run("python3 -c \"import os; "
                         "os.setxattr('/tmp/meta/b.txt', 'user.e2b.stage', b'inside')\"")
    assert sandbox.files.get_info("/tmp/meta/b.txt").metadata == {
        "author": "me", "stage": "inside"}
    assert sandbox.files.get_info("/tmp").metadata is None
    # An upload replaces the whole set: without metadata, the file keeps none.
    assert sandbox.files.write("/tmp/meta/b.txt", "again").metadata is None
    assert sandbox.files.get_info("/tmp/meta/b.txt").metadata is None


def test_an_unknown_route_answers_as_the_api_does(e2b_emulator: RunningEmulator) -> None:
    # E2B's API checks each request against its OpenAPI spec: a route it lacks is a
    # JSON 404 "no matching operation was found".
    answer = httpx.get(f"{e2b_emulator.url}/no/such/route",
                       headers={"X-API-Key": e2b_emulator.api_key.reveal()})
    assert (answer.status_code, answer.json()) == (
        404, {"code": 404, "message": "no matching operation was found"})


def test_a_feature_left_out_answers_as_an_unknown_route_naming_it(
        e2b_emulator: RunningEmulator) -> None:
    # Secrets are not served: the SDK sees the API's unknown-route 404, and its message
    # says which feature that is.
    with pytest.raises(SecretException) as caught:
        Secret.list().next_items()
    assert "no matching operation was found (secrets: not served by this emulator)" \
        in str(caught.value)
    tags = httpx.delete(f"{e2b_emulator.url}/templates/tags",
                        headers={"X-API-Key": e2b_emulator.api_key.reveal()})
    assert (tags.status_code, tags.json()["message"]) == (
        404, "no matching operation was found (template tags: not served by this emulator)")


def test_an_error_names_the_path_without_the_backends_prefix(sandbox: Sandbox) -> None:
    # envd's messages are its own: the emulator's backend does not show through them.
    sandbox.files.write("/tmp/plain", "x")
    with pytest.raises(SandboxException) as caught:
        sandbox.files.make_dir("/tmp/plain/sub")
    assert "/tmp/plain" in str(caught.value)
    assert "[local" not in str(caught.value)
