"""The VS Code door through a real VS Code: code-server with the packaged extension (.vsix), in
headless Chromium, typing with the keyboard against the real appliance. The extension starts
`ctxpress lsp`; the ghost text, Tab and the feedback rows are what a user of VS Code gets."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from db.session import engine_for
from tests.conftest import Appliance, free_port
from tests.e2e.conftest import ROOT, git_repo, installed
from tests.e2e.replay import MAX_TOKENS, record, replay_case
from tests.e2e.vscode_driver import CodeServer, Ghost, Workbench, workbench

pytestmark = pytest.mark.services

# Greedy decoding of the real model completes `return ` here with `a + b`, every run.
SOURCE = 'def add(a, b):\n    """Return the sum of a and b."""\n    \n\n\nprint(add(2, 3))\n'
GHOST_TIMEOUT_S = 120  # a cold prompt takes 10-20 s on 2 cores; the wait stays bounded


def vsix() -> Path:
    """The extension packaged by `make vscode` (run by `make test`); the test fails without it."""
    version = json.loads((ROOT / "editors/vscode/package.json").read_text())["version"]
    path = ROOT / f"editors/vscode/ctxpress-{version}.vsix"
    if not path.exists():
        pytest.fail(f"{path} is missing: build it with `make vscode`")
    return path


# A repository per test: what one test saves is indexed, and retrieval would bring it into another's prompts.
@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return git_repo(tmp_path / "vscode-demo", {"pkg/math_utils.py": SOURCE})


@pytest.fixture(scope="module")
def code_server(appliance: Appliance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """code-server with the extension installed (each test opens its own folder); its whole process
    group stopped after, and none of it may be left."""
    server = CodeServer(installed("code-server"), tmp_path_factory.mktemp("code-server"),
                        # the extension host, and so `ctxpress lsp`, inherit this environment
                        env=appliance.env,
                        settings={"ctxpress.serverPath": str(Path(sys.executable).with_name("ctxpress")),
                                  "ctxpress.natsUrl": appliance.settings.effective_nats_url(),
                                  # as the replay's straight-NATS baseline asks, so the figures compare
                                  "ctxpress.maxTokens": MAX_TOKENS})
    installed("code-server/node_modules/code-server/out/node/entry.js")
    server.install_extension(vsix())
    try:
        started = time.perf_counter()
        url = server.start(free_port())
        print(f"\ncode-server at {url} after {time.perf_counter() - started:.1f} s")
        yield url
    finally:
        print(server.extension_log() or f"(no ctxpress log under {server.user_data}/logs)")
        left = server.stop()
        assert not left, f"code-server's processes still running after it was stopped: {left}"


def feedback_since(appliance: Appliance, since: datetime) -> list[Any]:
    with engine_for(appliance.settings.effective_database_url()).connect() as conn:
        return list(conn.execute(text("SELECT completion_id, action, chars_kept FROM completion_feedback "
                                      "WHERE created_at >= :since ORDER BY id"), {"since": since}).all())


def db_now(appliance: Appliance) -> datetime:
    with engine_for(appliance.settings.effective_database_url()).connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def accepted_feedback(appliance: Appliance, since: datetime, chars: int, timeout_s: float = 20) -> list[Any]:
    """The rows of the completion accepted with ``chars`` characters, once its `shown` and `accepted`
    have landed (telemetry is written in batches), or the rows since ``since`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    rows: list[Any] = []
    while time.monotonic() < deadline:
        rows = feedback_since(appliance, since)
        ids = {r.completion_id for r in rows if r.action == "accepted" and r.chars_kept == chars}
        for completion_id in ids:
            mine = [r for r in rows if r.completion_id == completion_id]
            if {r.action for r in mine} >= {"shown", "accepted"}:
                return mine
        time.sleep(0.3)
    return rows


def open_at(bench: Workbench, relative: str, line: int, column: int) -> None:
    bench.open_file(relative)
    bench.go_to(line, column)


def ghost_or_fail(bench: Workbench, typed: str, artifacts: Path, delay_ms: float = 40) -> Ghost:
    """The ghost text after typing ``typed``; the test fails, with a screenshot, when none shows."""
    try:
        return bench.type_for_ghost(typed, timeout_s=GHOST_TIMEOUT_S, delay_ms=delay_ms)
    except TimeoutError:
        shot = bench.screenshot(artifacts / "vscode-no-ghost-text.png")
        pytest.fail(f"no ghost text within {GHOST_TIMEOUT_S} s of typing {typed!r} (screen: {shot}; "
                    f"status bar: {bench.status()!r}; lines: {bench.lines()})")


def wait_for_file(path: Path, expected: str, timeout_s: float = 10) -> str:
    """The file's text once it is ``expected`` (an editor's save may land in steps), or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (found := path.read_text()) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def test_typing_in_vscode_shows_ghost_text_and_tab_accepts_it(
        appliance: Appliance, code_server: str, repo: Path, artifacts: Path) -> None:
    with workbench(code_server, repo) as bench:
        open_at(bench, "pkg/math_utils.py", 3, 5)
        since = db_now(appliance)
        ghost = ghost_or_fail(bench, "return ", artifacts)
        shot = bench.screenshot(artifacts / "vscode-ghost-text.png")
        print(f"ghost text {ghost.text!r} {ghost.latency_ms:.0f} ms after the last keystroke; screenshot: {shot}")
        assert ghost.text.startswith("a + b"), ghost

        bench.page.keyboard.press("Tab")
        assert bench.wait_line(3, "    return " + ghost.text.split("\n")[0]), bench.lines()
        bench.screenshot(artifacts / "vscode-accepted.png")
        bench.save()
        expected = SOURCE.replace("    \n", f"    return {ghost.text}\n", 1)
        assert wait_for_file(repo / "pkg" / "math_utils.py", expected) == expected

        rows = accepted_feedback(appliance, since, len(ghost.text))
        assert {(r.action, r.chars_kept) for r in rows} >= {("shown", None), ("accepted", len(ghost.text))}, rows
        print(f"feedback of completion {rows[0].completion_id}: {[(r.action, r.chars_kept) for r in rows]}")


def test_typing_replay_through_vscode(code_server: str, tmp_path: Path, artifacts: Path,
                                     latency_report: Path) -> None:
    """The editor doors' shared typing replay (tests/e2e/replay.py) typed into VS Code: at each pause,
    the ms from the last keystroke to the ghost text on screen. Figures only: nothing is asserted on time."""
    replay = replay_case()
    path = replay.write_repository(tmp_path, "e2e-vscode")
    line, column = replay.cursor_at(0)
    latencies = []
    with workbench(code_server, path.parents[1]) as bench:
        open_at(bench, f"pkg/{path.name}", line + 1, column + 1)
        for typed in replay.typed_between():
            ghost = ghost_or_fail(bench, typed, artifacts, delay_ms=60)
            latencies.append(ghost.latency_ms)
            print(f"after {typed!r}: {ghost.text[:60]!r} in {ghost.latency_ms:.0f} ms")
        at_end = replay.text_at(replay.pauses[-1]).split("\n")[replay.cursor_at(replay.pauses[-1])[0]]
        assert at_end in bench.lines(), f"{at_end!r} is not in the editor as typed: {bench.lines()}"
    record(latency_report, "VS Code 1.100 (code-server) → ctxpress lsp", latencies)
    print(f"VS Code replay: {[round(ms) for ms in latencies]} ms, p50 {statistics.median(latencies):.0f} ms")


class FileOpenedLog:
    """Every ``file_opened`` published on the appliance's NATS while it runs (a plain subscriber gets a copy beside
    the worker's queue group), collected on a thread of its own: the VS Code tests are synchronous."""

    def __init__(self, nats_url: str) -> None:
        self.nats_url = nats_url
        self.events: list[dict[str, Any]] = []
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        import nats

        from ctxpress_core.wire.v1 import SUBJECT_FILE_OPENED

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        client = await nats.connect(self.nats_url, connect_timeout=5)

        async def seen(msg: Any) -> None:
            self.events.append(json.loads(msg.data))

        await client.subscribe(SUBJECT_FILE_OPENED, cb=seen)
        self._ready.set()
        await self._stop.wait()
        await client.close()

    def __enter__(self) -> FileOpenedLog:
        self._thread.start()
        assert self._ready.wait(10), "could not subscribe to the appliance's NATS"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def prewarmed_tokens(appliance: Appliance) -> float:
    """The worker's count of prompt tokens it processed ahead of a request (pre-warms and fills)."""
    return appliance.worker_metric("ctxpress_prewarmed_tokens_total")


def test_a_jump_in_vscode_has_the_appliance_prepare_the_prompt_where_the_cursor_rests(
        appliance: Appliance, code_server: str, repo: Path) -> None:
    """The extension's ``ctxpress/cursorRest``, from a real VS Code: after a jump (Go to Line) the cursor rests, the
    extension tells ``ctxpress lsp``, which publishes the file with that place (``file_opened`` with a line and a
    column), and the worker processes that place's prompt before any keystroke (its pre-warmed tokens grow)."""
    before = prewarmed_tokens(appliance)
    with FileOpenedLog(appliance.settings.effective_nats_url()) as opened, workbench(code_server, repo) as bench:
        bench.open_file("pkg/math_utils.py")
        bench.go_to(3, 5)  # the blank line of the body, 1-based as VS Code shows it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(e.get("line") is not None for e in opened.events):
            time.sleep(0.2)
        rested = [(e["path"], e["line"], e["column"]) for e in opened.events if e.get("line") is not None]
        assert rested and rested[-1] == ("pkg/math_utils.py", 2, 4), opened.events
        deadline = time.monotonic() + GHOST_TIMEOUT_S
        while time.monotonic() < deadline and prewarmed_tokens(appliance) <= before:
            time.sleep(0.5)
        assert prewarmed_tokens(appliance) > before
