"""Events: ``sandbox.<op>.started|complete|failed``, emitted only once the application has
configured structlog, carrying provider, sandbox id and duration, never env values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from memory_provider import Store
from structlog.testing import capture_logs

from provider_sdk import events, open_provider
from provider_sdk.errors import SandboxNotFound, TemplateNotFound
from provider_sdk.local import LocalProvider


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def debug(self, event: str, **fields: Any) -> None:
        self.calls.append((event, fields))


@pytest.mark.anyio
async def test_nothing_is_logged_while_structlog_is_unconfigured(
        memory: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder()
    monkeypatch.setattr(events, "logger", recorder)
    assert not structlog.is_configured()
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.exec(["true"])
    assert recorder.calls == []


@pytest.mark.anyio
async def test_create_logs_started_then_complete_with_the_new_id(memory: Store) -> None:
    async with open_provider("memory") as provider:
        with capture_logs() as logs:
            sandbox = await provider.create()
        await sandbox.kill()
    names = [e["event"] for e in logs]
    assert names == ["sandbox.create.started", "sandbox.create.complete"]
    started, complete = logs
    assert started["provider"] == complete["provider"] == "memory"
    assert started["sandbox_id"] is None
    assert complete["sandbox_id"] == sandbox.id
    assert complete["duration_ms"] >= 0
    assert complete["log_level"] == "debug"


@pytest.mark.anyio
async def test_a_failing_operation_logs_failed_with_the_error_type(memory: Store) -> None:
    async with open_provider("memory") as provider:
        with capture_logs() as logs, pytest.raises(SandboxNotFound):
            await provider.get_info("mem-absent")
    assert [e["event"] for e in logs] == ["sandbox.info.started", "sandbox.info.failed"]
    failed = logs[-1]
    assert failed["error"] == "SandboxNotFound"
    assert failed["sandbox_id"] == "mem-absent"
    assert failed["duration_ms"] >= 0


@pytest.mark.anyio
async def test_sandbox_operations_carry_the_sandbox_id(memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with capture_logs() as logs:
            await sandbox.exec(["true"])
            await sandbox.files.write("a.txt", b"x")
            await sandbox.pause()
            await sandbox.resume()
    ops = {e["event"].rsplit(".", 1)[0] for e in logs}
    assert ops == {"sandbox.exec", "sandbox.files.write", "sandbox.pause", "sandbox.resume"}
    assert all(e["sandbox_id"] == sandbox.id for e in logs)


@pytest.mark.anyio
async def test_events_never_carry_env_values_or_file_contents(memory: Store) -> None:
    async with open_provider("memory") as provider:
        with capture_logs() as logs:
            async with provider.create(env={"TOKEN": "spec-secret-value"}) as sandbox:
                await sandbox.exec(["true"], env={"KEY": "call-secret-value"})
                await sandbox.files.write("f", b"file-secret-content")
    text = repr(logs)
    for secret in ("spec-secret-value", "call-secret-value", "file-secret-content"):
        assert secret not in text


@pytest.mark.slow
@pytest.mark.anyio
async def test_cancelled_operation_logs_failed(memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with capture_logs() as logs:
            with anyio.move_on_after(0.2):
                await sandbox.exec(["sleep", "30"])
    exec_events = [e for e in logs if e["event"].startswith("sandbox.exec")]
    assert [e["event"] for e in exec_events] == ["sandbox.exec.started", "sandbox.exec.failed"]
    assert exec_events[-1]["error"] == "CancelledError"


@pytest.mark.anyio
async def test_every_public_operation_emits_its_events(memory: Store) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        with capture_logs() as logs:
            await sandbox.files.mkdir("d")
            await sandbox.files.write("d/a.txt", b"x")
            await sandbox.files.list("d")
            await sandbox.files.stat("d/a.txt")
            await sandbox.files.rename("d/a.txt", "d/b.txt")
            await sandbox.files.remove("d", recursive=True)
            process = await sandbox.start(["cat"])
            await process.write_stdin("hi")
            await process.close_stdin()
            await process.kill()
            await sandbox.metrics()
            await provider.create_volume("v")
            await provider.get_volume("v")
            await provider.list_volumes()
            await provider.delete_volume("v")
            await provider.list_snapshots()
    completed = [e["event"].removesuffix(".complete") for e in logs
                 if e["event"].endswith(".complete")]
    assert completed == [
        "sandbox.files.mkdir", "sandbox.files.write", "sandbox.files.list",
        "sandbox.files.stat", "sandbox.files.rename", "sandbox.files.remove",
        "sandbox.process.start", "sandbox.process.stdin", "sandbox.process.close_stdin",
        "sandbox.process.kill", "sandbox.metrics", "sandbox.volume.create",
        "sandbox.volume.get", "sandbox.volume.list", "sandbox.volume.delete",
        "sandbox.snapshot.list"]
    assert all(e["provider"] == "memory" for e in logs)
    process_events = [e for e in logs if e["event"].startswith("sandbox.process.")]
    assert all(e["sandbox_id"] == sandbox.id for e in process_events)
    assert all(e["pid"] == process.pid for e in process_events[2:])


@pytest.mark.anyio
async def test_template_list_and_delete_emit_their_events(tmp_path: Path) -> None:
    async with LocalProvider(home=tmp_path) as provider:
        with capture_logs() as logs:
            await provider.list_templates()
            with pytest.raises(TemplateNotFound):
                await provider.delete_template("never-built")
    assert [e["event"] for e in logs] == [
        "sandbox.template.list.started", "sandbox.template.list.complete",
        "sandbox.template.delete.started", "sandbox.template.delete.failed"]
    assert logs[-1]["error"] == "TemplateNotFound"
