"""A function body blanked out and typed back at a human pace: where the typist pauses long enough for the
editor to ask for a completion, the file as it is at each pause, and the replay at the typist's pace. The
typing and team scenarios (bench.py), the load scenario and the replays through an editor, llama.vscode's
HTTP door and a peer server all type this way."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.bench_report import Sample
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.scoring import first_line
from ctxpress_core.wire.v1 import CompletionRequest

_WORD = re.compile(r"\w+|\s+|[^\w\s]")


def typing_pauses(body: str, cps: float, debounce_ms: float, seed: int) -> list[int]:
    """Offsets in ``body`` where a typist pauses longer than the debounce: after words and
    punctuation, with a human's irregular gaps (seeded)."""
    rng = random.Random(seed)
    pauses, offset = [], 0
    for match in _WORD.finditer(body):
        offset = match.end()
        gap_ms = 1000 / cps * rng.uniform(0.5, 3.0) if not match.group().isspace() else 0.0
        if gap_ms > debounce_ms and body[offset:offset + 1] != "\n" and offset < len(body):
            pauses.append(offset)
    return pauses


def pick_function(text: str) -> tuple[int, int] | None:
    """A function body of 6-30 lines: (start offset of its first body line, end offset)."""
    from syntax.parsed_file import parse_text
    from syntax.symbols.table import extract_symbols

    table = extract_symbols(parse_text(text, "python", "<bench>"))
    source = text.encode("utf-8")
    best = None
    for sym in table.symbols:
        if sym.kind not in {"function", "method"} or sym.body_start_byte is None or sym.body_end_byte is None:
            continue
        lines = sym.end_line - sym.start_line
        if 6 <= lines <= 30:
            start = source.rfind(b"\n", 0, sym.body_start_byte) + 1
            span = (len(source[:start].decode()), len(source[: sym.body_end_byte].decode()))
            if best is None or abs(lines - 15) < abs(best[2] - 15):
                best = (*span, lines)
    return (best[0], best[1]) if best else None


@dataclass
class TypingStep:
    """One pause of a typing replay: the file as it is then, the cursor, and what is typed next."""

    text: str
    line: int
    column: int
    next_text: str  # the rest of the line the typist goes on to type (scores the suggestion)
    typed: int  # characters of the body typed so far


def typed_body(path: Path, cfg: BenchConfig) -> tuple[str, int, int, list[int]]:
    """The function body of ``path`` a typing replay types back: the file's text, the body's start and
    end offsets, and the offsets in the body where the typist pauses and a completion is asked for."""
    text = path.read_text(encoding="utf-8")
    span = pick_function(text)
    if span is None:
        raise ValueError(f"{path}: no function of 6-30 lines to type")
    start, end = span
    pauses = typing_pauses(text[start:end], cfg.typing_cps, cfg.debounce_ms, cfg.seed)
    step = max(1, len(pauses) // cfg.typing_pauses)
    return text, start, end, pauses[::step][: cfg.typing_pauses]


def cursor_of(text: str, offset: int) -> tuple[int, int]:
    """The 0-based line and column of character ``offset`` of ``text``."""
    return text.count("\n", 0, offset), offset - (text.rfind("\n", 0, offset) + 1)


def typing_plan(path: Path, cfg: BenchConfig) -> tuple[str, int, list[TypingStep]]:
    """A function body of ``path`` removed and typed back: the text the IDE opens (body removed),
    the line the typist starts on, and the pauses at which a completion is asked for."""
    text, start, end, pauses = typed_body(path, cfg)
    body = text[start:end]
    steps = []
    for offset in pauses:
        current = text[:start] + body[:offset] + text[end:]
        line, column = cursor_of(current, start + offset)
        steps.append(TypingStep(current, line, column, body[offset:].split("\n", 1)[0], offset))
    opened = text[:start] + text[end:]
    return opened, opened.count("\n", 0, start), steps


def step_request(repository: str, path: str, step: TypingStep, mode: str, scenario: str,
                  cfg: BenchConfig) -> CompletionRequest:
    return CompletionRequest(repository=repository, path=path, text=step.text, line=step.line, column=step.column,
                             max_tokens=cfg.max_tokens, mode=mode,  # type: ignore[arg-type]
                             scenario=f"bench-{scenario}", features=cfg.features if mode == "optimized" else None)


def suggestion_matches(completion: str, next_text: str) -> bool:
    suggestion = first_line(completion)
    return bool(suggestion.strip()) and next_text.startswith(suggestion.rstrip())


async def replay_typing(steps: Sequence[TypingStep], cfg: BenchConfig, send: Any, progress: Progress,
                        label: str) -> list[Sample]:
    """Ask at each pause, at the typist's pace: a pause comes ``typed / cps`` after the start, or at
    once when the previous answer came later than that (the typist did not wait for it)."""
    samples: list[Sample] = []
    deadline = time.monotonic() + cfg.max_seconds
    clock = time.monotonic()
    for step in steps:
        if time.monotonic() > deadline:
            break
        due = clock + step.typed / cfg.typing_cps
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        latency, reply = await send(step)
        samples.append(Sample(label, latency, reply, suggestion_matches(reply.get("completion", ""), step.next_text)))
        progress.advance(f"typing {label} {latency:.0f} ms")
        clock = min(clock, time.monotonic() - step.typed / cfg.typing_cps)
    return samples
