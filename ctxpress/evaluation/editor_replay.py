"""The typing replay driven through ``ctxpress lsp`` as an editor drives it.

Every character is a ``didChange``; at each pause an automatic ``inlineCompletion`` is asked
for, and the latency is from the keystroke that ended the pause to the suggestion returned
(what the user waits for). A suggestion continued from the forward cache comes back with the
id of the one already on screen. ``supersede``: a fast typist who gets a request at every
keystroke, each superseding the last; what it measures is the engine time spent on requests
whose answer nobody saw, with and without telling the appliance to abandon them.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.bench_report import Sample
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.runner import percentile
from ctxpress.evaluation.typing_replay import suggestion_matches, typed_body
from ctxpress.lsp.server import STATUS_NOTIFICATION

FORWARD_CACHE_MS = 5.0
FAST_TYPIST_KEYSTROKES = 60
QUIET_S = 3.0  # after the last answer, for the engine's status file
DRAIN_S = 600.0  # the longest wait for a session's requests to be answered


@dataclass
class Keystrokes:
    opened: str  # the file as the editor opens it (the function body removed)
    start: int  # offset where the body is typed back
    body: str
    pauses: list[int]  # offsets in body where the typist pauses and a suggestion is asked for


def keystroke_plan(path: Path, cfg: BenchConfig) -> Keystrokes:
    """The same function body and pauses as ``typing_replay.typing_plan``."""
    text, start, end, pauses = typed_body(path, cfg)
    return Keystrokes(text[:start] + text[end:], start, text[start:end], pauses)


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class EditorSession:
    """A pygls client standing in for the editor."""

    def __init__(self, env: dict[str, str], options: dict[str, Any]) -> None:
        self.env = env
        self.options = options
        self.client = LanguageClient("ctxpress-bench", "1")
        self.text = ""
        self.version = 0
        self.uri = ""
        self.requests_sent = 0  # to the appliance (the server's ``ctxpress/status``): not debounced away

        @self.client.feature(STATUS_NOTIFICATION)
        def status(params: Any) -> None:
            sent = params.get("requests") if isinstance(params, dict) else getattr(params, "requests", None)
            self.requests_sent = max(self.requests_sent, int(sent or 0))

    async def __aenter__(self) -> EditorSession:
        await self.client.start_io(sys.executable, "-m", "ctxpress.cli", "lsp", env=self.env)
        await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(
                general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
                text_document=types.TextDocumentClientCapabilities(
                    inline_completion=types.InlineCompletionClientCapabilities())),
            initialization_options=self.options))
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
        finally:
            await self.client.stop()

    def open(self, path: Path, text: str) -> None:
        self.uri, self.text, self.version = path.as_uri(), text, 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=self.uri, language_id="python", version=1, text=text)))

    def position(self, offset: int) -> types.Position:
        line_start = self.text.rfind("\n", 0, offset) + 1
        return types.Position(line=self.text.count("\n", 0, offset), character=_utf16(self.text[line_start:offset]))

    def insert(self, offset: int, char: str) -> None:
        at = self.position(offset)
        self.text = self.text[:offset] + char + self.text[offset:]
        self.version += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=char)]))

    def ask(self, offset: int) -> asyncio.Future[types.InlineCompletionList | None]:
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri=self.uri), position=self.position(offset))
        return asyncio.ensure_future(self.client.text_document_inline_completion_async(params))


def _suggestion(result: types.InlineCompletionList | None) -> tuple[str, str]:
    if not result or not result.items:
        return "", ""
    item = result.items[0]
    text = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
    completion_id = str(item.command.arguments[0]) if item.command and item.command.arguments else ""
    return completion_id, text


async def typing_via_lsp(path: Path, cfg: BenchConfig, env: dict[str, str], progress: Progress) -> list[Sample]:
    """The typing replay's pauses, with every keystroke in between sent as an editor sends it."""
    plan = await asyncio.to_thread(keystroke_plan, path, cfg)
    samples: list[Sample] = []
    # debounce fixed at 1 ms: the replay's pauses are known, and what is compared with the NATS replay is
    # the editor path itself (the adaptive debounce would add ~1.5 keystroke intervals to each request)
    options = {"maxTokens": cfg.max_tokens, "mode": "optimized", "scenario": "bench-typing-lsp",
               "features": cfg.features, "debounceMs": 1}
    async with EditorSession(env, {k: v for k, v in options.items() if v is not None}) as editor:
        editor.open(path, plan.opened)
        shown_id = ""
        deadline = time.monotonic() + cfg.max_seconds
        clock = time.monotonic()
        typed = 0
        for pause in plan.pauses:
            if time.monotonic() > deadline:
                break
            for i in range(typed, pause):
                due = clock + (i + 1) / cfg.typing_cps
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                editor.insert(plan.start + i, plan.body[i])
            typed = pause
            keystroke_at = time.perf_counter()
            result = await editor.ask(plan.start + pause)
            latency = (time.perf_counter() - keystroke_at) * 1000
            completion_id, text = _suggestion(result)
            from_cache = bool(completion_id) and completion_id == shown_id
            shown_id = completion_id or shown_id
            next_text = plan.body[pause:].split("\n", 1)[0]
            reply = {"id": completion_id, "completion": text, "context": {}, "forward_cache": from_cache}
            samples.append(Sample("lsp", latency, reply, suggestion_matches(text, next_text)))
            progress.advance(f"typing lsp {latency:.0f} ms{' (forward cache)' if from_cache else ''}")
            clock = min(clock, time.monotonic() - pause / cfg.typing_cps)
    return samples


