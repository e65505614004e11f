"""Pre-warms (a file's prompt processed ahead of its first keystroke) are one per user at a time.

Opening a file starts its pre-warm; opening another supersedes it. A storm of opened files therefore costs the engine
one prompt per user instead of one per file, which would crowd out everyone's typed requests (the fairness benchmark,
docs/reliability.md), and the file a developer looks at now is the one that gets warm.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import Any


class LatestPerUser:
    """The newest background task of each user: starting one cancels that user's older one, nobody else's. Every
    task is kept referenced until it is done (asyncio holds only weak references to running tasks)."""

    def __init__(self) -> None:
        self._tasks: dict[str | None, asyncio.Task[None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    def start(self, user: str | None, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        older = self._tasks.pop(user, None)
        if older is not None:
            older.cancel()
        task = asyncio.create_task(work)
        self._tasks[user] = task
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(functools.partial(self._forget, user))
        return task

    def running(self, user: str | None) -> asyncio.Task[None] | None:
        return self._tasks.get(user)

    def unfinished(self) -> list[asyncio.Task[None]]:
        """Every task not done yet, superseded ones included (they end at their next await)."""
        return list(self._running)

    def _forget(self, user: str | None, task: asyncio.Task[None]) -> None:
        if self._tasks.get(user) is task:
            del self._tasks[user]
