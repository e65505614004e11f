"""`ctxpress lsp` driven over stdio by a real LSP client (pygls), against the real appliance."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient
from sqlalchemy import text

from ctxpress.lsp.stdio import HEADER_LIMIT_BYTES
from db.session import engine_for
from tests.conftest import Appliance, free_port

pytestmark = pytest.mark.services

# An obvious next line: greedy decoding of the real model completes it the same way every run.
SOURCE = 'def add(a, b):\n    """Return the sum of a and b."""\n    return \n\n\nprint(add(2, 3))\n'
CURSOR = (2, len("    return "))
CAPABILITIES = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
    text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities(),
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True)),
    workspace=types.WorkspaceClientCapabilities(execute_command=types.ExecuteCommandClientCapabilities()),
)


class Editor:
    """A pygls client playing the editor; records what the server tells the user."""

    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.messages: list[types.ShowMessageParams] = []
        self.statuses: list[dict[str, Any]] = []
        self.versions: dict[str, int] = {}
        self.capabilities = types.ServerCapabilities()

    def open(self, uri: str, source: str, language: str = "python") -> None:
        self.versions[uri] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=source)))

    def type(self, uri: str, line: int, character: int, typed: str) -> None:
        """One keystroke per character, as an editor sends them."""
        for i, char in enumerate(typed):
            self.versions[uri] += 1
            at = types.Position(line=line, character=character + i)
            self.client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at),
                                                                        text=char)]))

    async def inline(self, uri: str, line: int, character: int, *, explicit: bool = True,
                     wait_s: float = 180) -> types.InlineCompletionList | None:
        kind = types.InlineCompletionTriggerKind.Invoked if explicit else types.InlineCompletionTriggerKind.Automatic
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=kind),
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character))
        return await asyncio.wait_for(self.client.text_document_inline_completion_async(params), wait_s)


async def start_editor(appliance: Appliance, options: dict[str, Any], root: Path) -> Editor:
    client = LanguageClient("test-editor", "1")
    editor = Editor(client)

    @client.feature(types.WINDOW_SHOW_MESSAGE)
    def show(params: types.ShowMessageParams) -> None:
        editor.messages.append(params)

    @client.feature("ctxpress/status")
    def status(params: Any) -> None:
        # pygls hands a notification it has no type for over as an object of its fields
        fields = ("state", "message", "lastLatencyMs", "requests", "cacheHits")
        editor.statuses.append(params if isinstance(params, dict) else {f: getattr(params, f, None) for f in fields})

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def log_message(_params: types.LogMessageParams) -> None:
        pass

    env = {**appliance.env}
    await client.start_io(sys.executable, "-m", "ctxpress.cli", "lsp", env=env)
    initialized = await client.initialize_async(types.InitializeParams(
        capabilities=CAPABILITIES, initialization_options={"maxTokens": 12, **options},
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)]))
    client.initialized(types.InitializedParams())
    editor.capabilities = initialized.capabilities
    return editor


async def stop_editor(editor: Editor) -> None:
    server = editor.client._server
    try:
        await asyncio.wait_for(editor.client.shutdown_async(None), 10)
        editor.client.exit(None)
    finally:
        await editor.client.stop()
        if server is not None and server.stderr is not None:  # the server's log, shown when a test fails
            log = await asyncio.wait_for(server.stderr.read(), 10)
            print(log.decode(errors="replace")[-4000:])


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "lsp-demo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "pkg").mkdir()
    (root / "pkg" / "math_utils.py").write_text(SOURCE)
    return root


@pytest.fixture
async def editor(appliance: Appliance, repo: Path) -> AsyncIterator[Editor]:
    ed = await start_editor(appliance, {}, repo)
    yield ed
    await stop_editor(ed)


def feedback_rows(appliance: Appliance, completion_id: str) -> list[Any]:
    with engine_for(appliance.settings.effective_database_url()).connect() as conn:
        return list(conn.execute(text("SELECT action, chars_kept FROM completion_feedback "
                                      "WHERE completion_id = :id ORDER BY action"), {"id": completion_id}).all())


async def feedback_landed(appliance: Appliance, completion_id: str, actions: set[str],
                          timeout_s: float = 20) -> list[Any]:
    """The completion's feedback rows once they show ``actions`` (telemetry is written in batches),
    or what is there after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    rows: list[Any] = []
    while time.monotonic() < deadline and {r.action for r in rows} != actions:
        await asyncio.sleep(0.3)
        rows = feedback_rows(appliance, completion_id)
    return rows


