"""``ctxpress bench --scenario load``: a team typing at once for minutes, moving through many files.

``editors`` simulated editors, each with its own NATS connection, take files of a third-party package in turn
(Python files with a function of 6-30 lines, shuffled by the seed); in each file they remove a function body,
open the file as an IDE does, and type the body's first words back at a human pace, asking for a completion at
each pause (``pauses_per_file`` of them, with the editor's 30 s deadline), then move to the next file. Until
``minutes`` have passed.

What it reports: requests and errors by code, p50/p95 of the answered ones, and every ``memory_every_s`` the
resident memory of each part of the appliance (VmRSS from ``/proc``, summed over the part's process and its
children: PostgreSQL's backends, Triton's server and model stubs; shared pages count once per process) and the
entries of the completion worker's per-file caches (its ``ctxpress_cache_entries`` metric). Memory that stays
flat while the editors move through new files is the point.
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from ctxpress.client import CompletionClient
from ctxpress.evaluation.bench import third_party_root
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.bench_report import Sample
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.runner import percentile
from ctxpress.evaluation.typing_replay import step_request, typing_plan
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import FileOpened

EDITOR_TIMEOUT_MS = 30_000  # what `ctxpress lsp` gives a request by default
MIN_LINES, MAX_LINES = 150, 4_000


# The bar for a team's load: a request answered within this is one a developer waited for.
ANSWER_WITHIN_MS = 5_000.0


@dataclass
class LoadConfig:
    editors: int = 8
    minutes: float = 5.0
    pauses_per_file: int = 4
    memory_every_s: float = 30.0
    files: int = 400  # candidate files taken from the package (each editor walks its share)


@dataclass
class LoadResult:
    samples: list[Sample] = field(default_factory=list)
    files_typed: int = 0
    memory: list[dict[str, Any]] = field(default_factory=list)  # {"t_s", "rss_mib": {part: MiB}, "caches"}


def candidate_files(root: Path, n: int, seed: int) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*.py")):
        try:
            lines = path.read_text(encoding="utf-8").count("\n")
        except (OSError, UnicodeDecodeError):
            continue
        if MIN_LINES <= lines <= MAX_LINES:
            files.append(path)
    random.Random(seed).shuffle(files)
    return files[:n]


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_rss_kib(pid: int, children: dict[int, list[int]]) -> int:
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        total += _rss_kib(current)
        todo += children.get(current, [])
    return total


def part_memory_mib(settings: Settings) -> dict[str, float]:
    from ctxpress.parts import parts

    children = _children()
    out = {}
    for part in parts(settings):
        pid = None if part.external else part.pid()
        if pid is not None:
            out[part.name] = round(tree_rss_kib(pid, children) / 1024, 1)
    return out


def worker_caches(settings: Settings) -> dict[str, float]:
    """The completion worker's ``ctxpress_cache_entries`` by cache (empty when its metrics are off)."""
    if not settings.worker_metrics_port:
        return {}
    url = f"http://{settings.bind_host}:{settings.worker_metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
    except OSError:
        return {}
    out = {}
    for line in body.splitlines():
        if line.startswith("ctxpress_cache_entries{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('cache="', 1)[1].split('"', 1)[0]] = float(value)
    return out


async def _editor(index: int, files: list[Path], cfg: BenchConfig, load: LoadConfig, deadline: float,
                  result: LoadResult, progress: Progress) -> None:
    # a pause at every word: the first ``pauses_per_file`` of them are the ones asked at
    per_file = replace(cfg, typing_pauses=10_000, max_seconds=load.minutes * 60)
    root = third_party_root()
    async with CompletionClient(cfg.nats_url, cfg.subject, timeout_s=EDITOR_TIMEOUT_MS / 1000 + 2) as client:
        for path in files[index::load.editors]:
            if time.monotonic() > deadline:
                return
            try:
                opened, open_line, steps = await asyncio.to_thread(typing_plan, path, per_file)
            except ValueError:  # no function of 6-30 lines to type in this file
                continue
            repository, name = root.name, str(path.relative_to(root))
            try:
                await client.file_opened(FileOpened(repository=repository, path=name, text=opened, line=open_line,
                                                    column=0))
            except (NatsTimeout, NoRespondersError):
                pass
            result.files_typed += 1
            clock = time.monotonic()
            for step in steps[:load.pauses_per_file]:
                if time.monotonic() > deadline:
                    return
                await asyncio.sleep(max(0.0, clock + step.typed / cfg.typing_cps - time.monotonic()))
                request = step_request(repository, name, step, "optimized", "load", cfg)
                request = request.model_copy(update={"timeout_ms": EDITOR_TIMEOUT_MS})
                started = time.perf_counter()
                try:
                    reply = await client.complete(request)
                except NatsTimeout:
                    reply = {"error": {"code": "no_answer_at_deadline"}}
                except NoRespondersError:
                    reply = {"error": {"code": "no_responders"}}
                latency = (time.perf_counter() - started) * 1000
                result.samples.append(Sample("optimized", latency, reply))
                progress.advance(f"load editor {index} {latency:.0f} ms")
                clock = min(clock, time.monotonic() - step.typed / cfg.typing_cps)


async def _watch_memory(settings: Settings, load: LoadConfig, started: float, result: LoadResult,
                        done: asyncio.Event) -> None:
    while True:
        memory = await asyncio.to_thread(part_memory_mib, settings)
        caches = await asyncio.to_thread(worker_caches, settings)
        result.memory.append({"t_s": round(time.monotonic() - started), "rss_mib": memory, "caches": caches})
        try:
            await asyncio.wait_for(done.wait(), load.memory_every_s)
            return
        except TimeoutError:
            continue


async def run_load(cfg: BenchConfig, load: LoadConfig, settings: Settings) -> LoadResult:
    files = await asyncio.to_thread(candidate_files, third_party_root(), load.files, cfg.seed)
    if len(files) < load.editors:
        raise ValueError(f"{len(files)} candidate files in {third_party_root()} for {load.editors} editors")
    result = LoadResult()
    # the bar counts the most requests the editors could send at the typist's pace
    progress = Progress(int(load.editors * load.minutes * 60 * cfg.typing_cps / 40), "load")
    started = time.monotonic()
    done = asyncio.Event()
    watcher = asyncio.create_task(_watch_memory(settings, load, started, result, done))
    deadline = started + load.minutes * 60
    try:
        await asyncio.gather(*(_editor(i, files, cfg, load, deadline, result, progress) for i in range(load.editors)))
    finally:
        done.set()
        await watcher
    result.memory.append({"t_s": round(time.monotonic() - started), "rss_mib": part_memory_mib(settings),
                          "caches": worker_caches(settings)})
    return result


def summary(result: LoadResult, load: LoadConfig) -> dict[str, Any]:
    codes = Counter(s.reply["error"].get("code", "?") for s in result.samples if "error" in s.reply)
    answered = [s.latency_ms for s in result.samples if "error" not in s.reply]
    first, last = result.memory[0], result.memory[-1]
    return {"editors": load.editors, "minutes": load.minutes, "files_typed": result.files_typed,
            "requests": len(result.samples), "answered": len(answered), "errors_by_code": dict(codes),
            "answered_within_5s": sum(1 for ms in answered if ms <= ANSWER_WITHIN_MS),
            "latency_ms_p50": round(percentile(answered, 50)) if answered else None,
            "latency_ms_p95": round(percentile(answered, 95)) if answered else None,
            "rss_mib_start": first["rss_mib"], "rss_mib_end": last["rss_mib"],
            "caches_start": first["caches"], "caches_end": last["caches"], "memory_over_time": result.memory}


def report_lines(s: dict[str, Any]) -> list[str]:
    lines = [f"[load] {s['editors']} editors, {s['minutes']:g} min, {s['files_typed']} files typed in",
             f"  requests {s['requests']}, answered {s['answered']} ({s['answered_within_5s']} within 5 s), errors by "
             f"code: {s['errors_by_code'] or 'none'}",
             f"  latency of the answered: p50 {s['latency_ms_p50']} ms, p95 {s['latency_ms_p95']} ms" if s["answered"]
             else "  latency of the answered: none answered",
             f"  {'resident memory (MiB)':<24}" + "".join(f"{name:>18}" for name in s["rss_mib_end"])]
    for sample in s["memory_over_time"]:
        lines.append(f"  {'at ' + str(sample['t_s']) + ' s':<24}"
                     + "".join(f"{sample['rss_mib'].get(name, 0):>18.1f}" for name in s["rss_mib_end"]))
    caches = sorted(s["caches_end"])
    if caches:
        lines.append(f"  {'worker caches (entries)':<24}" + "".join(f"{name:>18}" for name in caches))
        for sample in s["memory_over_time"]:
            lines.append(f"  {'at ' + str(sample['t_s']) + ' s':<24}"
                         + "".join(f"{sample['caches'].get(name, 0):>18.0f}" for name in caches))
    return lines
