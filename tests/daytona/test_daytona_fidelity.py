"""The unmodified ``daytona`` SDK, sync and async, against the emulator: what the SDK
sends is understood, and what the emulator answers is what the SDK's models accept."""

from __future__ import annotations

import io
import json
import os
import secrets
import urllib.error
import urllib.request

import pytest
from daytona import (
    AsyncDaytona,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    CreateSnapshotParams,
    Daytona,
    DaytonaAuthenticationError,
    DaytonaConfig,
    DaytonaError,
    DaytonaFileNotFoundError,
    DaytonaNotFoundError,
    DaytonaSessionEndedError,
    DaytonaTimeoutError,
    DownloadProgress,
    FileUpload,
    Image,
    ListSandboxesQuery,
    Sandbox,
    SandboxState,
    SessionExecuteRequest,
    VolumeMount,
)
from daytona_emulator_fixtures import running
from engines import require_docker


def _label() -> dict[str, str]:
    return {"fidelity": secrets.token_hex(4)}


# ------------------------------------------------------------------------ sync SDK

def test_sync_create_from_the_default_snapshot_get_and_delete(sync_client: Daytona) -> None:
    sandbox = sync_client.create(CreateSandboxFromSnapshotParams(labels=_label()))
    assert sandbox.state == SandboxState.STARTED
    assert sandbox.toolbox_proxy_url.startswith("http://127.0.0.1:")
    again = sync_client.get(sandbox.id)
    assert (again.id, again.labels) == (sandbox.id, sandbox.labels)
    sync_client.delete(sandbox, wait=True)
    with pytest.raises(DaytonaNotFoundError):
        sync_client.get(sandbox.id)


def test_sync_create_from_an_image_keeps_env_and_resources(sync_client: Daytona) -> None:
    sandbox = sync_client.create(CreateSandboxFromImageParams(
        image="debian:12", env_vars={"FIDELITY": "image"}, labels=_label()))
    try:
        assert sandbox.build_info is not None
        assert "FROM debian:12" in (sandbox.build_info.dockerfile_content or "")
        assert sandbox.process.exec("printf %s \"$FIDELITY\"").result == "image"
    finally:
        sync_client.delete(sandbox)


def test_sync_the_default_snapshot_is_listed_and_named_by_its_sandboxes(
        sync_client: Daytona) -> None:
    """Daytona lists its default snapshot (a general one, after the organisation's own)
    and a sandbox made without a snapshot names it."""
    page = sync_client.snapshot.list()
    general = [s for s in page.items if s.general]
    assert [s.name for s in general] == ["daytonaio/sandbox:0.6.0-slim"]
    assert (general[0].state, general[0].image_name) == ("active", general[0].name)
    assert page.items[-1].general
    assert sync_client.snapshot.get(general[0].name).id == general[0].id
    sandbox = sync_client.create()
    try:
        assert sandbox.snapshot == general[0].name
        assert sync_client.get(sandbox.id).snapshot == general[0].name
    finally:
        sync_client.delete(sandbox)
    with pytest.raises(DaytonaError):
        sync_client.snapshot.delete(general[0])
    assert sync_client.snapshot.get(general[0].name).state == "active"


def test_sync_get_by_name(sync_client: Daytona) -> None:
    name = f"fidelity-{secrets.token_hex(4)}"
    sandbox = sync_client.create(CreateSandboxFromSnapshotParams(name=name))
    try:
        assert sync_client.get(name).id == sandbox.id
    finally:
        sync_client.delete(sandbox)


def test_sync_list_by_labels_walks_every_page(sync_client: Daytona) -> None:
    labels = _label()
    made = [sync_client.create(CreateSandboxFromSnapshotParams(labels=labels))
            for _ in range(3)]
    try:
        found = [s.id for s in sync_client.list(ListSandboxesQuery(labels=labels, limit=1))]
        assert sorted(found) == sorted(s.id for s in made)
    finally:
        for sandbox in made:
            sync_client.delete(sandbox)


