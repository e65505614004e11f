"""Measurements of the repository index against a running appliance (``ctxpress up``).

    python -m benchmarks.indexing throughput SRC [SRC ...] [--min-files 1000]
        copies the source folders into a fresh git repository and indexes it from scratch
    python -m benchmarks.indexing freshness [--commits 20] [--saves 20]
        from a git hook (real ``git commit``, hooks installed) or an IDE save message to the new
        function being returned by a search; reports p50/p95/max

Uses the ``CTXPRESS_*`` settings of the appliance it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy.orm import Session

from ctxpress_core.settings import Settings, get_settings
from db.chunk_search import search_chunks
from db.session import engine_for

GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}


def _git(root: Path, *args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV, **(env or {})})


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def throughput(settings: Settings, sources: list[Path], min_files: int) -> dict[str, object]:
    from indexer.pipeline import Indexer
    from serving.triton_client import TritonEmbedder

    workdir = Path(tempfile.mkdtemp(prefix="ctxpress-bench-"))
    repo = workdir / "repo"
    repo.mkdir()
    for src in sources:
        shutil.copytree(src, repo / src.name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "sources")
    name = f"bench-{uuid.uuid4().hex[:8]}"
    embedder = TritonEmbedder(settings.effective_triton_url())
    indexer = Indexer(settings.effective_database_url(), embedder, settings.index_max_file_bytes)
    try:
        summary = indexer.index_repository(repo, name)
        again = indexer.index_repository(repo, name)  # nothing changed: must write nothing
    finally:
        embedder.close()
        shutil.rmtree(workdir, ignore_errors=True)
    files = summary.files_indexed
    if files < min_files:
        print(f"warning: only {files} files indexed (< {min_files})", file=sys.stderr)
    return {
        "repository": name, "sources": [str(s) for s in sources], "files_indexed": files,
        "files_skipped": len(summary.skipped), "skipped": dict(summary.skipped_by_reason()),
        "chunks": summary.chunks_total, "seconds": round(summary.seconds, 2),
        "stage_seconds": {k: round(v, 2) for k, v in summary.stage_seconds.items()},
        "files_per_s": round(files / summary.seconds, 1),
        "chunks_per_s": round(summary.chunks_total / summary.seconds, 1),
        "reindex_unchanged": {"seconds": round(again.seconds, 2), "chunks_written": again.chunks_written,
                              "files_unchanged": again.files_unchanged},
    }


def _found(settings: Settings, repository: str, symbol: str, deadline_s: float = 10.0) -> float:
    """Poll the index (the lexical side of the search) until ``symbol`` comes back; returns the time."""
    engine = engine_for(settings.effective_database_url())
    word = symbol.replace("_", "").lower()
    end = time.time() + deadline_s
    with Session(engine) as session:
        while time.time() < end:
            with session.begin():
                hits = search_chunks(session, [repository], query_vector=None, words=[word], k=3)
            if any(h.symbol == symbol for h in hits):
                return time.time()
            time.sleep(0.002)
    raise TimeoutError(f"{symbol} not searchable after {deadline_s}s")


def freshness(settings: Settings, commits: int, saves: int) -> dict[str, object]:
    from indexer import hooks

    workdir = Path(tempfile.mkdtemp(prefix="ctxpress-fresh-"))
    repo = workdir / "repo"
    repo.mkdir()
    name = f"fresh-{uuid.uuid4().hex[:8]}"
    module = repo / "pkg" / "module.py"
    module.parent.mkdir()
    module.write_text("".join(f"def existing_{i}(x):\n    return x + {i}\n\n\n" for i in range(40)))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    hooks.install(repo, name, settings.effective_nats_url())
    trace = workdir / "hook-trace.txt"
    commit_ms: list[float] = []
    hook_ms: list[float] = []
    wall_ms: list[float] = []
    try:
        # The first commit indexes the file (40 functions): a warm-up, not measured.
        with module.open("a") as f:
            f.write("def warm_up(x):\n    return x\n")
        _git(repo, "commit", "-qam", "warm up", env={"CTXPRESS_HOOK_TRACE": str(trace)})
        _found(settings, name, "warm_up", 60)
        trace.unlink(missing_ok=True)
        for i in range(commits):
            symbol = f"new_function_{i}_{uuid.uuid4().hex[:6]}"
            with module.open("a") as f:
                f.write(f"\n\ndef {symbol}(value):\n    \"\"\"Added by commit {i}.\"\"\"\n    return value * {i}\n")
            started = time.time()
            _git(repo, "commit", "-qam", f"add {symbol}", env={"CTXPRESS_HOOK_TRACE": str(trace)})
            committed = time.time()
            found = _found(settings, name, symbol)
            hook_started = float(trace.read_text().splitlines()[-1].split()[1])
            commit_ms.append((committed - started) * 1000)
            hook_ms.append((found - hook_started) * 1000)
            wall_ms.append((found - started) * 1000)
        save_ms = asyncio.run(_saves(settings, name, saves))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def stats(values: list[float]) -> dict[str, float]:
        if not values:
            return {}
        return {"n": len(values), "p50": round(statistics.median(values), 1),
                "p95": round(_percentile(values, 0.95), 1), "max": round(max(values), 1)}

    return {"repository": name, "hook_to_searchable_ms": stats(hook_ms), "save_to_searchable_ms": stats(save_ms),
            "git_commit_wall_ms": stats(commit_ms), "commit_start_to_searchable_ms": stats(wall_ms)}


async def _saves(settings: Settings, repository: str, n: int) -> list[float]:
    from ctxpress_core import nats_connect
    from ctxpress_core.wire.v1 import SUBJECT_FILE_SAVED, FileSaved

    nc = await nats_connect.connect(settings.effective_nats_url())
    js = nc.jetstream()
    out: list[float] = []
    base = "".join(f"def saved_{i}(x):\n    return x - {i}\n\n\n" for i in range(40))
    try:
        for i in range(n):
            symbol = f"saved_function_{i}_{uuid.uuid4().hex[:6]}"
            text = base + f"def {symbol}(item):\n    return item\n"
            started = time.time()
            msg = FileSaved(repository=repository, path="pkg/editor.py", text=text, saved_at=started)
            await js.publish(SUBJECT_FILE_SAVED, msg.model_dump_json().encode())
            found = await asyncio.get_running_loop().run_in_executor(None, _found, settings, repository, symbol)
            if i > 0:  # the first save indexes the 40 other functions too: warm-up
                out.append((found - started) * 1000)
    finally:
        await nc.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.indexing")
    sub = parser.add_subparsers(dest="what", required=True)
    tp = sub.add_parser("throughput")
    tp.add_argument("sources", nargs="+", type=Path)
    tp.add_argument("--min-files", type=int, default=1000)
    fr = sub.add_parser("freshness")
    fr.add_argument("--commits", type=int, default=20)
    fr.add_argument("--saves", type=int, default=20)
    args = parser.parse_args(argv)
    settings = get_settings()
    if args.what == "throughput":
        result = throughput(settings, args.sources, args.min_files)
    else:
        result = freshness(settings, args.commits, args.saves)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