async def captured_requests(nats_client: Any, subject: str) -> tuple[list[dict[str, Any]], Any]:
    """Every complete request on the wire (a plain subscriber sees what the worker's queue group gets)."""
    seen: list[dict[str, Any]] = []

    async def on(msg: Any) -> None:
        seen.append(json.loads(msg.data))

    sub = await nats_client.subscribe(subject, cb=on)
    await nats_client.flush()  # the server holds the interest before any door publishes
    return seen, sub


async def test_typing_then_inline_completion_forward_cache_and_acceptance(
        appliance: Appliance, editor: Editor, repo: Path, nats_client: Any) -> None:
    seen, sub = await captured_requests(nats_client, appliance.settings.completion_subject)
    uri = (repo / "pkg" / "math_utils.py").as_uri()
    editor.open(uri, SOURCE.replace("    return \n", "    \n"))
    editor.type(uri, 2, 4, "return ")
    result = await editor.inline(uri, *CURSOR)
    assert result is not None and len(result.items) == 1, result
    item = result.items[0]
    suggestion = item.insert_text
    assert isinstance(suggestion, str) and suggestion.startswith("a + b"), suggestion
    assert item.range == types.Range(start=types.Position(*CURSOR), end=types.Position(*CURSOR))
    assert item.command is not None and item.command.command == "ctxpress.accept"
    completion_id = item.command.arguments[0]

    await asyncio.sleep(0.3)
    assert len(seen) == 1
    sent = seen[0]
    assert (sent["repository"], sent["path"]) == ("lsp-demo", "pkg/math_utils.py")
    assert (sent["line"], sent["column"]) == CURSOR and sent["language"] == "python"
    assert sent["text"].splitlines()[2] == "    return "
    assert sent["recent_edits"] == [[2, 2]]

    # The user types the suggestion's first two characters: the rest comes from the forward cache.
    editor.type(uri, 2, CURSOR[1], suggestion[:2])
    started = time.perf_counter()
    again = await editor.inline(uri, 2, CURSOR[1] + 2, explicit=False)
    forward_ms = (time.perf_counter() - started) * 1000
    assert again is not None and again.items[0].insert_text == suggestion[2:]
    assert again.items[0].command.arguments[0] == completion_id
    await asyncio.sleep(0.3)
    assert len(seen) == 1, "the forward cache must not ask the appliance"
    print(f"forward cache answered in {forward_ms:.1f} ms")

    await editor.client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ctxpress.accept", arguments=[completion_id, len(suggestion)]))
    rows = await feedback_landed(appliance, completion_id, {"accepted", "shown"})
    assert {(r.action, r.chars_kept) for r in rows} == {("shown", None), ("accepted", len(suggestion))}
    await sub.unsubscribe()


async def test_a_client_that_reads_capabilities_first_gets_inline_completions(editor: Editor, repo: Path) -> None:
    """VS Code's language client registers its inline provider, and Neovim asks a server, only when
    ``initialize`` advertised ``inlineCompletionProvider``; editors without LSP 3.18 use plain completion."""
    capabilities = editor.capabilities
    assert capabilities.inline_completion_provider, "without it VS Code and Neovim never ask for ghost text"
    assert capabilities.completion_provider is not None
    assert capabilities.execute_command_provider is not None
    assert "ctxpress.accept" in capabilities.execute_command_provider.commands
    uri = (repo / "pkg" / "math_utils.py").as_uri()
    editor.open(uri, SOURCE)
    result = await editor.inline(uri, *CURSOR)
    assert result is not None and result.items and str(result.items[0].insert_text).startswith("a + b"), result


async def test_an_inline_client_s_word_completion_does_not_supersede_its_inline_request(
        editor: Editor, repo: Path) -> None:
    """VS Code asks textDocument/completion (its word suggestions) and textDocument/inlineCompletion at the same
    keystroke: the first must not cancel the second (one model run, and the ghost text comes)."""
    uri = (repo / "pkg" / "math_utils.py").as_uri()
    editor.open(uri, SOURCE)
    inline = asyncio.ensure_future(editor.inline(uri, *CURSOR))
    await asyncio.sleep(0.05)  # the inline request is in flight
    words = await asyncio.wait_for(editor.client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(*CURSOR))), 30)
    assert isinstance(words, types.CompletionList) and list(words.items) == []
    result = await inline
    assert result is not None and result.items and str(result.items[0].insert_text).startswith("a + b"), result


