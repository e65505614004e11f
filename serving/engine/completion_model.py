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
from serving.engine.abandoned import AbandonedRequests, Watch
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
    on one dedicated thread instead (``CompletionJob``: one request, in the order the scheduler
    admits them) and chunks cross back through an asyncio queue.
    """

    def __init__(self, engine: LlamaEngine, status_path: Path | None = None, latency_first: bool = True) -> None:
        self.engine = engine
        self.status_path = status_path
        # Admission: latency-first (engine time shared between users, then a 5 ms window, urgent requests
        # first, earliest deadline first, warm-ups last, a running request giving way to the one the scheduler
        # would choose over it) or plain arrival order;
        # one thread runs what is admitted, since the engine serves one request at a time.
        self.latency_first = latency_first
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

    def submit(self, job: Callable[[], None], *, warm: bool, cost_s: float = 0.0,
               ticket: Ticket | None = None, tenant: str | None = None) -> Ticket:
        with self._ready:
            ticket = self._scheduler.submit(job, warm=warm and self.latency_first, cost_s=cost_s, ticket=ticket,
                                            tenant=tenant)
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

    def should_give_way(self, ticket: Ticket, ran_s: float) -> bool:
        with self._ready:
            return self._scheduler.should_give_way(ticket, ran_s)

    def charge(self, tenant: str | None, seconds: float) -> None:
        with self._ready:
            self._scheduler.charge(tenant, seconds)

    async def __call__(self, requests: list[Any]) -> AsyncIterator[list[dict[str, np.ndarray]]]:
        # Decoupled: each yield is one response per request of this call.
        assert len(requests) == 1, "the CPU engine is bound with max_batch_size=1"
        req = CompletionInputs.of(requests[0].data)
        watch = self.abandoned.watch(req.request_id,
                                     time.monotonic() + req.budget_ms / 1000 if req.budget_ms > 0 else None)
        job = CompletionJob(self, req, watch, asyncio.get_running_loop())
        await job.estimate()
        job.submit()
        async for response in job.responses():
            yield response

    def write_status(self) -> None:
        """`ctxpress status` reads the engine's state (pool, speculation, degradations) from here."""
        if self.status_path is None:
            return
        try:
            tmp = self.status_path.with_suffix(".tmp")
            with self._ready:
                st = self._scheduler.stats
                waits = sorted(st.waits_ms)
                shares = self._scheduler.share.snapshot()
            status = {**self.engine.status(), "abandoned": self.abandoned.snapshot(), "admission": {
                "latency_first": self.latency_first, "released": st.released, "batches": st.batches,
                "urgent": st.urgent, "warm": st.warm,
                "wait_ms_p95": waits[int(0.95 * (len(waits) - 1))] if waits else None,
                "engine_s_ahead_by_user": shares}}
            # Owner only: the pool's keys name each user's repository and path.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)  # an older file keeps its mode through O_CREAT
                f.write(json.dumps(status))
            tmp.replace(self.status_path)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.status_path, exc)


