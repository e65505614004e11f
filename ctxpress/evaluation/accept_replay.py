"""A typist who accepts what matches: a function body typed back at the typist's pace, and at each pause a
suggestion asked for; a suggestion the body goes on with is accepted (Tab), and the editor asks again at once
where it left the cursor. The scenario ``accept`` of ``ctxpress bench`` replays this and reports the requests right
after an accept: how many, how fast, and the share answered within 50 ms."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.bench_report import Sample
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.typing_replay import cursor_of, typed_body

# Labels of the samples: a request at a pause in the typing, and the request right after an accept.
TYPED = "typed"
AFTER_ACCEPT = "after_accept"
# Accepts in a row at most (each accept asks again): a model that goes on matching does not end the replay.
MAX_CHAIN = 8

Send = Callable[[str, int, int], Awaitable[tuple[float, dict[str, Any]]]]


async def replay_accepting(path: Path, cfg: BenchConfig, send: Send, progress: Progress) -> list[Sample]:
    """``send(text, line, column)`` asks for a completion; the samples are labelled ``typed`` and
    ``after_accept``, each marked whether its suggestion was accepted."""
    text, start, end, pauses = typed_body(path, cfg)
    body = text[start:end]
    samples: list[Sample] = []
    offset = 0
    deadline = time.monotonic() + cfg.max_seconds
    for pause in pauses:
        if pause <= offset:
            continue  # typed already, by an accepted suggestion
        if time.monotonic() > deadline:
            break
        await asyncio.sleep((pause - offset) / cfg.typing_cps)
        offset, kind = pause, TYPED
        for _ in range(MAX_CHAIN):
            current = text[:start] + body[:offset] + text[end:]
            latency, reply = await send(current, *cursor_of(current, start + offset))
            completion = reply.get("completion") or ""
            accept = bool(completion.strip()) and body.startswith(completion, offset)
            samples.append(Sample(kind, latency, reply, accept))
            progress.advance(f"accept {kind} {latency:.0f} ms{' (accepted)' if accept else ''}")
            if not accept:
                break
            offset += len(completion)
            kind = AFTER_ACCEPT
            await asyncio.sleep(cfg.accept_pause_s)
    return samples


def accept_figures(samples: list[Sample]) -> dict[str, Any]:
    """The requests after an accept: how many, how fast, the share answered within 50 ms."""
    after = [s for s in samples if s.mode == AFTER_ACCEPT and "error" not in s.reply]
    fast = [s for s in after if s.latency_ms <= 50.0]
    return {"accepts": len(after), "within_50ms": len(fast),
            "share_within_50ms": len(fast) / len(after) if after else None}
