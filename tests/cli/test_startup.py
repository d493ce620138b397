"""``psdk --help`` and ``psdk providers`` start fast: neither imports a vendor SDK nor a
provider's own modules (each a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Runs psdk, then prints which heavy modules it imported, as JSON, on stderr's last line.
_RUN_AND_REPORT = (
    "import sys, json; from provider_sdk.cli import main; status = main(sys.argv[1:]); "
    "heavy = ('docker', 'e2b', 'daytona', 'provider_sdk.provider', 'provider_sdk_e2b.provider',"
    " 'provider_sdk_docker.provider', 'provider_sdk.local.provider', 'structlog', 'rich'); "
    "print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr); "
    "sys.exit(status)"
)


def _imported_by(*argv: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PSDK_PROVIDER", "PSDK_CONFIG")}
    result = subprocess.run([sys.executable, "-c", _RUN_AND_REPORT, *argv],
                            capture_output=True, text=True, env=env, timeout=60,
                            stdin=subprocess.DEVNULL)
    return result, json.loads(result.stderr.splitlines()[-1])


def test_help_imports_no_provider_and_no_vendor_sdk() -> None:
    result, heavy = _imported_by("--help")
    assert result.returncode == 0
    assert "providers" in result.stdout
    assert heavy == []


def test_providers_reads_capabilities_without_importing_providers() -> None:
    result, heavy = _imported_by("providers")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].split() == ["NAME", "CAPABILITIES"]
    assert any(line.startswith("docker ") for line in result.stdout.splitlines())
    assert heavy == []
    matrix, heavy = _imported_by("providers", "--matrix")
    assert matrix.returncode == 0, matrix.stderr
    header, *rows = matrix.stdout.splitlines()
    at = header.split().index("docker")
    assert next(r for r in rows if r.startswith("pause ")).split()[at] == "yes"
    assert heavy == []


def test_providers_with_provider_shows_that_one_alone() -> None:
    result, _ = _imported_by("providers", "--provider", "docker", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == ["docker"]
    assert "volumes" in rows[0]["capabilities"]


def test_providers_with_an_unknown_provider_is_an_error() -> None:
    result, _ = _imported_by("providers", "--provider", "nope")
    assert result.returncode == 1
    assert result.stderr.startswith("psdk: error: ")
    assert "'nope'" in result.stderr
