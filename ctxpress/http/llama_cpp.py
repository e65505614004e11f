"""llama.cpp server's ``POST /infill`` and ``GET /health``, as llama.vscode and llama.vim call them.

Request (llama.vscode ``src/llama-server.ts``, llama.vim ``autoload/llama.vim``): the lines before
the cursor's line as ``input_prefix``, that line up to the cursor as ``prompt``, the rest of it and
the lines after as ``input_suffix``, chunks of other files as ``input_extra`` (ignored: the
appliance retrieves cross-file context from its own index), ``n_predict`` (0: only warm the cache
for the next request, sent here as ``file_opened``), ``stop``, ``response_fields``, and
``t_max_predict_ms`` (past it, the completion ends at the next line end, as llama.cpp ends it).
``t_max_prompt_ms`` is accepted and not applied: the appliance answers within its own deadline.

Reply: ``content``, ``tokens_cached``, ``timings`` (``prompt_n`` counts the tokens the engine
processed, ``cache_n`` those it found cached), ``generation_settings``; with ``response_fields``
only the fields named, each under its path as one key (``"timings/prompt_n": 12``), as llama.cpp does.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from ctxpress.http.editing import (
    completion_request,
    cursor_between,
    cut_at_stop,
    max_decode_ms,
    max_tokens,
    where_from,
)
from ctxpress.http.replies import HttpError, error_reply, json_reply, read_model
from ctxpress.http.upstream import Superseded, Upstream, server_timing
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import FileOpened

SCENARIO = "http-infill"


class InfillChunk(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str
    filename: str = ""


class InfillRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input_prefix: str = ""
    input_suffix: str = ""
    prompt: str = ""
    input_extra: list[InfillChunk] = Field(default_factory=list, max_length=1024)
    n_predict: int = Field(default=-1, ge=-1)
    stop: list[str] | None = Field(default=None, max_length=64)
    stream: bool = False
    cache_prompt: bool = True
    t_max_prompt_ms: int | None = None
    t_max_predict_ms: int | None = None
    response_fields: list[str] | None = Field(default=None, max_length=64)


def nested_fields(reply: dict[str, Any], paths: list[str] | None) -> dict[str, Any]:
    """llama.cpp's ``response_fields``: each path (``a/b``) found in the reply, under the path as its key."""
    if not paths:
        return reply
    out: dict[str, Any] = {}
    for path in paths:
        value: Any = reply
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def infill_reply(answer: dict[str, Any], content: str, stopped_by_word: bool, n_predict: int, settings: Settings
                 ) -> dict[str, Any]:
    context, timings = answer.get("context", {}), answer.get("timings", {})
    prompt_tokens = int(context.get("prompt_tokens") or 0)
    cached = int(context.get("cached_tokens") or 0)
    predicted = int(answer.get("completion_tokens") or 0)
    prompt_ms, predicted_ms = float(timings.get("prompt_ms", 0.0)), float(timings.get("decode_ms", 0.0))
    return {
        "index": 0, "content": content, "id_slot": 0, "stop": True, "model": answer.get("model", ""),
        "tokens_predicted": predicted, "tokens_evaluated": prompt_tokens,
        "generation_settings": {"n_ctx": settings.n_ctx, "n_predict": n_predict, "model": answer.get("model", "")},
        "has_new_line": "\n" in content, "truncated": bool(context.get("truncated")),
        "stop_type": "word" if stopped_by_word else ("limit" if answer.get("finish_reason") == "length" else "eos"),
        "tokens_cached": cached,
        "timings": {
            "cache_n": cached, "prompt_n": prompt_tokens - cached, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / max(1, prompt_tokens - cached),
            "prompt_per_second": 1000 * (prompt_tokens - cached) / prompt_ms if prompt_ms else 0.0,
            "predicted_n": predicted, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / max(1, predicted),
            "predicted_per_second": 1000 * predicted / predicted_ms if predicted_ms else 0.0,
        },
        # ctxpress's own: the id its feedback and telemetry know the completion by
        "ctxpress_id": answer.get("id"),
    }


def routes(upstream: Upstream) -> list[web.RouteDef]:
    settings = upstream.settings

    async def health(request: web.Request) -> web.Response:
        problem = await upstream.reachable()
        if problem is not None:
            return error_reply(503, f"the ctxpress appliance is unreachable: {problem}")
        return json_reply({"status": "ok"})

    async def infill(request: web.Request) -> web.Response:
        body = await read_model(request, InfillRequest)
        if body.stream:
            raise HttpError(400, "stream: true is not served on /infill; the llama.cpp plugins send stream: false")
        where = where_from(request, settings)
        cursor = cursor_between(body.input_prefix + body.prompt, body.input_suffix, settings)
        if body.n_predict == 0:  # llama.vscode and llama.vim warming the cache for the next request
            if cursor.text:
                upstream.file_opened(FileOpened(repository=where.repository, path=where.path, text=cursor.text,
                                                language=where.language, line=cursor.line, column=cursor.column))
            empty = {"content": "", "tokens_cached": 0, "timings": {}, "stop": True}
            return json_reply(nested_fields(empty, body.response_fields))
        tokens = max_tokens(body.n_predict, settings)
        asked = completion_request(where, cursor, tokens, SCENARIO, upstream.timeout_ms,
                                   max_decode_ms(body.t_max_predict_ms))
        # one pending request per client and document: llama.vim stops its curl for a newer one
        key = ("infill", request.remote, where.repository, where.path)
        started = time.perf_counter()
        try:
            answer = await upstream.complete(asked, supersede=key)
        except Superseded:
            return json_reply(nested_fields({"content": "", "stop": True, "tokens_cached": 0}, body.response_fields))
        timing = server_timing(started)
        content, by_word = cut_at_stop(str(answer.get("completion", "")), body.stop)
        return json_reply(nested_fields(infill_reply(answer, content, by_word, tokens, settings),
                                        body.response_fields), headers=timing)

    return [web.get("/health", health), web.post("/infill", infill)]
