"""kill -9 of each part of a running appliance under a bounded load (``make faults``).

Each test starts an appliance of its own with ``ctxpress up`` (throw-away state directory, free ports),
indexes a small git repository and installs its hooks, then runs the load of ``tests/faults/load.py``:
two editors asking for completions in a loop, and once they have answers a commit every 1.5 s. Once both
flow, the part's process (its pid from ``ctxpress status --json``) gets SIGKILL. Then:

- no request hangs: each ends with an answer or a structured error (NATS's "no responders" while no worker
  listens), or with no reply at its deadline only when the dead part held it or NATS itself was gone (a request
  sent once the part is back always has its reply); none goes past the deadline plus a margin;
- the supervisor brings the part back by itself (a new process, ready, one restart in its state file);
- service resumes: a request sent after the kill is answered with a completion;
- no index event is lost or applied twice: once the stream is drained, the repository's chunks are
  exactly those of a fresh index of the same tree (same paths, symbols and contents, none twice).

A row per part goes to the terminal summary (tests/faults/conftest.py) for docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import nats
import pytest
from sqlalchemy import text

from ctxpress.parts import parts
from ctxpress.parts.supervisor import read_state
from ctxpress_core.settings import Settings
from db.session import engine_for
from tests.conftest import appliance_env, ctxpress, running_appliance, settings_from_env
from tests.faults.load import DEADLINE_S, HANG_MARGIN_S, MAX_COMMITS, ROWS, CommitLoad, CompletionLoad, counts
from tests.indexer.index_repo import make_repo

pytestmark = pytest.mark.faults

PARTS = ("completion-worker", "index-worker", "triton", "postgres", "nats")
LOAD_MAX_S = 420.0  # the whole load, whatever happens
WARM_MAX_S = 300.0  # the first answers (a cold prompt on busy cores)
BACK_MAX_S = 300.0  # the part restarted and ready (Triton loads its model again)
RESUME_MAX_S = 300.0  # after that, an answered request
DRAIN_MAX_S = 120.0  # the index stream empty
COMMITS_AFTER_BACK = len(CommitLoad.FILES)  # every file edited again once the part is back


async def _until(condition: Any, limit_s: float, what: str, every_s: float = 0.5) -> float:
    """Poll ``condition`` (a blocking callable, run in a thread) until true; the seconds it took."""
    started = time.monotonic()
    while not await asyncio.to_thread(condition):
        if time.monotonic() - started > limit_s:
            raise AssertionError(f"{what}: not within {limit_s:.0f} s")
        await asyncio.sleep(every_s)
    return time.monotonic() - started


def _status_pid(env: dict[str, str], name: str) -> int:
    status = json.loads(ctxpress(env, "status", "--json", timeout=60).stdout)
    pid = next(row["pid"] for row in status["parts"] if row["name"] == name)
    assert isinstance(pid, int), status
    return pid


def _back(settings: Settings, name: str, old_pid: int) -> bool:
    part = next(p for p in parts(settings) if p.name == name)
    pid = part.pid()
    restarts = read_state(settings).get("parts", {}).get(name, {}).get("restarts", 0)
    return pid is not None and pid != old_pid and restarts >= 1 and part.ready()


def _chunks(settings: Settings, repository: str) -> Counter[tuple[str, str, str]]:
    with engine_for(settings.effective_database_url()).connect() as conn:
        rows = conn.execute(text("SELECT c.path, c.symbol, c.content_hash FROM code_chunks c "
                                 "JOIN repositories r ON r.id = c.repo_id WHERE r.name = :name"),
                            {"name": repository}).all()
    return Counter((r.path, r.symbol, r.content_hash) for r in rows)


def _events_applied(home: Path, repository: str) -> int:
    """Events the index workers (every process the log saw) applied to ``repository``: one per commit, more when
    a worker died after applying a batch and before acking it (redelivered, applied again: no change)."""
    applied = 0
    for line in (home / "logs" / "index-worker.log").read_text(errors="replace").splitlines():
        start = line.find('{"event": "indexed"')
        if start >= 0:
            entry = json.loads(line[start:])
            applied += entry["events"] if entry["repository"] == repository else 0
    return applied


async def _stream_drained(settings: Settings) -> bool:
    nc = await nats.connect(settings.effective_nats_url(), connect_timeout=2, max_reconnect_attempts=0)
    try:
        info = await nc.jetstream().consumer_info(settings.index_stream, settings.index_consumer)
        return info.num_pending == 0 and info.num_ack_pending == 0
    finally:
        await nc.close()


@pytest.fixture
def own_appliance(model_path: Path) -> Any:
    # Not under pytest's base temp: every pytest session on the machine sets that back to 0700, which would
    # lock PostgreSQL's own system user out of its data directory in the middle of a test.
    home = Path(tempfile.mkdtemp(prefix="ctxpress-faults-"))
    try:
        with running_appliance(appliance_env(home, model_path)) as env:
            yield env, home
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("name", PARTS)
async def test_a_part_killed_under_load_comes_back_and_loses_nothing(name: str, own_appliance: Any) -> None:
    env, home = own_appliance
    settings = settings_from_env(env)
    repository = "faults-repo"
    root = make_repo(home / "repo")
    indexed = ctxpress(env, "index", str(root), "--name", repository)
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    installed = ctxpress(env, "hooks", "install", str(root), "--name", repository)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    completions = CompletionLoad(settings)
    commits = CommitLoad(root)
    load = [asyncio.ensure_future(completions.run(LOAD_MAX_S))]
    try:
        await _until(lambda: counts(completions.outcomes)["answered"] >= 2, WARM_MAX_S, "the first answers")
        load.append(asyncio.ensure_future(commits.run(LOAD_MAX_S)))  # the commits go on through the kill
        await _until(lambda: commits.commits >= 3, WARM_MAX_S, "the first commits")
        pid = await asyncio.to_thread(_status_pid, env, name)
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        print(f"\n{name}: pid {pid} killed after {len(completions.outcomes)} requests, {commits.commits} commits")
        back_s = await _until(lambda: _back(settings, name, pid), BACK_MAX_S, f"{name} restarted")
        back_at = killed_at + back_s
        commits_at_back = commits.commits
        resumed_s = back_s + await _until(
            lambda: any(o.kind == "answered" and o.started > back_at for o in completions.outcomes),
            RESUME_MAX_S, "a request answered after the restart")
        await _until(lambda: commits.commits >= min(commits_at_back + COMMITS_AFTER_BACK, MAX_COMMITS),
                     COMMITS_AFTER_BACK * 30.0, "commits after the restart")
    finally:
        completions.stop.set()
        commits.stop.set()
        await asyncio.wait_for(asyncio.gather(*load), DEADLINE_S + HANG_MARGIN_S + 30)

    drained_s = 0.0
    started = time.monotonic()
    while not await _stream_drained(settings):
        drained_s = time.monotonic() - started
        assert drained_s < DRAIN_MAX_S, "index stream not drained"
        await asyncio.sleep(0.5)
    fresh = ctxpress(env, "index", str(root), "--name", "faults-fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    applied, expected = _chunks(settings, repository), _chunks(settings, "faults-fresh")
    lost, extra = expected - applied, applied - expected

    outcomes = completions.outcomes
    in_flight = [o for o in outcomes if o.started < killed_at < o.ended]
    late = [o for o in outcomes if o.kind == "no reply" and o.started > back_at]
    row = {"part": name, "requests": len(outcomes), "in_flight": len(in_flight),
           "in_flight_outcomes": dict(counts(in_flight)), "outcomes": dict(counts(outcomes)),
           "hung": counts(outcomes)["hung"], "back_s": round(back_s, 1), "resumed_s": round(resumed_s, 1),
           "commits": commits.commits, "events_refused_by_hook": commits.refused,
           "events_applied": _events_applied(home, repository),
           "chunks": sum(expected.values()), "lost": sum(lost.values()), "extra": sum(extra.values())}
    ROWS.append(row)
    print(json.dumps(row))
    assert row["hung"] == 0, row
    assert not late, f"requests sent after {name} was back got no answer: {row}"
    assert max(o.seconds for o in outcomes) < DEADLINE_S + HANG_MARGIN_S
    assert not lost and not extra, f"lost {list(lost)[:5]}, extra {list(extra)[:5]}"
    assert sum(expected.values()) > 0
