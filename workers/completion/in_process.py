"""A completion worker in this process, on the engine it is given (the scripted engine, or a client of the
appliance's Triton), subscribed exactly as ``python -m workers.completion`` is: what the team-mode tests and the
fairness benchmark start beside a gateway."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from ctxpress_core import nats_connect
from ctxpress_core.identity import service_connect_options, team_mode
from ctxpress_core.settings import Settings
from serving.engine_api import CompletionEngine
from workers.completion.service import CompletionService
from workers.completion.worker import _subscribe
from workers.grants import Grants
from workers.telemetry import TelemetryWriter


@contextlib.asynccontextmanager
async def running_worker(settings: Settings, engine: CompletionEngine, count_tokens: Callable[[str], int], *,
                         telemetry: TelemetryWriter | None = None) -> AsyncIterator[CompletionService]:
    """The worker's service while it serves its subjects (team mode: with its grants, as the worker user)."""
    grants = Grants(settings.effective_database_url()) if team_mode(settings) else None
    service = CompletionService(settings, engine, count_tokens, settings.model_name, telemetry, None, grants)
    nc = await nats_connect.connect(settings.nats_servers(), name="ctxpress-completion-worker",
                                    plaintext_credentials=not settings.nats_tls, **service_connect_options(settings))
    tasks: set[asyncio.Task[None]] = set()
    subscriptions = await _subscribe(nc, settings, service, team=grants is not None, tasks=tasks)
    try:
        yield service
    finally:
        for sub, _ in subscriptions:
            await sub.unsubscribe()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await nc.close()
