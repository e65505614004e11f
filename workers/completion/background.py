"""The completion worker's background thread: work no live request waits for (warming an opened file, counting a
whole file for the report) runs on one thread at the lowest CPU priority. On the embedded appliance it shares two
cores with the engine, and at normal priority it slowed the prompt it ran beside (the long eval: 13 s prompts took
21-22 s)."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("ctxpress.worker.completion")


def low_priority_executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxpress-background",
                              initializer=_lowest_cpu_priority)


def _lowest_cpu_priority() -> None:
    """Nice 19 for the calling thread only (Linux applies setpriority to a thread id)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError) as exc:  # not Linux, or not allowed: normal priority
        log.info("background thread keeps normal CPU priority: %s", exc)
