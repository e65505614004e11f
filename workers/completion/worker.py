"""The completion worker process: its tokenizer, engine and database clients, its NATS subscriptions, and
an orderly stop.

Run several (``python -m workers.completion``); they share one queue group, so NATS spreads requests
among them. Every request gets exactly one reply: a completion, or a structured error. CPU work
(tokenizing, windowing) runs in an executor so the event loop keeps answering while a request is being
assembled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import start_http_server

from context import Retriever, exact_counter, memoized
from ctxpress_core import nats_connect
from ctxpress_core.identity import (
    service_connect_options,
    shard_user_subject,
    subject_user,
    team_mode,
    user_subject,
)
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import HEADER_FLOODING, SUBJECT_CANCEL, SUBJECT_FILE_OPENED
from serving.triton_client import AsyncTritonEmbedder, TritonCompletionClient
from syntax.warm import warm_up
from workers import metrics, replies
from workers.completion.fair_gate import within_rate, within_share
from workers.completion.service import CompletionService
from workers.fair_share import UserLimits
from workers.grants import Grants
from workers.process import run_service
from workers.telemetry import TelemetryWriter

log = logging.getLogger("ctxpress.worker.completion")

_Handler = Callable[[Msg], Awaitable[None]]


def load_tokenizer(settings: Settings) -> Callable[[str], int]:
    from serving.tokenizer import Tokenizer, memoized_counter
    from serving.weights import model_path

    return memoized_counter(Tokenizer(model_path(settings)).count)


async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    connect_options = service_connect_options(settings)  # team mode: no start without the worker credential
    grants = Grants(settings.effective_database_url()) if team_mode(settings) else None
    loop = asyncio.get_running_loop()
    count_tokens = await loop.run_in_executor(None, load_tokenizer, settings)
    # Load every grammar and query now rather than on the first request of each language, and
    # check once that segment-wise token counting is exact for this tokenizer (~0.1 s).
    await loop.run_in_executor(None, warm_up)
    await loop.run_in_executor(None, exact_counter, memoized(count_tokens))
    engine = TritonCompletionClient(settings.effective_triton_url())
    telemetry = TelemetryWriter(settings.effective_database_url(), user_backlog=settings.telemetry_user_backlog)
    telemetry.start()
    if settings.worker_metrics_port:
        start_http_server(settings.worker_metrics_port, addr=settings.metrics_bind_host)
    retriever = Retriever(settings.effective_database_url(), AsyncTritonEmbedder(settings.effective_triton_url()),
                          timeout_ms=settings.retrieval_timeout_ms, top_k=settings.retrieval_top_k,
                          min_similarity=settings.retrieval_min_similarity)
    service = CompletionService(settings, engine, count_tokens, settings.model_name, telemetry, retriever, grants)
    for cache in service.cache_entries():  # read when /metrics is scraped
        metrics.CACHE_ENTRIES.labels(cache).set_function(lambda cache=cache: service.cache_entries()[cache])
    # plain text only where CTXPRESS_NATS_TLS=false says so (ctxpress_core.nats_connect)
    nc = await nats_connect.connect(settings.nats_servers(), name="ctxpress-completion-worker",
                                    max_reconnect_attempts=-1, plaintext_credentials=not settings.nats_tls,
                                    **connect_options)
    tasks: set[asyncio.Task[None]] = set()
    measuring = service.start_measuring()  # beside the first requests, not before them
    subscriptions = await _subscribe(nc, settings, service, team=grants is not None, tasks=tasks)
    suffix = f".{settings.shard}" if settings.shard is not None else ""
    log.info("completion worker listening on %s (queue %s), Triton at %s", settings.completion_subject + suffix,
             settings.completion_queue, settings.effective_triton_url())
    await stop.wait()
    if measuring is not None:
        measuring.cancel()
    for sub, drain in subscriptions:  # no lost message: finish what was received, then leave the group
        await (sub.drain() if drain else sub.unsubscribe())
    if tasks:
        await asyncio.wait(tasks, timeout=settings.triton_timeout_s)
    await nc.drain()
    await telemetry.close()
    await engine.close()
    log.info("completion worker stopped")


async def _subscribe(nc: Client, settings: Settings, service: CompletionService, *, team: bool,
                     tasks: set[asyncio.Task[None]]) -> list[tuple[Subscription, bool]]:
    """Every subject the worker serves, in the order they are let go at stop, each with whether it is
    drained (its received messages answered first) or only unsubscribed."""

    limits = UserLimits.requests(settings, service.flooding)
    feedback_limits = UserLimits.feedback(settings, service.flooding)

    def retry_ms() -> float:  # a request held now is likely done in about the engine's time for one
        return service.engine_load.mean_s * 1000

    async def reply(msg: Msg, received_at: float) -> None:
        user = subject_user(msg.subject)
        if settings.shard is not None and msg.headers and HEADER_FLOODING in msg.headers:  # only the gateway's
            service.flooding.mark(user)
        payload = await within_share(limits, user, lambda: service.handle(msg.data, received_at, user), retry_ms())
        if msg.reply:
            await msg.respond(payload)

    def answerable(msg: Msg) -> bool:  # only to the sender's own inbox (workers/replies.py)
        return replies.answerable(msg, team=team, service="completion-worker")

    async def on_message(msg: Msg) -> None:
        if not answerable(msg):
            return
        # Reply from a task so a slow inference never blocks the next message's validation.
        task = asyncio.create_task(reply(msg, time.perf_counter()))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def on_feedback(msg: Msg) -> None:
        if not answerable(msg):
            return
        user = subject_user(msg.subject)
        answer = within_rate(feedback_limits, user) or service.feedback(msg.data, user)
        if msg.reply:
            await msg.respond(answer)

    async def opened(msg: Msg) -> None:
        user = subject_user(msg.subject)
        # an opened file is parsed and pre-warmed: it counts against the user's share as a request does
        answer = await within_share(limits, user, lambda: service.file_opened(msg.data, user), retry_ms())
        if msg.reply:
            await msg.respond(answer)

    async def on_file_opened(msg: Msg) -> None:
        if not answerable(msg):
            return
        # From a task, as a request: one user's opened files must not queue another's behind them.
        task = asyncio.create_task(opened(msg))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def on_cancel(msg: Msg) -> None:
        service.cancel(msg.data, subject_user(msg.subject))

    queue = settings.completion_queue
    # Behind the gateway a worker serves its shard's subjects; alone, the IDE-facing ones.
    suffix = f".{settings.shard}" if settings.shard is not None else ""
    subscriptions = [
        (await nc.subscribe(settings.completion_subject + suffix, queue=queue, cb=on_message), True),
        (await nc.subscribe(settings.feedback_subject, queue=queue, cb=on_feedback), True),
        (await nc.subscribe(SUBJECT_FILE_OPENED + suffix, queue=queue, cb=on_file_opened), True),
        # Not a queue group: whichever worker holds the request must hear it.
        (await nc.subscribe(SUBJECT_CANCEL, cb=on_cancel), False),
    ]
    # Team mode: the same handlers on every user's subjects (ctxpress.v1.u.*.<kind>), each request checked against
    # the grants of the user in its subject. On the subjects above requests carry no user and get `forbidden`.
    # A shard serves what the gateway forwards to it (ctxpress.v1.s.<shard>.u.*.<kind>), the user in the subject.
    if team:
        def subject(kind: str) -> str:
            return user_subject("*", kind) if settings.shard is None else shard_user_subject(settings.shard, "*", kind)

        handlers: tuple[tuple[str, _Handler], ...] = (
            ("complete", on_message), ("feedback", on_feedback), ("file_opened", on_file_opened))
        for kind, cb in handlers:
            subscriptions.append((await nc.subscribe(subject(kind), queue=queue, cb=cb), True))
        subscriptions.append((await nc.subscribe(subject("cancel"), cb=on_cancel), True))
    return subscriptions


def main() -> int:
    return run_service(run_worker)
