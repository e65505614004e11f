"""``ctxpress.v1.cancel``: the running requests a caller named (by user and request_id), which a cancel from the
same user stops. A user cancels only their own."""

from __future__ import annotations

import asyncio

from pydantic import ValidationError

from ctxpress_core.errors import RequestError
from ctxpress_core.wire.v1 import CancelRequest
from workers.completion.request import within_size_limit

Key = tuple[str | None, str]  # (user, the caller's request_id)


class Cancels:
    def __init__(self, max_request_bytes: int) -> None:
        self.max_request_bytes = max_request_bytes
        self._running: dict[Key, asyncio.Task[object]] = {}
        self._asked: dict[Key, bool] = {}  # cancelled by its caller, not by the worker stopping

    def counts(self) -> dict[str, int]:
        return {"cancellable_requests": len(self._running), "cancel_marks": len(self._asked)}

    def hold(self, user: str | None, request_id: str, task: asyncio.Task[object]) -> None:
        self._running[(user, request_id)] = task

    def release(self, user: str | None, request_id: str, task: asyncio.Task[object] | None) -> None:
        if self._running.get((user, request_id)) is task:
            del self._running[(user, request_id)]
            # a cancel that arrived as the request was finishing is not left behind
            self._asked.pop((user, request_id), None)

    def asked(self, user: str | None, request_id: str) -> bool:
        """Whether the request's caller cancelled it (once: the mark is taken)."""
        return self._asked.pop((user, request_id), False)

    def cancel(self, data: bytes, user: str | None = None) -> bool:
        """Abandon the named request if this worker holds it (for the same user)."""
        try:
            within_size_limit(data, self.max_request_bytes, "a cancel")
            request_id = CancelRequest.model_validate_json(data).request_id
        except (ValidationError, RequestError):
            return False
        task = self._running.get((user, request_id))
        if task is None or task.done():
            return False
        self._asked[(user, request_id)] = True
        task.cancel()
        return True
