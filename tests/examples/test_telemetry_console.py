"""``examples/telemetry_console.py`` runs as a user would run it, on the local provider:
the console exporter prints each operation's span, and the command sees the trace
context of its own span."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from engines import require_bwrap

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "telemetry_console.py"


def test_the_example_prints_spans_and_the_command_sees_its_traceparent(
        tmp_path: Path) -> None:
    require_bwrap()
    env = {**os.environ, "PSDK_HOME": str(tmp_path / "home"), "PSDK_PROVIDER": "local"}
    done = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    names = re.findall(r'"name": "(sandbox\.[a-z.]+)"', done.stdout)
    assert names[:3] == ["sandbox.create", "sandbox.exec", "sandbox.kill"]
    traceparent = re.search(r"^traceparent: 00-([0-9a-f]{32})-([0-9a-f]{16})-0[13]$",
                            done.stdout, re.MULTILINE)
    assert traceparent is not None, done.stdout[:2000]
    trace_id, span_id = traceparent.groups()
    assert f'"span_id": "0x{span_id}"' in done.stdout  # the exec's own span
    assert f'"trace_id": "0x{trace_id}"' in done.stdout
    assert "psdk.sandboxes.created" in done.stdout  # the metrics, printed at shutdown