def test_sync_stop_start_and_archive_keep_files(sync_client: Daytona) -> None:
    sandbox = sync_client.create()
    try:
        sandbox.fs.upload_file(b"kept", "/tmp/kept.txt")
        sandbox.stop()
        assert sandbox.state == SandboxState.STOPPED
        sandbox.archive()
        assert sandbox.state == SandboxState.ARCHIVED
        sandbox.start()
        assert sandbox.state == SandboxState.STARTED
        assert sandbox.fs.download_file("/tmp/kept.txt") == b"kept"
    finally:
        sync_client.delete(sandbox)


def test_sync_stop_ends_processes(sync_client: Daytona) -> None:
    count = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -o 'fidelity[-]bg' | wc -l"
    sandbox = sync_client.create()
    try:
        sandbox.process.exec("(exec -a fidelity-bg sleep 300) > /dev/null 2>&1 &")
        assert sandbox.process.exec(count).result.strip() == "1"
        sandbox.stop()
        sandbox.start()
        assert sandbox.process.exec(count).result.strip() == "0"
    finally:
        sync_client.delete(sandbox)


def test_sync_exec_with_cwd_env_and_exit_code(sync_client: Daytona) -> None:
    sandbox = sync_client.create()
    try:
        result = sandbox.process.exec('echo "$A:$(pwd)"; echo to-stderr >&2; exit 3',
                                      cwd="/tmp", env={"A": "b c"})
        assert result.exit_code == 3
        assert result.result == "b c:/tmp\nto-stderr\n"
    finally:
        sync_client.delete(sandbox)


def test_sync_every_command_gets_the_same_shell_and_merged_output(sync_client: Daytona) -> None:
    """The daemon's shell, looked up on the first command and started directly on the
    later ones, answers alike: the same ``$0`` and line numbers, stderr merged in order,
    and a script that does not parse reported in the result with the shell's status."""
    sandbox = sync_client.create()
    try:
        scripts = ['echo "$0 $LINENO"; echo err >&2; echo out', 'echo "unterminated']
        first = [sandbox.process.exec(script) for script in scripts]
        again = [sandbox.process.exec(script) for script in scripts]
        assert [(r.exit_code, r.result) for r in again] == [
            (r.exit_code, r.result) for r in first]
        assert (first[0].exit_code, first[0].result) == (0, "bash 1\nerr\nout\n")
        assert first[1].exit_code == 2
        assert "unexpected EOF" in first[1].result
    finally:
        sync_client.delete(sandbox)


def test_sync_a_command_cannot_choose_the_shell_of_the_next(sync_client: Daytona) -> None:
    """What the first command writes on its stderr, while the emulator looks the
    daemon's shell up, is its output (merged), not the name of a shell to start later:
    the next command still runs under bash."""
    sandbox = sync_client.create()
    try:
        assert sandbox.process.exec("echo sh >&2").result == "sh\n"
        assert sandbox.process.exec('echo "$0"').result == "bash\n"
    finally:
        sync_client.delete(sandbox)


def test_sync_commands_run_as_the_sandbox_user_in_its_home(sync_client: Daytona) -> None:
    """Daytona's default image runs commands as ``daytona`` in ``/home/daytona``, the
    user the sandbox's DTO names."""
    sandbox = sync_client.create()
    try:
        assert sandbox.user == "daytona"
        assert sandbox.get_user_home_dir() == "/home/daytona"
        assert sandbox.get_work_dir() == "/home/daytona"
        result = sandbox.process.exec('echo "$USER $LOGNAME $HOME $(pwd)"', cwd="/home/daytona")
        assert result.result == "daytona daytona /home/daytona /home/daytona\n"
        sandbox.fs.upload_file(b"relative", "here.txt")
        assert sandbox.fs.download_file("/home/daytona/here.txt") == b"relative"
    finally:
        sync_client.delete(sandbox)


