"""A pytest plugin that ``psdk contract`` loads: at the end of the run, a summary a person
can read, whatever pytest's other options.

It says how many tests passed, failed, were skipped and were known failures; lists each
skip reason once with how many tests it skipped (a capability the provider does not
declare, a missing engine...); lists each known failure (a strict xfail the provider
declared) with its reason; and names every failure. It changes no outcome and never
imports the provider.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

__all__ = ["Summary", "pytest_configure"]


class Summary:
    """Outcomes collected from pytest's reports, and the section that shows them."""

    def __init__(self) -> None:
        self.passed = 0
        self.skips: Counter[str] = Counter()
        self.known: dict[str, str] = {}
        self.failed: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count one phase's outcome (setup skips and failures count as the test's)."""
        xfail = getattr(report, "wasxfail", None)
        if report.skipped and xfail is not None:
            self.known[report.nodeid] = str(xfail) or "known failure"
        elif report.skipped:
            self.skips[_skip_reason(report.longrepr)] += 1
        elif report.failed:
            self.failed.append(report.nodeid)
        elif report.when == "call":
            self.passed += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Write the summary section."""
        write = terminalreporter.write_line
        terminalreporter.section("contract summary")
        write(f"{self.passed} passed, {len(self.failed)} failed, "
              f"{sum(self.skips.values())} skipped, {len(self.known)} known failures")
        if self.skips:
            write("skipped:")
            for reason, count in sorted(self.skips.items(), key=lambda kv: (-kv[1], kv[0])):
                write(f"  {count:>4} x {reason}")
        if self.known:
            write("known failures:")
            for nodeid, reason in sorted(self.known.items()):
                write(f"  {_short(nodeid)}: {reason}")
        if self.failed:
            write("failed:")
            for nodeid in dict.fromkeys(self.failed):
                write(f"  {_short(nodeid)}")


def _skip_reason(longrepr: object) -> str:
    """The reason of a skip report (pytest keeps it as (path, line, "Skipped: reason"))."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr
    reason = str(text)
    return reason.removeprefix("Skipped: ").strip() or "no reason given"


def _short(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1]


def pytest_configure(config: pytest.Config) -> None:
    """Register the summary."""
    config.pluginmanager.register(Summary(), "psdk-contract-summary")
