"""``ctxpress bench --scenario shards``: the team topology as processes (``ctxpress.topology``), measured.

- **What the gateway adds**: the same requests asked through the gateway (a developer's subject) and straight to
  the file's shard (the shard's forwarded subject, as the gateway itself asks), alternately, in one run: once with a
  request the worker refuses at once (the hop alone) and once as a completion the engine answers from its cache.
- **Stickiness**: the share of each file's requests that one shard answered.
- **Failover**: a shard's worker and engine killed with SIGKILL; the time from the kill to the first answer for
  one of its files from the other shard, and how many of its files the other shard answered from a warm cache.
- **A planned restart**: a shard stopped (its engine writes its pool to its disk tier) and started again; the share
  of its files whose prompt came back from the disk tier when they returned to it.

The files are third-party code (SQLAlchemy's modules, cut to their first lines), cursors at the end of a line.
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.runner import percentile
from ctxpress.topology import LocalTopology
from ctxpress_core import identity

REPOSITORY = "bench-shards"
FILE_LINES = 60
TIMEOUT_S = 300.0
CAPACITY_REQUESTS = 600
CAPACITY_CONCURRENCY = 16


@dataclass(frozen=True)
class File:
    path: str
    text: str
    line: int
    column: int

    def request(self, **extra: Any) -> bytes:
        return json.dumps({"repository": REPOSITORY, "path": self.path, "text": self.text, "line": self.line,
                           "column": self.column, "max_tokens": 8, "scenario": "bench-shards", **extra}).encode()

    def refused(self) -> bytes:
        """A cursor past the end: the worker answers at once, no engine time (the gateway's hop alone)."""
        return json.dumps({"repository": REPOSITORY, "path": self.path, "text": "x = 1\n", "line": 5,
                           "column": 0}).encode()


def bench_files(root: Path, count: int) -> list[File]:
    files = []
    for source in sorted(root.rglob("*.py")):
        lines = source.read_text(errors="replace").splitlines()[:FILE_LINES]
        if len(lines) < FILE_LINES or not lines[-1].strip():
            continue
        files.append(File(str(source.relative_to(root)), "\n".join(lines) + "\n", len(lines) - 1, len(lines[-1])))
        if len(files) == count:
            break
    return files


def _figures(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(values, 50), 1), "p95_ms": round(percentile(values, 95), 1),
            "n": len(values)}


class Client:
    def __init__(self, nc: nats.NATS, subject: Callable[[File], str]) -> None:
        self.nc = nc
        self.subject = subject

    async def ask(self, file: File, payload: bytes) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        reply = await self.nc.request(self.subject(file), payload, timeout=TIMEOUT_S)
        return (time.perf_counter() - started) * 1000, dict(json.loads(reply.data))


async def _measure(topology: LocalTopology, files: list[File], rounds: int, progress: Progress) -> dict[str, Any]:
    from workers.sharding import shard_for

    alice = topology.add_user("alice", [REPOSITORY])
    gateway_credentials = identity.load_credentials(
        identity.service_credentials_path(topology.admin_settings(), identity.GATEWAY_USER))
    developer = await nats.connect(alice.nats_url.split(","), max_reconnect_attempts=-1, **alice.connect_options())
    straight = await nats.connect(alice.nats_url.split(","), **gateway_credentials.connect_options())
    shard_of = {f.path: shard_for(REPOSITORY, f.path, topology.shards) for f in files}
    through = Client(developer, lambda f: alice.subject("complete"))
    direct = Client(straight, lambda f: identity.shard_user_subject(shard_of[f.path], "alice", "complete"))
    served: dict[str, list[int]] = defaultdict(list)
    out: dict[str, Any] = {"files": len(files), "shards": topology.shards,
                           "files_per_shard": dict(Counter(shard_of.values()))}
    try:
        for file in files:  # every file's prompt computed once on its shard
            _, answer = await through.ask(file, file.request())
            served[file.path].append(answer.get("shard", -1))
            progress.advance(f"cold {file.path[-30:]}")
        for label, payload in (("hop", File.refused), ("cached_completion", File.request)):
            times: dict[str, list[float]] = {"gateway": [], "direct": []}
            answers: list[dict[str, Any]] = []
            for _ in range(rounds):
                for file in files:
                    for name, client in (("gateway", through), ("direct", direct)):
                        ms, answer = await client.ask(file, payload(file))
                        times[name].append(ms)
                        answers.append(answer)
                        if name == "gateway" and label == "cached_completion":
                            served[file.path].append(answer.get("shard", -1))
                    progress.advance(f"{label} {file.path[-30:]}")
            if label == "cached_completion":
                out["per_request"] = _costs(answers)
            g, d = _figures(times["gateway"]), _figures(times["direct"])
            out[f"gateway_{label}"] = {"through_gateway": g, "direct_to_shard": d,
                                       "added_p50_ms": round(g["p50_ms"] - d["p50_ms"], 1),
                                       "added_p95_ms": round(g["p95_ms"] - d["p95_ms"], 1)}
        # each path twice, in the order A B B A, so that neither gains from when it ran
        capacity: dict[str, list[dict[str, float]]] = defaultdict(list)
        for name, client in (("through_gateway", through), ("direct_to_shard", direct),
                             ("direct_to_shard", direct), ("through_gateway", through)):
            capacity[name].append(await _capacity(client, files, progress))
        out["gateway_capacity"] = {name: {**runs[0], "per_s": round(statistics.fmean(r["per_s"] for r in runs), 1),
                                          "runs_per_s": [r["per_s"] for r in runs]}
                                   for name, runs in capacity.items()}
        shares = [Counter(s).most_common(1)[0][1] / len(s) for s in served.values()]
        out["stickiness"] = {"requests": sum(len(s) for s in served.values()), "min_share": round(min(shares), 3),
                             "mean_share": round(statistics.fmean(shares), 3),
                             "on_its_shard": round(statistics.fmean(
                                 s.count(shard_of[p]) / len(s) for p, s in served.items()), 3)}
        out["failover"] = await _failover(topology, through, files, shard_of, progress)
        out["planned_restart"] = await _planned_restart(topology, through, files, shard_of, progress)
    finally:
        await developer.close()
        await straight.close()
    return out


