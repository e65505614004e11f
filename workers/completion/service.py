"""One completion request end to end, like an editor's completion provider: the request off the wire, its text,
its in-file and cross-file context, admission to the engine, the prompt, the engine's answer and the reply, each
outcome observed. The worker's other subjects have modules of their own, reached through ``CompletionService``:
cancel (cancels.py), feedback (feedback.py) and file_opened (file_events.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable

from context import ContextLibrary, Prepared, Prompt, Retriever, file_tokens, memo_sizes
from ctxpress_core import inference
from ctxpress_core.errors import CtxpressError, ErrorCode, RequestError
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import (
    CompletionRequest,
    CompletionResponse,
    ErrorBody,
    ErrorResponse,
    Timings,
    content_hash,
)
from serving.engine_api import CompletionEngine, CompletionResult, EngineRequest, complete
from serving.fim import STOP_WORDS
from workers import metrics
from workers.completion.background import low_priority_executor
from workers.completion.cancels import Cancels
from workers.completion.engine_load import EngineLoad
from workers.completion.feedback import feedback
from workers.completion.file_events import FileEvents
from workers.completion.file_store import FileStore
from workers.completion.fill_behind import FillBehind
from workers.completion.observe import Observer, observe_retrieval
from workers.completion.planned_prompts import PlannedPrompts
from workers.completion.postprocess import CompletionSettled, clean_completion
from workers.completion.prompt_plan import PromptPlanner, calibration_prompt
from workers.completion.request import parse_request
from workers.fair_share import Flooding
from workers.grants import Caller, Grants
from workers.telemetry import TelemetryWriter

log = logging.getLogger("ctxpress.worker.completion")

# Above this, the report's file tokens are estimated (4 characters a token): counting held the tokenizer seconds.
EXACT_FILE_TOKENS_CHARS = 256 * 1024


class CompletionService:
    """One worker's requests: each stage a part of its own (the context library, engine_load, observe), run in
    order by ``_answer``; the per-file state (the library's sessions) and the file store shared by all requests
    and by the file events."""

    def __init__(
        self,
        settings: Settings,
        engine: CompletionEngine,
        count_tokens: Callable[[str], int],
        model_name: str,
        telemetry: TelemetryWriter | None = None,
        retriever: Retriever | None = None,
        grants: Grants | None = None,
    ) -> None:
        self.settings = settings
        self.grants = grants  # team mode: each request's user (from its subject) must hold a grant for its repository
        self.engine = engine
        self.count_tokens = count_tokens
        self.model_name = model_name
        self.files = FileStore()
        self.library = ContextLibrary(settings, count_tokens, model_name)
        self.retriever = retriever  # None: no index (no cross-file chunks)
        self.observe = Observer(telemetry)
        self.engine_load = EngineLoad(slots=settings.kv_pool_slots)
        self._file_tokens_cache: dict[str, int] = {}
        self._low_priority = low_priority_executor()  # background.py: what no live request waits for
        self.cancels = Cancels(settings.max_request_bytes)
        # users refused for their share lately (the worker's limits, or the gateway's): weighed below the others
        self.flooding = Flooding()
        self.planner = PromptPlanner(settings.latency_target_ms, settings.plan_min_tokens)
        self._measuring: asyncio.Task[None] | None = None
        self.fill = FillBehind(engine, self.planner, settings.triton_timeout_s, idle=self.engine_load.idle)
        self.prompts = PlannedPrompts(self.library, self.planner, self.fill, retriever, settings.context_budget_tokens)
        self.file_events = FileEvents(settings, count_tokens, self.files, self.library, self.prompts, self.fill,
                                      self._authorize, self._low_priority)

    def cache_entries(self) -> dict[str, int]:
        """The size of every per-file and per-request structure the worker keeps (each one bounded)."""
        memo_entries, memo_chars = memo_sizes()
        return {"file_store_files": len(self.files), "file_store_chars": self.files.chars,
                **self.library.sessions.counts(), "file_token_counts": len(self._file_tokens_cache),
                "token_memo_entries": memo_entries, "token_memo_chars": memo_chars,
                **self.cancels.counts()}

    def start_measuring(self) -> asyncio.Task[None] | None:
        """The engine measured beside the first requests (``measure_engine``): a request that finds the measurement
        under way waits for it (``_answer``), so a fresh appliance's first completion is planned too; sent whole
        without the figures, a cold prompt took ~12 s on 2 cores. Nothing is measured where nothing is planned
        (a latency target of 0): the engine's first seconds go to the first requests."""
        if self.planner.target_ms <= 0:
            return None
        self._measuring = asyncio.create_task(self.measure_engine())
        return self._measuring

    async def measure_engine(self) -> None:
        """One short prompt through the engine, for the plan's first figures (prompt_plan.py); a failure is logged
        and the first request measures it instead."""
        try:
            result = await complete(self.engine, EngineRequest(
                calibration_prompt(uuid.uuid4().hex), 4, speculation="none", request_id=uuid.uuid4().hex,
                deadline_ms=int(self.settings.triton_timeout_s * 1000)))
        except Exception as exc:
            log.warning("measuring the engine failed (the first request measures it): %s", exc)
            return
        self.planner.speed.observe(result, suggestion=False)
        log.info(json.dumps({"event": "engine_measured", **self.planner.speed.figures()}))

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
                self.cancels.hold(user, request.request_id, task)
            text, digest = self._resolve_text(request, caller)
            response = await self._answer(request, text, digest, request_id, received_at, caller)
            self.observe.completion(request, response, user)
            return response.model_dump_json().encode()
        except asyncio.CancelledError:
            if task is not None and task.cancelling() and not self.cancels.asked(user, request_id):
                raise  # the worker is stopping, not the caller
            metrics.CANCELLED.inc()
            body = ErrorBody(code=ErrorCode.CANCELLED, message=f"request {request_id} was cancelled by its caller")
        except CtxpressError as exc:  # each kind of failure says which code it is answered with
            body = ErrorBody.of(exc)
        except Exception:  # a bug must not take the worker down or leave the IDE hanging
            log.exception("request %s failed", request_id)
            body = ErrorBody(code=ErrorCode.INTERNAL, message=f"internal error (request {request_id})")
        finally:
            if request is not None and request.request_id:
                self.cancels.release(user, request.request_id, task)
        self.observe.error(request, request_id, body, received_at, user)
        return ErrorResponse(error=body).model_dump_json().encode()

    async def _answer(self, request: CompletionRequest, text: str, digest: str, request_id: str,
                      received_at: float, caller: Caller) -> CompletionResponse:
        """The pipeline: context, admission, inference, reply."""
        started = time.perf_counter()
        self.engine_load.admit(self._time_left(request, received_at), caller.user)  # before the context work, too
        view = caller.view(text, digest)
        if self._measuring is not None and not self._measuring.done():
            # for at most half its time: the other half is its own (an engine that never answers the measurement
            # leaves the request the time to say so itself)
            await asyncio.wait({self._measuring}, timeout=max(0.0, self._time_left(request, received_at) / 2))
        # under load the plan shrinks rather than refuses
        left_ms = (self._time_left(request, received_at) - self.engine_load.expected_wait_s(caller.user)) * 1000
        built, plan, full = await self.prompts.choose(request, view, left_ms)
        prepared = built.prepared
        observe_retrieval(prepared.report.retrieval)
        context_ms = (time.perf_counter() - started) * 1000
        left_s = self._time_left(request, received_at)
        self.engine_load.admit(left_s, caller.user)  # OVERLOADED: the requests ahead take longer than it may wait
        # Counting the whole file is for the report only: do it while the model works.
        file_tokens = asyncio.get_running_loop().run_in_executor(self._low_priority, self._file_tokens, text, digest)
        result = await self._infer(request, built, left_s, caller.user)
        self.planner.speed.observe(result)
        if plan is not None:  # the next request here gets the full prompt at the cost of a warm one
            self.fill.tasks.start(caller.user, self.prompts.fill_full(request, view, full))
        prepared.report.file_tokens = await file_tokens
        queue_ms = (started - received_at) * 1000
        return self._response(request, request_id, prepared, result, received_at, queue_ms, context_ms)

    async def _authorize(self, user: str | None, repository: str) -> Caller:
        """Team mode: nothing of a request reaches retrieval or the engine unless its user holds a grant for
        its repository. The single-user appliance serves everything it is asked."""
        if self.grants is None:
            return Caller(user, (repository,))
        return await self.grants.authorize(user, repository)

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

    def _time_left(self, request: CompletionRequest, received_at: float) -> float:
        """Seconds this request may still wait for the engine: the engine's timeout or the caller's, if sooner."""
        timeout_s = self.settings.triton_timeout_s
        if request.timeout_ms is not None:
            timeout_s = min(timeout_s, request.timeout_ms / 1000)
        return timeout_s - (time.perf_counter() - received_at)

    async def _infer(self, request: CompletionRequest, built: Prompt, left_s: float,
                     user: str | None) -> CompletionResult:
        # the engine stops once what the editor gets can no longer change (early_stop)
        settled = CompletionSettled(built.prepared.suffix, prefix=built.prepared.prefix,
                                    language=built.prepared.language)
        self.planner.sent(built.cache_key, built.layout.text)
        try:
            with self.engine_load.track(user):
                return await complete(self.engine, EngineRequest(
                    built.layout.text, request.max_tokens, stop_words=STOP_WORDS, cache_key=built.cache_key,
                    speculation=built.speculation, request_id=uuid.uuid4().hex, deadline_ms=int(left_s * 1000),
                    template_markers=built.layout.markers, cache_salt=built.cache_salt,
                    share=self.settings.flooding_share if user in self.flooding else 1.0),
                    settled=settled if built.prepared.features.get("early_stop", False) else None,
                    max_decode_ms=request.max_decode_ms)
        except CtxpressError:
            raise
        except Exception as exc:  # any other inference failure: reply, do not hang
            raise RequestError(ErrorCode.INFERENCE_FAILED, f"inference failed: {exc}") from None

    def _response(self, request: CompletionRequest, request_id: str, prepared: Prepared, result: CompletionResult,
                  received_at: float, queue_ms: float, context_ms: float) -> CompletionResponse:
        report = prepared.report
        report.prompt_tokens = result.figures.get(inference.CTX_PROMPT_TOKENS)
        report.cached_tokens = result.figures.get(inference.CTX_CACHED_TOKENS)
        report.kv_bytes = result.figures.get(inference.CTX_KV_BYTES)
        report.restored_tokens = result.figures.get(inference.CTX_RESTORED_TOKENS)
        report.restore_ms = result.figures.get(inference.CTX_RESTORE_MS)
        total_ms = (time.perf_counter() - received_at) * 1000
        first = result.first_token_ms or result.total_ms
        return CompletionResponse(
            id=request_id,
            # the finish reason tells the post-processing that the token limit, not the model, ended the text
            completion=clean_completion(result.text, prepared.suffix, prefix=prepared.prefix,
                                        language=prepared.language, finish_reason=result.finish_reason),
            finish_reason=result.finish_reason or "stop",
            model=self.model_name,
            mode=request.mode,
            language=prepared.language,
            content_hash=prepared.digest,
            timings=Timings(context_ms=context_ms, queue_ms=queue_ms, prompt_ms=first,
                            decode_ms=max(result.total_ms - first, 0.0), total_ms=total_ms),
            context=report,
            shard=self.settings.shard,
            completion_tokens=result.figures.get(inference.CTX_COMPLETION_TOKENS),
            draft_tokens_proposed=result.figures.get(inference.CTX_DRAFT_PROPOSED),
            draft_tokens_accepted=result.figures.get(inference.CTX_DRAFT_ACCEPTED),
            features=prepared.features,
        )

    def _file_tokens(self, text: str, digest: str) -> int:
        """Exact whole-file token count, for the report; cached per file version."""
        count = self._file_tokens_cache.get(digest)
        if count is None and len(text) > EXACT_FILE_TOKENS_CHARS:
            return file_tokens(text, None)  # a report figure is not worth holding the tokenizer for seconds
        if count is None:
            count = file_tokens(text, self.count_tokens)
            if len(self._file_tokens_cache) > 4096:
                self._file_tokens_cache.clear()
            self._file_tokens_cache[digest] = count
        return count

    def cancel(self, data: bytes, user: str | None = None) -> bool:
        """``ctxpress.v1.cancel``: abandon the named request if this worker holds it (for the same user)."""
        return self.cancels.cancel(data, user)

    def feedback(self, data: bytes, user: str | None = None) -> bytes:
        """``ctxpress.v1.feedback``: an IDE's accept/dismiss of a completion."""
        return feedback(data, self.settings.max_request_bytes, self.observe, user)

    async def file_opened(self, data: bytes, user: str | None = None) -> bytes:
        """``ctxpress.v1.file_opened``: warm the file, then pre-warm its prompt's head."""
        return await self.file_events.file_opened(data, user)
