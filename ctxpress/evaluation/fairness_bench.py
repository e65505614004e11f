"""``ctxpress bench --scenario fairness``: does one teammate's flood starve another?

A team appliance of its own (embedded PostgreSQL, the embedded NATS with TLS and team authorization, the
gateway and a completion worker as in production) with two developers: bob types (the typing replay) alone,
then types again while alice floods: long-deadline requests on distinct files, 8 MiB payloads, feedback
spam and file_opened storms. Same run, same engine; bob's p50/p95 and answered share are printed for both and
their ratios (the target: p50 under the flood at most 1.5x alone, answered at least 90 % as often).

The engine is either the scripted one, serving one token step at a time in the order the CPU engine's own
scheduler chooses (``--engine scripted``, the default: no model needed; its figures measure the appliance's
admission and fair sharing, not the model) or the appliance's own Triton (``--engine triton``:
`ctxpress up` running, its CPU engine serving both users).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats

from ctxpress import team
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.runner import percentile
from ctxpress.evaluation.typing_replay import TypingStep, replay_typing, step_request, typing_plan
from ctxpress.parts.nats_server import NatsPart
from ctxpress_core import identity, inference
from ctxpress_core.settings import Settings
from serving.engine.scheduler import LatencyFirstScheduler, Ticket
from serving.engine_api import CompletionEngine, EngineRequest, Piece
from workers.completion.in_process import running_worker

REPOSITORY = "bench"
BOB_TIMEOUT_MS = 10_000  # an editor's deadline for a keystroke's suggestion
# alice's client runs on this host only because the benchmark has one host: at nice 19 it has the CPU the
# appliance leaves, as if it ran on her own machine; what the appliance spends on her flood (TLS, refusals,
# context work, the engine) still competes with bob. ``--flood-nice 0`` lets her client compete too.
FLOOD_NICE = 19
FLOOD_TEXT = "def f(x):\n    return x + 1\n\n" * 6_000  # ~170 KB: parsed and embedded, the costly context work
BIG_PAYLOAD = b'{"text": "' + b"x" * ((8 << 20) - 64) + b'"}'


class SharedEngine:
    """A scripted engine with one compute unit, scheduled by the CPU engine's own scheduler
    (``serving.engine.scheduler``: engine time shared between users, then earliest deadline first): it runs
    the request chosen step by step (64 prompt tokens, or one generated token, a step) and, between two
    steps, gives way when the scheduler would choose another."""

    def __init__(self, step_s: float = 0.02, prompt_step_tokens: int = 64) -> None:
        self.step_s = step_s
        self.prompt_step_tokens = prompt_step_tokens
        self.scheduler: LatencyFirstScheduler[asyncio.Future[None]] = LatencyFirstScheduler()
        self._busy = False
        self._retry: asyncio.TimerHandle | None = None

    def __str__(self) -> str:
        return "the scripted engine with the CPU engine's scheduler"

    async def _turn(self, cost_s: float, tenant: str | None, ticket: Ticket | None) -> Ticket:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ticket = self.scheduler.submit(turn, cost_s=cost_s, ticket=ticket, tenant=tenant)
        self._dispatch()
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed the engine as it was cancelled: pass it on
                self._release()
            raise
        return ticket

    def _dispatch(self) -> None:
        """Hand the engine to the request the scheduler chooses (after its gathering window, if need be)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        while not self._busy and (chosen := self.scheduler.next_batch(limit=1)):
            if not chosen[0].done():  # a waiter cancelled meanwhile is skipped
                self._busy = True
                chosen[0].set_result(None)
        if not self._busy and (wait := self.scheduler.wait_s()) is not None:
            self._retry = asyncio.get_running_loop().call_later(max(wait, 0.001), self._dispatch)

    def _release(self) -> None:
        self._busy = False
        self._dispatch()

    async def _steps(self, n: int, tenant: str | None) -> AsyncIterator[None]:
        ticket = await self._turn(n * self.step_s, tenant, None)
        started = time.monotonic()
        try:
            for _ in range(n):
                await asyncio.sleep(self.step_s)
                yield
                if self.scheduler.should_give_way(ticket, time.monotonic() - started):
                    self.scheduler.charge(tenant, time.monotonic() - started)
                    self._release()
                    ticket = await self._turn(0.0, tenant, ticket)
                    started = time.monotonic()
        finally:
            self.scheduler.charge(tenant, time.monotonic() - started)
            self._release()

    async def stream(self, request: EngineRequest) -> AsyncIterator[Piece]:
        prompt_tokens = max(1, len(request.prompt) // 4)
        prompt_steps = -(-prompt_tokens // self.prompt_step_tokens)
        step = 0
        async for _ in self._steps(prompt_steps + request.max_tokens, request.cache_salt):
            step += 1
            if step > prompt_steps:
                yield Piece("x ")
        yield Piece("", {inference.CTX_PROMPT_TOKENS: prompt_tokens,
                         inference.CTX_COMPLETION_TOKENS: request.max_tokens}, "length")

    async def cancel(self, request_id: str) -> bool:
        return False


@dataclass
class Figures:
    latencies_ms: list[float] = field(default_factory=list)
    context_ms: list[float] = field(default_factory=list)  # the worker's context work, of each answered request
    codes: Counter[str] = field(default_factory=Counter)
    stages_ms: dict[str, list[float]] = field(default_factory=dict)  # the reply's timings, of each answered request

    def summary(self) -> dict[str, Any]:
        answered = self.codes["ok"]
        total = sum(self.codes.values())
        return {"requests": total, "answered": answered, "answered_share": answered / total if total else None,
                "p50_ms": percentile(self.latencies_ms, 50) if self.latencies_ms else None,
                "p95_ms": percentile(self.latencies_ms, 95) if self.latencies_ms else None,
                "context_ms_p50": percentile(self.context_ms, 50) if self.context_ms else None,
                "stages_ms_p50": {k: round(percentile(v, 50), 1) for k, v in self.stages_ms.items()},
                "outcomes": dict(self.codes)}


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextlib.asynccontextmanager
async def team_appliance(home: Path, engine: CompletionEngine, count_tokens: Callable[[str], int],
                         over: dict[str, Any]) -> AsyncIterator[tuple[identity.NatsCredentials, ...]]:
    """PostgreSQL, NATS (TLS, team authorization), the gateway and shard 0's worker; yields alice's and bob's
    credentials."""
    from db import team as store
    from db.embedded import EmbeddedPostgres
    from db.migrations import migrate
    pg_port, nats_port, monitor_port = free_ports(3)
    postgres = EmbeddedPostgres(home / "pg", "127.0.0.1", pg_port)
    await asyncio.to_thread(postgres.start, timeout_s=120)
    nats_part: NatsPart | None = None
    try:
        url = postgres.url()
        await asyncio.to_thread(migrate, url)
        settings = Settings(home=home, team=True, database_url=url, nats_port=nats_port,
                            nats_monitor_port=monitor_port, worker_metrics_port=0, shards=1, **over)
        team.prepare_up(settings)
        nats_part = NatsPart(settings)
        await asyncio.to_thread(nats_part.start, 30)
        team.after_part_started(settings, "nats")
        users = []
        for name in ("alice", "bob"):
            password = identity.new_password()
            store.add_user(url, name, identity.bcrypt_hash(password, 4), [REPOSITORY])
            users.append(identity.NatsCredentials(settings.effective_nats_url(), name, password,
                                                  identity.client_ca(settings)))
        team.sync_authorization(settings, lambda line: None)
        env = {**os.environ, "CTXPRESS_HOME": str(home), "CTXPRESS_TEAM": "true", "CTXPRESS_DATABASE_URL": url,
               "CTXPRESS_NATS_PORT": str(nats_port), "CTXPRESS_NATS_MONITOR_PORT": str(monitor_port),
               "CTXPRESS_SHARDS": "1", **{f"CTXPRESS_{k.upper()}": str(v) for k, v in over.items()}}
        # the gateway in a process of its own, as `ctxpress up` runs it: its relaying is not the worker's loop's
        gateway = await asyncio.create_subprocess_exec(sys.executable, "-m", "workers.gateway", env=env)
        async with running_worker(settings.model_copy(update={"shard": 0}), engine, count_tokens):
            try:
                yield tuple(users)
            finally:
                gateway.terminate()
                try:
                    await asyncio.wait_for(gateway.wait(), 30)
                except TimeoutError:  # still draining a flood's backlog: the figures are taken, stop it
                    print("fairness: the gateway was not stopped 30 s after SIGTERM; killed", file=sys.stderr)
                    gateway.kill()
                    await gateway.wait()
    finally:
        if nats_part is not None:
            nats_part.stop()
        postgres.stop()


async def _until_served(client: Any, bob: identity.NatsCredentials) -> None:
    probe = json.dumps({"repository": REPOSITORY, "path": "probe.py", "text": "x\n", "line": 9, "column": 0})
    for _ in range(300):
        try:
            reply = json.loads((await client.request(bob.subject("complete"), probe.encode(), timeout=2)).data)
            if reply.get("error", {}).get("code") == "cursor_out_of_range":  # the worker answered, through the gateway
                return
        except Exception:  # not up yet
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the gateway and the worker did not answer within a minute")


async def _typist(client: Any, bob: identity.NatsCredentials, steps: list[TypingStep], cfg: BenchConfig,
                  label: str) -> Figures:
    figures = Figures()

    async def send(step: TypingStep) -> tuple[float, dict[str, Any]]:
        request = step_request(REPOSITORY, "src/typed.py", step, "optimized", "fairness", cfg).model_copy(
            update={"timeout_ms": BOB_TIMEOUT_MS})
        started = time.perf_counter()
        try:
            msg = await client.request(bob.subject("complete"), request.model_dump_json(exclude_none=True).encode(),
                                       timeout=BOB_TIMEOUT_MS / 1000 + 5)
            reply: dict[str, Any] = json.loads(msg.data)
        except Exception as exc:  # no reply in time counts as not answered
            reply = {"error": {"code": type(exc).__name__}}
        latency = (time.perf_counter() - started) * 1000
        code = reply["error"]["code"] if "error" in reply else "ok"
        figures.codes[code] += 1
        if code == "ok":
            figures.latencies_ms.append(latency)
            figures.context_ms.append(float(reply.get("timings", {}).get("context_ms", 0.0)))
            for stage, value in reply.get("timings", {}).items():
                figures.stages_ms.setdefault(stage, []).append(float(value))
        return latency, reply

    await replay_typing(steps, cfg, send, Progress(len(steps), f"bob typing ({label})"), label)
    return figures


async def _flood(client: Any, alice: identity.NatsCredentials, stop: asyncio.Event, seen: Counter[str]) -> None:
    """alice's four floods at once, each as fast as its answers come, until ``stop``. Its bodies are made once
    (only a counter changes): the flood's own work is sending."""

    async def loop(kind: str, body: Callable[[int], bytes], concurrency: int) -> None:
        counter = itertools.count()

        async def one() -> None:
            while not stop.is_set():
                try:
                    msg = await client.request(alice.subject(kind), body(next(counter)), timeout=30)
                    reply = json.loads(msg.data)
                    seen[f"{kind}:{reply['error']['code'] if 'error' in reply else 'ok'}"] += 1
                except Exception as exc:
                    seen[f"{kind}:{type(exc).__name__}"] += 1
                    await asyncio.sleep(0.05)
        await asyncio.gather(*(one() for _ in range(concurrency)))

    long_tail = json.dumps({"repository": REPOSITORY, "text": FLOOD_TEXT, "line": 1, "column": 4,
                            "max_tokens": 256, "timeout_ms": 600_000}).encode()[1:]
    opened_tail = json.dumps({"repository": REPOSITORY, "text": FLOOD_TEXT, "language": "python",
                              "line": 1}).encode()[1:]

    def long_request(i: int) -> bytes:
        return b'{"path": "flood/f%d.py", ' % i + long_tail

    def opened(i: int) -> bytes:
        return b'{"path": "storm/o%d.py", ' % i + opened_tail

    def feedback(i: int) -> bytes:
        return json.dumps({"completion_id": f"spam-{i}", "action": "accepted", "chars_kept": 1}).encode()

    await asyncio.gather(loop("complete", long_request, 16), loop("complete", lambda i: BIG_PAYLOAD, 2),
                         loop("file_opened", opened, 8), loop("feedback", feedback, 8))


async def run_fairness(cfg: BenchConfig, typing_file: Path, engine_kind: str, settings: Settings,
                       report: Callable[[str], None], flood_nice: int = FLOOD_NICE) -> dict[str, Any]:
    if engine_kind == "triton":
        from serving.triton_client import TritonCompletionClient
        from workers.completion.worker import load_tokenizer

        engine: CompletionEngine = TritonCompletionClient(settings.effective_triton_url())
        count_tokens = load_tokenizer(settings)
        over: dict[str, Any] = {"triton_url": settings.effective_triton_url()}
    else:
        engine, count_tokens, over = SharedEngine(), (lambda s: max(1, len(s) // 4)), {}
    _, _, steps = typing_plan(typing_file, cfg)

    with tempfile.TemporaryDirectory(prefix="ctxpress-fairness-") as home:
        report(f"fairness: starting a team appliance (engine: {engine_kind}) in {home}")
        async with team_appliance(Path(home), engine, count_tokens, over) as (alice, bob):
            b = await nats.connect(bob.nats_url, **bob.connect_options())
            try:
                await _until_served(b, bob)
                report("fairness: bob types alone")
                alone = await _typist(b, bob, steps, cfg, "alone")
                report("fairness: bob types while alice floods (from a process of her own)")
                alice_file = identity.write_credentials(Path(home) / "alice.json", alice)
                flood = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "ctxpress.evaluation.fairness_bench", str(alice_file), str(flood_nice),
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
                await asyncio.sleep(3.0)  # the flood under way before bob's first keystroke
                flooded = await _typist(b, bob, steps, cfg, "flooded")
                try:
                    out, _ = await asyncio.wait_for(flood.communicate(b"stop\n"), 60)
                except TimeoutError:
                    flood.kill()
                    out = b""
                seen = json.loads(out.decode().strip().splitlines()[0]) if out.strip() else {}
            finally:
                await b.close()
    one, two = alone.summary(), flooded.summary()
    p50_ratio = two["p50_ms"] / one["p50_ms"] if one["p50_ms"] and two["p50_ms"] else None
    share_ratio = (two["answered_share"] / one["answered_share"]
                   if one["answered_share"] and two["answered_share"] is not None else None)
    return {"engine": engine_kind, "bob_alone": one, "bob_flooded": two, "p50_ratio": p50_ratio,
            "answered_ratio": share_ratio, "alice": dict(sorted(seen.items())),
            "target_met": p50_ratio is not None and p50_ratio <= 1.5 and share_ratio is not None
            and share_ratio >= 0.9}


def report_lines(f: dict[str, Any]) -> list[str]:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    lines = [f"fairness (engine: {f['engine']}, alice's client at nice {f.get('flood_nice', FLOOD_NICE)})",
             f"{'bob':<10}{'requests':>9}{'answered':>9}{'share':>7}"
             f"{'p50 ms':>8}{'p95 ms':>8}{'context p50':>12}"]
    for label in ("alone", "flooded"):
        s = f[f"bob_{label}"]
        share = "-" if s["answered_share"] is None else f"{s['answered_share']:.0%}"
        lines.append(f"{label:<10}{s['requests']:>9}{s['answered']:>9}{share:>7}{ms(s['p50_ms']):>8}"
                     f"{ms(s['p95_ms']):>8}{ms(s['context_ms_p50']):>12}")
    ratio = "-" if f["p50_ratio"] is None else f"{f['p50_ratio']:.2f}x"
    share = "-" if f["answered_ratio"] is None else f"{f['answered_ratio']:.2f}"
    lines.append(f"p50 flooded/alone {ratio} (target <= 1.5x), answered ratio {share} (target >= 0.9): "
                 f"{'met' if f['target_met'] else 'NOT met'}")
    for label in ("alone", "flooded"):
        stages = f[f"bob_{label}"]["stages_ms_p50"]
        lines.append(f"bob {label}, p50 of each stage (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items()))
    lines.append("alice's flood: " + ", ".join(f"{k} {v}" for k, v in f["alice"].items()))
    return lines


def main(cfg: BenchConfig, typing_file: Path, engine_kind: str, settings: Settings,
         flood_nice: int = FLOOD_NICE) -> int:
    figures = asyncio.run(run_fairness(cfg, typing_file, engine_kind, settings,
                                       lambda line: print(line, file=sys.stderr), flood_nice))
    figures["flood_nice"] = flood_nice
    for line in report_lines(figures):
        print(line)
    print(json.dumps({"scenarios": {"fairness": figures}}))
    return 0


async def _flood_process(credentials_file: str, nice: int) -> None:
    """alice's side: flood until a line on stdin, then print what she was answered (one JSON line)."""
    os.nice(nice)
    alice = identity.load_credentials(credentials_file)
    client = await nats.connect(alice.nats_url, **alice.connect_options())
    stop, seen = asyncio.Event(), Counter[str]()
    flood = asyncio.create_task(_flood(client, alice, stop, seen))
    await asyncio.to_thread(sys.stdin.readline)
    stop.set()
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):  # requests still unanswered are abandoned
        await asyncio.wait_for(flood, 5)
    print(json.dumps(dict(seen)), flush=True)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), 5)


if __name__ == "__main__":
    asyncio.run(_flood_process(sys.argv[1], int(sys.argv[2])))
