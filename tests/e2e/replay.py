"""A short typing replay, the same for every editor client and for the straight NATS path: a function
body of a third-party file (never code written here) is removed, the file is opened, the body's first
words are typed back, and at each pause a suggestion is asked for. Latency is from the last keystroke
of a pause to the suggestion in hand.

Each client replays into a repository and path of its own, so every replay starts cold (the engine
has no KV for it) and warms the same way: the figures compare the doors, not the cache.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ctxpress.client import CompletionClient
from ctxpress.evaluation.bench import third_party_root
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.runner import percentile
from ctxpress.evaluation.typing_replay import pick_function, typing_pauses
from ctxpress_core.wire.v1 import CompletionRequest

PAUSES = 4
MAX_TOKENS = 16
MIN_TYPED = 12  # characters typed between two pauses
# a mid-sized module whose functions are ordinary application code
SOURCE = ("engine", "url.py")


@dataclass(frozen=True)
class Replay:
    source: Path
    opened: str  # the file as the editor opens it: the body removed
    start: int  # offset in ``opened`` where the body is typed back
    body: str
    pauses: tuple[int, ...]  # offsets in ``body`` where the typist stops and a suggestion is asked for

    def typed_between(self) -> list[str]:
        """What is typed before each pause (the first one from the body's start)."""
        ends = list(self.pauses)
        return [self.body[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def text_at(self, typed: int) -> str:
        return self.opened[: self.start] + self.body[:typed] + self.opened[self.start:]

    def cursor_at(self, typed: int) -> tuple[int, int]:
        """(line, column in characters) after ``typed`` characters of the body."""
        before = self.opened[: self.start] + self.body[:typed]
        return before.count("\n"), len(before) - (before.rfind("\n") + 1)

    def write_repository(self, root: Path, name: str) -> Path:
        """A git repository ``root/name`` holding the opened file; the file's path."""
        repo = root / name
        path = repo / "pkg" / self.source.name
        path.parent.mkdir(parents=True)
        path.write_text(self.opened, encoding="utf-8")
        subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
        return path


def replay_case() -> Replay:
    source = third_party_root().joinpath(*SOURCE)
    text = source.read_text(encoding="utf-8")
    span = pick_function(text)
    assert span is not None, f"{source}: no function of 6-30 lines"
    start, end = span
    # a docstring stays in the opened file: the typist writes code (an editor's auto-closed quotes
    # would turn typed docstring quotes into other text)
    lead = text[start:end].lstrip()
    if lead[:3] in ('"""', "\'\'\'"):
        closing = text.index(lead[:3], text.index(lead[:3], start) + 3)
        start = text.index("\n", closing) + 1
        start += len(text[start:end]) - len(text[start:end].lstrip("\n"))
    body = text[start:end]
    cfg = BenchConfig(nats_url="", subject="")
    # the first pauses only (each client types every character through its own UI), after a word
    # and a few words apart, as a typist who stops to look
    pauses: list[int] = []
    for offset in typing_pauses(body, cfg.typing_cps, cfg.debounce_ms, cfg.seed):
        if body[offset - 1].isalnum() and offset - (pauses[-1] if pauses else 0) >= MIN_TYPED:
            pauses.append(offset)
    pauses = pauses[:PAUSES]
    return Replay(source, text[:start] + text[end:], start, body, tuple(pauses))


async def direct_replay(nats_url: str, replay: Replay, repository: str, path: str) -> list[float]:
    """The same pauses as ``ctxpress.v1.complete`` requests straight over NATS; ms each."""
    latencies = []
    async with CompletionClient(nats_url) as client:
        for typed in replay.pauses:
            line, column = replay.cursor_at(typed)
            request = CompletionRequest(repository=repository, path=path, text=replay.text_at(typed), line=line,
                                        column=column, language="python", max_tokens=MAX_TOKENS,
                                        scenario="e2e-direct")
            started = time.perf_counter()
            answer = await client.complete(request)
            latencies.append((time.perf_counter() - started) * 1000)
            assert "error" not in answer, answer
    return latencies


def record(report: Path, door: str, latencies_ms: list[float]) -> None:
    """Adds one door's figures to the run's latency report (JSON), printed at the end of the run."""
    figures = json.loads(report.read_text()) if report.exists() else {}
    figures[door] = {"samples_ms": [round(ms, 1) for ms in latencies_ms],
                     "p50_ms": round(percentile(latencies_ms, 50), 1),
                     "cold_ms": round(latencies_ms[0], 1) if latencies_ms else None,
                     "warm_p50_ms": round(percentile(latencies_ms[1:], 50), 1) if len(latencies_ms) > 1 else None}
    report.write_text(json.dumps(figures, indent=2))


def table(report: Path) -> list[str]:
    figures = json.loads(report.read_text())
    lines = [f"{'door':<34} {'p50 ms':>8} {'cold ms':>8} {'warm p50':>9}  samples"]
    for door, f in figures.items():
        lines.append(f"{door:<34} {f['p50_ms']:>8} {f['cold_ms']!s:>8} {f['warm_p50_ms']!s:>9}  {f['samples_ms']}")
    return lines
