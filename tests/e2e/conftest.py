"""End-to-end tests of the editor doors through the clients people run (VS Code, Neovim, Tabby's
agent), installed from the registries by ``make editor-clients`` (infra/editor-clients/) into
``.e2e/``. A client that is not installed fails its test: it never skips."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = Path(os.environ.get("E2E_DIR", ROOT / ".e2e"))
# Where screenshots and the latency report go; printed by the tests that write them.
ARTIFACTS = Path(os.environ.get("CTXPRESS_E2E_ARTIFACTS", E2E_DIR / "artifacts"))


def installed(relative: str) -> Path:
    """A file of an installed client under .e2e/; the test fails (not skips) when it is missing."""
    path = E2E_DIR / relative
    if not path.exists():
        pytest.fail(f"{path} is missing: install the editor clients with `make editor-clients`")
    return path


def git_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    """A new git work tree at ``root`` with a ``pkg`` folder and ``files`` (relative path: text)."""
    (root / "pkg").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=30)
    for relative, text in (files or {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


LATENCY_REPORT = ARTIFACTS / "latency.json"
_reported: list[Path] = []


@pytest.fixture(scope="session")
def latency_report(artifacts: Path) -> Path:
    """This run's per-door latency figures (tests/e2e/replay.py), started afresh each run."""
    LATENCY_REPORT.unlink(missing_ok=True)
    _reported.append(LATENCY_REPORT)
    return LATENCY_REPORT


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.e2e.replay import table

    if _reported and _reported[0].exists():
        terminalreporter.section("typing replay through each editor door (same run)")
        for line in table(_reported[0]):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"(figures in {_reported[0]})")
