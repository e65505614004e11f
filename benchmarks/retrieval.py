"""Time cross-file retrieval alone: ``python -m benchmarks.retrieval CASES.jsonl --repo NAME``.

Runs ``Retriever.retrieve`` for each case's cursor as the worker does (query embedding through
Triton, pgvector + lexical search in PostgreSQL) with the deadline lifted, so that the time
itself is measured; prints p50/p95 and how many would have fit the deployment's deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from context.sources.retrieval import Retriever
from ctxpress.evaluation.cases import cut_out, read_cases
from ctxpress.evaluation.progress import Progress
from ctxpress_core.settings import get_settings
from serving.triton_client import AsyncTritonEmbedder


async def run(cases_path: Path, repository: str) -> dict[str, float]:
    settings = get_settings()
    retriever = Retriever(settings.effective_database_url(), AsyncTritonEmbedder(settings.effective_triton_url()),
                          timeout_ms=10_000)
    cases = read_cases(cases_path)
    progress = Progress(len(cases), "retrieval")
    times: list[float] = []
    returned: list[int] = []
    try:
        for case in cases:
            text = (Path(case.repo) / case.path).read_text(encoding="utf-8")
            cut, _ = cut_out(text, case.line, case.column)
            result = await retriever.retrieve(repositories=[repository], path=case.path, text=cut, line=case.line)
            times.append(result.report.elapsed_ms)
            returned.append(result.report.returned)
            progress.advance(f"{result.report.elapsed_ms:.0f} ms")
    finally:
        retriever.close()
    times.sort()
    return {"n": len(times), "p50_ms": times[len(times) // 2], "p95_ms": times[int(0.95 * (len(times) - 1))],
            "max_ms": times[-1], "chunks_mean": statistics.fmean(returned),
            "within_deadline": sum(t <= settings.retrieval_timeout_ms for t in times),
            "deadline_ms": settings.retrieval_timeout_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("cases", type=Path)
    parser.add_argument("--repo", required=True, help="repository name in the index")
    args = parser.parse_args()
    summary = asyncio.run(run(args.cases, args.repo))
    print(f"retrieval over {summary['n']:.0f} cursors: p50 {summary['p50_ms']:.1f} ms, p95 {summary['p95_ms']:.1f} ms, "
          f"{summary['within_deadline']:.0f} within the {summary['deadline_ms']:.0f} ms deadline", file=sys.stderr)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
