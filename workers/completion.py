"""The completion worker: ``ctxpress.v1.complete`` over NATS request-reply.

Run several (``python -m workers.completion``); they share one queue group, so NATS
spreads requests among them. Every request gets exactly one reply: a completion, or a
structured error. CPU work (tokenizing, windowing) runs in an executor so the event
loop keeps answering while a request is being assembled.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import nats
from nats.aio.msg import Msg
from prometheus_client import start_http_server
from pydantic import ValidationError

from ctxpress.features import resolve as resolve_features
from ctxpress.languages import language_from_path
from ctxpress.settings import Settings
from ctxpress.wire.v1 import (
    SUBJECT_FILE_OPENED,
    BlockReport,
    CompletionRequest,
    CompletionResponse,
    ContextReport,
    ErrorBody,
    ErrorCode,
    ErrorResponse,
    Feedback,
    FileOpened,
    Timings,
    UnsupportedLanguage,
    content_hash,
)
from indexer.embeddings import AsyncTritonEmbedder
from indexer.symbols import warm_up
from serving import protocol
from serving.fim import FIM_PREFIX, FIM_SUFFIX, STOP_WORDS, fim_prompt
from serving.triton_client import (
    InferenceTimeout,
    InferenceUnavailable,
    TritonCompletionClient,
)
from workers import metrics
from workers.context.assemble import assemble_context, warm_file
from workers.context.line_tokens import exact_counter
from workers.context.packing import memoized
from workers.context.retrieval import RenderedChunk, Retrieval, Retriever, render_retrieved
from workers.context.window import CursorOutOfRange, Window, baseline_window, split_at_cursor
from workers.file_store import FileStore
from workers.postprocess import clean_completion
from workers.process import run_service
from workers.telemetry import TelemetryWriter

log = logging.getLogger("ctxpress.worker.completion")


class RequestError(Exception):
    def __init__(self, code: ErrorCode, message: str, details: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.body = ErrorBody(code=code, message=message, details=details)


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
                raise RequestError(ErrorCode.UNSUPPORTED_LANGUAGE, str(cause)) from None
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
    ) -> None:
        self.settings = settings
        self.retriever = retriever
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

    async def handle(self, data: bytes, received_at: float) -> bytes:
        """One request in, one reply out; never raises."""
        request_id = uuid.uuid4().hex[:16]
        request: CompletionRequest | None = None
        try:
            request = parse_request(data, self.settings.max_request_bytes)
            request_id = request.request_id or request_id
            response = await self._complete(request, request_id, received_at)
            self._observe(request, response)
            return response.model_dump_json().encode()
        except RequestError as exc:
            body = exc.body
        except Exception:  # a bug must not take the worker down or leave the IDE hanging
            log.exception("request %s failed", request_id)
            body = ErrorBody(code=ErrorCode.INTERNAL, message=f"internal error (request {request_id})")
        self._observe_error(request, request_id, body, received_at)
        return ErrorResponse(error=body).model_dump_json().encode()

    def _observe(self, request: CompletionRequest, response: CompletionResponse) -> None:
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
            "cached_tokens": ctx.cached_tokens, "completion_tokens": response.completion_tokens,
            "draft_tokens_proposed": response.draft_tokens_proposed,
            "draft_tokens_accepted": response.draft_tokens_accepted,
            **{f"{stage}_ms": getattr(t, f"{stage}_ms") for stage in ("queue", "context", "prompt", "decode", "total")},
        }
        log.info(json.dumps({"event": "completion", **{k: v for k, v in row.items() if k != "features"}}))
        if self.telemetry is not None:
            self.telemetry.record_event(row)

    def _observe_error(self, request: CompletionRequest | None, request_id: str, body: ErrorBody,
                       received_at: float) -> None:
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
                "total_ms": (time.perf_counter() - received_at) * 1000,
            })

    def feedback(self, data: bytes) -> bytes:
        """An IDE's accept/dismiss of a completion: recorded for the real acceptance rate."""
        try:
            event = Feedback.model_validate_json(data)
        except ValidationError as exc:
            body = ErrorBody(code=ErrorCode.INVALID_REQUEST, message=f"invalid feedback: {exc.errors()[0]['msg']}")
            return ErrorResponse(error=body).model_dump_json().encode()
        metrics.FEEDBACK.labels(event.action).inc()
        if self.telemetry is not None:
            self.telemetry.record_feedback(event.model_dump())
        return b'{"ok": true}'

    async def file_opened(self, data: bytes) -> bytes:
        """Warm the parse tree and symbol table of a file before its first completion."""
        try:
            event = FileOpened.model_validate_json(data)
        except ValidationError as exc:
            body = ErrorBody(code=ErrorCode.INVALID_REQUEST, message=f"invalid file_opened: {exc.errors()[0]['msg']}")
            return ErrorResponse(error=body).model_dump_json().encode()
        self.files.put(content_hash(event.text), event.text)
        loop = asyncio.get_running_loop()
        try:
            warm_ms = await loop.run_in_executor(
                self._low_priority, functools.partial(warm_file, event.path, event.text, event.language,
                                        count_tokens=self.count_tokens))
        except Exception as exc:  # warming is optional: the first completion will parse instead
            log.exception("warming %s failed", event.path)
            return json.dumps({"ok": False, "reason": f"{type(exc).__name__}: {exc}"}).encode()
        task = asyncio.create_task(self._prewarm_logged(event))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return json.dumps({"ok": True, "warm_ms": warm_ms}).encode()

    async def _prewarm_logged(self, event: FileOpened) -> None:
        try:
            await self._prewarm(event)
        except Exception as exc:  # optional: the first keystroke pays the prompt instead
            metrics.DEGRADED.labels("prewarm", type(exc).__name__).inc()
            log.warning("pre-warming %s failed: %s", event.path, exc)

    def _cache_key(self, request: CompletionRequest, features: dict[str, bool]) -> str | None:
        """The engine's KV pool is keyed by repository + path + model (None: the shared context)."""
        if request.mode != "optimized" or not features.get("prefix_cache", False):
            return None
        return f"{self.model_name}:{request.repository}:{request.path}"

    def _speculation(self, request: CompletionRequest, features: dict[str, bool]) -> str:
        if request.mode != "optimized" or not features.get("speculative", False):
            return "none"
        return "auto"

    async def _prewarm(self, event: FileOpened) -> None:
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
        elif middle_from is not None:
            prompt = fim_prompt(prepared.prefix, prepared.suffix, middle_from=middle_from)
            head = prompt[:len(prompt) - (len(prepared.prefix) - middle_from)]
        else:
            head = FIM_PREFIX + stable
        result = await self.triton.complete(
            head,
            max_tokens=0, timeout_s=self.settings.triton_timeout_s,
            cache_key=self._cache_key(request, features), speculation="none")
        metrics.PREWARMED_TOKENS.inc(result.figures.get(protocol.CTX_PROMPT_TOKENS, 0))
        log.info(json.dumps({"event": "prewarm", "path": event.path, "tokens": result.figures.get(
            protocol.CTX_PROMPT_TOKENS), "reused": result.figures.get(protocol.CTX_CACHED_TOKENS),
            "finish": result.finish_reason}))

    def _resolve_text(self, request: CompletionRequest) -> tuple[str, str]:
        if request.text is not None:
            digest = content_hash(request.text)
            self.files.put(digest, request.text)
            return request.text, digest
        assert request.content_hash is not None
        text = self.files.get(request.content_hash)
        if text is None:
            raise RequestError(ErrorCode.UNKNOWN_CONTENT,
                               f"content hash {request.content_hash[:12]}… is not known here; send the text")
        return text, request.content_hash

    def _prepare(self, request: CompletionRequest, text: str, digest: str) -> Prepared:
        """CPU-bound: runs in an executor."""
        language = request.language or language_from_path(request.path)
        default_budget = (self.settings.baseline_budget_tokens if request.mode == "baseline"
                          else self.settings.context_budget_tokens)
        budget = request.budget_tokens or default_budget
        try:
            split_at_cursor(text, request.line, request.column)
        except CursorOutOfRange as exc:
            raise RequestError(ErrorCode.CURSOR_OUT_OF_RANGE, str(exc)) from None

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

    async def _retrieve(self, request: CompletionRequest, text: str) -> Retrieval:
        assert self.retriever is not None
        return await self.retriever.retrieve(repositories=[request.repository], path=request.path, text=text,
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
        if count is None:
            count = self.count_tokens(text)
            if len(self._file_tokens_cache) > 4096:
                self._file_tokens_cache.clear()
            self._file_tokens_cache[digest] = count
        return count

    async def _complete(self, request: CompletionRequest, request_id: str, received_at: float) -> CompletionResponse:
        started = time.perf_counter()
        queue_ms = (started - received_at) * 1000
        text, digest = self._resolve_text(request)
        loop = asyncio.get_running_loop()
        prepare = loop.run_in_executor(None, partial(self._prepare, request, text, digest))
        if self._wants_retrieval(request):
            # cross-file retrieval runs beside in-file assembly; it never raises and is bounded
            prepared, retrieval = await asyncio.gather(prepare, self._retrieve(request, text))
            await loop.run_in_executor(None, self._add_retrieved, prepared, retrieval, request)
        else:
            prepared = await prepare
        context_ms = (time.perf_counter() - started) * 1000
        # Counting the whole file is for the report only: do it while the model works.
        file_tokens = loop.run_in_executor(self._low_priority, self._file_tokens, text, digest)
        try:
            result = await self.triton.complete(
                fim_prompt(prepared.prefix, prepared.suffix,
                           suffix_first=request.mode == "optimized" and prepared.features.get("suffix_first", False),
                           middle_from=_middle_from(request, prepared)),
                max_tokens=request.max_tokens,
                stop_words=STOP_WORDS,
                timeout_s=self.settings.triton_timeout_s,
                cache_key=self._cache_key(request, prepared.features),
                speculation=self._speculation(request, prepared.features),
            )
        except InferenceTimeout as exc:
            raise RequestError(ErrorCode.INFERENCE_TIMEOUT, str(exc)) from None
        except InferenceUnavailable as exc:
            raise RequestError(ErrorCode.INFERENCE_UNAVAILABLE, str(exc)) from None
        except Exception as exc:  # any other inference failure: reply, do not hang
            raise RequestError(ErrorCode.INFERENCE_FAILED, f"inference failed: {exc}") from None
        report = prepared.report
        report.file_tokens = await file_tokens
        report.prompt_tokens = result.figures.get(protocol.CTX_PROMPT_TOKENS)
        report.cached_tokens = result.figures.get(protocol.CTX_CACHED_TOKENS)
        report.kv_bytes = result.figures.get(protocol.CTX_KV_BYTES)
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
            completion_tokens=result.figures.get(protocol.CTX_COMPLETION_TOKENS),
            draft_tokens_proposed=result.figures.get(protocol.CTX_DRAFT_PROPOSED),
            draft_tokens_accepted=result.figures.get(protocol.CTX_DRAFT_ACCEPTED),
            features=prepared.features,
        )


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
        start_http_server(settings.worker_metrics_port, addr=settings.bind_host)
    retriever = Retriever(settings.effective_database_url(), AsyncTritonEmbedder(settings.effective_triton_url()),
                          timeout_ms=settings.retrieval_timeout_ms, top_k=settings.retrieval_top_k,
                          min_similarity=settings.retrieval_min_similarity)
    service = CompletionService(settings, triton, count_tokens, settings.model_name, telemetry, retriever)
    nc = await nats.connect(settings.effective_nats_url(), name="ctxpress-completion-worker",
                            max_reconnect_attempts=-1)
    tasks: set[asyncio.Task[None]] = set()

    async def reply(msg: Msg, received_at: float) -> None:
        payload = await service.handle(msg.data, received_at)
        if msg.reply:
            await msg.respond(payload)

    async def on_message(msg: Msg) -> None:
        # Reply from a task so a slow inference never blocks the next message's validation.
        task = asyncio.create_task(reply(msg, time.perf_counter()))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def on_feedback(msg: Msg) -> None:
        reply = service.feedback(msg.data)
        if msg.reply:
            await msg.respond(reply)

    # Behind the gateway a worker serves its shard's subjects; alone, the IDE-facing ones.
    suffix = f".{settings.shard}" if settings.shard is not None else ""
    sub = await nc.subscribe(settings.completion_subject + suffix, queue=settings.completion_queue, cb=on_message)
    feedback_sub = await nc.subscribe(settings.feedback_subject, queue=settings.completion_queue, cb=on_feedback)

    async def on_file_opened(msg: Msg) -> None:
        reply = await service.file_opened(msg.data)
        if msg.reply:
            await msg.respond(reply)

    opened_sub = await nc.subscribe(SUBJECT_FILE_OPENED + suffix, queue=settings.completion_queue,
                                    cb=on_file_opened)
    log.info("completion worker listening on %s (queue %s), Triton at %s", settings.completion_subject + suffix,
             settings.completion_queue, settings.effective_triton_url())
    await stop.wait()
    await sub.drain()  # no lost message: finish what was received, then leave the group
    await feedback_sub.drain()
    await opened_sub.drain()
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
