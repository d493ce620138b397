"""Console pieces: JSON of model values, the spinner and its message, the byte counter."""

from __future__ import annotations

import datetime as dt
import io
import json
import time

from provider_sdk.cli.console import BuildStatus, Progress, Status, to_json
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


def test_status_off_a_terminal_is_silent_when_quick() -> None:
    stream = io.StringIO()
    with Status(stream, "working", enabled=False):
        pass
    assert stream.getvalue() == ""


def test_status_off_a_terminal_says_once_it_takes_long() -> None:
    stream = io.StringIO()
    with Status(stream, "creating a docker sandbox", enabled=False, after=0.05, every=10):
        deadline = time.monotonic() + 10
        while not stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert stream.getvalue().startswith("psdk: creating a docker sandbox (")
    assert stream.getvalue().endswith(" s so far)\n")


def test_status_on_a_terminal_draws_the_message_and_erases_it() -> None:
    stream = io.StringIO()
    with Status(stream, "working", enabled=True) as status:
        status.update("step 2/4")
        deadline = time.monotonic() + 10
        while "step 2/4" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "step 2/4" in stream.getvalue()
    assert "\x1b[" in stream.getvalue()


def test_build_status_off_a_terminal_prints_steps_and_spaces_out_byte_counts() -> None:
    stream = io.StringIO()
    with BuildStatus(stream, "agent", "building", enabled=False, every_bytes=60) as build:
        build.line("Step 1/2 : FROM base")
        build.line("abc: Pushing 1024/4096 bytes")
        build.line("abc: Pushing 2048/4096 bytes")  # too soon after the last: not shown
        build.line("abc: Pushing 4096/4096 bytes")  # done: shown
        build.line("evil\x1b[2Jline")
    assert stream.getvalue().splitlines() == [
        "agent: Step 1/2 : FROM base",
        "agent: abc: Pushing 1.0 KiB / 4.0 KiB",
        "agent: abc: Pushing 4.0 KiB / 4.0 KiB",
        "agent: evil\\x1b[2Jline",
    ]


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
