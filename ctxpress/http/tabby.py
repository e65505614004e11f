"""Tabby's server API as its agent (``clients/tabby-agent``, used by Tabby's VS Code, IntelliJ and Vim
plugins) calls it: ``GET /v1/health``, ``POST /v1/completions`` with ``segments``, ``POST /v1/events``.

The agent sends about 20 lines on each side of the cursor (``segments.prefix``/``suffix``), the
file's path relative to its git root (``filepath``) and the origin's URL (``git_url``, which names
the repository); declarations and snippets from other files are ignored (the appliance retrieves
its own). Events become feedback: ``view`` → shown, ``select`` → accepted (``select_kind=line``:
the first line), ``dismiss`` → dismissed.
"""

from __future__ import annotations

import os
import platform
import time
from collections import OrderedDict
from importlib.metadata import PackageNotFoundError, version
from typing import Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from ctxpress.http.editing import (
    completion_request,
    cursor_between,
    repository_from_git_url,
    where_from,
)
from ctxpress.http.replies import HttpError, json_reply, parse_model, read_model
from ctxpress.http.upstream import Superseded, Upstream, server_timing

SCENARIO = "http-tabby"
# completion id → its text, for the length of an accepted one (the agent reports only the id)
REMEMBERED = 1024


class Segments(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prefix: str
    suffix: str | None = None
    filepath: str | None = Field(default=None, max_length=4096)
    git_url: str | None = Field(default=None, max_length=4096)
    clipboard: str | None = None


class TabbyCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    language: str | None = Field(default=None, max_length=64)
    segments: Segments
    user: str | None = None
    temperature: float | None = None
    seed: int | None = None


class LogEventRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["view", "select", "dismiss"]
    completion_id: str = Field(min_length=1, max_length=128)
    choice_index: int = Field(ge=0)
    view_id: str | None = None
    elapsed: int | None = None
    select_kind: Literal["line"] | None = None


class Shown:
    """The texts of the latest completions, so that an accepted one's length can be reported."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self._texts: OrderedDict[str, str] = OrderedDict()

    def remember(self, completion_id: str, text: str) -> None:
        self._texts[completion_id] = text
        self._texts.move_to_end(completion_id)
        while len(self._texts) > self.size:
            self._texts.popitem(last=False)

    def chars_kept(self, completion_id: str, line_only: bool) -> int | None:
        text = self._texts.get(completion_id)
        if text is None:
            return None
        return len(text.split("\n", 1)[0]) if line_only else len(text)


def _version() -> str:
    try:
        return version("ctxpress")
    except PackageNotFoundError:  # run from a source tree
        return "0.0.0"


def health_state(model: str) -> dict[str, object]:
    return {"model": model, "chat_model": None, "device": "cpu", "arch": platform.machine(),
            "cpu_info": platform.processor() or platform.machine(), "cpu_count": os.cpu_count() or 1,
            "cuda_devices": [],
            # read by the agent as a semantic version: below 0.9 it asks for no server-side settings
            "version": {"build_date": "", "build_timestamp": "", "git_sha": "",
                        "git_describe": f"ctxpress-{_version()}"}}


async def tabby_completion(request: web.Request, upstream: Upstream, shown: Shown, raw: bytes) -> web.Response:
    body = parse_model(raw, TabbyCompletionRequest)
    segments = body.segments
    where = where_from(request, upstream.settings, path=segments.filepath,
                       repository=repository_from_git_url(segments.git_url), editor_language=body.language)
    cursor = cursor_between(segments.prefix, segments.suffix or "", upstream.settings)
    asked = completion_request(where, cursor, upstream.settings.default_max_tokens, SCENARIO, upstream.timeout_ms)
    key = ("tabby", request.remote, where.repository, where.path)
    started = time.perf_counter()
    try:
        answer = await upstream.complete(asked, supersede=key)
    except Superseded:
        return json_reply({"id": f"cmpl-{asked.request_id}", "choices": []})
    timing = server_timing(started)
    completion_id, text = str(answer.get("id") or asked.request_id), str(answer.get("completion", ""))
    shown.remember(completion_id, text)
    return json_reply({"id": completion_id, "choices": [{"index": 0, "text": text}] if text else []}, headers=timing)


def routes(upstream: Upstream, shown: Shown) -> list[web.RouteDef]:
    model = upstream.settings.model_path.name if upstream.settings.model_path else upstream.settings.model_name

    async def health(request: web.Request) -> web.Response:
        problem = await upstream.reachable()
        if problem is not None:
            raise HttpError(503, f"the ctxpress appliance is unreachable: {problem}")
        return json_reply(health_state(model))

    async def events(request: web.Request) -> web.Response:
        event = await read_model(request, LogEventRequest)
        line_only = (event.select_kind or request.query.get("select_kind")) == "line"
        if event.type == "view":
            upstream.feedback(event.completion_id, "shown")
        elif event.type == "select":
            upstream.feedback(event.completion_id, "accepted", shown.chars_kept(event.completion_id, line_only))
        else:
            upstream.feedback(event.completion_id, "dismissed", 0)
        return web.Response(text="")

    return [web.get("/v1/health", health), web.post("/v1/health", health), web.post("/v1/events", events)]