def cancelled_in_worker(appliance: Appliance) -> float:
    """The completion worker's count of requests abandoned by their caller (Prometheus)."""
    return appliance.worker_metric("ctxpress_cancelled_total")


async def test_superseded_and_cancelled_requests_are_abandoned_in_the_appliance(
        appliance: Appliance, editor: Editor, repo: Path) -> None:
    """Where the appliance drops them (assembly, queue, prompt chunk, decode step) depends on timing;
    the engine side is tested on its own in tests/serving/test_triton_cancel.py."""
    uri = (repo / "pkg" / "long.py").as_uri()
    # A prompt the engine needs seconds for, so the cancel arrives while the request is still running.
    source = "".join(f"def function_{i}(value):\n    return value * {i} + {i * 7}\n\n" for i in range(120))
    editor.open(uri, source + "def last(value):\n    return ")
    before = await asyncio.to_thread(cancelled_in_worker, appliance)
    last_line = source.count("\n") + 1
    params = types.InlineCompletionParams(
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(line=last_line, character=len("    return ")))
    future = editor.client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id="cancel-me")
    await asyncio.sleep(1.0)
    editor.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="cancel-me"))
    with pytest.raises(JsonRpcException) as raised:
        await asyncio.wait_for(asyncio.wrap_future(future), 30)
    assert raised.value.code == -32800  # RequestCancelled

    # A newer request for the same document supersedes the pending one.
    first = asyncio.ensure_future(editor.inline(uri, last_line, len("    return "), explicit=True))
    await asyncio.sleep(1.0)
    editor.type(uri, last_line, len("    return "), "v")
    second = await editor.inline(uri, last_line, len("    return v"), explicit=True)
    with pytest.raises(JsonRpcException) as superseded:
        await first
    assert superseded.value.code == -32800
    assert second is not None
    after = await asyncio.to_thread(cancelled_in_worker, appliance)
    assert after >= before + 2


async def test_utf16_columns_with_astral_characters(appliance: Appliance, editor: Editor, repo: Path,
                                                    nats_client: Any) -> None:
    seen, sub = await captured_requests(nats_client, appliance.settings.completion_subject)
    uri = (repo / "pkg" / "emoji.py").as_uri()
    line = 'GREETING = "héllo 😋 wörld"  # '
    editor.open(uri, f"{line}\n")
    utf16 = len(line.encode("utf-16-le")) // 2
    assert utf16 == len(line) + 1  # the emoji is two UTF-16 units
    result = await editor.inline(uri, 0, utf16)
    assert result is not None
    await asyncio.sleep(0.3)
    assert [(r["line"], r["column"]) for r in seen] == [(0, len(line))]
    await sub.unsubscribe()


async def test_a_cursor_at_rest_has_the_appliance_prepare_that_places_prompt(appliance: Appliance, editor: Editor,
                                                                             repo: Path, nats_client: Any) -> None:
    """``ctxpress/cursorRest`` (the VS Code extension sends it once a click or a jump has settled): the server
    tells the appliance the file and the cursor, in the wire's columns, so the prompt there is ready before the
    first keystroke; a notification it cannot place is ignored and the server keeps serving."""
    from ctxpress_core.wire.v1 import SUBJECT_FILE_OPENED

    seen, sub = await captured_requests(nats_client, SUBJECT_FILE_OPENED)
    uri = (repo / "pkg" / "rest.py").as_uri()
    line = 'NAME = "😋"  # '
    editor.open(uri, f"x = 1\n{line}\n")
    utf16 = len(line.encode("utf-16-le")) // 2
    # one it cannot place first (no position, a document not open): ignored, and the next one is served
    editor.client.protocol.notify("ctxpress/cursorRest", {"textDocument": {"uri": uri}})
    editor.client.protocol.notify("ctxpress/cursorRest", {"textDocument": {"uri": uri + ".unknown"},
                                                          "position": {"line": 0, "character": 0}})
    editor.client.protocol.notify("ctxpress/cursorRest", {"textDocument": {"uri": uri},
                                                          "position": {"line": 1, "character": utf16}})
    await asyncio.sleep(3)  # published without a reply; a second one would show up in this time too
    rested = [e for e in seen if e.get("line") is not None]
    assert [(e["path"], e["line"], e["column"]) for e in rested] == [("pkg/rest.py", 1, len(line))]
    assert rested[0]["text"] == f"x = 1\n{line}\n"
    await sub.unsubscribe()


