"""``ctxpress.v1.feedback``: an IDE's accept/dismiss of a completion, recorded for the real acceptance rate."""

from __future__ import annotations

from pydantic import ValidationError

from ctxpress_core.errors import ErrorCode, RequestError
from ctxpress_core.wire.v1 import ErrorBody, ErrorResponse, Feedback
from workers.completion.observe import Observer
from workers.completion.request import within_size_limit


def feedback(data: bytes, max_request_bytes: int, observe: Observer, user: str | None = None) -> bytes:
    try:
        within_size_limit(data, max_request_bytes, "feedback")
        event = Feedback.model_validate_json(data)
    except RequestError as exc:
        return ErrorResponse(error=ErrorBody.of(exc)).model_dump_json().encode()
    except ValidationError as exc:
        body = ErrorBody(code=ErrorCode.INVALID_REQUEST, message=f"invalid feedback: {exc.errors()[0]['msg']}")
        return ErrorResponse(error=body).model_dump_json().encode()
    observe.feedback(event, user)
    return b'{"ok": true}'
