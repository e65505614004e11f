"""The FIM endpoints Continue's autocomplete providers call, non-streamed or as server-sent events.

- ``POST /v1/fim/completions`` (Mistral/Codestral's API; Continue's ``mistral``, ``deepseek`` and
  other FIM providers, ``core/llm/llms/OpenAI.ts`` ``_streamFim``): ``prompt`` is the text before
  the cursor, ``suffix`` the text after; streamed chunks carry ``choices[0].delta.content``.
- ``POST /v1/completions`` (OpenAI's legacy completions; Continue's ``openai`` provider for a
  model without FIM support, ``_legacystreamComplete``): ``prompt`` is Continue's FIM template
  filled in (``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>`` and the other templates below), or
  plain text with the after-cursor text in ``suffix``; streamed chunks carry ``choices[0].text``.

The appliance answers whole, so a stream is one chunk with the suggestion, one with the finish
reason, and ``[DONE]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from ctxpress.http.editing import completion_request, cursor_between, cut_at_stop, max_tokens, where_from
from ctxpress.http.replies import dumps, json_reply, parse_model
from ctxpress.http.upstream import Superseded, Upstream, server_timing

SCENARIO = "http-fim"
# FIM templates (Continue's core/autocomplete/templating/AutocompleteTemplate.ts) written prefix first:
# <prefix marker>before<suffix marker>after<middle marker>
PREFIX_SUFFIX_MIDDLE = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder, CodeGemma, Granite
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder, StableCode
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
    ("<[fim-prefix]>", "<[fim-suffix]>", "<[fim-middle]>"),  # Seed-Coder
    ("<PRE> ", " <SUF>", " <MID>"),  # Code Llama
)
# Codestral: [SUFFIX]after[PREFIX]before
SUFFIX_FIRST = ("[SUFFIX]", "[PREFIX]")
FILE_SEPARATOR = "<|file_sep|>"  # Qwen's multi-file template names the current file after the last one


class FimRequest(BaseModel):
    """Both endpoints' bodies (OpenAI's ``prompt`` may be a list: its first item is used)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | list[str]
    suffix: str | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    stop: list[str] | str | None = None
    stream: bool = False
    temperature: float | None = None


@dataclass(frozen=True)
class Split:
    before: str
    after: str
    path: str | None = None


def split_prompt(prompt: str, suffix: str | None) -> Split:
    """The text before and after the cursor from a (possibly templated) prompt."""
    for prefix_marker, suffix_marker, middle_marker in PREFIX_SUFFIX_MIDDLE:
        start = prompt.rfind(prefix_marker)
        if start < 0:
            continue
        head, rest = prompt[:start], prompt[start + len(prefix_marker):]
        before, found, after = rest.partition(suffix_marker)
        if not found:
            return Split(before.removesuffix(middle_marker), suffix or "")
        after = after[:after.rfind(middle_marker)] if middle_marker in after else after
        path = None
        if FILE_SEPARATOR in head:
            path = head.rsplit(FILE_SEPARATOR, 1)[1].strip().split("\n", 1)[0].strip() or None
        return Split(before, after, path)
    if prompt.startswith(SUFFIX_FIRST[0]) and SUFFIX_FIRST[1] in prompt:
        after, _, before = prompt[len(SUFFIX_FIRST[0]):].partition(SUFFIX_FIRST[1])
        return Split(before, after)
    return Split(prompt, suffix or "")


def _sse(event: dict[str, Any]) -> bytes:
    return f"data: {dumps(event)}\n\n".encode()


async def fim_completion(request: web.Request, upstream: Upstream, raw: bytes, *, chat_shaped: bool
                         ) -> web.StreamResponse:
    """``chat_shaped``: Mistral's FIM reply (``message``/``delta.content``), else OpenAI's ``text``."""
    body = parse_model(raw, FimRequest)
    prompt = body.prompt if isinstance(body.prompt, str) else (body.prompt[0] if body.prompt else "")
    split = split_prompt(prompt, body.suffix)
    where = where_from(request, upstream.settings, path=split.path)
    cursor = cursor_between(split.before, split.after, upstream.settings)
    tokens = max_tokens(body.max_completion_tokens or body.max_tokens, upstream.settings)
    asked = completion_request(where, cursor, tokens, SCENARIO, upstream.timeout_ms)
    key = ("fim", request.remote, where.repository, where.path)
    started = time.perf_counter()
    try:
        answer = await upstream.complete(asked, supersede=key)
        text, by_word = cut_at_stop(str(answer.get("completion", "")), body.stop)
        finish = "stop" if by_word or answer.get("finish_reason") != "length" else "length"
    except Superseded:
        answer, text, finish = {}, "", "stop"
    timing = server_timing(started)
    completion_id = str(answer.get("id") or asked.request_id)
    model = body.model or str(answer.get("model", ""))
    created = int(time.time())
    prompt_tokens = int((answer.get("context") or {}).get("prompt_tokens") or 0)
    completion_tokens = int(answer.get("completion_tokens") or 0)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens}
    kind = "chat.completion" if chat_shaped else "text_completion"

    def choice(content: str, done: bool, streamed: bool) -> dict[str, Any]:
        reason = finish if done else None
        if not chat_shaped:
            return {"index": 0, "text": content, "logprobs": None, "finish_reason": reason}
        field = "delta" if streamed else "message"
        return {"index": 0, field: {"role": "assistant", "content": content}, "finish_reason": reason}

    if not body.stream:
        return json_reply({"id": completion_id, "object": kind, "created": created, "model": model,
                           "choices": [choice(text, True, False)], "usage": usage}, headers=timing)
    chunk_kind = "chat.completion.chunk" if chat_shaped else "text_completion"
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           **timing})
    await response.prepare(request)
    for content, done in ((text, False), ("", True)):
        event = {"id": completion_id, "object": chunk_kind, "created": created, "model": model,
                 "choices": [choice(content, done, True)]}
        if done:
            event["usage"] = usage
        await response.write(_sse(event))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
