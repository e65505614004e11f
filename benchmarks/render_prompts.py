"""Render the prompts the completion worker would send to the model, without the model.

Used to prove a refactor changes no behaviour: the long-eval cases (`make-cases` over SQLAlchemy,
``--min-lines 2000 --seed 1``) and the typing replay's pauses (one context library, so steady excerpts carry from
pause to pause), each prompt's text and FIM markers written one JSON line per request. Two runs' files
are compared with ``cmp``. Cross-file retrieval is left out: it needs the index and its timeout makes it
depend on the machine's load.

    python -m benchmarks.render_prompts --out before.jsonl [--cases held-out.jsonl] [--features=-similar]

``--cases``: another case set (``ctxpress eval make-cases``) instead of the long-eval cases, no typing replay.
``--features``: switches as ``ctxpress eval --features`` takes them (which cursors a switch changes).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
from pathlib import Path

from context.build import ContextLibrary, FileView
from ctxpress.evaluation.bench import third_party_root
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.cases import cut_out, make_cases, read_cases
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.typing_replay import typing_plan
from ctxpress_core.features import parse_list
from ctxpress_core.settings import get_settings
from ctxpress_core.wire.v1 import CompletionRequest
from workers.completion.worker import load_tokenizer

LONG_CASES = 100
LONG_SEED = 1
LONG_MIN_LINES = 2000
TYPING_PAUSES = 20


async def _prompt(library: ContextLibrary, request: CompletionRequest) -> dict[str, object]:
    text = request.text or ""
    view = FileView(text, hashlib.sha256(text.encode()).hexdigest(), None, (request.repository,))
    built = await library.build_prompt(request, view, None)
    prompt = built.layout.text
    return {"path": request.path, "line": request.line, "column": request.column,
            "sha256": hashlib.sha256(prompt.encode()).hexdigest(), "chars": len(prompt),
            "markers": built.layout.markers, "prompt": prompt}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.render_prompts", description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cases", type=Path, help="a case set of ctxpress eval make-cases (then no typing replay)")
    p.add_argument("--features", type=parse_list, default={}, help="e.g. -suffix_floor,-similar")
    args = p.parse_args(argv)
    # a generous assembly deadline: a prompt must not depend on how busy the machine is
    settings = get_settings().model_copy(update={"assembly_timeout_ms": 60_000.0})
    library = ContextLibrary(settings, load_tokenizer(settings), settings.model_name)
    root = third_party_root()
    cases = read_cases(args.cases) if args.cases else make_cases(root, LONG_CASES, LONG_SEED, LONG_MIN_LINES)
    cfg = BenchConfig(settings.effective_nats_url(), settings.completion_subject, modes=["optimized"],
                      typing_pauses=TYPING_PAUSES)
    typing_file = root / "engine" / "result.py"
    _opened, _line, steps = typing_plan(typing_file, cfg) if not args.cases else (None, None, [])
    progress = Progress(len(cases) + len(steps), "rendering prompts")
    with args.out.open("w", encoding="utf-8") as out:
        for case in cases:
            text = (Path(case.repo) / case.path).read_text(encoding="utf-8")
            cut, _ = cut_out(text, case.line, case.column)
            request = CompletionRequest(repository=Path(case.repo).name, path=case.path, text=cut, line=case.line,
                                        column=case.column, mode="optimized", features=args.features or None)
            out.write(json.dumps({"set": "long", **asyncio.run(_prompt(library, request))}) + "\n")
            progress.advance(case.path)
        for step in steps:
            request = CompletionRequest(repository="sqlalchemy", path="engine/result.py", text=step.text,
                                        line=step.line, column=step.column, mode="optimized",
                                        features=args.features or None)
            out.write(json.dumps({"set": "typing", **asyncio.run(_prompt(library, request))}) + "\n")
            progress.advance("typing")
    print(f"{len(cases)} long-eval prompts and {len(steps)} typing-replay prompts written to {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
