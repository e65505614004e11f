"""Model-written notes end to end on the real parts: the indexer asks for them (not for a block holding a
secret), a completion worker's writer writes them with the real model in idle time and gives way to a request,
and the context library shows a note in its block's summary when the feature is on."""

from __future__ import annotations

import asyncio
import json
import string
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from context.build import ContextLibrary, FileView
from context.sources.notes import NoteReader
from ctxpress_core.wire.v1 import CompletionRequest, content_hash
from db.session import engine_for
from indexer.embeddings import TritonEmbedder
from indexer.pipeline import FileChange, Indexer
from serving.triton_client import TritonCompletionClient
from tests.indexer.test_index_secrets import _made_up
from workers.completion.engine_load import EngineLoad
from workers.completion.notes import Activity, NoteWriter

pytestmark = pytest.mark.services

AWS_KEY = "AKIA" + _made_up(string.ascii_uppercase + string.digits, 16)
BODY = "".join(f"    if kind == {i}:\n        total += x * {i + 2}\n" for i in range(14))
SHAPES = "".join(f"    if len(values) == {i}:\n        names.append('size {i}')\n" for i in range(10))
MODULE = f'''import math


def f(xs, kind):
    total = 0
    for x in xs:
{"".join("    " + line + chr(10) for line in BODY.splitlines())}    return math.sqrt(total)


def g(conn):
    conn.login(key="{AWS_KEY}")
    conn.refresh()
    return conn.session()


def describe(values):
    """Name the shape of the values."""
    names = []
{SHAPES}    return names


def report(values):
    """Print the weighted norm of the values."""
    norm = f(values, 3)
    print(norm)
    return norm
'''


def _rows(url: str, repo: str) -> dict[str, tuple[str | None, int]]:
    """Each wanted note's block (its source's first line), with its note and tries."""
    with Session(engine_for(url)) as session:
        rows = session.execute(text(
            "SELECT n.source, n.note, n.tries FROM block_notes n JOIN repositories r ON r.id = n.repo_id"
            " WHERE r.name = :r"), {"r": repo})
        return {r.source.splitlines()[0]: (r.note, r.tries) for r in rows}


def _writer(appliance: Any, engine: TritonCompletionClient, activity: Activity) -> NoteWriter:
    return NoteWriter(engine, appliance.settings.effective_database_url(), activity, EngineLoad(), idle_s=0.0,
                      max_tokens=24)


async def test_notes_are_asked_for_written_in_idle_time_and_shown_in_summaries(
        appliance: Any, embedder: TritonEmbedder, tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    repo = f"notes-{uuid.uuid4().hex[:8]}"
    indexer = Indexer(url, embedder)
    summary = indexer.apply_changes(repo, [FileChange("calc.py", MODULE)])
    assert summary.notes_wanted == 1
    # g has an opaque name and no docstring, but holds a secret: its text is never stored for the writer
    assert _rows(url, repo) == {"def f(xs, kind):": (None, 0)}

    # an engine that fails is not the block's fault: it is handed back untried, and the writer waits
    failing = _writer(appliance, TritonCompletionClient("127.0.0.1:1"), Activity())
    assert await asyncio.wait_for(failing.write_one_when_idle(asyncio.Event()), 60) > 0
    assert _rows(url, repo) == {"def f(xs, kind):": (None, 0)}

    engine = TritonCompletionClient(appliance.settings.effective_triton_url())
    activity = Activity()
    writer = _writer(appliance, engine, activity)
    try:
        # a request arrives while the note is being written: the writer gives way and hands the block back
        stop = asyncio.Event()
        writing = asyncio.create_task(writer.write_one_when_idle(stop))
        await asyncio.sleep(0.3)
        with activity.request():
            await asyncio.wait_for(writing, 30)
        assert writer.interrupted == 1 and writer.written == 0
        assert _rows(url, repo) == {"def f(xs, kind):": (None, 0)}
        # idle: the note is written with the real model
        await asyncio.wait_for(writer.write_one_when_idle(stop), 300)
    finally:
        await engine.close()
    ((note, tries),) = _rows(url, repo).values()
    assert writer.written == 1 and tries == 1
    assert note and "\n" not in note and len(note) <= 122

    # the summary of f, shown beside the cursor in report(), carries the note when the feature is on
    library = ContextLibrary(appliance.settings, lambda s: len(s) // 3, "m")
    reader = NoteReader(url, timeout_ms=5000)
    cursor = MODULE.index("    print(norm)")
    line = MODULE[:cursor].count("\n")
    prompts = {}
    for on in (False, True):
        request = CompletionRequest(repository=repo, path="calc.py", text=MODULE, line=line, column=4,
                                    budget_tokens=220, features={"model_notes": on, "whole_file": False})
        built = await library.build_prompt(request, FileView(MODULE, content_hash(MODULE), None, (repo,)), None,
                                           reader)
        prompts[on] = built.layout.text
    reader.close()
    assert "def f(xs, kind):\n" in prompts[False] and "if kind == 13" not in prompts[False]  # f as a summary
    assert f'def f(xs, kind):\n    """{note}"""\n    ...\n' in prompts[True]
    assert note not in prompts[False]

    # f changes: its note no longer describes it, and is dropped with the old version
    indexer.apply_changes(repo, [FileChange("calc.py", MODULE.replace("math.sqrt(total)", "total"))])
    assert _rows(url, repo) == {"def f(xs, kind):": (None, 0)}

    # `ctxpress notes` counts them, and writes the new version's note at once
    status = appliance.ctxpress("notes", "--status", "--repository", repo)
    assert json.loads(status.stdout) == {"written": 0, "pending": 1}, status.stderr
    written = appliance.ctxpress("notes", "--repository", repo, "--json")
    summary = json.loads(written.stdout)
    assert (summary["written"], summary["now_pending"]) == (1, 0), written.stderr
    ((note, _),) = _rows(url, repo).values()
    assert note
