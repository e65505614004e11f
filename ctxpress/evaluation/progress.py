"""A small progress bar on stderr (long operations show progress and end with a summary)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, width: int = 30) -> None:
        self.total = max(total, 1)
        self.label = label
        self.width = width
        self.done = 0
        self.started = time.perf_counter()
        self._last_draw = 0.0

    def advance(self, note: str = "") -> None:
        self.done += 1
        self.note(note)

    def note(self, note: str) -> None:
        """Redraw with ``note`` without counting a step (work alongside the counted steps)."""
        now = time.perf_counter()
        if now - self._last_draw < 0.2 and self.done < self.total:
            return
        self._last_draw = now
        filled = self.width * self.done // self.total
        elapsed = now - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                         f"{elapsed:5.0f}s elapsed, ~{eta:4.0f}s left {note[:40]:<40}")
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()
