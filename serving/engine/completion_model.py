"""The completion model Triton serves (``bind_completion_model``): admission, one engine thread, chunks streamed
back, cancellation, and the engine's status file."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np

from ctxpress_core import inference
from serving.engine.abandoned import AbandonedRequests
from serving.engine.completion_tensors import CompletionInputs, response_tensors, text_value
from serving.engine.cpu_engine import LlamaEngine
from serving.engine.generation import GaveWay, GenerationChunk, GenerationFigures
from serving.engine.scheduler import WINDOW_S, LatencyFirstScheduler, Ticket

log = logging.getLogger("ctxpress.triton")


class CompletionModel:
    """The pytriton inference callable: one request per call (max_batch_size 1).

    An async generator on purpose: pytriton iterates a plain generator on its event loop, so
    generation would block every other request there, and two requests queued on the engine
    would deadlock (the second blocking the loop the first needs to stream). Generation runs
    on one dedicated thread instead (requests are served in arrival order) and chunks cross
    back through an asyncio queue.
    """

    def __init__(self, engine: LlamaEngine, status_path: Path | None = None, latency_first: bool = True) -> None:
        self.engine = engine
        self.status_path = status_path
        # Admission: latency-first (a 5 ms window, urgent requests first, earliest deadline first,
        # warm-ups last, a prompt giving way to a request due before it) or plain arrival order;
        # one thread runs what is admitted, since the engine serves one request at a time.
        self._latency_first = latency_first
        self._scheduler: LatencyFirstScheduler[Callable[[], None]] = LatencyFirstScheduler(
            window_s=WINDOW_S if latency_first else 0.0)
        self._ready = threading.Condition()
        self.abandoned = AbandonedRequests()
        threading.Thread(target=self._run_admitted, name="llama", daemon=True).start()

    def cancel(self, requests: list[Any]) -> list[dict[str, np.ndarray]]:
        """The cancel model: each named request is abandoned (see ``AbandonedRequests``)."""
        out = []
        for request in requests:
            known = self.abandoned.cancel(text_value(request.data, inference.CTX_REQUEST_ID))
            out.append({"ok": np.array([[int(known)]], dtype=np.int32)})
        return out

    def _submit(self, job: Callable[[], None], *, warm: bool, cost_s: float = 0.0,
                ticket: Ticket | None = None) -> Ticket:
        with self._ready:
            ticket = self._scheduler.submit(job, warm=warm and self._latency_first, cost_s=cost_s, ticket=ticket)
            self._ready.notify()
        return ticket

    def _run_admitted(self) -> None:
        while True:
            with self._ready:
                # one at a time: the next is chosen when this one is done, among all then queued
                while not (batch := self._scheduler.next_batch(limit=1)):
                    self._ready.wait(timeout=self._scheduler.wait_s())
            for job in batch:
                try:
                    job()
                except Exception:  # e.g. the caller's event loop closed: the next requests still run
                    log.exception("a request's job failed outside the engine")

    def _estimate(self, prompt: str, markers: list[int] | None, cache_key: str | None,
                  max_tokens: int) -> tuple[list[int], float]:
        """The prompt's tokens and its expected service time in seconds."""
        tokens = self.engine.tokenize(prompt, markers)
        return tokens, self.engine.expected_ms(tokens, cache_key, max_tokens) / 1000

    def _due_before(self, deadline: float) -> bool:
        with self._ready:
            return self._scheduler.earlier_than(deadline)

    async def __call__(self, requests: list[Any]) -> AsyncIterator[list[dict[str, np.ndarray]]]:
        # One piece on purpose: the job that runs on the engine thread (``produce``, which queues itself
        # again when it gives way) and its helpers are closures over this request's queue, event loop,
        # ticket and watch, which the streaming loop at the end shares with them.
        # Decoupled: each yield is one response per request of this call.
        assert len(requests) == 1, "the CPU engine is bound with max_batch_size=1"
        req = CompletionInputs.of(requests[0].data)
        watch = self.abandoned.watch(req.request_id,
                                     time.monotonic() + req.budget_ms / 1000 if req.budget_ms > 0 else None)

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[GenerationChunk | BaseException | None] = asyncio.Queue()
        live = req.max_tokens > 0  # max_tokens=0 is a warm-up, which gives way to live requests
        by_deadline = live and self._latency_first
        cost_s, tokens = 0.0, None
        if by_deadline:
            try:  # tokenizing is CPU work: off the event loop (the engine then uses these tokens)
                tokens, cost_s = await loop.run_in_executor(None, self._estimate, req.prompt, req.markers,
                                                            req.cache_key, req.max_tokens)
            except Exception as exc:  # the engine reports a bad prompt itself; admitted in arrival order
                log.debug("no cost estimate: %s", exc)
        ticket: list[Ticket] = []  # set once queued (the engine may start before _submit returns)

        def give_way() -> bool:
            # an abandoned request stops at its next chunk too, keeping the KV it has processed
            return watch.abandoned() or (bool(ticket) and self._due_before(ticket[0].deadline))

        def finish_abandoned(stage: str, started: float, figures: GenerationFigures | None = None) -> None:
            self.abandoned.record(stage, (time.perf_counter() - started) * 1000)
            done = figures or GenerationFigures(prompt_tokens=len(tokens or ()))
            done.finish_reason = "cancelled"
            loop.call_soon_threadsafe(queue.put_nowait, GenerationChunk(text="", figures=done, final=True))
            self._write_status()
            loop.call_soon_threadsafe(queue.put_nowait, None)

        def produce(carried: GaveWay | None = None) -> None:
            if live:
                self.engine.live_waiting -= 1
            started = time.perf_counter()
            if watch.abandoned():  # nobody waits for it any more: never computed
                finish_abandoned("queued", started)
                return
            try:
                chunks = self.engine.generate(req.prompt, max_tokens=req.max_tokens, temperature=req.temperature,
                                              stop=req.stop, cache_key=req.cache_key, speculation=req.speculation,
                                              give_way=give_way if (by_deadline or watch.watched) else None,
                                              carried=carried, tokens=tokens, markers=req.markers)
                for chunk in chunks:
                    if not chunk.final and watch.abandoned():
                        chunks.close()  # stops between decode steps; the KV so far stays in the pool
                        finish_abandoned("decode", started, chunk.figures)
                        return
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
                self.abandoned.record_served((time.perf_counter() - started) * 1000)
            except GaveWay as stepped:  # queued again with its first arrival and deadline
                if watch.abandoned():
                    finish_abandoned("prompt", started)
                    return
                self.abandoned.record_served((time.perf_counter() - started) * 1000)
                log.info("a prompt (%s) gave way to a request due earlier after %d tokens", req.cache_key,
                         stepped.processed)
                if live:
                    self.engine.live_waiting += 1
                # (the except clause unbinds its name: the job gets the exception as an argument)
                self._submit(functools.partial(produce, stepped), warm=False, ticket=ticket[0] if ticket else None)
                return
            except BaseException as exc:  # handed to the caller, which turns it into a Triton error
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            self._write_status()
            loop.call_soon_threadsafe(queue.put_nowait, None)

        if live:
            self.engine.live_waiting += 1
        ticket.append(self._submit(produce, warm=not live, cost_s=cost_s))
        pieces: list[str] = []
        finished = False
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                if item.final:
                    # Streaming clients already have the text; a non-streaming one gets it all now.
                    yield [response_tensors("" if req.stream else "".join(pieces), item.figures)]
                elif req.stream:
                    yield [response_tensors(item.text, item.figures, final=False)]
                else:
                    pieces.append(item.text)
            finished = True
        finally:
            # Also when the stream is closed under us (the client went away): the engine drops
            # or stops the request instead of finishing it for nobody.
            self.abandoned.forget(watch, cancel=not finished)

    def _write_status(self) -> None:
        """`ctxpress status` reads the engine's state (pool, speculation, degradations) from here."""
        if self.status_path is None:
            return
        try:
            tmp = self.status_path.with_suffix(".tmp")
            st = self._scheduler.stats
            waits = sorted(st.waits_ms)
            status = {**self.engine.status(), "abandoned": self.abandoned.snapshot(), "admission": {
                "latency_first": self._latency_first, "released": st.released, "batches": st.batches,
                "urgent": st.urgent, "warm": st.warm,
                "wait_ms_p95": waits[int(0.95 * (len(waits) - 1))] if waits else None}}
            # Owner only: the pool's keys name each user's repository and path.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)  # an older file keeps its mode through O_CREAT
                f.write(json.dumps(status))
            tmp.replace(self.status_path)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.status_path, exc)