async def test_bad_input_gets_clear_errors_and_the_server_keeps_serving(
        appliance: Appliance, editor: Editor, repo: Path) -> None:
    uri = (repo / "pkg" / "math_utils.py").as_uri()
    editor.open(uri, SOURCE)
    with pytest.raises(JsonRpcException) as past_end:
        await editor.inline(uri, 400, 0)
    assert past_end.value.code == -32602 and "past the end" in str(past_end.value)
    with pytest.raises(JsonRpcException) as not_open:
        await editor.inline((repo / "nowhere.py").as_uri(), 0, 0)
    assert not_open.value.code == -32602 and "not open" in str(not_open.value)
    with pytest.raises(JsonRpcException) as unknown:
        await asyncio.wait_for(asyncio.wrap_future(editor.client.protocol.send_request("ctxpress/nonsense", {})), 10)
    assert unknown.value.code == -32601  # MethodNotFound
    huge = (repo / "pkg" / "huge.py").as_uri()
    editor.open(huge, "x = 1\n" * (appliance.settings.max_request_bytes // 6 + 10))
    with pytest.raises(JsonRpcException) as too_large:
        await editor.inline(huge, 3, 0)
    assert "bytes" in str(too_large.value)
    # Malformed JSON-RPC straight onto the wire: a body that is not JSON, then one that is not a message.
    server = editor.client._server
    assert server is not None and server.stdin is not None
    for body in (b"{not json", b'{"jsonrpc": "2.0", "id": 5}', b"[1, 2, 3]"):
        server.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    server.stdin.write(b"X-Garbage: " + b"y" * (HEADER_LIMIT_BYTES * 2) + b"\r\n")  # a header past the limit
    await server.stdin.drain()
    result = await editor.inline(uri, *CURSOR)
    assert result is not None and result.items and result.items[0].insert_text.startswith("a + b")
    assert server.returncode is None


async def test_unreachable_appliance_says_so_once_then_recovers(appliance: Appliance, repo: Path,
                                                                nats_client: Any) -> None:
    """The editor points at a NATS that is down; it comes up later, relaying to the appliance."""
    port = free_port()
    ed = await start_editor(appliance, {"natsUrl": f"nats://127.0.0.1:{port}"}, repo)
    relay: asyncio.subprocess.Process | None = None
    try:
        uri = (repo / "pkg" / "math_utils.py").as_uri()
        ed.open(uri, SOURCE)
        for _ in range(4):
            result = await ed.inline(uri, *CURSOR, wait_s=30)
            assert result is not None and not result.items
            await asyncio.sleep(1.2)
        warnings = [m for m in ed.messages if m.type == types.MessageType.Warning]
        assert len(warnings) == 1 and "unreachable" in warnings[0].message, ed.messages
        assert any(s.get("state") == "unreachable" for s in ed.statuses)

        nats_bin = Path(sys.executable).parent / "nats-server"
        relay = await asyncio.create_subprocess_exec(str(nats_bin), "-a", "127.0.0.1", "-p", str(port),
                                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import nats

        deadline = time.monotonic() + 20
        while True:
            try:
                down = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=1, max_reconnect_attempts=0)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)

        async def forward(msg: Any) -> None:  # the appliance behind the NATS that came back
            reply = await nats_client.request(msg.subject, msg.data, timeout=170)
            await msg.respond(reply.data)

        await down.subscribe(appliance.settings.completion_subject, cb=forward)
        await asyncio.sleep(3.5)  # past the server's retry interval
        result = await ed.inline(uri, *CURSOR)
        assert result is not None and result.items and result.items[0].insert_text.startswith("a + b")
        assert any(m.type == types.MessageType.Info and "back" in m.message for m in ed.messages)
        assert len([m for m in ed.messages if m.type == types.MessageType.Warning]) == 1
        await down.close()
    finally:
        await stop_editor(ed)
        if relay is not None:
            relay.terminate()
            await relay.wait()
