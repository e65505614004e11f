"""The fault suite's summary: one line per part killed (what docs/reliability.md reports)."""

from __future__ import annotations

import json

import pytest

from tests.faults.load import ROWS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    terminalreporter.section("faults: part killed under load")
    for row in ROWS:
        terminalreporter.write_line(json.dumps(row))
