"""JSON in and out, and the one error shape every door answers with.

Errors are ``{"error": {"code": <HTTP status>, "type": ..., "message": ...}}``: llama.cpp's server
shape, which OpenAI-style clients also read. Bodies are compact one-line JSON: llama.vim checks a
reply with the pattern ``"content":"`` (no space) and Vim's job channel reads it line by line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from ctxpress_core.errors import CtxpressError

log = logging.getLogger("ctxpress.http")
ModelT = TypeVar("ModelT", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# aiohttp's own refusals (no such route, wrong method, body too large) keep their status with our body
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error", 499: "cancelled",
          500: "server_error", 502: "server_error", 503: "unavailable_error", 504: "timeout_error"}


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def json_reply(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=dumps(value), status=status, content_type="application/json", headers=headers)


class HttpError(CtxpressError):
    """A request refused with ``status`` and a message saying why."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"code": status, "type": _TYPES.get(status, "invalid_request_error"), "message": message}}
    return json_reply(body, status, headers)


async def read_model(request: web.Request, model: type[ModelT]) -> ModelT:
    """The request's JSON body as ``model``; 400 saying what is wrong (413 from aiohttp past the size limit)."""
    return parse_model(await request.read(), model)


def parse_model(raw: bytes, model: type[ModelT]) -> ModelT:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise HttpError(400, f"invalid request body: {problems(exc)}") from None


def problems(exc: ValidationError) -> str:
    """What is wrong, field by field (the first five)."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors(include_url=False)[:5])


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpError as exc:
        return error_reply(exc.status, exc.message, exc.headers)
    except ValidationError as exc:  # a peer's request that makes no valid ctxpress request
        return error_reply(400, f"cannot ask the appliance this: {problems(exc)}")
    except web.HTTPException as exc:  # aiohttp's: 404, 405, 413 ...
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        message = exc.reason
        if isinstance(exc, web.HTTPRequestEntityTooLarge):
            message = f"{exc.text} (CTXPRESS_MAX_REQUEST_BYTES)"
        return error_reply(exc.status, message, headers)
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return error_reply(500, "internal error in ctxpress serve-http (see its log)")
