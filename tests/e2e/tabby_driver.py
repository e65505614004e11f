"""Tabby's agent 1.5.0 (``tabby-agent`` from npm, ``dist/cli.js``) driven the ways its editors drive it.

What 1.5.0's CLI offers (read from its dist/cli.js): with ``--lsp`` (plus ``--stdio``, which
vscode-languageserver needs to pick its transport) a Language Server that answers only
``textDocument/completion`` (no inline completion, no ``tabby/*`` methods, no telemetry: the items
carry ``data.completionId`` but no command); without it, the JSON-lines protocol of Tabby's Vim plugin
(vim-tabby: ``[id, {"func": name, "args": [...]}]`` in, ``[id, result]`` out, ``[0, event]`` for the
agent's events), which calls the agent's methods by name: ``initialize``, ``provideCompletions``,
``postEvent`` (the ``view``/``select`` telemetry the plugins send), ``cancelRequest``. The VS Code
extension of that release ran the same agent in-process and called the same three methods.

The agent reads ``~/.tabby-client/agent/config.toml`` and writes its data and logs beside it: every
run gets a throw-away HOME, with anonymous usage tracking (posts to app.tabbyml.com) disabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from tests.e2e.replay import Replay

AGENT_VERSION = "1.5.0"
# under E2E_DIR, where infra/editor-clients/tabby-agent.sh installs it
AGENT_CLI = "tabby-agent/node_modules/tabby-agent/dist/cli.js"


def agent_environment(home: Path, endpoint: str, token: str) -> dict[str, str]:
    """The environment of an agent whose HOME is ``home``, configured for ``endpoint`` with ``token``."""
    config = home / ".tabby-client" / "agent" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("\n".join([
        "[server]",
        f'endpoint = "{endpoint}"',
        f'token = "{token}"',
        "",
        "[logs]",
        # the agent's own log (~/.tabby-client/agent/logs/), printed when a test ends
        'level = "debug"',
        "",
        "[anonymousUsageTracking]",
        # applied before the agent's first usage event (AgentInitialized): nothing leaves the machine
        "disable = true",
        "",
    ]))
    return {**os.environ, "HOME": str(home)}


def agent_log(home: Path, limit: int = 6000) -> str:
    """The tail of the agent's log files (pino JSON lines)."""
    logs = sorted((home / ".tabby-client" / "agent" / "logs").glob("*.log"))
    return "".join(p.read_text(errors="replace") for p in logs)[-limit:]


def percentile_50(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# --- the LSP server (`cli.js --lsp --stdio`) ------------------------------------------------------------

# What VS Code's language client (vscode-languageclient 9) says about completion: the agent reads only
# clientInfo, but an editor sends all of it.
LSP_CAPABILITIES = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(dynamic_registration=True, did_save=True),
        completion=types.CompletionClientCapabilities(
            dynamic_registration=True, context_support=True,
            completion_item=types.ClientCompletionItemOptions(
                snippet_support=True, commit_characters_support=True, insert_replace_support=True,
                documentation_format=[types.MarkupKind.Markdown, types.MarkupKind.PlainText],
                label_details_support=True)),
        inline_completion=types.InlineCompletionClientCapabilities(dynamic_registration=True)),
    workspace=types.WorkspaceClientCapabilities(workspace_folders=True, configuration=True),
    window=types.WindowClientCapabilities(work_done_progress=True),
)
CLIENT_INFO = types.ClientInfo(name="Visual Studio Code", version="1.88.1")


@dataclass
class TabbyLspEditor:
    """A pygls client playing the editor against the agent's Language Server."""

    client: LanguageClient
    home: Path
    messages: list[types.ShowMessageParams] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)
    server_info: types.ServerInfo | None = None
    capabilities: types.ServerCapabilities | None = None

    @classmethod
    async def start(cls, cli: Path, home: Path, env: dict[str, str], root: Path) -> TabbyLspEditor:
        client = LanguageClient("tabby-e2e-editor", "1")
        editor = cls(client, home)

        @client.feature(types.WINDOW_SHOW_MESSAGE)
        def show(params: types.ShowMessageParams) -> None:
            editor.messages.append(params)

        await client.start_io("node", str(cli), "--lsp", "--stdio", env=env, cwd=str(root))
        result = await asyncio.wait_for(client.initialize_async(types.InitializeParams(
            process_id=os.getpid(), client_info=CLIENT_INFO, capabilities=LSP_CAPABILITIES,
            root_uri=root.as_uri(), workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)])),
            60)
        editor.server_info, editor.capabilities = result.server_info, result.capabilities
        client.initialized(types.InitializedParams())
        return editor

    def open(self, uri: str, text: str, language: str = "python") -> None:
        self.versions[uri] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)))

    def type(self, uri: str, line: int, character: int, typed: str) -> tuple[int, int]:
        """One incremental change per character, as an editor sends keystrokes; the cursor after them."""
        for char in typed:
            self.versions[uri] += 1
            at = types.Position(line=line, character=character)
            self.client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at),
                                                                        text=char)]))
            line, character = (line + 1, 0) if char == "\n" else (line, character + 1)
        return line, character

    async def complete(self, uri: str, line: int, character: int, wait_s: float = 180) -> types.CompletionList:
        params = types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
            context=types.CompletionContext(trigger_kind=types.CompletionTriggerKind.Invoked))
        result = await asyncio.wait_for(self.client.text_document_completion_async(params), wait_s)
        if isinstance(result, list):
            return types.CompletionList(is_incomplete=False, items=result)
        assert result is not None, "the agent answered textDocument/completion with null"
        return result

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 20)
            self.client.exit(None)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.stop(), 20)


