"""The index worker against the real NATS JetStream, PostgreSQL and Triton of the appliance."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import (
    HEADER_DEAD_DELIVERIES,
    HEADER_DEAD_ERROR,
    HEADER_DEAD_SUBJECT,
    SUBJECT_FILE_SAVED,
    SUBJECT_INDEX_DEAD,
    SUBJECT_INDEX_GIT,
    ChangedPath,
    FileSaved,
    IndexEvent,
)
from db.chunk_search import search_chunks
from db.models import CodeChunk, IndexedFile, Repository
from db.session import engine_for
from indexer.pipeline import Indexer
from indexer.stream import ACK_WAIT_S, dead_letter_stream, dead_letters, next_batch, retry_delay_s
from serving.triton_client import TritonEmbedder
from tests.conftest import free_port
from tests.indexer.index_repo import git, make_repo
from workers.index_worker import IndexWorker, decode

pytestmark = pytest.mark.services


def _searchable(url: str, repo: str, symbol: str) -> bool:
    with Session(engine_for(url)) as session, session.begin():
        hits = search_chunks(session, [repo], query_vector=None, words=[symbol.replace("_", "").lower()], k=5)
    return any(h.symbol == symbol for h in hits)


async def _wait_searchable(url: str, repo: str, symbols: list[str], timeout_s: float) -> float:
    started = time.perf_counter()
    missing = list(symbols)
    while missing:
        missing = [s for s in missing if not _searchable(url, repo, s)]
        if missing and time.perf_counter() - started > timeout_s:
            raise AssertionError(f"not searchable after {timeout_s}s: {missing[:5]} (+{len(missing) - 5})")
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


def _worker_pid(appliance: Any) -> int:
    return int((appliance.settings.run_dir / "index-worker.pid").read_text())


def _kill_worker(appliance: Any) -> None:
    """Kill the index worker and keep it down (the supervisor would restart it): events queue up."""
    from ctxpress.parts.supervisor import SupervisorPart

    SupervisorPart(appliance.settings).stop()
    pid = _worker_pid(appliance)
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)


def _restart_worker(appliance: Any) -> None:
    result = appliance.ctxpress("up", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


async def _status(nats_client: Any, subject: str) -> dict[str, Any]:
    reply = await nats_client.request(subject, b"", timeout=2)
    return json.loads(reply.data)


def _functions(prefix: str, n: int) -> tuple[str, list[str]]:
    names = [f"{prefix}_{i}_{uuid.uuid4().hex[:6]}" for i in range(n)]
    return "".join(f"def {name}(value):\n    return value + {i}\n\n\n" for i, name in enumerate(names)), names


async def test_a_commit_with_hooks_installed_makes_the_new_function_searchable(appliance: Any, tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    name = f"hooked-{uuid.uuid4().hex[:6]}"
    root = make_repo(tmp_path / "repo")
    indexed = appliance.ctxpress("index", str(root), "--name", name)
    assert indexed.returncode == 0, indexed.stderr
    assert "6 files" in indexed.stdout and "13 chunks" in indexed.stdout and "syntax error 1" in indexed.stdout
    installed = appliance.ctxpress("hooks", "install", str(root), "--name", name)
    assert installed.returncode == 0, installed.stderr

    (root / "shop" / "shipping.py").write_text((root / "shop" / "shipping.py").read_text() + (
        "\n\ndef estimate_delivery_days(country: str, express: bool = False) -> int:\n"
        '    """Business days until the parcel arrives."""\n'
        '    return 1 if express else (2 if country == "FR" else 5)\n'))
    git(root, "add", "-A")
    started = time.perf_counter()
    git(root, "commit", "-q", "-m", "delivery estimate")
    commit_s = time.perf_counter() - started
    waited = await _wait_searchable(url, name, ["estimate_delivery_days"], timeout_s=15)
    assert commit_s < 2.0  # the hook returns at once
    found = appliance.ctxpress("search", "--repo", name, "--json", "how many days until delivery")
    results = json.loads(found.stdout)["results"]
    assert results[0]["symbol"] == "estimate_delivery_days" and "vector" in results[0]["found_by"]
    print(f"commit {commit_s * 1000:.0f} ms, then searchable after {waited * 1000:.0f} ms")

    # a delete and a rename, through the same hooks
    git(root, "mv", "shop/shipping.py", "shop/delivery.py")
    git(root, "commit", "-q", "-m", "rename")
    deadline = time.time() + 15
    while True:
        with Session(engine_for(url)) as session:
            paths = set(session.scalars(select(CodeChunk.path).join(Repository).where(Repository.name == name)))
        if "shop/delivery.py" in paths and "shop/shipping.py" not in paths:
            break
        assert time.time() < deadline, paths
        await asyncio.sleep(0.05)
    assert appliance.ctxpress("hooks", "uninstall", str(root)).returncode == 0


async def test_a_save_event_is_indexed_and_a_redelivered_message_changes_nothing(appliance: Any,
                                                                                 nats_client: Any) -> None:
    settings = appliance.settings
    url = settings.effective_database_url()
    name = f"saves-{uuid.uuid4().hex[:6]}"
    js = nats_client.jetstream()
    v1, _ = _functions("first", 3)
    v2, names2 = _functions("second", 3)
    _kill_worker(appliance)  # we play the worker ourselves, on the same durable consumer
    embedder = TritonEmbedder(settings.effective_triton_url())
    worker = IndexWorker(settings, Indexer(url, embedder))
    try:
        for text in (v1, v2):
            saved = FileSaved(repository=name, path="app/edit.py", text=text)
            await js.publish(SUBJECT_FILE_SAVED, saved.model_dump_json().encode())
        sub = await js.pull_subscribe_bind(settings.index_consumer, settings.index_stream)
        first, second = await sub.fetch(2, timeout=5)
        # The first event is applied, but the worker "dies" before its ack ...
        await asyncio.get_running_loop().run_in_executor(
            None, worker.indexer.apply_changes, name, decode(first, first.metadata.sequence.stream).changes, None)
        await worker.handle_batch([second])  # ... while the second is applied and acked
        with Session(engine_for(url)) as session:
            rows = set(session.execute(select(CodeChunk.symbol, CodeChunk.id).join(Repository)
                                       .where(Repository.name == name)))
        assert {s for s, _ in rows} == set(names2)
        # JetStream redelivers the first after ack_wait: applying it again must change nothing.
        (again,) = await sub.fetch(1, timeout=ACK_WAIT_S + 10)
        assert again.metadata.sequence.stream == first.metadata.sequence.stream
        assert again.metadata.num_delivered == 2
        await worker.handle_batch([again])
        with Session(engine_for(url)) as session:
            after = set(session.execute(select(CodeChunk.symbol, CodeChunk.id).join(Repository)
                                        .where(Repository.name == name)))
        assert after == rows and worker.stats.stale_events == 1
        await sub.unsubscribe()
    finally:
        embedder.close()
        _restart_worker(appliance)


async def test_killing_the_worker_mid_stream_loses_nothing(appliance: Any, nats_client: Any) -> None:
    settings = appliance.settings
    url = settings.effective_database_url()
    name = f"burst-{uuid.uuid4().hex[:6]}"
    js = nats_client.jetstream()
    expected: list[str] = []
    for f in range(30):
        text, names = _functions(f"burst{f}", 6)
        expected += names
        await js.publish(SUBJECT_FILE_SAVED,
                         FileSaved(repository=name, path=f"mod{f}.py", text=text).model_dump_json().encode())
    # Kill it while it is busy with the burst (180 chunks to embed: seconds of work).
    deadline = time.time() + 10
    while (await _status(nats_client, settings.index_status_subject))["events"] == 0:
        assert time.time() < deadline
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    _kill_worker(appliance)
    _restart_worker(appliance)
    await _wait_searchable(url, name, expected, timeout_s=ACK_WAIT_S + 60)


async def test_a_burst_of_commits_is_one_pass_per_file(appliance: Any, nats_client: Any) -> None:
    settings = appliance.settings
    url = settings.effective_database_url()
    name = f"rebase-{uuid.uuid4().hex[:6]}"
    js = nats_client.jetstream()
    _kill_worker(appliance)  # the events pile up, as during a 50-commit rebase
    try:
        last: list[str] = []
        for i in range(50):
            text, last = _functions(f"step{i}", 2)
            event = IndexEvent(repository=name, commit=uuid.uuid4().hex + "00000000", hook="post-commit",
                               changes=[ChangedPath(path="lib/core.py", status="M", text=text)])
            await js.publish(SUBJECT_INDEX_GIT, event.model_dump_json().encode())
        bad = await js.publish(SUBJECT_INDEX_GIT, b'{"not": "an event"}')
        assert bad.seq > 0
    finally:
        _restart_worker(appliance)
    await _wait_searchable(url, name, last, timeout_s=30)
    status = await _status(nats_client, settings.index_status_subject)
    assert status["file_passes"][f"{name}:lib/core.py"] == 1, status
    assert status["invalid"] == 1  # refused with a log line and terminated, not redelivered forever
    with Session(engine_for(url)) as session:
        symbols = set(session.scalars(select(CodeChunk.symbol).join(Repository).where(Repository.name == name)))
        row = session.scalars(select(IndexedFile).join(Repository).where(Repository.name == name)).one()
    assert symbols == set(last) and row.source_seq > 0


def test_retries_wait_longer_each_time_up_to_the_cap() -> None:
    settings = Settings(index_retry_base_s=2.0, index_retry_max_s=60.0)
    assert [retry_delay_s(settings, n) for n in range(1, 8)] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


async def test_an_outage_longer_than_the_retries_keeps_the_event_as_a_dead_letter(appliance: Any,
                                                                                   nats_client: Any) -> None:
    """The database is unreachable for every try: the event is retried with backoff, then kept in the dead-letter
    stream with its subject and why, and `ctxpress status` raises an alert. (Before, after 20 naks 2 s apart,
    about 40 s, JetStream stopped delivering it and nothing said so.)"""
    settings = appliance.settings.model_copy(update={"index_retry_base_s": 0.2, "index_max_deliver": 3})
    js = nats_client.jetstream()
    dead_before = await dead_letters(js, settings)
    name = f"outage-{uuid.uuid4().hex[:6]}"
    event = IndexEvent(repository=name, commit="c" * 40, hook="post-commit",
                       changes=[ChangedPath(path="lib/core.py", status="M", text="def f():\n    return 1\n")])
    _kill_worker(appliance)
    try:
        seq = (await js.publish(SUBJECT_INDEX_GIT, event.model_dump_json().encode())).seq
        # An index worker whose database is down for the whole test (nothing listens on that port).
        down = f"postgresql+psycopg://ctxpress@127.0.0.1:{free_port()}/ctxpress"
        worker = IndexWorker(settings, Indexer(down, TritonEmbedder(settings.effective_triton_url())), js=js)
        sub = await js.pull_subscribe_bind(settings.index_consumer, settings.index_stream)
        deliveries: list[int] = []
        deadline = time.monotonic() + 60
        while worker.stats.dead_lettered == 0:
            assert time.monotonic() < deadline, worker.stats.as_dict()
            msgs = await next_batch(sub)
            deliveries += [m.metadata.num_delivered for m in msgs if m.metadata.sequence.stream == seq]
            if msgs:
                await worker.handle_batch(msgs)
        await sub.unsubscribe()
        assert deliveries == [1, 2, 3], deliveries  # retried, then given up on at the last try
        dead = await js.get_last_msg(dead_letter_stream(settings), SUBJECT_INDEX_DEAD)
        assert json.loads(dead.data) == json.loads(event.model_dump_json())
        assert dead.headers is not None and dead.headers[HEADER_DEAD_SUBJECT] == SUBJECT_INDEX_GIT
        assert "OperationalError" in dead.headers[HEADER_DEAD_ERROR] and dead.headers[HEADER_DEAD_DELIVERIES] == "3"
        assert await dead_letters(js, settings) == dead_before + 1
    finally:
        _restart_worker(appliance)
    status = appliance.ctxpress("status")
    assert f"ALERT: {dead_before + 1} index event(s) given up on" in status.stdout, status.stdout