class CompletionJob:
    """One request: its cost estimated, queued, run on the engine thread (again after each time it gives way,
    with its first ticket), its chunks handed back to the caller's event loop and streamed as responses."""

    def __init__(self, model: CompletionModel, req: CompletionInputs, watch: Watch,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.model = model
        self.engine = model.engine
        self.req = req
        self.watch = watch
        self.loop = loop
        self.queue: asyncio.Queue[GenerationChunk | BaseException | None] = asyncio.Queue()
        self.live = req.max_tokens > 0  # max_tokens=0 is a warm-up, which gives way to live requests
        self.by_deadline = self.live and model.latency_first
        self.tokens: list[int] | None = None
        self.cost_s = 0.0
        self.ticket: Ticket | None = None  # set once queued (the engine may start before submit returns)
        self._run_started = 0.0

    async def estimate(self) -> None:
        """The prompt's tokens and its expected service time, off the event loop (tokenizing is CPU work)."""
        if not self.by_deadline:
            return
        try:
            self.tokens, self.cost_s = await self.loop.run_in_executor(None, self._estimate)
        except Exception as exc:  # the engine reports a bad prompt itself; admitted in arrival order
            log.debug("no cost estimate: %s", exc)

    def _estimate(self) -> tuple[list[int], float]:
        req = self.req
        tokens = self.engine.tokenize(req.prompt, req.markers)
        return tokens, self.engine.expected_ms(tokens, req.cache_key, req.max_tokens) / 1000

    def submit(self, carried: GaveWay | None = None) -> None:
        if self.live:
            self.engine.live_waiting += 1
        ticket = self.model.submit(functools.partial(self.run, carried), warm=not self.live, cost_s=self.cost_s,
                                   ticket=self.ticket, tenant=self.req.tenant)
        self.ticket = self.ticket or ticket

    def give_way(self) -> bool:
        """Asked between prompt chunks and decode steps: an abandoned request stops (its KV kept), and one
        another request should go before (the scheduler's shares and deadlines) steps aside."""
        if self.watch.abandoned():
            return True
        return (self.by_deadline and self.ticket is not None
                and self.model.should_give_way(self.ticket, self._charged_s()))

    def _charged_s(self) -> float:
        """This run's engine seconds as its user's share counts them: a user weighed below others (``req.share``)
        is charged more for each second served."""
        return (time.perf_counter() - self._run_started) / self.req.share

    def run(self, carried: GaveWay | None = None) -> None:
        """On the engine thread; its time is charged to the request's user, whatever the outcome."""
        if self.live:
            self.engine.live_waiting -= 1
        self._run_started = time.perf_counter()
        try:
            self._run(carried)
        finally:
            self.model.charge(self.req.tenant, self._charged_s())

    def _run(self, carried: GaveWay | None) -> None:
        req, started = self.req, self._run_started
        if self.watch.abandoned():  # nobody waits for it any more: never computed
            self._finish_abandoned("queued", started)
            return
        try:
            chunks = self.engine.generate(req.prompt, max_tokens=req.max_tokens, temperature=req.temperature,
                                          stop=req.stop, cache_key=req.cache_key, speculation=req.speculation,
                                          give_way=self.give_way if (self.by_deadline or self.watch.watched) else None,
                                          carried=carried, tokens=self.tokens, markers=req.markers)
            for chunk in chunks:
                self._put(chunk)
            self.model.abandoned.record_served((time.perf_counter() - started) * 1000)
        except GaveWay as stepped:
            self._gave_way(stepped, started)
            return
        except BaseException as exc:  # handed to the caller, which turns it into a Triton error
            self._put(exc)
        self.model.write_status()
        self._put(None)

    def _gave_way(self, stepped: GaveWay, started: float) -> None:
        if self.watch.abandoned():
            decoding = stepped.decoding
            self._finish_abandoned("decode" if decoding else "prompt", started, decoding.figures if decoding else None)
            return
        self.model.abandoned.record_served((time.perf_counter() - started) * 1000)
        log.info("a request (%s) %s", self.req.cache_key, stepped)
        self.submit(stepped)  # queued again with its first arrival, deadline and user

    def _finish_abandoned(self, stage: str, started: float, figures: GenerationFigures | None = None) -> None:
        self.model.abandoned.record(stage, (time.perf_counter() - started) * 1000)
        done = figures or GenerationFigures(prompt_tokens=len(self.tokens or ()))
        done.finish_reason = "cancelled"
        self._put(GenerationChunk(text="", figures=done, final=True))
        self.model.write_status()
        self._put(None)

    def _put(self, item: GenerationChunk | BaseException | None) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def responses(self) -> AsyncIterator[list[dict[str, np.ndarray]]]:
        req = self.req
        pieces: list[str] = []
        finished = False
        try:
            while (item := await self.queue.get()) is not None:
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
            self.model.abandoned.forget(self.watch, cancel=not finished)


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