async def lsp_replay(editor: TabbyLspEditor, replay: Replay, uri: str) -> tuple[list[float], list[str]]:
    """The typing replay (tests/e2e/replay.py) into an open document: each pause's text typed one
    keystroke at a time, then a completion asked for; ms from the request to the suggestion in hand,
    and the first item's text at each pause."""
    latencies, texts = [], []
    line, column = replay.cursor_at(0)
    for typed in replay.typed_between():
        line, column = editor.type(uri, line, column, typed)
        started = time.perf_counter()
        result = await editor.complete(uri, line, column)
        latencies.append((time.perf_counter() - started) * 1000)
        item = result.items[0] if result.items else None
        texts.append(item.text_edit.new_text if item is not None and item.text_edit is not None else "")
    return latencies, texts


# --- the JSON-lines protocol (`cli.js`, as vim-tabby starts it) --------------------------------------------

class TabbyJsonLines:
    """Tabby's Vim plugin's side of the agent's JSON-lines protocol (autoload/tabby/agent.vim)."""

    def __init__(self, process: asyncio.subprocess.Process, home: Path) -> None:
        self.process = process
        self.home = home
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._event_seen = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, cli: Path, home: Path, env: dict[str, str]) -> TabbyJsonLines:
        # vim-tabby's command line (tabby#OnVimEnter)
        process = await asyncio.create_subprocess_exec(
            "node", "--dns-result-order=ipv4first", str(cli), env=env, cwd=str(home),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024)
        return cls(process, home)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            try:
                request_id, result = json.loads(line)
            except ValueError:
                continue  # not a message of the protocol
            if request_id == 0:
                self.events.append(result)
                self._event_seen.set()
            elif (future := self._waiting.pop(request_id, None)) is not None and not future.done():
                future.set_result(result)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionError("the agent exited"))

    async def request(self, func: str, *args: Any, wait_s: float = 180) -> Any:
        assert self.process.stdin is not None
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self.process.stdin.write((json.dumps([request_id, {"func": func, "args": list(args)}]) + "\n").encode())
        await self.process.stdin.drain()
        return await asyncio.wait_for(future, wait_s)

    async def initialize(self, plugin_version: str = "1.4.0") -> bool:
        """tabby#agent#Initialize: the client properties vim-tabby sends (from Neovim)."""
        client = "NVIM v0.7.2"
        return bool(await self.request("initialize", {"clientProperties": {
            "user": {"vim": {"triggerMode": "auto"}},
            "session": {"client": client, "ide": {"name": "NVIM", "version": client},
                        "tabby_plugin": {"name": "TabbyML/vim-tabby", "version": plugin_version}}}}))

    async def status(self, wanted: str, wait_s: float = 60) -> str:
        """The agent's status once it is ``wanted`` (its statusChanged events), or what it is after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            status = await self.request("getStatus")
            if status == wanted or time.monotonic() > deadline:
                return str(status)
            self._event_seen.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event_seen.wait(), 1)

    async def provide_completions(self, filepath: Path, text: str, position: int, *, manually: bool = True,
                                  language: str = "python", wait_s: float = 180) -> dict[str, Any]:
        """tabby#Trigger: the context s:GetCompletionContext builds (``position`` in characters)."""
        request = {"filepath": str(filepath), "language": language, "text": text, "position": position,
                   "clipboard": "", "manually": manually}
        return dict(await self.request("provideCompletions", request, {"signal": True}, wait_s=wait_s) or {})

    async def post_event(self, kind: str, completion_id: str, choice_index: int) -> bool:
        """tabby#agent#PostEvent: ``view`` when the suggestion is rendered, ``select`` when accepted."""
        return bool(await self.request("postEvent", {"type": kind, "completion_id": completion_id,
                                                     "choice_index": choice_index}))

    async def stop(self) -> str:
        """Stops the agent as Vim does when it quits (SIGTERM: the agent finalizes and exits); its stderr."""
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 20)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self._reader.cancel()
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode(errors="replace")