def _costs(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a cached completion's time goes, as the worker reports it: the engine, the context, retrieval (the
    database). The per-request costs the docs' throughput model multiplies by the shards."""
    ok = [a for a in answers if "timings" in a]

    def p50(values: list[float]) -> float | None:
        return round(percentile(values, 50), 1) if values else None

    retrieval = [float(a["context"]["retrieval"]["elapsed_ms"]) for a in ok
                 if isinstance(a["context"].get("retrieval"), dict) and "elapsed_ms" in a["context"]["retrieval"]]
    return {"n": len(ok),
            "engine_ms_p50": p50([a["timings"]["prompt_ms"] + a["timings"]["decode_ms"] for a in ok]),
            "context_ms_p50": p50([a["timings"]["context_ms"] for a in ok]),
            "retrieval_ms_p50": p50(retrieval), "prompt_tokens_p50": p50(
                [float(a["context"]["prompt_tokens"]) for a in ok if a["context"].get("prompt_tokens")])}


async def _capacity(client: Client, files: list[File], progress: Progress, requests: int = CAPACITY_REQUESTS,
                    concurrency: int = CAPACITY_CONCURRENCY) -> dict[str, float]:
    """Requests a second the path carries when the worker answers at once: the bound NATS and the gateway put on a
    team's throughput, whatever the engines."""
    queue = [files[i % len(files)] for i in range(requests)]

    async def one_client() -> None:
        while queue:
            file = queue.pop()
            await client.ask(file, file.refused())

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    progress.advance("capacity")
    return {"requests": requests, "concurrency": concurrency, "per_s": round(requests / elapsed, 1)}


async def _answered_by(client: Client, file: File, shard: int, within_s: float) -> tuple[float, dict[str, Any]]:
    """Ask until ``shard`` answers for ``file``; returns the seconds that took and the answer."""
    started = time.monotonic()
    while True:
        _, answer = await client.ask(file, file.request())
        if answer.get("shard") == shard:
            return time.monotonic() - started, answer
        if time.monotonic() - started > within_s:
            raise RuntimeError(f"{file.path}: shard {shard} did not answer within {within_s:.0f} s: {answer}")
        await asyncio.sleep(0.2)


def _warm(answer: dict[str, Any]) -> bool:
    return bool(answer.get("context", {}).get("cached_tokens"))


async def _failover(topology: LocalTopology, client: Client, files: list[File], shard_of: dict[str, int],
                    progress: Progress) -> dict[str, Any]:
    victim, survivor = 0, 1
    moved = [f for f in files if shard_of[f.path] == victim]
    for process in ("completion-worker-0", "triton-0"):
        topology.processes[process].kill(signal.SIGKILL)
    killed = time.monotonic()
    _, hop = await client.ask(moved[0], moved[0].refused())  # answered by the survivor's worker, no engine time
    rerouted_ms = (time.monotonic() - killed) * 1000
    killed = time.monotonic()
    _, first = await client.ask(moved[0], moved[0].request())
    first_answer_s = time.monotonic() - killed
    answers = [first] + [(await client.ask(f, f.request()))[1] for f in moved[1:]]
    progress.advance("failover")
    again = [(await client.ask(f, f.request()))[1] for f in moved]  # the survivor holds them now
    for process in ("triton-0", "completion-worker-0"):
        topology.processes[process].start()
        topology.processes[process].wait_ready(600)
    back_s, _ = await _answered_by(client, moved[0], victim, 120)
    progress.advance("failover: shard back")
    return {"killed": "completion-worker-0 and triton-0 (SIGKILL)", "rerouted_ms": round(rerouted_ms, 1),
            "rerouted_error": hop.get("error", {}).get("code"), "first_answer_s": round(first_answer_s, 2),
            "first_answer_by_shard": first.get("shard"), "moved_files": len(moved),
            "answered_by_survivor": sum(a.get("shard") == survivor for a in answers),
            "warm_share_first_request": round(sum(map(_warm, answers)) / len(answers), 3),
            "warm_share_second_request": round(sum(map(_warm, again)) / len(again), 3),
            "back_on_its_shard_after_restart_s": round(back_s, 1)}


