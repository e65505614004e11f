"""``ctxpress eval --benchmark humaneval-single|humaneval-multi|humaneval-span``: a public FIM benchmark
through the appliance, scored by running each completion with its task's tests.

The tasks are HumanEval infilling's (Bavarian et al. 2022): a canonical solution with one line, a run of
lines or a random span cut out. Each is written as an editor holds it: the text before the hole, then,
where the hole is whole lines, an empty line with the cursor at column 0, then the text after. The request
goes over NATS to the completion worker exactly as an editor's does; the completion is inserted as
returned at the cursor and the task's tests run in :mod:`ctxpress.evaluation.sandbox` (pass@1, greedy).
Beside pass@1: exact match and edit similarity of the completion against the canonical solution.

Arms: ``optimized`` and ``baseline`` (the ±200-line window) through the appliance, and, with
``--peer-server``, llama.cpp's own server holding the same model file and asked with a plain FIM prompt
(``<|fim_prefix|>before<|fim_suffix|>after<|fim_middle|>``, greedy, the same token limit, nothing cut):
what a user would get from the model without ctxpress. The arms alternate task by task, so that drift
in the machine's load hits all alike.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.runner import percentile
from ctxpress.evaluation.sandbox import DEFAULT_TIMEOUT_S, Outcome, run_program
from ctxpress.evaluation.scoring import edit_similarity, exact_match, first_line

# benchmark name -> (data file, whether the hole is whole lines)
BENCHMARKS: dict[str, tuple[str, bool]] = {
    "humaneval-single": ("HumanEval-SingleLineInfilling.jsonl.gz", True),
    "humaneval-multi": ("HumanEval-MultiLineInfilling.jsonl.gz", True),
    # a random character span: it may start at a line's start, the cursor is still where the span was
    "humaneval-span": ("HumanEval-RandomSpanInfillingLight.jsonl.gz", False),
}
REPOSITORY = "human-eval-infilling"
PEER_ARM = "llama-server"
# Qwen2.5-Coder's FIM tokens (the packaged model's vocabulary): the plain prompt of the peer arm.
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"


@dataclass(frozen=True)
class Task:
    task_id: str
    entry_point: str
    prompt: str
    suffix: str
    canonical_solution: str
    test: str
    # the hole is whole lines (single- and multi-line tasks): the cursor sits on an empty line of its own
    whole_lines: bool = True


@dataclass(frozen=True)
class EditorView:
    """The file as an editor holds it at the moment of asking, and where the cursor is (0-based)."""

    text: str
    line: int
    column: int
    before: str  # the text before the cursor
    after: str  # the text after it


def default_data_dir() -> Path:
    """``$CTXPRESS_HUMANEVAL_DIR``, else ``../shared/bench/human-eval-infilling`` beside the repository."""
    configured = os.environ.get("CTXPRESS_HUMANEVAL_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2].parent / "shared" / "bench" / "human-eval-infilling"


def load_tasks(benchmark: str, data_dir: Path) -> list[Task]:
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    name, whole_lines = BENCHMARKS[benchmark]
    with gzip.open(data_dir / name, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    tasks = [Task(r["task_id"], r["entry_point"], r["prompt"], r["suffix"], r["canonical_solution"], r["test"],
                  whole_lines) for r in rows]
    broken = [t.task_id for t in tasks if whole_lines and not t.prompt.endswith("\n")]
    if broken:
        raise ValueError(f"{benchmark}: tasks whose hole does not start a line: {', '.join(broken[:5])}")
    return tasks


def choose(tasks: Sequence[Task], limit: int | None, seed: int) -> list[Task]:
    """All tasks, or a seeded sample of ``limit`` of them kept in file order: the same tasks for every arm
    and every run with the same seed."""
    if not limit or limit >= len(tasks):
        return list(tasks)
    picked = sorted(random.Random(seed).sample(range(len(tasks)), limit))
    return [tasks[i] for i in picked]


def editor_view(task: Task) -> EditorView:
    if task.whole_lines:
        # the hole's lines are gone and the developer has opened an empty line where they were
        before, after = task.prompt, "\n" + task.suffix
    else:
        before, after = task.prompt, task.suffix
    line = before.count("\n")
    column = len(before) - (before.rfind("\n") + 1)
    return EditorView(before + after, line, column, before, after)


def program(task: Task, completion: str) -> str:
    """The file after the completion is inserted at the cursor, then the task's tests."""
    view = editor_view(task)
    return view.before + completion + view.after + "\n" + task.test + f"\ncheck({task.entry_point})\n"