def test_sync_the_default_image_has_python_as_well_as_python3(sync_client: Daytona) -> None:
    sandbox = sync_client.create()
    try:
        result = sandbox.process.exec("python -c 'import sys; print(sys.version_info[0])'")
        assert (result.exit_code, result.result) == (0, "3\n")
        assert sandbox.process.exec("python3 -c 'print(3)'").result == "3\n"
    finally:
        sync_client.delete(sandbox)


def test_sync_exec_timeout_is_a_timeout_error(sync_client: Daytona) -> None:
    sandbox = sync_client.create()
    try:
        with pytest.raises(DaytonaTimeoutError):
            sandbox.process.exec("sleep 30", timeout=1)
    finally:
        sync_client.delete(sandbox)


def test_sync_exec_timeout_answers_as_the_daemon(sync_client: Daytona) -> None:
    """The daemon answers a killed command with its request-timeout error: 408, code
    ``REQUEST_TIMEOUT``, message ``request timeout: command execution timeout``."""
    sandbox = sync_client.create()
    try:
        with pytest.raises(DaytonaTimeoutError) as caught:
            sandbox.process.exec("echo started; sleep 30", timeout=1)
        error = caught.value
        assert (error.status_code, error.code) == (408, "REQUEST_TIMEOUT")
        assert str(error).endswith(": request timeout: command execution timeout")
    finally:
        sync_client.delete(sandbox)


def test_sync_session_keeps_cd_and_export(sync_client: Daytona) -> None:
    sandbox = sync_client.create()
    try:
        sandbox.process.create_session("s")
        sandbox.process.execute_session_command("s", SessionExecuteRequest(
            command="cd /tmp && export FIDELITY=session"))
        done = sandbox.process.execute_session_command("s", SessionExecuteRequest(
            command='echo "$PWD $FIDELITY"; echo err >&2'))
        assert (done.exit_code, done.stdout, done.stderr) == (0, "/tmp session\n", "err\n")
        assert [s.session_id for s in sandbox.process.list_sessions()] == ["s"]
        sandbox.process.delete_session("s")
        assert sandbox.process.list_sessions() == []
    finally:
        sync_client.delete(sandbox)


def test_sync_session_is_one_shell_and_a_bare_exit_ends_it(sync_client: Daytona) -> None:
    """Commands are sourced into one shell: plain variables and functions carry over,
    and ``exit`` ends the session, as on Daytona."""
    sandbox = sync_client.create()
    try:
        sandbox.process.create_session("one")
        run = sandbox.process.execute_session_command
        run("one", SessionExecuteRequest(command="PLAIN=kept; f() { echo from-f; }"))
        done = run("one", SessionExecuteRequest(command='echo "$PLAIN"; f'))
        assert done.stdout == "kept\nfrom-f\n"
        assert run("one", SessionExecuteRequest(command="exit 7")).exit_code == 7
        with pytest.raises(DaytonaSessionEndedError):
            run("one", SessionExecuteRequest(command="true"))
    finally:
        sync_client.delete(sandbox)


def test_sync_files_upload_download_list_and_errors(sync_client: Daytona) -> None:
    sandbox = sync_client.create()
    try:
        sandbox.fs.upload_files([FileUpload(b"\x00one\xff", "/tmp/f/one.bin"),
                                 FileUpload(b"two", "/tmp/f/two.txt")])
        assert sandbox.fs.download_file("/tmp/f/one.bin") == b"\x00one\xff"
        names = sorted(f.name for f in sandbox.fs.list_files("/tmp/f"))
        assert names == ["one.bin", "two.txt"]
        info = sandbox.fs.get_file_info("/tmp/f/two.txt")
        assert (info.size, info.is_dir) == (3, False)
        sandbox.fs.create_folder("/tmp/f/sub", "755")
        sandbox.fs.move_files("/tmp/f/two.txt", "/tmp/f/sub/two.txt")
        assert sandbox.fs.download_file("/tmp/f/sub/two.txt") == b"two"
        sandbox.fs.delete_file("/tmp/f", recursive=True)
        with pytest.raises(DaytonaFileNotFoundError):
            sandbox.fs.download_file("/tmp/f/one.bin")
    finally:
        sync_client.delete(sandbox)


