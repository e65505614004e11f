"""The completion worker: ``ctxpress.v1.complete`` over NATS request-reply.

Run several (``python -m workers.completion``); they share one queue group, so NATS
spreads requests among them. Every request gets exactly one reply: a completion, or a
structured error. CPU work (tokenizing, windowing) runs in an executor so the event
loop keeps answering while a request is being assembled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import nats
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import start_http_server
from pydantic import ValidationError

from ctxpress.core import inference
from ctxpress.core.errors import CtxpressError, ErrorCode, RequestError, UnsupportedLanguage
from ctxpress.core.features import resolve as resolve_features
from ctxpress.core.identity import service_connect_options, subject_user, team_mode, user_subject
from ctxpress.core.languages import language_from_path
from ctxpress.core.settings import Settings
from ctxpress.core.wire.v1 import (
    SUBJECT_CANCEL,
    SUBJECT_FILE_OPENED,
    BlockReport,
    CancelRequest,
    CompletionRequest,
    CompletionResponse,
    ContextReport,
    ErrorBody,
    ErrorResponse,
    Feedback,
    FileOpened,
    Timings,
    content_hash,
)
from indexer.embeddings import AsyncTritonEmbedder
from indexer.syntax.tree_cache import TREE_CACHE
from indexer.syntax.warm import warm_up
from serving.fim import FIM_PREFIX, FIM_SUFFIX, STOP_WORDS, fim_markers, fim_prompt
from serving.triton_client import TritonCompletionClient
from workers import metrics
from workers.context import steady
from workers.context.assemble import assemble_context, warm_file
from workers.context.line_tokens import exact_counter
from workers.context.packing import memo_sizes, memoized
from workers.context.retrieval import RenderedChunk, Retrieval, Retriever, render_retrieved
from workers.context.window import (
    MAX_LINE_CHARS,
    Window,
    baseline_window,
    clip_long_lines,
    longest_line,
    split_at_cursor,
)
from workers.file_store import FileStore
from workers.grants import Caller, Grants
from workers.postprocess import clean_completion
from workers.process import run_service
from workers.telemetry import TelemetryWriter

log = logging.getLogger("ctxpress.worker.completion")


def parse_request(data: bytes, max_bytes: int) -> CompletionRequest:
    """Bytes off the wire to a valid request, or a ``RequestError`` saying what is wrong."""
    if len(data) > max_bytes:
        raise RequestError(ErrorCode.PAYLOAD_TOO_LARGE, f"request is {len(data)} bytes; the limit is {max_bytes}")
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(ErrorCode.INVALID_JSON, f"request is not valid JSON: {exc}") from None
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


@dataclass
class Prepared:
    prefix: str
    suffix: str
    report: ContextReport
    language: str
    digest: str
    features: dict[str, bool]
    stable_chars: int = 0  # prefix[:stable_chars] changes least: cross-file chunks go after it
    # The enclosing block up to the cursor: the prefix's last block_chars characters (cross-file
    # chunks go before it), which block_in_middle moves into the FIM middle.
    block_chars: int = 0
    # The in-file excerpts were kept from the previous request (typing in the same block): so are
    # the cross-file chunks after them (see CompletionService._add_retrieved).
    steady: bool = False


# Above this, a file's token count in the report is estimated (about 4 characters a token) rather than
# counted: the shared tokenizer would be held for seconds by a figure nobody waits for.
EXACT_FILE_TOKENS_CHARS = 256 * 1024

# Files whose cross-file chunks are kept for the next keystroke in the same block.
HELD_CHUNK_FILES = 64


class CompletionService:
    def __init__(
        self,
        settings: Settings,
        triton: TritonCompletionClient,
        count_tokens: Callable[[str], int],
        model_name: str,
        telemetry: TelemetryWriter | None = None,
        retriever: Retriever | None = None,
        grants: Grants | None = None,
    ) -> None:
        self.settings = settings
        self.retriever = retriever
        self.grants = grants  # team mode: each request's user (from its subject) must hold a grant for its repository
        self.triton = triton
        self.count_tokens = count_tokens
        self.model_name = model_name
        self.telemetry = telemetry
        self.files = FileStore()
        self._file_tokens_cache: dict[str, int] = {}
        self._background: set[asyncio.Task[None]] = set()  # pre-warm tasks (kept referenced)
        # (repository, path) -> the enclosing block the chunks were placed before, their text, pieces
        self._held_chunks: OrderedDict[tuple[str, str], tuple[tuple[str, int], str, list[RenderedChunk]]] = \
            OrderedDict()
        self._held_chunks_lock = threading.Lock()  # _add_retrieved runs in executor threads
        # Work no live request waits for (warming an opened file, counting a whole file for the
        # report) runs on one thread at the lowest CPU priority: on the embedded appliance it
        # shares two cores with the engine, and at normal priority it slowed the prompt it ran
        # beside (the long eval: ~1,000-token prompts took 13 s, 21-22 s beside a big file's warm-up).
        self._low_priority = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxpress-background",
                                                initializer=_lowest_cpu_priority)
        # Requests by (user, the caller's request_id), for ``ctxpress.v1.cancel``: a user cancels only their own.
        self._inflight: dict[tuple[str | None, str], asyncio.Task[object]] = {}
        self._cancelled_by_caller: dict[tuple[str | None, str], bool] = {}
        self.engine_load = EngineLoad()

    def cache_entries(self) -> dict[str, int]:
        """The size of every per-file and per-request structure the worker keeps (each one bounded)."""
        memo_entries, memo_chars = memo_sizes()
        with self._held_chunks_lock:
            held_chunks = len(self._held_chunks)
        return {"file_store_files": len(self.files), "file_store_chars": self.files.chars,
                "tree_cache_files": len(TREE_CACHE), "steady_excerpt_files": steady.held_files(),
                "held_chunk_files": held_chunks, "file_token_counts": len(self._file_tokens_cache),
                "token_memo_entries": memo_entries, "token_memo_chars": memo_chars,
                "requests_in_flight": len(self._inflight), "cancel_marks": len(self._cancelled_by_caller)}

    async def handle(self, data: bytes, received_at: float, user: str | None = None) -> bytes:
        """One request in, one reply out; never raises (a cancelled request answers ``cancelled``).
        ``user``: whose subject it came on (team mode), None on the single-user subjects."""
        request_id = uuid.uuid4().hex[:16]
        request: CompletionRequest | None = None
        task = asyncio.current_task()
        try:
            request = parse_request(data, self.settings.max_request_bytes)
            request_id = request.request_id or request_id
            caller = await self._authorize(user, request.repository)
            if task is not None and request.request_id:
                self._inflight[(user, request.request_id)] = task
            response = await self._complete(request, request_id, received_at, caller)
            self._observe(request, response, user)
            return response.model_dump_json().encode()
        except asyncio.CancelledError:
            if task is not None and task.cancelling() and not self._cancelled_by_caller.pop((user, request_id), False):
                raise  # the worker is stopping, not the caller
            metrics.CANCELLED.inc()
            body = ErrorBody(code=ErrorCode.CANCELLED, message=f"request {request_id} was cancelled by its caller")
        except CtxpressError as exc:  # each kind of failure says which code it is answered with
            body = ErrorBody.of(exc)
        except Exception:  # a bug must not take the worker down or leave the IDE hanging
            log.exception("request %s failed", request_id)
            body = ErrorBody(code=ErrorCode.INTERNAL, message=f"internal error (request {request_id})")
        finally:
            if request is not None and request.request_id and self._inflight.get((user, request.request_id)) is task:
                del self._inflight[(user, request.request_id)]
                # a cancel that arrived as the request was finishing is not left behind
                self._cancelled_by_caller.pop((user, request.request_id), None)
        self._observe_error(request, request_id, body, received_at, user)
        return ErrorResponse(error=body).model_dump_json().encode()

    async def _authorize(self, user: str | None, repository: str) -> Caller:
        """Team mode: nothing of a request reaches retrieval or the engine unless its user holds a grant for
        its repository. The single-user appliance serves everything it is asked."""
        if self.grants is None:
            return Caller(user, (repository,))
        return await self.grants.authorize(user, repository)

    def cancel(self, data: bytes, user: str | None = None) -> bool:
        """``ctxpress.v1.cancel``: abandon the named request if this worker holds it (for the same user)."""
        try:
            request_id = CancelRequest.model_validate_json(data).request_id
        except ValidationError:
            return False
        task = self._inflight.get((user, request_id))
        if task is None or task.done():
            return False
        self._cancelled_by_caller[(user, request_id)] = True
        task.cancel()
        return True

    def _observe(self, request: CompletionRequest, response: CompletionResponse, user: str | None = None) -> None:
        """Log, count and record one completion (the seed's habit: every request, every figure)."""
        ctx, t = response.context, response.timings
        outcome = "degraded" if ctx.degraded else "ok"
        scenario = request.scenario or "ide"
        metrics.REQUESTS.labels(request.mode, outcome).inc()
        metrics.REQUEST_LATENCY.labels(request.mode, scenario).observe(t.total_ms / 1000)
        for stage in ("context", "queue", "prompt", "decode"):
            metrics.STAGE_LATENCY.labels(stage).observe(getattr(t, f"{stage}_ms") / 1000)
        if ctx.degraded:
            metrics.DEGRADED.labels("context", ctx.degraded.split(":")[0]).inc()
        metrics.FILE_TOKENS.inc(ctx.file_tokens)
        metrics.CONTEXT_TOKENS.inc(ctx.context_tokens)
        metrics.PROMPT_TOKENS.inc(ctx.prompt_tokens or 0)
        metrics.CACHED_PROMPT_TOKENS.inc(ctx.cached_tokens or 0)
        metrics.DRAFT_PROPOSED.inc(response.draft_tokens_proposed or 0)
        metrics.DRAFT_ACCEPTED.inc(response.draft_tokens_accepted or 0)
        for source in ctx.sources:
            metrics.CONTEXT_SOURCES.labels(source).inc()
        row = {
            "request_id": response.id, "repository": request.repository, "path": request.path,
            "language": response.language, "mode": request.mode, "scenario": scenario, "model": response.model,
            "outcome": outcome, "degraded_reason": ctx.degraded, "strategy": ctx.strategy, "sources": ctx.sources,
            "features": json.dumps(response.features), "file_tokens": ctx.file_tokens,
            "context_tokens": ctx.context_tokens, "prompt_tokens": ctx.prompt_tokens,
            "cached_tokens": ctx.cached_tokens, "restored_tokens": ctx.restored_tokens,
            "restore_ms": ctx.restore_ms, "completion_tokens": response.completion_tokens,
            "draft_tokens_proposed": response.draft_tokens_proposed,
            "draft_tokens_accepted": response.draft_tokens_accepted, "user_name": user,
            **{f"{stage}_ms": getattr(t, f"{stage}_ms") for stage in ("queue", "context", "prompt", "decode", "total")},
        }
        log.info(json.dumps({"event": "completion", **{k: v for k, v in row.items() if k != "features"}}))
        if self.telemetry is not None:
            self.telemetry.record_event(row)

    def _observe_error(self, request: CompletionRequest | None, request_id: str, body: ErrorBody,
                       received_at: float, user: str | None = None) -> None:
        mode = request.mode if request else "unknown"
        metrics.REQUESTS.labels(mode, "error").inc()
        metrics.ERRORS.labels(body.code.value).inc()
        log.info(json.dumps({"event": "error", "id": request_id, "code": body.code.value, "message": body.message}))
        if self.telemetry is not None:
            self.telemetry.record_event({
                "request_id": request_id, "repository": request.repository if request else "",
                "path": request.path if request else "", "mode": mode,
                "scenario": (request.scenario if request else None) or "ide", "outcome": "error",
                "error_code": body.code.value, "sources": [], "features": "{}",
                "total_ms": (time.perf_counter() - received_at) * 1000, "user_name": user,
            })

    def feedback(self, data: bytes, user: str | None = None) -> bytes:
        """An IDE's accept/dismiss of a completion: recorded for the real acceptance rate."""
        try:
            event = Feedback.model_validate_json(data)
        except ValidationError as exc:
            body = ErrorBody(code=ErrorCode.INVALID_REQUEST, message=f"invalid feedback: {exc.errors()[0]['msg']}")
            return ErrorResponse(error=body).model_dump_json().encode()
        metrics.FEEDBACK.labels(event.action).inc()
        if self.telemetry is not None:
            self.telemetry.record_feedback({**event.model_dump(), "user_name": user})
        return b'{"ok": true}'

    async def file_opened(self, data: bytes, user: str | None = None) -> bytes:
        """Warm the parse tree and symbol table of a file before its first completion."""
        try:
            event = FileOpened.model_validate_json(data)
            caller = await self._authorize(user, event.repository)
        except ValidationError as exc:
            body = ErrorBody(code=ErrorCode.INVALID_REQUEST, message=f"invalid file_opened: {exc.errors()[0]['msg']}")
            return ErrorResponse(error=body).model_dump_json().encode()
        except CtxpressError as exc:
            return ErrorResponse(error=ErrorBody.of(exc)).model_dump_json().encode()
        self.files.put(caller.file_key(content_hash(event.text)), event.text)
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(None, longest_line, event.text) > MAX_LINE_CHARS:
            return json.dumps({"ok": False, "reason": "long lines: completions there use the window"}).encode()
        try:
            warm_ms = await loop.run_in_executor(
                self._low_priority, functools.partial(warm_file, event.path, event.text, event.language,
                                        count_tokens=self.count_tokens))
        except Exception as exc:  # warming is optional: the first completion will parse instead
            log.exception("warming %s failed", event.path)
            return json.dumps({"ok": False, "reason": f"{type(exc).__name__}: {exc}"}).encode()
        task = asyncio.create_task(self._prewarm_logged(event, caller))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return json.dumps({"ok": True, "warm_ms": warm_ms}).encode()

    async def _prewarm_logged(self, event: FileOpened, caller: Caller) -> None:
        try:
            await self._prewarm(event, caller)
        except Exception as exc:  # optional: the first keystroke pays the prompt instead
            metrics.DEGRADED.labels("prewarm", type(exc).__name__).inc()
            log.warning("pre-warming %s failed: %s", event.path, exc)

    def _cache_key(self, request: CompletionRequest, features: dict[str, bool],
                   caller: Caller | None = None) -> str | None:
        """The engine's KV pool is keyed by repository + path + model (None: the shared context). In team mode
        by user too, shared context included: the cached-token count every reply carries would otherwise tell
        one user whether a prompt they guess matches what another one sent."""
        owner = f"{caller.user}:" if caller is not None and caller.user is not None else ""
        if request.mode != "optimized" or not features.get("prefix_cache", False):
            return f"{self.model_name}:{owner}shared" if owner else None
        return f"{self.model_name}:{owner}{request.repository}:{request.path}"

    def _speculation(self, request: CompletionRequest, features: dict[str, bool]) -> str:
        if request.mode != "optimized" or not features.get("speculative", False):
            return "none"
        return "auto"

    async def _prewarm(self, event: FileOpened, caller: Caller) -> None:
        """Process the stable part of the file's optimized prompt in the engine (max_tokens=0),
        so that the first keystroke finds its KV. The engine gives way to live requests."""
        if event.line is None:  # without a cursor there is no prompt to predict
            return
        request = CompletionRequest(repository=event.repository, path=event.path, text=event.text,
                                    line=min(event.line, event.text.count("\n")), column=event.column,
                                    language=event.language, mode="optimized")
        features = resolve_features(request.features)
        if not (features["prewarm"] and features["prefix_cache"]):
            return
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(None, self._prepare, request, event.text, content_hash(event.text))
        stable = prepared.prefix[:prepared.stable_chars]
        if not stable:
            return
        # The live prompt will start the same way (see fim_prompt): the stable part is its head,
        # and when the middle opens with the block or the cursor line, all that comes before it.
        middle_from = _middle_from(request, prepared)
        if features["suffix_first"]:
            head = FIM_SUFFIX + prepared.suffix + FIM_PREFIX + stable
            markers = fim_markers(stable, prepared.suffix, suffix_first=True, within=len(head))
        elif middle_from is not None:
            prompt = fim_prompt(prepared.prefix, prepared.suffix, middle_from=middle_from)
            head = prompt[:len(prompt) - (len(prepared.prefix) - middle_from)]
            markers = fim_markers(prepared.prefix, prepared.suffix, middle_from=middle_from, within=len(head))
        else:
            head = FIM_PREFIX + stable
            markers = (0,)
        result = await self.triton.complete(
            head, template_markers=markers,
            max_tokens=0, timeout_s=self.settings.triton_timeout_s,
            cache_key=self._cache_key(request, features, caller), speculation="none")
        metrics.PREWARMED_TOKENS.inc(result.figures.get(inference.CTX_PROMPT_TOKENS, 0))
        log.info(json.dumps({"event": "prewarm", "path": event.path, "tokens": result.figures.get(
            inference.CTX_PROMPT_TOKENS), "reused": result.figures.get(inference.CTX_CACHED_TOKENS),
            "finish": result.finish_reason}))

    def _resolve_text(self, request: CompletionRequest, caller: Caller) -> tuple[str, str]:
        if request.text is not None:
            digest = content_hash(request.text)
            self.files.put(caller.file_key(digest), request.text)
            return request.text, digest
        assert request.content_hash is not None
        text = self.files.get(caller.file_key(request.content_hash))
        if text is None:
            raise RequestError(ErrorCode.UNKNOWN_CONTENT,
                               f"content hash {request.content_hash[:12]}… is not known here; send the text")
        return text, request.content_hash

    def _prepare(self, request: CompletionRequest, text: str, digest: str) -> Prepared:
        """CPU-bound: runs in an executor."""
        language = request.language or language_from_path(request.path, text)
        default_budget = (self.settings.baseline_budget_tokens if request.mode == "baseline"
                          else self.settings.context_budget_tokens)
        budget = request.budget_tokens or default_budget
        split_at_cursor(text, request.line, request.column)  # CursorOutOfRange: answered cursor_out_of_range

        def window() -> Window:
            # also optimized's fallback, then within optimized's budget
            return baseline_window(
                text, request.line, request.column,
                count_tokens=self.count_tokens,
                window_lines=self.settings.window_lines,
                budget_tokens=budget,
            )

        enabled = resolve_features(request.features) if request.mode == "optimized" else {}
        if request.mode == "baseline" or not enabled["crop"]:
            w = window()
            report = ContextReport(
                strategy="window",
                sources=["window"],
                file_tokens=0,
                # counted whole: per-line sums (used for packing) overcount at line seams
                context_tokens=self.count_tokens(w.prefix) + self.count_tokens(w.suffix),
                window_start_line=w.start_line,
                window_end_line=w.end_line,
                truncated=w.truncated,
                budget_tokens=budget,
            )
            return Prepared(w.prefix, w.suffix, report, language, digest, enabled)

        def fallback() -> tuple[str, str]:
            w = window()
            return w.prefix, w.suffix

        ctx = assemble_context(
            text, request.path, request.line, request.column,
            count_tokens=self.count_tokens,
            budget_tokens=budget,
            language=request.language,
            recent_edit_lines=request.recent_edits or (),
            timeout_ms=self.settings.assembly_timeout_ms,
            fallback=fallback,
            summaries=enabled["summaries"],
            nearby_first=enabled["nearby_first"],
            similar=enabled["similar"],
            whole_file=enabled["whole_file"],
            fill_below=enabled["fill_below"],
            steady=enabled["steady_excerpts"],
        )
        report = ContextReport(
            strategy=ctx.strategy,
            sources=sorted({b.kind for b in ctx.blocks}) or ["window"],
            file_tokens=0,
            context_tokens=ctx.context_tokens,
            degraded=ctx.fallback_reason,
            budget_tokens=budget,
            blocks=[BlockReport(**vars(b)) for b in ctx.blocks],
            dropped=[BlockReport(**vars(b)) for b in ctx.dropped],
        )
        return Prepared(ctx.prefix, ctx.suffix, report, language, digest, enabled, stable_chars=ctx.stable_chars,
                        block_chars=0 if ctx.strategy == "window-fallback" else len(ctx.prefix) - ctx.stable_chars,
                        steady=ctx.steady)

    def _wants_retrieval(self, request: CompletionRequest) -> bool:
        return (self.retriever is not None and request.mode == "optimized"
                and resolve_features(request.features)["retrieval"])

    async def _retrieve(self, request: CompletionRequest, text: str, caller: Caller) -> Retrieval:
        assert self.retriever is not None
        return await self.retriever.retrieve(repositories=list(caller.repositories), path=request.path, text=text,
                                             line=request.line, language=request.language)

    def _add_retrieved(self, prepared: Prepared, retrieval: Retrieval, request: CompletionRequest) -> None:
        """Other files' chunks go between the in-file excerpts and the enclosing block (which
        stays next to the cursor), within what the in-file context left of the budget. Not
        first: they change with every cursor move, and everything after them in the prompt
        would lose its cached KV. While the user types in one block (the in-file excerpts kept),
        the chunks placed there are kept too when they still fit: a query that follows the typed
        words would change them, and the KV of the block after them, at every keystroke."""
        report = prepared.report
        r = retrieval.report
        report.retrieval = {"elapsed_ms": r.elapsed_ms, "threshold": r.threshold, "returned": r.returned,
                            "coarse_files": r.coarse_files, "unresolved": r.unresolved, "skipped": r.skipped}
        if r.skipped:
            metrics.DEGRADED.labels("retrieval", r.skipped).inc()
            log.info(json.dumps({"event": "degraded", "part": "retrieval", "why": r.skipped}))
        room = (report.budget_tokens or 0) - report.context_tokens
        key = (request.repository, request.path)
        block = (report.blocks[0].name, report.blocks[0].start_line) if report.blocks else ("", -1)
        with self._held_chunks_lock:
            held = self._held_chunks.pop(key, None)
        kept = (prepared.steady and held is not None and held[0] == block
                and sum(piece.tokens for piece in held[2]) <= room)
        if held is not None and kept:
            _block, text, rendered = held
        else:
            if not retrieval.chunks or room <= 0:
                return
            text, rendered = render_retrieved(retrieval.chunks, room, self.count_tokens, prepared.language)
            if not rendered:
                return
        with self._held_chunks_lock:
            self._held_chunks[key] = (block, text, rendered)
            while len(self._held_chunks) > HELD_CHUNK_FILES:
                self._held_chunks.popitem(last=False)
        note = "; kept while typing in the same block" if kept else ""
        at = prepared.stable_chars
        prepared.prefix = prepared.prefix[:at] + text + prepared.prefix[at:]
        report.context_tokens += sum(piece.tokens for piece in rendered)
        report.sources = sorted({*report.sources, "retrieval"})
        report.blocks.extend(
            BlockReport(kind="retrieved", name=f"{piece.chunk.path}:{piece.chunk.symbol}",
                        start_line=piece.chunk.start_line, end_line=piece.chunk.end_line, form=piece.form,
                        tokens=piece.tokens,
                        reason=(f"other file, found by {'+'.join(piece.chunk.found_by)}, "
                                f"score {piece.chunk.score:.3f}{note}"))
            for piece in rendered
        )

    def _file_tokens(self, text: str, digest: str) -> int:
        """Exact whole-file token count, for the report; cached per file version."""
        count = self._file_tokens_cache.get(digest)
        if count is None and len(text) > EXACT_FILE_TOKENS_CHARS:
            return len(text) // 4  # a report figure is not worth holding the tokenizer for seconds
        if count is None:
            count = self.count_tokens(text)
            if len(self._file_tokens_cache) > 4096:
                self._file_tokens_cache.clear()
            self._file_tokens_cache[digest] = count
        return count

    async def _prepare_with_retrieval(self, request: CompletionRequest, text: str, digest: str,
                                      caller: Caller) -> Prepared:
        loop = asyncio.get_running_loop()
        prepare = loop.run_in_executor(None, partial(self._prepare, request, text, digest))
        if not self._wants_retrieval(request):
            return await prepare
        # cross-file retrieval runs beside in-file assembly; it never raises and is bounded
        prepared, retrieval = await asyncio.gather(prepare, self._retrieve(request, text, caller))
        await loop.run_in_executor(None, self._add_retrieved, prepared, retrieval, request)
        return prepared

    def _prepare_long_lines(self, request: CompletionRequest, text: str, digest: str, longest: int) -> Prepared:
        """A file with a line over ``MAX_LINE_CHARS``: the baseline window of the file with its long lines cut."""
        split_at_cursor(text, request.line, request.column)  # CursorOutOfRange: answered cursor_out_of_range
        clipped, column = clip_long_lines(text, request.line, request.column)
        prepared = self._prepare(request.model_copy(update={"column": column, "mode": "baseline",
                                                            "budget_tokens": request.budget_tokens or
                                                            self.settings.context_budget_tokens}),
                                 clipped, digest)
        prepared.report.degraded = f"long lines: a line of {longest:,} characters (over {MAX_LINE_CHARS:,})"
        return prepared

    async def _complete(self, request: CompletionRequest, request_id: str, received_at: float,
                        caller: Caller) -> CompletionResponse:
        started = time.perf_counter()
        queue_ms = (started - received_at) * 1000
        text, digest = self._resolve_text(request, caller)
        loop = asyncio.get_running_loop()
        longest = await loop.run_in_executor(None, longest_line, text)
        if longest > MAX_LINE_CHARS:
            # minified or generated code: the window around the cursor, long lines cut, no parse, no
            # retrieval (every pass over such a line costs in proportion to its length)
            prepared = await loop.run_in_executor(None, self._prepare_long_lines, request, text, digest, longest)
        else:
            prepared = await self._prepare_with_retrieval(request, text, digest, caller)
        context_ms = (time.perf_counter() - started) * 1000

            # cross-file retrieval runs beside in-file assembly; it never raises and is bounded
        timeout_s = self.settings.triton_timeout_s
        if request.timeout_ms is not None:
            timeout_s = min(timeout_s, request.timeout_ms / 1000)
        left_s = timeout_s - (time.perf_counter() - received_at)
        expected_s = self.engine_load.expected_wait_s()
        if left_s <= 0 or expected_s > left_s:
            metrics.OVERLOADED.inc()
            raise RequestError(ErrorCode.OVERLOADED,
                               f"the engine is busy: {self.engine_load.inflight} requests ahead, about "
                               f"{expected_s:.1f}s of work, and this request waits {max(left_s, 0):.1f}s")
        # Counting the whole file is for the report only: do it while the model works.
        file_tokens = loop.run_in_executor(self._low_priority, self._file_tokens, text, digest)
        try:
            with self.engine_load.track():
                suffix_first = request.mode == "optimized" and prepared.features.get("suffix_first", False)
                middle_from = _middle_from(request, prepared)
                result = await self.triton.complete(
                    fim_prompt(prepared.prefix, prepared.suffix, suffix_first=suffix_first, middle_from=middle_from),
                    template_markers=fim_markers(prepared.prefix, prepared.suffix, suffix_first=suffix_first,
                                                 middle_from=middle_from),
                    max_tokens=request.max_tokens,
                    stop_words=STOP_WORDS,
                    timeout_s=left_s,
                    cache_key=self._cache_key(request, prepared.features, caller),
                    speculation=self._speculation(request, prepared.features),
                    request_id=uuid.uuid4().hex,
                )
        except CtxpressError:
            raise
        except Exception as exc:  # any other inference failure: reply, do not hang
            raise RequestError(ErrorCode.INFERENCE_FAILED, f"inference failed: {exc}") from None
        report = prepared.report
        report.file_tokens = await file_tokens
        report.prompt_tokens = result.figures.get(inference.CTX_PROMPT_TOKENS)
        report.cached_tokens = result.figures.get(inference.CTX_CACHED_TOKENS)
        report.kv_bytes = result.figures.get(inference.CTX_KV_BYTES)
        report.restored_tokens = result.figures.get(inference.CTX_RESTORED_TOKENS)
        report.restore_ms = result.figures.get(inference.CTX_RESTORE_MS)
        total_ms = (time.perf_counter() - received_at) * 1000
        first = result.first_token_ms or result.total_ms
        return CompletionResponse(
            id=request_id,
            completion=clean_completion(result.text, prepared.suffix),
            finish_reason=result.finish_reason or "stop",
            model=self.model_name,
            mode=request.mode,
            language=prepared.language,
            content_hash=digest,
            timings=Timings(
                context_ms=context_ms,
                queue_ms=queue_ms,
                prompt_ms=first,
                decode_ms=max(result.total_ms - first, 0.0),
                total_ms=total_ms,
            ),
            context=report,
            completion_tokens=result.figures.get(inference.CTX_COMPLETION_TOKENS),
            draft_tokens_proposed=result.figures.get(inference.CTX_DRAFT_PROPOSED),
            draft_tokens_accepted=result.figures.get(inference.CTX_DRAFT_ACCEPTED),
            features=prepared.features,
        )


class EngineLoad:
    """This worker's requests waiting on the engine, and how long one takes (moving average): a
    request that would wait longer than its caller does is rejected at once (``overloaded``)
    instead of being queued to time out, leaving a backlog of work nobody waits for."""

    def __init__(self, prior_s: float = 2.0, alpha: float = 0.2) -> None:
        self.inflight = 0
        self.mean_s = prior_s
        self._alpha = alpha

    def expected_wait_s(self) -> float:
        return self.inflight * self.mean_s

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        self.inflight += 1
        started = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.inflight -= 1
            elapsed = time.perf_counter() - started
            # A request that ended without an answer (timed out, cancelled) after longer than the estimate says
            # a request takes at least that long. Without it an engine too slow for every deadline never served
            # a request to learn from, and every request was accepted only to time out.
            if ok or elapsed > self.mean_s:
                self.mean_s += self._alpha * (elapsed - self.mean_s)


def _middle_from(request: CompletionRequest, prepared: Prepared) -> int | None:
    """Where the FIM middle starts in the prefix (see serving.fim.fim_prompt), None: at its end."""
    if request.mode != "optimized":
        return None
    if prepared.features.get("block_in_middle", False) and prepared.block_chars > 0:
        return len(prepared.prefix) - prepared.block_chars
    if prepared.features.get("line_in_middle", False) or prepared.features.get("block_in_middle", False):
        # (a window has no block: its cursor line is what changes)
        return prepared.prefix.rfind("\n") + 1
    return None


def _lowest_cpu_priority() -> None:
    """Nice 19 for the calling thread only (Linux applies setpriority to a thread id)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError) as exc:  # not Linux, or not allowed: normal priority
        log.info("background thread keeps normal CPU priority: %s", exc)


def load_tokenizer(settings: Settings) -> Callable[[str], int]:
    from serving.tokenizer import Tokenizer, memoized_counter
    from serving.weights import TARGET, ensure_model

    path = settings.model_path or ensure_model(TARGET, settings.models_dir)
    return memoized_counter(Tokenizer(path).count)




async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    connect_options = service_connect_options(settings)  # team mode: no start without the worker credential
    grants = Grants(settings.effective_database_url()) if team_mode(settings) else None
    loop = asyncio.get_running_loop()
    count_tokens = await loop.run_in_executor(None, load_tokenizer, settings)
    # Load every grammar and query now rather than on the first request of each language, and
    # check once that segment-wise token counting is exact for this tokenizer (~0.1 s).
    await loop.run_in_executor(None, warm_up)
    await loop.run_in_executor(None, exact_counter, memoized(count_tokens))
    triton = TritonCompletionClient(settings.effective_triton_url())
    telemetry = TelemetryWriter(settings.effective_database_url())
    telemetry.start()
    if settings.worker_metrics_port:
        start_http_server(settings.worker_metrics_port, addr=settings.metrics_bind_host)
    retriever = Retriever(settings.effective_database_url(), AsyncTritonEmbedder(settings.effective_triton_url()),
                          timeout_ms=settings.retrieval_timeout_ms, top_k=settings.retrieval_top_k,
                          min_similarity=settings.retrieval_min_similarity)
    service = CompletionService(settings, triton, count_tokens, settings.model_name, telemetry, retriever, grants)
    for cache in service.cache_entries():  # read when /metrics is scraped
        metrics.CACHE_ENTRIES.labels(cache).set_function(lambda cache=cache: service.cache_entries()[cache])
    nc = await nats.connect(settings.nats_servers(), name="ctxpress-completion-worker",
                            max_reconnect_attempts=-1, **connect_options)
    tasks: set[asyncio.Task[None]] = set()

    async def reply(msg: Msg, received_at: float) -> None:
        payload = await service.handle(msg.data, received_at, subject_user(msg.subject))
        if msg.reply:
            await msg.respond(payload)

    async def on_message(msg: Msg) -> None:
        # Reply from a task so a slow inference never blocks the next message's validation.
        task = asyncio.create_task(reply(msg, time.perf_counter()))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def on_feedback(msg: Msg) -> None:
        reply = service.feedback(msg.data, subject_user(msg.subject))
        if msg.reply:
            await msg.respond(reply)

    # Behind the gateway a worker serves its shard's subjects; alone, the IDE-facing ones.
    suffix = f".{settings.shard}" if settings.shard is not None else ""
    sub = await nc.subscribe(settings.completion_subject + suffix, queue=settings.completion_queue, cb=on_message)
    feedback_sub = await nc.subscribe(settings.feedback_subject, queue=settings.completion_queue, cb=on_feedback)

    async def on_file_opened(msg: Msg) -> None:
        reply = await service.file_opened(msg.data, subject_user(msg.subject))
        if msg.reply:
            await msg.respond(reply)

    opened_sub = await nc.subscribe(SUBJECT_FILE_OPENED + suffix, queue=settings.completion_queue,
                                    cb=on_file_opened)

    async def on_cancel(msg: Msg) -> None:
        service.cancel(msg.data, subject_user(msg.subject))

    # Not a queue group: whichever worker holds the request must hear it.
    cancel_sub = await nc.subscribe(SUBJECT_CANCEL, cb=on_cancel)
    # Team mode: the same handlers on every user's subjects (ctxpress.v1.u.*.<kind>), each request checked against
    # the grants of the user in its subject. On the subjects above requests carry no user and get `forbidden`.
    user_subs: list[Subscription] = []
    if grants is not None:
        for kind, cb in (("complete", on_message), ("feedback", on_feedback), ("file_opened", on_file_opened)):
            user_subs.append(await nc.subscribe(user_subject("*", kind), queue=settings.completion_queue, cb=cb))
        user_subs.append(await nc.subscribe(user_subject("*", "cancel"), cb=on_cancel))
    log.info("completion worker listening on %s (queue %s), Triton at %s", settings.completion_subject + suffix,
             settings.completion_queue, settings.effective_triton_url())
    await stop.wait()
    await sub.drain()  # no lost message: finish what was received, then leave the group
    await feedback_sub.drain()
    await opened_sub.drain()
    await cancel_sub.unsubscribe()
    for user_sub in user_subs:
        await user_sub.drain()
    if tasks:
        await asyncio.wait(tasks, timeout=settings.triton_timeout_s)
    await nc.drain()
    await telemetry.close()
    await triton.close()
    log.info("completion worker stopped")


def main() -> int:
    return run_service(run_worker)


if __name__ == "__main__":
    raise SystemExit(main())