def file_path(task: Task) -> str:
    """A file name per task (``HumanEval_0_L3.py``): no worker state is carried from one task to the next."""
    return task.task_id.split("/", 1)[-1].replace("/", "_") + ".py"


def reported_line(completion: str) -> str:
    """The completion's first line, or its second where it opens with a line break: the line the Qwen2.5-Coder
    report's HumanEval-FIM exact match compares with the hole (its fim-bench's harness). Unlike the long eval's
    ``first_line``, a leading break is skipped: here the cursor sits on a line of its own."""
    return first_line(completion.removeprefix("\n"))


def quality(completion: str, expected: str) -> dict[str, float]:
    """Exact match and edit similarity of the whole completion (every line inserted) against the hole, and the
    exact match of its first line alone (the published single-line metric)."""
    return {"exact_match": float(exact_match(completion, expected)),
            "edit_similarity": edit_similarity(completion, expected),
            "first_line_match": float(exact_match(reported_line(completion), expected))}


def score_task(task: Task, completion: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    outcome: Outcome = run_program(program(task, completion), timeout_s=timeout_s)
    return {"passed": float(outcome.passed), "status": outcome.status, "test_s": round(outcome.seconds, 3),
            **quality(completion, task.canonical_solution),
            **({"test_output": outcome.output[-400:]} if not outcome.passed else {})}


# An arm answers one task: (completion, latency in ms, extra figures) or raises.
Arm = Callable[[Task], Awaitable[tuple[str, float, dict[str, Any]]]]


@dataclass
class BenchmarkConfig:
    benchmark: str
    nats_url: str
    subject: str
    modes: Sequence[str]  # appliance arms: "optimized", "baseline"
    max_tokens: int
    peer_server: Path | None = None
    model: Path | None = None
    peer_threads: int = 2
    test_timeout_s: float = DEFAULT_TIMEOUT_S
    request_timeout_s: float = 300.0
    canonical: bool = False  # score the canonical solutions instead of any model: a check of the harness
    features: dict[str, bool] | None = None  # the appliance arms' switches (ablations, e.g. -early_stop)


def _order(index: int, arms: Sequence[str]) -> list[str]:
    # each arm goes first as often as the others: a warm cache or a quiet minute favours none
    shift = index % len(arms)
    return [*arms[shift:], *arms[:shift]]


async def run_benchmark(tasks: Sequence[Task], config: BenchmarkConfig, out: Path | None = None,
                        ) -> dict[str, list[dict[str, Any]]]:
    from contextlib import AsyncExitStack, ExitStack

    arms: dict[str, Arm] = {}
    if config.canonical:
        arms["canonical"] = _canonical_arm
        return await _run(tasks, arms, config, out)
    async with AsyncExitStack() as stack:
        if config.modes:
            from ctxpress.client import CompletionClient

            client = await stack.enter_async_context(
                CompletionClient(config.nats_url, config.subject, timeout_s=config.request_timeout_s))
            for mode in config.modes:
                arms[mode] = _appliance_arm(client, mode, config)
        sync = stack.enter_context(ExitStack())
        if config.peer_server is not None:
            if config.model is None:
                raise ValueError("the llama-server arm needs the model file")
            arms[PEER_ARM] = _peer_arm(sync, config)
        return await _run(tasks, arms, config, out)


async def _run(tasks: Sequence[Task], arms: dict[str, Arm], config: BenchmarkConfig,
               out: Path | None) -> dict[str, list[dict[str, Any]]]:
    names = list(arms)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    passed = dict.fromkeys(names, 0)
    progress = Progress(len(tasks) * len(names), config.benchmark)
    sink = out.open("w", encoding="utf-8") if out else None
    try:
        for index, task in enumerate(tasks):
            for name in _order(index, names):
                row: dict[str, Any] = {"task_id": task.task_id, "arm": name}
                try:
                    completion, latency_ms, extra = await arms[name](task)
                except Exception as exc:  # one failed request is a row with an error, not a lost run
                    row.update(error=type(exc).__name__, message=str(exc)[:300])
                else:
                    scored = await asyncio.to_thread(score_task, task, completion, config.test_timeout_s)
                    row.update(completion=completion, latency_ms=round(latency_ms, 1), **extra, **scored)
                    passed[name] += int(scored["passed"])
                rows[name].append(row)
                if sink:
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                progress.advance(" ".join(f"{n}:{passed[n]}" for n in names))
    finally:
        if sink:
            sink.close()
    return rows


def _appliance_arm(client: Any, mode: str, config: BenchmarkConfig) -> Arm:
    from ctxpress_core.wire.v1 import CompletionRequest, FileOpened

    async def complete(task: Task) -> tuple[str, float, dict[str, Any]]:
        view = editor_view(task)
        path = file_path(task)
        # as an editor does: the file is opened (didOpen) before the completion is asked for
        await client.file_opened(FileOpened(repository=REPOSITORY, path=path, text=view.text, language="python",
                                            line=view.line, column=view.column))
        request = CompletionRequest(repository=REPOSITORY, path=path, text=view.text, line=view.line,
                                    column=view.column, language="python", max_tokens=config.max_tokens,
                                    mode=mode,  # type: ignore[arg-type]
                                    scenario="humaneval", request_id=f"he-{mode}-{path}"[:128],
                                    features=config.features)
        started = time.perf_counter()
        reply = await client.complete(request)
        latency_ms = (time.perf_counter() - started) * 1000
        if "error" in reply:
            raise RuntimeError(f"{reply['error']['code']}: {reply['error']['message']}")
        ctx = reply.get("context") or {}
        return reply["completion"], latency_ms, {"finish_reason": reply.get("finish_reason"),
                                                 "prompt_tokens": ctx.get("prompt_tokens")}

    return complete


async def _canonical_arm(task: Task) -> tuple[str, float, dict[str, Any]]:
    return task.canonical_solution, 0.0, {}


def plain_fim_prompt(task: Task) -> str:
    view = editor_view(task)
    return f"{FIM_PREFIX}{view.before}{FIM_SUFFIX}{view.after}{FIM_MIDDLE}"


def _peer_arm(stack: Any, config: BenchmarkConfig) -> Arm:
    from ctxpress.evaluation.peer import PeerServer

    assert config.peer_server is not None and config.model is not None
    server = stack.enter_context(PeerServer(config.peer_server, config.model, config.peer_threads))

    async def complete(task: Task) -> tuple[str, float, dict[str, Any]]:
        body = {"prompt": plain_fim_prompt(task), "n_predict": config.max_tokens, "temperature": 0.0,
                "top_k": 1, "samplers": ["top_k"], "cache_prompt": True, "stream": False}
        started = time.perf_counter()
        raw = await asyncio.to_thread(server.post, "/completion", body)
        latency_ms = (time.perf_counter() - started) * 1000
        timings = raw.get("timings") or {}
        return str(raw.get("content", "")), latency_ms, {
            "finish_reason": "length" if raw.get("stop_type") == "limit" else "stop",
            "prompt_tokens": timings.get("prompt_n")}

    return complete


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    ok = [r for r in rows if "error" not in r]
    out: dict[str, float] = {"n": len(rows), "errors": len(rows) - len(ok)}
    if not ok:
        return out
    # pass@1 counts a failed request as a miss: the developer got nothing
    out["pass_at_1"] = sum(r["passed"] for r in ok) / len(rows)
    out["exact_match"] = statistics.fmean(r["exact_match"] for r in ok)
    out["first_line_match"] = statistics.fmean(r.get("first_line_match", 0.0) for r in ok)
    out["edit_similarity"] = statistics.fmean(r["edit_similarity"] for r in ok)
    out["timeouts"] = sum(1 for r in ok if r["status"] == "timeout")
    out["cut_at_token_limit"] = sum(1 for r in ok if r.get("finish_reason") == "length")
    latencies = [r["latency_ms"] for r in ok]
    out["latency_ms_p50"] = percentile(latencies, 50)
    out["latency_ms_p95"] = percentile(latencies, 95)
    return out


def paired(first: Sequence[dict[str, Any]], second: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """(tasks the first arm passes and the second fails, the reverse): on a small sample the difference in
    pass@1 is these two counts, and only they say whether it is more than a coin would give."""
    passes = {r["task_id"]: bool(r.get("passed")) for r in second}
    only_first = sum(1 for r in first if r.get("passed") and not passes.get(r["task_id"], False))
    only_second = sum(1 for r in first if not r.get("passed") and passes.get(r["task_id"], False))
    return only_first, only_second


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test on the discordant tasks (ties dropped): the chance of a split at least this
    uneven if neither arm were better."""
    from math import comb

    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_lines(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    names = [n for n in rows if rows[n]]
    lines = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            wins, losses = paired(rows[a], rows[b])
            lines.append(f"paired: {arm_label(a)} passes where {arm_label(b)} fails on {wins} tasks, the reverse "
                         f"on {losses} (sign test p = {sign_test_p(wins, losses):.2f})")
    return lines


# Published figures, quoted only from a source that was read, with where it was read. Each: (label, metric,
# figure in percent, source). Kept beside ours for scale, never compared as if measured the same way: the
# Qwen report scores the first line against the hole (our "line-1 EM %"), greedy, bf16 base models; the FIM
# paper samples 100 completions at temperature 0.2 from its own 6.9B models and reports the pass rate.
_QWEN = "Qwen2.5-Coder report, arXiv 2409.12186v3, Table 7, HumanEval-FIM Python"
_FIM = "Bavarian et al. 2022, arXiv 2207.14255, Table 4"
PUBLISHED: dict[str, list[tuple[str, str, float, str]]] = {
    "humaneval-single": [
        ("Qwen2.5-Coder-1.5B (base)", "first-line exact match", 77.0, _QWEN),
        ("Qwen2.5-Coder-0.5B (base)", "first-line exact match", 70.3, _QWEN),
        ("FIM90 6.9B", "pass rate", 75.1, _FIM),
    ],
    "humaneval-multi": [("FIM90 6.9B", "pass rate", 44.1, _FIM)],
    "humaneval-span": [("FIM90 6.9B", "pass rate, the full random-span set", 55.1, _FIM)],
}


def report_lines(benchmark: str, summary: dict[str, dict[str, float]], meta: dict[str, Any]) -> list[str]:
    """The side-by-side table: our arms measured in this run, then published figures for scale."""
    lines = [f"{benchmark}: {meta['n']} of {meta['total']} tasks ({meta['selection']}), "
             f"max_tokens {meta['max_tokens']}, load before/after: {meta.get('load_before')} / "
             f"{meta.get('load_after')}",
             f"{'arm':<34}{'pass@1 %':>10}{'EM %':>8}{'line-1 EM %':>13}{'ES':>7}{'cut':>6}{'errors':>8}"
             f"{'p50 ms':>9}"]
    for arm, figures in summary.items():
        if not figures.get("n"):
            continue
        lines.append(f"{arm_label(arm):<34}{figures.get('pass_at_1', 0) * 100:>10.1f}"
                     f"{figures.get('exact_match', 0) * 100:>8.1f}{figures.get('first_line_match', 0) * 100:>13.1f}"
                     f"{figures.get('edit_similarity', 0):>7.3f}"
                     f"{figures.get('cut_at_token_limit', 0):>6.0f}{figures.get('errors', 0):>8.0f}"
                     f"{figures.get('latency_ms_p50', 0):>9.0f}")
    for label, metric, figure, source in PUBLISHED.get(benchmark, []):
        # under the column that measures the same thing: first-line exact match, else a pass rate
        cells = f"{'':>10}{'':>8}{figure:>13.1f}" if metric.startswith("first-line") else f"{figure:>10.1f}"
        lines.append(f"{label:<34}{cells}   ({metric}; {source})")
    return lines


def arm_label(arm: str) -> str:
    return {"optimized": "ctxpress optimized", "baseline": "ctxpress window (baseline)",
            PEER_ARM: "llama-server plain FIM", "canonical": "canonical solution (harness check)"}.get(arm, arm)