def test_sync_set_file_permissions_as_the_daemon(sync_client: Daytona) -> None:
    """The mode is set (octal), an owner by number or name is looked up in the sandbox,
    and a missing path is a 404."""
    sandbox = sync_client.create()
    try:
        sandbox.fs.upload_file(b"x", "/tmp/perm.txt")
        sandbox.fs.set_file_permissions("/tmp/perm.txt", mode="640")
        assert sandbox.fs.get_file_info("/tmp/perm.txt").permissions == "0640"
        uid = sandbox.process.exec("id -u").result.strip()
        sandbox.fs.set_file_permissions("/tmp/perm.txt", owner=uid)
        assert sandbox.process.exec("stat -c %u:%a /tmp/perm.txt").result == f"{uid}:640\n"
        with pytest.raises(DaytonaNotFoundError):
            sandbox.fs.set_file_permissions("/tmp/missing.txt", mode="600")
        with pytest.raises(DaytonaError):
            sandbox.fs.set_file_permissions("/tmp/perm.txt", mode="9")
        with pytest.raises(DaytonaError):
            sandbox.fs.set_file_permissions("/tmp/perm.txt", owner="no-such-user")
        assert sandbox.fs.get_file_info("/tmp/perm.txt").permissions == "0640"
    finally:
        sync_client.delete(sandbox)


def _tree(sandbox: Sandbox) -> None:
    sandbox.fs.upload_files([
        FileUpload(b"one needle\nno\r\nneedle two\r\n", "/tmp/t/a.txt"),
        FileUpload(b"needle\0binary", "/tmp/t/b.bin"),
        FileUpload(b"last needle", "/tmp/t/sub/c.txt"),
        FileUpload(b"", "/tmp/t/sub/empty.txt"),
        FileUpload(b"needle", "/tmp/elsewhere/d.txt"),
    ])
    sandbox.process.exec("ln -s ../elsewhere /tmp/t/link && ln -s a.txt /tmp/t/sub.txt")


def test_sync_find_files_greps_text_files_as_the_daemon(sync_client: Daytona) -> None:
    """Lines holding the pattern, numbered, in walk order (names sorted, depth first);
    binary files and symlinks skipped."""
    sandbox = sync_client.create()
    try:
        _tree(sandbox)
        found = [(m.file, m.line, m.content) for m in sandbox.fs.find_files("/tmp/t", "needle")]
        assert found == [("/tmp/t/a.txt", 1, "one needle"), ("/tmp/t/a.txt", 3, "needle two"),
                         ("/tmp/t/sub/c.txt", 1, "last needle")]
        assert sandbox.fs.find_files("/tmp/no-such-dir", "needle") == []
    finally:
        sync_client.delete(sandbox)


def test_sync_search_files_matches_names_with_go_globs(sync_client: Daytona) -> None:
    """Every entry under the path (itself included) whose name matches, in walk order;
    symlinks are named, not followed."""
    sandbox = sync_client.create()
    try:
        _tree(sandbox)
        assert sandbox.fs.search_files("/tmp/t", "*.txt").files == [
            "/tmp/t/a.txt", "/tmp/t/sub/c.txt", "/tmp/t/sub/empty.txt", "/tmp/t/sub.txt"]
        assert sandbox.fs.search_files("/tmp/t/", "[^a-l]*").files == [
            "/tmp/t/", "/tmp/t/sub", "/tmp/t/sub.txt"]
        assert sandbox.fs.search_files("/tmp/t", "li?k").files == ["/tmp/t/link"]
        assert sandbox.fs.search_files("/tmp/t", "[").files == []
    finally:
        sync_client.delete(sandbox)


