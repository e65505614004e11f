"""Running a worker as a process: logging, settings, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from ctxpress_core.identity import TeamConfigError
from ctxpress_core.settings import Settings, get_settings

Service = Callable[[Settings, asyncio.Event], Awaitable[None]]


def run_service(service: Service) -> int:
    """Run ``service(settings, stop)`` until a signal sets ``stop``; the service drains itself."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = get_settings()

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await service(settings, stop)

    try:
        asyncio.run(runner())
    except TeamConfigError as exc:  # team mode without credentials: one clear line, not a traceback
        logging.getLogger("ctxpress.worker").error("refusing to start: %s", exc)
        return 2
    return 0
