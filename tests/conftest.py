"""Session-wide test rules.

- Under ``CI=true`` nothing skips silently: a skip is turned into a failure that names what was missing.
- Every run ends with the number of skipped tests and why, so a green run that skipped half its tests shows it.
- Shared fixtures: ``local_stack`` (the simulated cluster with the local stack applied), the fabric exporter's
  fixture sysfs tree and processes, and ``--update-golden``.
- Every test that uses ``local_stack`` (directly or through another fixture) is marked ``cluster``: ``make test``
  runs those one at a time against the one simulated cluster, after the others; the integration tests that start
  their own API server, Prometheus or engine run with the unit tests, before any cluster is up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

import pytest

from tests.support.local_stack import local_stack
from tests.support.require import under_ci
from tests.support.telemetry import exporter_factory, sysfs_copy, update_golden

__all__ = ["exporter_factory", "local_stack", "sysfs_copy", "update_golden"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "local_stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the fabric exporter's golden files (tests/daemons/fabric_exporter/golden/)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and under_ci() and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        report.outcome = "failed"
        report.longrepr = f"CI=true: this test may not skip ({reason})"


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if isinstance(r, pytest.TestReport)]
    reasons = Counter(_skip_reason(r) for r in skipped)
    terminalreporter.section("skipped", sep="-")
    terminalreporter.write_line(f"{len(skipped)} test(s) skipped")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"  {count} x {reason}")