def forward_cache_share(samples: Sequence[Sample]) -> dict[str, float | None]:
    hits = [s for s in samples if s.reply.get("forward_cache")]
    fast = [s for s in hits if s.latency_ms <= FORWARD_CACHE_MS]
    return {"forward_cache_share": len(hits) / len(samples) if samples else None,
            "forward_cache_within_5ms_share": len(fast) / len(samples) if samples else None}


async def editor_overhead(samples: Sequence[Sample], database_url: str) -> dict[str, float | None]:
    """What the editor path added to each request that reached the appliance: the editor's latency
    less the worker's own time for it (its telemetry row, by completion id)."""
    from sqlalchemy import text as sql

    from db.session import engine_for

    asked = {s.reply["id"]: s.latency_ms for s in samples if s.reply.get("id") and not s.reply.get("forward_cache")}
    rows: list[Any] = []
    for _ in range(10):  # telemetry is written in batches, every half second
        with engine_for(database_url).connect() as conn:
            rows = conn.execute(sql("SELECT request_id, total_ms FROM completion_events WHERE request_id = ANY(:ids)"),
                                {"ids": list(asked)}).all()
        if len(rows) >= len(asked):
            break
        await asyncio.sleep(1)
    added = [asked[r.request_id] - float(r.total_ms) for r in rows if r.total_ms is not None]
    return {"editor_added_ms_p50": percentile(added, 50) if added else None,
            "editor_added_ms_p95": percentile(added, 95) if added else None}


async def supersede(path: Path, cfg: BenchConfig, env: dict[str, str], status_file: Path, database_url: str,
                    progress: Progress, *, abandon: bool, debounce_ms: int | None) -> dict[str, Any]:
    """A fast typist: a suggestion asked for after every keystroke without waiting, each request
    superseding the last (``abandon``: in the appliance too). ``debounce_ms`` None: the server's
    adaptive debounce. Returns the engine time spent in all and on the answers that were shown."""
    from sqlalchemy import text as sql

    from db.session import engine_for

    plan = await asyncio.to_thread(keystroke_plan, path, cfg)
    label = f"bench-supersede-{'abandon' if abandon else 'keep'}-{debounce_ms or 'adaptive'}-{time.time_ns()}"
    before = _engine_ms(status_file)
    delivered: list[str] = []
    chars = plan.body[:FAST_TYPIST_KEYSTROKES]
    options: dict[str, Any] = {"maxTokens": cfg.max_tokens, "scenario": label, "abandonUpstream": abandon}
    if debounce_ms is not None:
        options["debounceMs"] = debounce_ms
    async with EditorSession(env, options) as editor:
        editor.open(path, plan.opened)
        pending: list[asyncio.Future[types.InlineCompletionList | None]] = []
        for i, char in enumerate(chars):
            editor.insert(plan.start + i, char)
            pending.append(editor.ask(plan.start + i + 1))
            await asyncio.sleep(1 / cfg.typing_cps)
            progress.advance(f"supersede {'abandon' if abandon else 'keep'} keystroke {i + 1}")
        for future in pending:
            try:
                completion_id, _ = _suggestion(await asyncio.wait_for(future, 300))
            except (JsonRpcException, TimeoutError):
                continue
            if completion_id:
                delivered.append(completion_id)
        asked = editor.requests_sent
    # the appliance finishes what it still runs for nobody (without abandoning): every request has its
    # telemetry row once the worker has answered it (a completion, or cancelled, overloaded, timed out)
    give_up = time.monotonic() + DRAIN_S
    rows: list[Any] = []
    while time.monotonic() < give_up:
        with engine_for(database_url).connect() as conn:
            rows = conn.execute(sql("SELECT request_id, outcome, prompt_ms, decode_ms FROM completion_events "
                                    "WHERE scenario = :s"), {"s": label}).all()
        if len(rows) >= asked:
            break
        progress.note(f"waiting for the appliance: {len(rows)} of {asked} requests answered")
        await asyncio.sleep(2)
    await asyncio.sleep(QUIET_S)  # the engine's status is written as each request ends
    total_ms = _engine_ms(status_file) - before
    rows = [r for r in rows if r.outcome != "error"]
    shown_ms = sum((r.prompt_ms or 0) + (r.decode_ms or 0) for r in rows if r.request_id in set(delivered))
    return {"keystrokes": len(chars), "requests_sent": asked, "answers_shown": len(delivered),
            "engine_ms": round(total_ms), "engine_ms_on_shown": round(shown_ms),
            "superseded_share": round(1 - shown_ms / total_ms, 3) if total_ms > 0 else None}


def _engine_ms(status_file: Path) -> float:
    try:
        abandoned = json.loads(status_file.read_text()).get("abandoned", {})
    except (OSError, ValueError):
        return 0.0
    return float(abandoned.get("served_ms", 0.0)) + float(abandoned.get("abandoned_ms", 0.0))
