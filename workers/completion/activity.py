"""When the worker last had a request, and how many it holds now."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Activity:
    """When this worker last had a request, and how many it holds now."""

    def __init__(self) -> None:
        self.held = 0
        self.last = time.monotonic()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        self.held += 1
        self.last = time.monotonic()
        try:
            yield
        finally:
            self.held -= 1
            self.last = time.monotonic()

    def idle_s(self) -> float:
        return 0.0 if self.held else time.monotonic() - self.last
