"""The bridges' side of NATS: the editor's client (``ctxpress.lsp.appliance``), the user's own
subjects in team mode, and a client's pending request superseded by its newer one.

A request whose HTTP client went away is cancelled by aiohttp (``handler_cancellation``); the
editor's client then tells the appliance (``ctxpress.v1.cancel``) so it stops working on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from typing import Any

from ctxpress.http.replies import HttpError
from ctxpress.lsp.appliance import Appliance, Unreachable, editor_subject
from ctxpress_core.errors import ErrorCode
from ctxpress_core.identity import NatsCredentials
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, Feedback, FileOpened

log = logging.getLogger("ctxpress.http")

# The appliance's error codes as HTTP statuses (the body keeps the code and its message).
ERROR_STATUS: dict[str, int] = {
    ErrorCode.INVALID_JSON: 400, ErrorCode.INVALID_REQUEST: 400, ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.CURSOR_OUT_OF_RANGE: 400, ErrorCode.UNSUPPORTED_LANGUAGE: 400, ErrorCode.UNKNOWN_CONTENT: 400,
    ErrorCode.INFERENCE_TIMEOUT: 504, ErrorCode.INFERENCE_UNAVAILABLE: 503, ErrorCode.INFERENCE_FAILED: 502,
    ErrorCode.CANCELLED: 499, ErrorCode.OVERLOADED: 503, ErrorCode.FORBIDDEN: 403, ErrorCode.INTERNAL: 500,
    ErrorCode.RATE_LIMITED: 429,
}


def server_timing(started: float) -> dict[str, str]:
    """The time spent waiting for the appliance since ``started`` (``time.perf_counter``), as a
    ``Server-Timing`` header: what a client's latency less it is, the bridge added."""
    return {"Server-Timing": f"appliance;dur={(time.perf_counter() - started) * 1000:.2f}"}


def retry_after(code: str, retry_after_ms: object) -> dict[str, str] | None:
    """HTTP's ``Retry-After`` (whole seconds, rounded up) for a refusal that says when to ask again."""
    if code == ErrorCode.RATE_LIMITED:
        ms = retry_after_ms if isinstance(retry_after_ms, int) and retry_after_ms > 0 else 1000
        return {"Retry-After": str(max(1, -(-ms // 1000)))}
    return {"Retry-After": "1"} if code == ErrorCode.OVERLOADED else None


class Superseded(Exception):
    """A newer request from the same client for the same document took this one's place."""


class Upstream:
    def __init__(self, settings: Settings, credentials: NatsCredentials | None) -> None:
        self.settings = settings
        self.credentials = credentials
        url, login = settings.effective_nats_url(), {}
        if credentials is not None:  # team mode: the user's login and URL, unless CTXPRESS_NATS_URL says otherwise
            url, login = settings.nats_url or credentials.nats_url, credentials.connect_options()
        self.appliance = Appliance(url, login, self._reachability,
                                   plaintext_credentials=credentials is not None and credentials.plaintext)
        self.timeout_ms = int(settings.triton_timeout_s * 1000)
        self._pending: dict[Hashable, asyncio.Task[dict[str, Any]]] = {}

    @staticmethod
    def _reachability(reachable: bool, why: str) -> None:
        if reachable:
            log.info("the appliance answers again (%s)", why)
        else:
            log.warning("the appliance is unreachable (%s): requests get 503 until it is back", why)

    def subject(self, kind: str) -> str:
        return editor_subject(self.settings, self.credentials, kind)

    async def complete(self, request: CompletionRequest, supersede: Hashable | None = None) -> dict[str, Any]:
        """The appliance's ``CompletionResponse`` as a dict. Raises ``HttpError`` (its error, unreachable,
        no answer in time) or ``Superseded``; cancelled with the HTTP request, it cancels upstream too."""
        if request.request_id is None or request.timeout_ms is None:
            raise ValueError("a bridge request carries its request_id and timeout_ms")
        ask = asyncio.ensure_future(self.appliance.request(
            self.subject("complete"), request.model_dump_json(exclude_none=True).encode(),
            timeout_s=request.timeout_ms / 1000 + 1, cancel_id=request.request_id,
            cancel_subject=self.subject("cancel")))
        if supersede is not None:
            previous = self._pending.get(supersede)
            if previous is not None and not previous.done():
                previous.cancel()  # abandoned here and (by the client) in the appliance
            self._pending[supersede] = ask
        try:
            reply = await ask
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if ask.cancelled() and current is not None and not current.cancelling():
                raise Superseded from None
            raise
        except Unreachable as exc:
            raise HttpError(503, f"the ctxpress appliance is unreachable: {exc}", {"Retry-After": "3"}) from None
        except TimeoutError:
            raise HttpError(504, f"the appliance did not answer within {request.timeout_ms} ms") from None
        finally:
            if supersede is not None and self._pending.get(supersede) is ask:
                del self._pending[supersede]
        if "error" in reply:
            error = reply["error"]
            code = str(error.get("code", "internal"))
            headers = retry_after(code, error.get("retry_after_ms"))
            raise HttpError(ERROR_STATUS.get(code, 502), f"{code}: {error.get('message', '')}", headers)
        return reply

    def file_opened(self, event: FileOpened) -> None:
        self.appliance.publish_soon(self.subject("file_opened"), event.model_dump_json(exclude_none=True).encode())

    def feedback(self, completion_id: str, action: str, chars_kept: int | None = None) -> None:
        event = Feedback(completion_id=completion_id, action=action, chars_kept=chars_kept)  # type: ignore[arg-type]
        self.appliance.publish_soon(self.subject("feedback"), event.model_dump_json(exclude_none=True).encode())

    async def reachable(self) -> str | None:
        """None when NATS answers now, else why not."""
        try:
            await self.appliance.ping()
        except Unreachable as exc:
            return str(exc)
        return None

    async def close(self) -> None:
        for task in self._pending.values():
            task.cancel()
        await self.appliance.close()
