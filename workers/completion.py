"""The completion worker: ``ctxpress.v1.complete`` over NATS request-reply.

Run several (``python -m workers.completion``); they share one queue group, so NATS
spreads requests among them. Every request gets exactly one reply: a completion, or a
structured error. CPU work (tokenizing, windowing) runs in an executor so the event
loop keeps answering while a request is being assembled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import nats
from nats.aio.msg import Msg
from pydantic import ValidationError

from ctxpress.languages import language_from_path
from ctxpress.settings import Settings, get_settings
from ctxpress.wire.v1 import (
    BlockReport,
    CompletionRequest,
    CompletionResponse,
    ContextReport,
    ErrorBody,
    ErrorCode,
    ErrorResponse,
    Timings,
    UnsupportedLanguage,
    content_hash,
)
from indexer.symbols import warm_up
from serving import protocol
from serving.fim import STOP_WORDS, fim_prompt
from serving.triton_client import (
    InferenceTimeout,
    InferenceUnavailable,
    TritonCompletionClient,
)
from workers.context.assemble import assemble_context
from workers.context.window import CursorOutOfRange, Window, baseline_window, split_at_cursor
from workers.file_store import FileStore
from workers.postprocess import clean_completion

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
    prompt: str
    suffix: str
    report: ContextReport
    language: str
    digest: str


class CompletionService:
    def __init__(
        self,
        settings: Settings,
        triton: TritonCompletionClient,
        count_tokens: Callable[[str], int],
        model_name: str,
    ) -> None:
        self.settings = settings
        self.triton = triton
        self.count_tokens = count_tokens
        self.model_name = model_name
        self.files = FileStore()
        self._file_tokens_cache: dict[str, int] = {}

    async def handle(self, data: bytes, received_at: float) -> bytes:
        """One request in, one reply out; never raises."""
        request_id = uuid.uuid4().hex[:16]
        try:
            request = parse_request(data, self.settings.max_request_bytes)
            request_id = request.request_id or request_id
            response = await self._complete(request, request_id, received_at)
            log.info(json.dumps({
                "event": "completion", "id": request_id, "mode": request.mode, "path": request.path,
                "file_tokens": response.context.file_tokens, "context_tokens": response.context.context_tokens,
                "cached_tokens": response.context.cached_tokens, "total_ms": round(response.timings.total_ms, 1),
                "finish": response.finish_reason,
            }))
            return response.model_dump_json().encode()
        except RequestError as exc:
            log.info(json.dumps({"event": "error", "id": request_id, "code": exc.body.code.value,
                                 "message": exc.body.message}))
            return ErrorResponse(error=exc.body).model_dump_json().encode()
        except Exception:  # a bug must not take the worker down or leave the IDE hanging
            log.exception("request %s failed", request_id)
            body = ErrorBody(code=ErrorCode.INTERNAL, message=f"internal error (request {request_id})")
            return ErrorResponse(error=body).model_dump_json().encode()

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
        budget = request.budget_tokens or self.settings.context_budget_tokens
        try:
            split_at_cursor(text, request.line, request.column)
        except CursorOutOfRange as exc:
            raise RequestError(ErrorCode.CURSOR_OUT_OF_RANGE, str(exc)) from None

        def window() -> Window:
            return baseline_window(
                text, request.line, request.column,
                count_tokens=self.count_tokens,
                window_lines=self.settings.window_lines,
                budget_tokens=budget,
            )

        if request.mode == "baseline":
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
            return Prepared(fim_prompt(w.prefix, w.suffix), w.suffix, report, language, digest)

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
        return Prepared(fim_prompt(ctx.prefix, ctx.suffix), ctx.suffix, report, language, digest)

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
        prepared = await loop.run_in_executor(None, partial(self._prepare, request, text, digest))
        context_ms = (time.perf_counter() - started) * 1000
        # Counting the whole file is for the report only: do it while the model works.
        file_tokens = loop.run_in_executor(None, self._file_tokens, text, digest)
        try:
            result = await self.triton.complete(
                prepared.prompt,
                max_tokens=request.max_tokens,
                stop_words=STOP_WORDS,
                timeout_s=self.settings.triton_timeout_s,
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
        )


def load_tokenizer(settings: Settings) -> Callable[[str], int]:
    from serving.tokenizer import Tokenizer
    from serving.weights import TARGET, ensure_model

    path = settings.model_path or ensure_model(TARGET, settings.models_dir)
    return Tokenizer(path).count


async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    count_tokens = await loop.run_in_executor(None, load_tokenizer, settings)
    # Load every grammar and query now rather than on the first request of each language.
    await loop.run_in_executor(None, warm_up)
    triton = TritonCompletionClient(settings.effective_triton_url())
    service = CompletionService(settings, triton, count_tokens, settings.model_name)
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

    sub = await nc.subscribe(settings.completion_subject, queue=settings.completion_queue, cb=on_message)
    log.info("completion worker listening on %s (queue %s), Triton at %s", settings.completion_subject,
             settings.completion_queue, settings.effective_triton_url())
    await stop.wait()
    await sub.drain()  # no lost message: finish what was received, then leave the group
    if tasks:
        await asyncio.wait(tasks, timeout=settings.triton_timeout_s)
    await nc.drain()
    await triton.close()
    log.info("completion worker stopped")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = get_settings()

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(settings, stop)

    asyncio.run(runner())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