def test_sync_replace_in_files_reports_each_file(sync_client: Daytona) -> None:
    """Every occurrence is replaced in place (through a symlink, the mode kept); a file
    that cannot be read fails alone, with Go's error text."""
    sandbox = sync_client.create()
    try:
        _tree(sandbox)
        sandbox.process.exec("chmod 750 /tmp/t/a.txt")
        results = sandbox.fs.replace_in_files(
            ["/tmp/t/sub.txt", "/tmp/t/missing.txt", "/tmp/t/sub"], "needle", "pin")
        assert [(r.file, r.success, r.error) for r in results] == [
            ("/tmp/t/sub.txt", True, None),
            ("/tmp/t/missing.txt", False, "open /tmp/t/missing.txt: no such file or directory"),
            ("/tmp/t/sub", False, "read /tmp/t/sub: is a directory")]
        assert sandbox.fs.download_file("/tmp/t/a.txt") == b"one pin\nno\r\npin two\r\n"
        assert sandbox.process.exec("stat -c %F:%a /tmp/t/sub.txt /tmp/t/a.txt").result == \
            "symbolic link:777\nregular file:750\n"
    finally:
        sync_client.delete(sandbox)


def test_sync_streams_a_file_up_and_down(sync_client: Daytona) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    sandbox = sync_client.create()
    try:
        sandbox.fs.upload_file_stream(io.BytesIO(data), "/tmp/stream/big.bin")
        assert b"".join(sandbox.fs.download_file_stream("/tmp/stream/big.bin")) == data
        assert sandbox.fs.get_file_info("/tmp/stream/big.bin").size == len(data)
    finally:
        sync_client.delete(sandbox)


def test_sync_download_progress_knows_the_total(sync_client: Daytona) -> None:
    """Each bulk-download part carries the file's size as ``Content-Length``, as the
    daemon's do, so the SDK's progress has a total (through a symlink, the target's)."""
    data = os.urandom(300 * 1024 + 7)
    sandbox = sync_client.create()
    try:
        sandbox.fs.upload_file(data, "/tmp/progress.bin")
        sandbox.process.exec("ln -s progress.bin /tmp/link.bin")
        for path in ("/tmp/progress.bin", "/tmp/link.bin"):
            seen: list[DownloadProgress] = []
            got = b"".join(sandbox.fs.download_file_stream(path, on_progress=seen.append))
            assert got == data
            assert seen
            assert {p.total_bytes for p in seen} == {len(data)}
            assert seen[-1].bytes_received == len(data)
    finally:
        sync_client.delete(sandbox)


def test_sync_volumes(sync_client: Daytona) -> None:
    name = f"fidelity-{secrets.token_hex(4)}"
    volume = sync_client.volume.create(name)
    try:
        assert sync_client.volume.get(name).id == volume.id
        assert name in [v.name for v in sync_client.volume.list()]
        mount = [VolumeMount(volume_id=volume.id, mount_path="/mnt/v")]
        writer = sync_client.create(CreateSandboxFromSnapshotParams(volumes=mount))
        writer.fs.upload_file(b"shared", "/mnt/v/data.txt")
        reader = sync_client.create(CreateSandboxFromSnapshotParams(volumes=mount))
        assert reader.fs.download_file("/mnt/v/data.txt") == b"shared"
        sync_client.delete(writer)
        sync_client.delete(reader)
    finally:
        sync_client.volume.delete(volume)
    with pytest.raises(DaytonaNotFoundError):
        sync_client.volume.get(name)


