"""A completion request off the wire: within the size limit, JSON, and valid against the schema; each
failure a ``RequestError`` saying what is wrong."""

from __future__ import annotations

import json

from pydantic import ValidationError

from ctxpress_core.errors import ErrorCode, RequestError, UnsupportedLanguage
from ctxpress_core.wire.v1 import CompletionRequest


def parse_request(data: bytes, max_bytes: int) -> CompletionRequest:
    """Bytes off the wire to a valid request, or a ``RequestError`` saying what is wrong."""
    within_size_limit(data, max_bytes, "request")
    try:
        raw = json.loads(data)
    except RecursionError:  # [[[[…: the decoder recurses once per level; it is the sender's error, not ours
        raise RequestError(ErrorCode.INVALID_JSON, "request is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, and an integer of over 4,300 digits
        raise RequestError(ErrorCode.INVALID_JSON, f"request is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(raw, dict):
        raise RequestError(ErrorCode.INVALID_REQUEST, "request must be a JSON object")
    try:
        return CompletionRequest.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, UnsupportedLanguage):
                raise cause from None
        details = [{"field": ".".join(str(p) for p in e["loc"]), "problem": e["msg"]} for e in exc.errors()]
        summary = "; ".join(f"{d['field'] or 'request'}: {d['problem']}" for d in details)
        raise RequestError(ErrorCode.INVALID_REQUEST, f"invalid request: {summary}", details) from None


def within_size_limit(data: bytes, max_bytes: int, what: str) -> None:
    """Every subject's message, not only a completion request: a larger one is refused before it is read."""
    if len(data) > max_bytes:
        raise RequestError(ErrorCode.PAYLOAD_TOO_LARGE, f"{what} is {len(data)} bytes; the limit is {max_bytes}")
