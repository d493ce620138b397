"""Console pieces: JSON of model values, the spinner and its message, the byte counter."""

from __future__ import annotations

import datetime as dt
import io
import json
import time

from provider_sdk.cli.console import Progress, Status, to_json
from provider_sdk.models import SandboxInfo, SandboxState, Snapshot


def test_to_json_turns_models_into_plain_data() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    info = SandboxInfo(id="sb", provider="p", state=SandboxState.PAUSED, created_at=when,
                       metadata={"k": "v"}, extra={"obj": object()})
    data = to_json(info)
    json.dumps(data)  # serialisable as is
    assert data["state"] == "paused"
    assert data["created_at"] == "2026-01-02T03:04:05+00:00"
    assert data["metadata"] == {"k": "v"}
    assert data["resources"] == {"cpu": None, "memory_mb": None, "disk_mb": None}
    assert isinstance(data["extra"]["obj"], str)
    assert to_json(Snapshot(id="s", provider="p", captures={"memory", "filesystem"}))[
        "captures"] == ["filesystem", "memory"]


def test_status_draws_nothing_when_disabled() -> None:
    stream = io.StringIO()
    with Status(stream, "working", enabled=False):
        pass
    assert stream.getvalue() == ""


def test_status_draws_a_spinner_and_erases_it() -> None:
    stream = io.StringIO()
    with Status(stream, "working", enabled=True):
        pass
    text = stream.getvalue()
    assert "working (" in text
    assert text.endswith("\r\x1b[2K")


def test_status_update_replaces_the_message_on_the_next_frame() -> None:
    stream = io.StringIO()
    with Status(stream, "working", enabled=True) as status:
        status.update("step 2/4")
        for _ in range(100):  # frames are drawn every 0.1 s
            if "step 2/4 (" in stream.getvalue():
                break
            time.sleep(0.05)
    assert "step 2/4 (" in stream.getvalue()


def test_progress_counts_bytes_against_the_total() -> None:
    stream = io.StringIO()
    progress = Progress(stream, "copy", 4 << 20, enabled=True)
    progress.advance(1 << 20)
    assert "copy  1.0 MiB / 4.0 MiB (25%)" in stream.getvalue()
    progress.close()
    assert stream.getvalue().endswith("\r\x1b[2K")
    assert progress.done == 1 << 20


def test_progress_draws_nothing_when_disabled() -> None:
    stream = io.StringIO()
    progress = Progress(stream, "copy", 10, enabled=False)
    progress.advance(5)
    progress.close()
    assert stream.getvalue() == ""