def test_sync_snapshots_from_an_image_and_from_a_sandbox(sync_client: Daytona) -> None:
    image_snapshot = sync_client.snapshot.create(CreateSnapshotParams(
        name=f"fidelity-image-{secrets.token_hex(4)}", image="debian:12"))
    assert (image_snapshot.state, image_snapshot.image_name) == ("active", "debian:12")
    source = sync_client.create()
    name = f"fidelity-{secrets.token_hex(4)}"
    try:
        source.fs.upload_file(b"in the snapshot", "/tmp/snap.txt")
        source.create_snapshot(name)
        snapshot = sync_client.snapshot.get(name)
        assert snapshot.source_sandbox_id == source.id
        listed = sync_client.snapshot.list(source_sandbox_id=source.id)
        assert [s.name for s in listed.items] == [name]
        copy = sync_client.create(CreateSandboxFromSnapshotParams(snapshot=name))
        assert copy.fs.download_file("/tmp/snap.txt") == b"in the snapshot"
        sync_client.delete(copy)
    finally:
        sync_client.delete(source)
        sync_client.snapshot.delete(sync_client.snapshot.get(name))
        sync_client.snapshot.delete(image_snapshot)
    with pytest.raises(DaytonaNotFoundError):
        sync_client.snapshot.get(name)


def test_sync_a_dockerfile_snapshot_fails_naming_the_step(sync_client: Daytona) -> None:
    """The backend builds offline and pulls nothing: a base image it lacks fails the
    build, and the SDK's error names the ``FROM`` line."""
    require_docker()  # the local backend builds its templates with Docker Engine
    params = CreateSnapshotParams(name=f"fidelity-build-{secrets.token_hex(4)}",
                                  image=Image.debian_slim("3.12").pip_install("requests"))
    with pytest.raises(DaytonaError, match=r"FROM \(line 1\): the base image '.*slim.*' is "
                                           "not in the Docker Engine"):
        sync_client.snapshot.create(params)
    failed = sync_client.snapshot.get(params.name)
    assert failed.state == "build_failed"
    assert "pip install" in (failed.build_info.dockerfile_content or "")
    sync_client.snapshot.delete(failed)


def test_sync_an_unserved_api_route_answers_as_an_unknown_route(sync_client: Daytona) -> None:
    """Daytona's API answers a route it lacks 404 ``Cannot METHOD PATH``; a route of a
    feature the emulator does not serve answers the same, naming the feature."""
    sandbox = sync_client.create()
    try:
        with pytest.raises(DaytonaNotFoundError,
                           match=rf"Cannot POST /api/sandbox/{sandbox.id}/fork "
                                 r"\(sandbox forks: not served by this emulator\)"):
            sandbox.fork()
    finally:
        sync_client.delete(sandbox)


def test_sync_an_unserved_toolbox_route_answers_as_an_unknown_route(
        sync_client: Daytona) -> None:
    """The toolbox daemon answers a route it lacks with a plain ``404 page not found``;
    a route the emulator does not serve answers the same, naming the feature."""
    sandbox = sync_client.create()
    try:
        with pytest.raises(DaytonaNotFoundError,
                           match=r"404 page not found \(git: not served by this emulator\)"):
            sandbox.git.status("/tmp")
    finally:
        sync_client.delete(sandbox)


