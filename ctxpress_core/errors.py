"""The root of the project's errors, and the wire code each kind of failure is answered with.

Every error a module raises derives from ``CtxpressError``; a class says once which ``ErrorCode`` a
request that fails with it gets, so the completion worker maps a failure by its type
instead of catching each kind by hand. Errors of tools that never answer a request (the CLI's
configuration errors, a part that does not start) keep ``internal``.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    INVALID_JSON = "invalid_json"
    INVALID_REQUEST = "invalid_request"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    CURSOR_OUT_OF_RANGE = "cursor_out_of_range"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    UNKNOWN_CONTENT = "unknown_content"
    INFERENCE_TIMEOUT = "inference_timeout"
    INFERENCE_UNAVAILABLE = "inference_unavailable"
    INFERENCE_FAILED = "inference_failed"
    # The caller cancelled the request (``ctxpress.v1.cancel``), e.g. a newer keystroke superseded it.
    CANCELLED = "cancelled"
    # The engine's queue cannot serve the request within its deadline: rejected at once.
    OVERLOADED = "overloaded"
    # Team mode: the request's user (from the NATS subject, never the payload) has no grant for its repository.
    FORBIDDEN = "forbidden"
    # The caller's own share is used up (in flight, requests per second, or engine slots while others wait): the
    # reply's ``retry_after_ms`` says when to ask again. Others' requests are not held back by it.
    RATE_LIMITED = "rate_limited"
    INTERNAL = "internal"


# Failures on the appliance's side, each answered with its code and this fixed message: what failed (an engine's
# address, a gRPC status's detail, a driver's error) tells a client about the appliance's insides, and goes to the
# worker's log only. A client's own mistakes (invalid_request, …) are answered with what is wrong with its request.
SERVER_SIDE_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.INFERENCE_TIMEOUT: "the model did not answer in time",
    ErrorCode.INFERENCE_UNAVAILABLE: "the model cannot be reached now; try again later",
    ErrorCode.INFERENCE_FAILED: "the model failed on this request",
    ErrorCode.INTERNAL: "internal error on the appliance; try again later",
}


class CtxpressError(Exception):
    code: ErrorCode = ErrorCode.INTERNAL
    details: list[dict[str, object]] | None = None


class RequestError(CtxpressError):
    """A request refused for a reason the handler states itself (code, message, per-field details)."""

    def __init__(self, code: ErrorCode, message: str, details: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class InferenceError(CtxpressError):
    """The inference server answered with an error."""

    code = ErrorCode.INFERENCE_FAILED


class InferenceUnavailable(InferenceError):
    """The inference server cannot be reached."""

    code = ErrorCode.INFERENCE_UNAVAILABLE


class InferenceTimeout(InferenceError):
    """The inference server did not finish within the deadline."""

    code = ErrorCode.INFERENCE_TIMEOUT


class EmbeddingError(CtxpressError):
    """The embedder could not be reached or answered with an error (indexing and retrieval both embed)."""

    code = ErrorCode.INFERENCE_UNAVAILABLE


class CursorOutOfRange(CtxpressError, ValueError):
    code = ErrorCode.CURSOR_OUT_OF_RANGE


class UnsupportedLanguage(CtxpressError, ValueError):
    """A ValueError too: the wire's validators raise it, and pydantic reports a validator's ValueError."""

    code = ErrorCode.UNSUPPORTED_LANGUAGE

    def __init__(self, language: str, known: list[str]) -> None:
        super().__init__(f"unsupported language {language!r}; known: {', '.join(sorted(known))}")
        self.language = language


class Forbidden(CtxpressError):
    """The request names a repository its user has no grant for (or came without a user in team mode)."""

    code = ErrorCode.FORBIDDEN


class GrantsUnavailable(CtxpressError):
    """The grants could not be read (database down): the request is refused, never served unchecked."""


class RateLimited(CtxpressError):
    """A user's request over their own share (workers/fair_share.py); ``retry_after_ms`` says when to ask again."""

    code = ErrorCode.RATE_LIMITED

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = max(1, int(retry_after_ms))


class PartUnavailable(CtxpressError):
    """A part of the appliance (NATS, PostgreSQL, Triton) does not answer where the settings say it is. Raised by a
    client that knows the address it tried; the ``ctxpress`` command turns it, and the drivers' own errors of the
    same meaning, into one line that says how to start it (ctxpress/unavailable.py)."""

    def __init__(self, part: str, address: str, reason: str = "") -> None:
        super().__init__(f"{part} at {address} cannot be reached" + (f" ({reason})" if reason else ""))
        self.part = part
        self.address = address
        self.reason = reason
