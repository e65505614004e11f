"""The gate of model-written notes (feature ``model_notes``, syntax/notes.py): which cursors of a case set they
change, so that only those need the model, run with the feature on and off.

Against the running appliance (``ctxpress up``): the case set's files are indexed under the name the eval gives
their repository, the notes they want are written through the appliance's engine (as ``ctxpress notes`` does),
then each cursor's prompt is built with the notes and without (in-process, no cross-file chunks), and the cursors
whose prompts differ are written to ``--out`` with the notes shown. Then, on a quiet machine:

    ctxpress eval --cases OUT --mode optimized --features=-retrieval,+model_notes --out on.jsonl
    ctxpress eval --cases OUT --mode optimized --features=-retrieval,-model_notes --out off.jsonl

    python -m benchmarks.notes_gate --cases long.jsonl --out changed.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from context.build import ContextLibrary, FileView
from context.sources.notes import NoteReader
from ctxpress.evaluation.cases import cut_out, read_cases
from ctxpress.evaluation.progress import Progress
from ctxpress_core.settings import get_settings
from ctxpress_core.wire.v1 import CompletionRequest, content_hash
from indexer.embeddings import TritonEmbedder
from indexer.pipeline import FileChange, Indexer
from workers.completion.worker import load_tokenizer


async def _prompt(library: ContextLibrary, request: CompletionRequest, notes: NoteReader) -> str:
    text = request.text or ""
    view = FileView(text, content_hash(text), None, (request.repository,))
    return (await library.build_prompt(request, view, None, notes)).layout.text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.notes_gate", description=__doc__)
    p.add_argument("--cases", type=Path, required=True, help="a case set (ctxpress eval make-cases)")
    p.add_argument("--out", type=Path, required=True, help="the cursors whose prompts the notes change")
    args = p.parse_args(argv)
    settings = get_settings().model_copy(update={"assembly_timeout_ms": 60_000.0})
    url = settings.effective_database_url()
    cases = read_cases(args.cases)
    by_repo: dict[str, dict[str, str]] = {}
    for case in cases:
        by_repo.setdefault(case.repo, {})[case.path] = (Path(case.repo) / case.path).read_text(encoding="utf-8")
    embedder = TritonEmbedder(settings.effective_triton_url())
    for repo, files in by_repo.items():
        summary = Indexer(url, embedder).apply_changes(
            Path(repo).name, [FileChange(path, text) for path, text in sorted(files.items())])
        print(f"{Path(repo).name}: {len(files)} files indexed, {summary.notes_wanted} notes newly wanted",
              file=sys.stderr)
    embedder.close()
    for repo in by_repo:
        subprocess.run([sys.executable, "-m", "ctxpress.cli", "notes", "--repository", Path(repo).name], check=True)

    library = {on: ContextLibrary(settings, load_tokenizer(settings), settings.model_name) for on in (False, True)}
    reader = NoteReader(url, timeout_ms=10_000)
    changed = 0
    progress = Progress(len(cases), "building prompts with and without notes")
    with args.out.open("w", encoding="utf-8") as out:
        for case in cases:
            cut, _ = cut_out(by_repo[case.repo][case.path], case.line, case.column)
            prompts = {}
            for on in (False, True):
                request = CompletionRequest(repository=Path(case.repo).name, path=case.path, text=cut, line=case.line,
                                            column=case.column, mode="optimized", features={"model_notes": on})
                prompts[on] = asyncio.run(_prompt(library[on], request, reader))
            if prompts[True] != prompts[False]:
                changed += 1
                shown = [line.strip() for line in prompts[True].splitlines() if line not in prompts[False]]
                out.write(json.dumps(asdict(case)) + "\n")
                print(f"{case.id}: {' | '.join(shown)}", file=sys.stderr)
            progress.advance(case.path)
    reader.close()
    print(f"{changed} of {len(cases)} prompts change with the notes; those cursors: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