def test_an_unknown_route_answers_as_daytona_does() -> None:
    em = running()
    for path, content_type, body in (
            ("/api/no-such-route?x=1", "application/json", "Cannot GET /api/no-such-route?x=1"),
            ("/toolbox/any/no-such-route", "text/plain", "404 page not found")):
        request = urllib.request.Request(
            f"{em.url}{path}", headers={"Authorization": f"Bearer {em.api_key.reveal()}"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)  # 127.0.0.1 only
        answer = caught.value
        assert answer.code == 404
        assert answer.headers["Content-Type"].startswith(content_type)
        text = answer.read().decode()
        if content_type == "text/plain":
            assert text == body
        else:
            assert json.loads(text)["message"] == body
            assert json.loads(text)["error"] == "Not Found"


def test_sync_wrong_key_is_refused() -> None:
    em = running()
    client = Daytona(DaytonaConfig(api_key="not-the-key",
                                   api_url=em.settings["DAYTONA_API_URL"]))
    with pytest.raises(DaytonaAuthenticationError, match="Unauthorized"):
        client.get("anything")


# ----------------------------------------------------------------------- async SDK

@pytest.mark.anyio
async def test_async_lifecycle_list_and_labels(async_client: AsyncDaytona) -> None:
    labels = _label()
    sandbox = await async_client.create(CreateSandboxFromSnapshotParams(labels=labels))
    try:
        found = [s.id async for s in async_client.list(ListSandboxesQuery(labels=labels))]
        assert found == [sandbox.id]
        await sandbox.set_labels({"replaced": "yes"})
        assert (await async_client.get(sandbox.id)).labels == {"replaced": "yes"}
        await sandbox.stop()
        assert sandbox.state == SandboxState.STOPPED
        await sandbox.start()
        assert sandbox.state == SandboxState.STARTED
    finally:
        await sandbox.delete(wait=True)


@pytest.mark.anyio
async def test_async_exec_and_files(async_client: AsyncDaytona) -> None:
    sandbox = await async_client.create()
    try:
        assert (await sandbox.process.exec("echo hi")).result == "hi\n"
        await sandbox.fs.upload_file(bytes(range(256)) * 1000, "/tmp/bin")
        assert await sandbox.fs.download_file("/tmp/bin") == bytes(range(256)) * 1000
        chunks = [c async for c in await sandbox.fs.download_file_stream("/tmp/bin")]
        assert b"".join(chunks) == bytes(range(256)) * 1000
        assert [f.name for f in await sandbox.fs.list_files("/tmp")] == ["bin"]
        assert await sandbox.get_work_dir()
    finally:
        await async_client.delete(sandbox)


@pytest.mark.anyio
async def test_async_session_commands_sync_async_and_logs(async_client: AsyncDaytona) -> None:
    sandbox = await async_client.create()
    try:
        await sandbox.process.create_session("s")
        await sandbox.process.execute_session_command("s", SessionExecuteRequest(
            command="export GREETING=hello"))
        started = await sandbox.process.execute_session_command("s", SessionExecuteRequest(
            command='echo "$GREETING out"; echo "$GREETING err" >&2; exit 4', run_async=True))
        assert started.exit_code is None
        out: list[str] = []
        err: list[str] = []
        await sandbox.process.get_session_command_logs_async("s", started.cmd_id, out.append,
                                                             err.append)
        assert ("".join(out), "".join(err)) == ("hello out\n", "hello err\n")
        command = await sandbox.process.get_session_command("s", started.cmd_id)
        assert command.exit_code == 4
        logs = await sandbox.process.get_session_command_logs("s", started.cmd_id)
        assert (logs.stdout, logs.stderr) == ("hello out\n", "hello err\n")
        session = await sandbox.process.get_session("s")
        assert [c.id for c in session.commands][-1] == started.cmd_id
    finally:
        await async_client.delete(sandbox)


@pytest.mark.anyio
async def test_async_volumes_and_snapshots(async_client: AsyncDaytona) -> None:
    volume = await async_client.volume.get(f"fidelity-{secrets.token_hex(4)}", create=True)
    sandbox = await async_client.create(CreateSandboxFromSnapshotParams(
        volumes=[VolumeMount(volume_id=volume.id, mount_path="/mnt/v")]))
    name = f"fidelity-{secrets.token_hex(4)}"
    try:
        await sandbox.fs.upload_file(b"v", "/mnt/v/x")
        await sandbox.create_snapshot(name)
        page = await async_client.snapshot.list()
        assert name in [s.name for s in page.items]
        await async_client.snapshot.delete(name)
    finally:
        await async_client.delete(sandbox)
        await async_client.volume.delete(volume)


@pytest.mark.anyio
async def test_async_unknown_sandbox_is_not_found(async_client: AsyncDaytona) -> None:
    with pytest.raises(DaytonaNotFoundError):
        await async_client.get("no-such-sandbox")