def bind_completion_model(triton: Any, engine: LlamaEngine, status_path: Path | None = None,
                           latency_first: bool = True) -> None:
    from pytriton.model_config import ModelConfig, Tensor

    def spec(t: inference.TensorSpec, *, output: bool = False) -> Tensor:
        dtype = {"BYTES": bytes, "INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_}[t.triton_dtype]
        # Triton has no optional outputs; this engine always produces every figure.
        return Tensor(name=t.name, dtype=dtype, shape=t.dims, optional=t.optional and not output)

    model = CompletionModel(engine, status_path, latency_first)
    triton.bind(
        model_name=inference.COMPLETION_MODEL,
        infer_func=model,
        inputs=[spec(t) for t in inference.COMPLETION_INPUTS],
        outputs=[spec(t, output=True) for t in inference.COMPLETION_OUTPUTS + inference.FIGURE_OUTPUTS],
        config=ModelConfig(batching=True, max_batch_size=1, decoupled=True),
        strict=False,
    )
    triton.bind(
        model_name=inference.CANCEL_MODEL,
        infer_func=model.cancel,
        inputs=[Tensor(name=inference.CTX_REQUEST_ID, dtype=bytes, shape=(1,))],
        outputs=[Tensor(name="ok", dtype=np.int32, shape=(1,))],
        config=ModelConfig(batching=False),
        strict=False,
    )