async def _planned_restart(topology: LocalTopology, client: Client, files: list[File], shard_of: dict[str, int],
                           progress: Progress) -> dict[str, Any]:
    shard = 1
    own = [f for f in files if shard_of[f.path] == shard]
    for process in ("completion-worker-1", "triton-1"):
        topology.processes[process].stop()  # SIGTERM: the engine writes its pool to its disk tier
    for process in ("triton-1", "completion-worker-1"):
        topology.processes[process].start()
        topology.processes[process].wait_ready(600)
    _, first = await _answered_by(client, own[0], shard, 120)
    answers = [first] + [(await client.ask(f, f.request()))[1] for f in own[1:]]
    progress.advance("planned restart")
    restored = [a for a in answers if a.get("context", {}).get("restored_tokens")]
    return {"restarted": "completion-worker-1 and triton-1 (SIGTERM, then started)", "files": len(answers),
            "restored_from_disk_share": round(len(restored) / max(len(answers), 1), 3),
            "restored_tokens_mean": round(statistics.fmean(
                a["context"]["restored_tokens"] for a in restored), 1) if restored else 0}


def run_shards_bench(model: Path, files_root: Path, *, files: int = 6, rounds: int = 5,
                     report: Callable[[str], None] = print) -> dict[str, Any]:
    chosen = bench_files(files_root, files)
    if len(chosen) < 2:
        raise ValueError(f"{files_root}: fewer than 2 Python files of {FILE_LINES}+ lines")
    progress = Progress(len(chosen) * (1 + 2 * rounds) + 7, "shards")
    with tempfile.TemporaryDirectory(prefix="ctxpress-shards-") as root:
        with LocalTopology(Path(root), model, report=report) as topology:
            return asyncio.run(_measure(topology, chosen, rounds, progress))


def report_lines(figures: dict[str, Any]) -> list[str]:
    hop, cached = figures["gateway_hop"], figures["gateway_cached_completion"]
    fail, planned, sticky = figures["failover"], figures["planned_restart"], figures["stickiness"]
    return [
        f"shards: {figures['shards']} shards, {figures['files']} files {figures['files_per_shard']}",
        f"  gateway hop (worker answers at once): through {hop['through_gateway']['p50_ms']:.1f}/"
        f"{hop['through_gateway']['p95_ms']:.1f} ms p50/p95, direct {hop['direct_to_shard']['p50_ms']:.1f}/"
        f"{hop['direct_to_shard']['p95_ms']:.1f} ms: +{hop['added_p50_ms']:.1f}/+{hop['added_p95_ms']:.1f} ms",
        f"  cached completion: through {cached['through_gateway']['p50_ms']:.0f}/"
        f"{cached['through_gateway']['p95_ms']:.0f} ms, direct {cached['direct_to_shard']['p50_ms']:.0f}/"
        f"{cached['direct_to_shard']['p95_ms']:.0f} ms: +{cached['added_p50_ms']:.1f}/+{cached['added_p95_ms']:.1f} ms",
        f"  a cached completion's cost in the worker: engine {figures['per_request']['engine_ms_p50']} ms, context "
        f"{figures['per_request']['context_ms_p50']} ms, retrieval {figures['per_request']['retrieval_ms_p50']} ms "
        f"(p50; prompts of {figures['per_request']['prompt_tokens_p50']} tokens)",
        f"  capacity (worker answers at once, {figures['gateway_capacity']['through_gateway']['concurrency']} "
        f"clients): through the gateway {figures['gateway_capacity']['through_gateway']['per_s']:.0f} requests/s, "
        f"direct {figures['gateway_capacity']['direct_to_shard']['per_s']:.0f} requests/s",
        f"  stickiness: {sticky['on_its_shard']:.1%} of {sticky['requests']} requests on their file's shard "
        f"(min share per file {sticky['min_share']:.1%})",
        f"  failover (SIGKILL): a moved file's request rerouted {fail['rerouted_ms']:.0f} ms after the kill; its "
        f"first completion {fail['first_answer_s']:.2f} s later (a cold prompt), by "
        f"shard {fail['first_answer_by_shard']}; warm at first ask {fail['warm_share_first_request']:.0%}, "
        f"second {fail['warm_share_second_request']:.0%}; back on its shard "
        f"{fail['back_on_its_shard_after_restart_s']:.0f} s after the restart began",
        f"  planned restart (SIGTERM): {planned['restored_from_disk_share']:.0%} of its files restored from the "
        f"disk tier (mean {planned['restored_tokens_mean']:.0f} tokens)",
    ]
