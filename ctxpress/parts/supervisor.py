"""The supervisor's part (``python -m ctxpress.supervisor``): ready once it has written its state file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ctxpress.parts.base import Part


class SupervisorPart(Part):
    """Restarts the embedded parts that die, and the workers when they stop answering (ctxpress/supervisor.py)."""

    name = "supervisor"

    @property
    def state_file(self) -> Path:
        return self.settings.run_dir / "supervisor.json"

    def address(self) -> str:
        return str(self.state_file)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "ctxpress.supervisor"]

    def ready(self) -> bool:
        # Ready once this very process has written its state (a file left by an earlier one does not count).
        pid = self.pid()
        try:
            return pid is not None and json.loads(self.state_file.read_text()).get("pid") == pid
        except (OSError, ValueError, AttributeError):
            return False
