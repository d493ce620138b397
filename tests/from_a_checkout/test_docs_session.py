"""``nox -s docs`` says where it built the site, and ``nox -s docs -- --serve`` serves
it on 127.0.0.1: the capability matrix and the API reference are there, generated. A
real nox session in its own process group, stopped with Ctrl-C's signal."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from engines import missing

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _listening_addresses(port: int) -> list[str]:
    """The local addresses (hex, as the kernel's table has them) listening on ``port``."""
    rows = [line.split() for name in ("tcp", "tcp6")
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]]
    return [row[1].split(":")[0] for row in rows
            if row[3] == "0A" and int(row[1].split(":")[1], 16) == port]


def test_docs_says_where_the_site_is_and_serves_it_on_loopback(tmp_path: Path) -> None:
    nox = shutil.which("nox")
    if nox is None:
        missing("nox is not installed (pip install nox)")
    assert nox is not None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "psdk-tests"
    site, port = tmp_path / "site", _free_port()
    log = tmp_path / "nox.log"
    with log.open("w") as out:
        proc = subprocess.Popen([nox, "-r", "--envdir", str(cache / "nox"), "-s", "docs", "--",
                                 "--site-dir", str(site), "--serve", "--port", str(port)],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while f"serving it on http://127.0.0.1:{port}/" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert f"the site is in {site}: open {site / 'index.html'}" in log.read_text()
        page = ""
        while not page:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/concepts/",
                                            timeout=10) as answer:
                    page = answer.read().decode()
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert "<!-- psdk:" not in page
        assert re.search(r"<code>templates\.build</code>", page)  # the matrix, generated
        assert (site / "reference" / "provider" / "index.html").is_file()
        assert _listening_addresses(port) == ["0100007F"]  # 127.0.0.1, and nothing else
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
