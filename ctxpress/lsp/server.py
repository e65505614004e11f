"""``ctxpress lsp``: inline completion (LSP 3.18) and plain completion over stdio, asked of the
appliance over NATS (``ctxpress.v1.complete``).

One keystroke's path: ``didChange`` updates the server's copy of the document (and the edited
line ranges), then the editor asks ``textDocument/inlineCompletion``. A suggestion already on
screen that the user is typing into is continued from the forward cache with no request;
otherwise the previous request for the document is abandoned (here and in the appliance), the
adaptive debounce waits, and one request goes out. Acceptance, and a suggestion superseded
without it, are reported as feedback.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pygls.capabilities import ServerCapabilitiesBuilder
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from ctxpress.lsp.appliance import Appliance, Unreachable, editor_subject
from ctxpress.lsp.debounce import AdaptiveDebounce
from ctxpress.lsp.documents import Document, Encoding, PositionError
from ctxpress.lsp.forward_cache import ForwardCache, Shown
from ctxpress.lsp.repository import Location, locate
from ctxpress.lsp.suggestion import without_following_lines
from ctxpress_core.identity import NatsCredentials, TeamConfigError, load_credentials
from ctxpress_core.languages import language_from_editor
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import (
    CompletionRequest,
    Feedback,
    FileOpened,
    FileSaved,
)

log = logging.getLogger("ctxpress.lsp")

ACCEPT_COMMAND = "ctxpress.accept"
STATUS_NOTIFICATION = "ctxpress/status"
VERSION = "0.1.0"
HEADER_LIMIT_BYTES = 64 * 1024


class LspOptions(BaseModel):
    """``initializationOptions`` (the editor's settings), over the ``CTXPRESS_*`` environment."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    # None: the credentials file's URL in team mode, else CTXPRESS_NATS_URL or the embedded NATS
    nats_url: str | None = Field(default=None, alias="natsUrl")
    credentials: Path | None = None
    repository: str | None = Field(default=None, min_length=1, max_length=256)
    debounce_ms: int = Field(default=0, ge=0, le=5000, alias="debounceMs")
    max_tokens: int = Field(default=64, ge=1, le=512, alias="maxTokens")
    mode: str = Field(default="optimized", pattern="^(optimized|baseline)$")
    timeout_ms: int = Field(default=30_000, ge=100, le=600_000, alias="timeoutMs")
    # For measurements: the telemetry label of this editor's requests, optimized mode's switches,
    # and whether a superseded request is abandoned in the appliance too (off: only here).
    scenario: str = Field(default="lsp", min_length=1, max_length=64)
    features: dict[str, bool] | None = None
    abandon_upstream: bool = Field(default=True, alias="abandonUpstream")

    @classmethod
    def from_editor(cls, settings: Settings, given: object) -> tuple[LspOptions, str | None]:
        """The options, and what was wrong with the editor's (then the defaults are used)."""
        defaults: dict[str, Any] = {
            "natsUrl": settings.nats_url, "credentials": settings.nats_credentials,
            "debounceMs": settings.lsp_debounce_ms, "maxTokens": settings.default_max_tokens,
            "timeoutMs": int(settings.triton_timeout_s * 1000),
        }
        if given is not None and not isinstance(given, dict):
            return cls.model_validate(defaults), "initializationOptions must be an object"
        given = {k: v for k, v in (given or {}).items() if v not in (None, "")}
        try:
            return cls.model_validate({**defaults, **given}), None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return cls.model_validate(defaults), f"ignored initializationOptions ({problems})"


@dataclass
class Figures:
    requests: int = 0
    cache_hits: int = 0
    last_latency_ms: float | None = None


class OwnDocumentsProtocol(LanguageServerProtocol):
    """pygls keeps a copy of every open document in its workspace, splitting the whole text into
    lines at each change; this server keeps its own (``Document``) and never reads pygls' copy, so
    open, change and close go straight to the handlers below."""

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None


class CtxpressServer(LanguageServer):
    def __init__(self, settings: Settings) -> None:
        super().__init__("ctxpress", VERSION, protocol_cls=OwnDocumentsProtocol)
        self.settings = settings
        self.options, _ = LspOptions.from_editor(settings, None)
        self.encoding = Encoding.UTF16
        self.documents: dict[str, Document] = {}
        self.locations: dict[str, Location] = {}
        self.workspace_roots: list[Path] = []
        self.forward = ForwardCache()
        self.debounce = AdaptiveDebounce(self.options.debounce_ms)
        self.pending: dict[str, asyncio.Task[Any]] = {}
        self.figures = Figures()
        self._appliance: Appliance | None = None
        self.credentials: NatsCredentials | None = None
        self.plain_items_one_line = False
        self.asks_inline = False

    # --- the appliance ----------------------------------------------------------------------
    @property
    def appliance(self) -> Appliance:
        if self._appliance is None:
            url, login = self.options.nats_url or self.settings.effective_nats_url(), {}
            if self.credentials is not None:  # team mode: the login, and its URL unless one is given
                url = self.options.nats_url or self.credentials.nats_url
                login = self.credentials.connect_options()
            plaintext = self.credentials is not None and self.credentials.plaintext
            self._appliance = Appliance(url, login, self._reachability, plaintext_credentials=plaintext)
        return self._appliance

    def subject(self, kind: str) -> str:
        return editor_subject(self.settings, self.credentials, kind)

    def load_credentials(self) -> str | None:
        """Read the team credentials file, if one is set; what is wrong with it, else None."""
        self.credentials = None
        if self.options.credentials is None:
            return None
        try:
            self.credentials = load_credentials(self.options.credentials)
        except TeamConfigError as exc:
            return str(exc)
        return None

    def _reachability(self, reachable: bool, why: str) -> None:
        """Told once per change: a message the user sees, and the status the extension shows."""
        if reachable:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Info, message=f"ctxpress: suggestions are back ({why})."))
        else:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning,
                message=f"ctxpress: the appliance is unreachable ({why}); no suggestions until it is back."))
        self.notify_status("ready" if reachable else "unreachable", why)

    def notify_status(self, state: str, message: str = "") -> None:
        self.protocol.notify(STATUS_NOTIFICATION, {
            "state": state, "message": message, "lastLatencyMs": self.figures.last_latency_ms,
            "requests": self.figures.requests, "cacheHits": self.figures.cache_hits})

    # --- documents --------------------------------------------------------------------------
    def document(self, uri: str) -> Document:
        doc = self.documents.get(uri)
        if doc is None:
            raise JsonRpcInvalidParams(f"{uri} is not open (didOpen first)")
        return doc

    def location(self, uri: str) -> Location:
        if uri not in self.locations:
            self.locations[uri] = locate(uri, self.workspace_roots, self.options.repository)
        return self.locations[uri]

    def too_large(self, doc: Document) -> str | None:
        limit = self.settings.max_request_bytes - 64 * 1024  # room for the request's other fields
        if len(doc.text) * 4 <= limit:  # no character takes more than 4 bytes: no need to encode
            return None
        size = len(doc.text.encode("utf-8", errors="surrogatepass"))
        if size > limit:
            return f"the document is {size:,} bytes; the appliance takes documents up to {limit:,}"
        return None

    # --- completion -------------------------------------------------------------------------
    async def suggest(self, uri: str, position: types.Position, *, explicit: bool) -> tuple[str, str] | None:
        """(completion id, text) to show at ``position``, or None. Superseded or cancelled: raises
        ``CancelledError`` (pygls answers the request with RequestCancelled)."""
        doc = self.document(uri)
        try:
            offset = doc.offset_at(position.line, position.character, self.encoding)
        except PositionError as exc:
            raise JsonRpcInvalidParams(str(exc)) from None
        if (problem := self.too_large(doc)) is not None:
            raise JsonRpcInvalidParams(problem)
        before, after = doc.text[:offset], doc.text[offset:]
        hit = self.forward.lookup(uri, before, after)
        if hit is not None:
            self.figures.cache_hits += 1
            return hit.completion_id, hit.rest
        self._dismiss_shown(uri)
        previous = self.pending.pop(uri, None)
        if previous is not None and not previous.done():
            previous.cancel()  # abandoned, not queued: a newer keystroke makes it worthless
        task = asyncio.current_task()
        if task is not None:
            self.pending[uri] = task
        try:
            await asyncio.sleep(self.debounce.delay_s(explicit=explicit))
            return await self._ask(uri, doc, offset, before, after)
        finally:
            if self.pending.get(uri) is task:
                del self.pending[uri]

    async def _ask(self, uri: str, doc: Document, offset: int, before: str, after: str) -> tuple[str, str] | None:
        where = self.location(uri)
        line, column = doc.wire_position(offset)
        request_id = uuid.uuid4().hex
        request = CompletionRequest(
            repository=where.repository, path=where.path, text=doc.text, line=line, column=column,
            language=language_from_editor(doc.language_id), max_tokens=self.options.max_tokens,
            mode=self.options.mode,  # type: ignore[arg-type]
            recent_edits=doc.edits or None, request_id=request_id, timeout_ms=self.options.timeout_ms,
            scenario=self.options.scenario, features=self.options.features)
        started = time.perf_counter()
        self.figures.requests += 1
        try:
            reply = await self.appliance.request(
                self.subject("complete"), request.model_dump_json(exclude_none=True).encode(),
                timeout_s=self.options.timeout_ms / 1000 + 1,
                cancel_id=request_id if self.options.abandon_upstream else None, cancel_subject=self.subject("cancel"))
        except Unreachable:
            return None
        except TimeoutError:
            log.warning("no answer within %d ms", self.options.timeout_ms)
            return None
        seconds = time.perf_counter() - started
        self.debounce.answered(seconds)
        self.figures.last_latency_ms = round(seconds * 1000, 1)
        if "error" in reply:
            error = reply["error"]
            log.info("no suggestion: %s: %s", error.get("code"), error.get("message"))
            if error.get("code") == "overloaded":
                self.notify_status("ready", error.get("message", ""))
            return None
        completion = without_following_lines(str(reply.get("completion", "")), after)
        self.notify_status("ready", f"{reply.get('model', '')}, {seconds * 1000:.0f} ms")
        if not completion.strip():
            return None
        completion_id = str(reply.get("id") or request_id)
        self.forward.remember(uri, Shown(completion_id, before, after, completion))
        self._feedback(completion_id, "shown")
        return completion_id, completion

    def _feedback(self, completion_id: str, action: str, chars_kept: int | None = None) -> None:
        event = Feedback(completion_id=completion_id, action=action, chars_kept=chars_kept)  # type: ignore[arg-type]
        self.appliance.publish_soon(self.subject("feedback"), event.model_dump_json(exclude_none=True).encode())

    def _dismiss_shown(self, uri: str) -> None:
        """The suggestion on screen is superseded without being accepted."""
        shown = self.forward.forget(uri)
        if shown is not None:
            self._feedback(shown.completion_id, "dismissed", 0)

    def accepted(self, completion_id: str, chars: int | None) -> None:
        self.forward.forget_completion(completion_id)
        self._feedback(completion_id, "accepted", chars)


def inserts_plain_words(params: types.InitializeParams) -> bool:
    """Neovim's own completion (``vim.lsp.omnifunc``) hands an item to Vim's ``complete()``, which inserts a
    newline as a NUL; completion plugins (nvim-cmp) apply the item's edit, newlines included, and say so by
    advertising snippets. Such a client gets the suggestion's first line as its item."""
    name = params.client_info.name if params.client_info else ""
    document = params.capabilities.text_document
    item = document.completion.completion_item if document and document.completion else None
    return name.lower() == "neovim" and not (item and item.snippet_support)


def build_server(settings: Settings) -> CtxpressServer:
    # One piece on purpose: pygls registers each LSP handler by decorating it on this server, so the
    # handlers are closures registered here, one after the other; each is short and works on the
    # CtxpressServer's methods, which hold the logic.
    server = CtxpressServer(settings)

    @server.feature(types.INITIALIZE)
    def initialize(ls: CtxpressServer, params: types.InitializeParams) -> None:
        ls.options, problem = LspOptions.from_editor(ls.settings, params.initialization_options)
        problem = "; ".join(p for p in (problem, ls.load_credentials()) if p) or None
        ls.debounce = AdaptiveDebounce(ls.options.debounce_ms)
        # the encoding pygls negotiates (the client's first choice among UTF-8/16/32; UTF-16 by default)
        chosen = ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities)
        ls.encoding = Encoding(chosen.value if isinstance(chosen, types.PositionEncodingKind) else str(chosen))
        folders = [f.uri for f in params.workspace_folders or []] or ([params.root_uri] if params.root_uri else [])
        ls.workspace_roots = [Path(unquote(urlparse(uri).path)) for uri in folders if uri.startswith("file:")]
        ls.plain_items_one_line = inserts_plain_words(params)
        document = params.capabilities.text_document
        ls.asks_inline = document is not None and document.inline_completion is not None
        if problem:
            log.warning(problem)
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                           message=f"ctxpress: {problem}"))

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: CtxpressServer, _params: None) -> None:
        if ls._appliance is not None:
            await ls._appliance.close()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: CtxpressServer, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        doc = Document(item.uri, item.text, item.version, item.language_id)
        ls.documents[item.uri] = doc
        ls.locations.pop(item.uri, None)
        if (problem := ls.too_large(doc)) is not None:
            log.warning("%s: %s: no suggestions in it", item.uri, problem)
            return
        where = ls.location(item.uri)
        event = FileOpened(repository=where.repository, path=where.path, text=doc.text,
                           language=language_from_editor(doc.language_id), features=ls.options.features)
        ls.appliance.publish_soon(ls.subject("file_opened"), event.model_dump_json(exclude_none=True).encode())

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: CtxpressServer, params: types.DidChangeTextDocumentParams) -> None:
        doc = ls.documents.get(params.text_document.uri)
        if doc is None:
            log.warning("didChange for %s, which is not open", params.text_document.uri)
            return
        ls.debounce.keystroke()
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                r = change.range
                try:
                    doc.apply((r.start.line, r.start.character), (r.end.line, r.end.character), change.text,
                              ls.encoding)
                except PositionError as exc:
                    # Out of step with the editor: a whole-text change will not come by itself, so
                    # say so; completions keep using the last good copy.
                    log.error("%s: change not applied (%s)", doc.uri, exc)
                    ls.window_show_message(types.ShowMessageParams(
                        type=types.MessageType.Error,
                        message=f"ctxpress: lost track of {doc.uri} ({exc}); reopen it to resynchronise."))
                    return
            else:
                doc.apply(None, None, change.text, ls.encoding)
        doc.version = params.text_document.version

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: CtxpressServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.documents.pop(uri, None)
        ls.locations.pop(uri, None)
        ls._dismiss_shown(uri)
        if (task := ls.pending.pop(uri, None)) is not None:
            task.cancel()

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=True))
    def did_save(ls: CtxpressServer, params: types.DidSaveTextDocumentParams) -> None:
        doc = ls.documents.get(params.text_document.uri)
        text = params.text if params.text is not None else (doc.text if doc else None)
        if text is None:
            return
        where = ls.location(params.text_document.uri)
        event = FileSaved(repository=where.repository, path=where.path, text=text, saved_at=time.time())
        ls.appliance.publish_soon(ls.subject("file_saved"), event.model_dump_json(exclude_none=True).encode())

    # With options, or pygls does not advertise ``inlineCompletionProvider``: VS Code's language client
    # and Neovim ask only servers that advertise it.
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: CtxpressServer, params: types.InlineCompletionParams
                                ) -> types.InlineCompletionList | None:
        explicit = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        found = await ls.suggest(params.text_document.uri, params.position, explicit=explicit)
        if found is None:
            return types.InlineCompletionList(items=[])
        completion_id, text = found
        cursor = types.Range(start=params.position, end=params.position)
        return types.InlineCompletionList(items=[types.InlineCompletionItem(
            insert_text=text, range=cursor,
            command=types.Command(title="ctxpress: accepted", command=ACCEPT_COMMAND,
                                  arguments=[completion_id, len(text)]))])

    @server.feature(types.TEXT_DOCUMENT_COMPLETION)
    async def completion(ls: CtxpressServer, params: types.CompletionParams) -> types.CompletionList:
        """For editors without inline completion (Helix): the suggestion as one item."""
        if ls.asks_inline:
            # An editor with inline completion asks both at the same keystroke (VS Code's word suggestions):
            # answering here too would run the model twice, each request superseding the other.
            return types.CompletionList(is_incomplete=False, items=[])
        explicit = params.context is not None and params.context.trigger_kind == types.CompletionTriggerKind.Invoked
        found = await ls.suggest(params.text_document.uri, params.position, explicit=explicit)
        if found is None:
            return types.CompletionList(is_incomplete=True, items=[])
        completion_id, text = found
        if ls.plain_items_one_line:
            # the next lines come from the forward cache as the user goes on typing (Enter included)
            text = text.split("\n", 1)[0]
            if not text.strip():
                return types.CompletionList(is_incomplete=True, items=[])
        first = text.split("\n", 1)[0].strip() or text.strip()
        cursor = types.Range(start=params.position, end=params.position)
        # No filterText: Neovim's omnifunc (like VS Code) then matches the item against the text from the
        # edit's start (the cursor) to the cursor, none, and keeps it. With filterText "" it matches it against
        # the word before the cursor and drops it: no suggestion right after a word (tests/e2e/test_neovim.py).
        return types.CompletionList(is_incomplete=True, items=[types.CompletionItem(
            label=first[:80], kind=types.CompletionItemKind.Snippet, detail="ctxpress",
            documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=f"```\n{text}\n```"),
            text_edit=types.TextEdit(range=cursor, new_text=text), sort_text="0",
            insert_text_format=types.InsertTextFormat.PlainText,
            command=types.Command(title="ctxpress: accepted", command=ACCEPT_COMMAND,
                                  arguments=[completion_id, len(text)]))])

    @server.command(ACCEPT_COMMAND)
    def accept(ls: CtxpressServer, *args: Any) -> None:
        values = list(args[0]) if len(args) == 1 and isinstance(args[0], list | tuple) else list(args)
        if not values or not isinstance(values[0], str) or not values[0]:
            raise JsonRpcInvalidParams(f"{ACCEPT_COMMAND} takes [completionId, charsKept?]")
        chars = values[1] if len(values) > 1 and isinstance(values[1], int) and values[1] >= 0 else None
        ls.accepted(values[0], chars)

    return server


def serve(settings: Settings) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # pygls logs every message at INFO (each keystroke's whole change): the editor's log, and the time
    # to write it, would be spent on that
    logging.getLogger("pygls").setLevel(logging.WARNING)
    server = build_server(settings)
    try:
        asyncio.run(_serve_pipes(server))
    except _NotAPipe:
        # stdin is a regular file (``ctxpress lsp < messages``): pygls' own reader, a thread per read
        server.start_io()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        server.shutdown()
    return 0


class _NotAPipe(Exception):
    pass


class _PipeReader:
    """stdin read by the event loop itself. pygls reads it with a thread hop per header line and body
    (four per message), each a wake-up of the loop: a keystroke's two messages cost milliseconds of
    waiting for threads before any work starts."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream

    async def readline(self) -> bytes:
        try:
            return await self._stream.readline()
        except ValueError:  # a "header" line longer than the limit: not a header, dropped
            return b"X-Ignored: line too long\r\n"

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self._stream.readexactly(n)
        except asyncio.IncompleteReadError:
            return b""  # the editor went away mid-message


async def _serve_pipes(server: CtxpressServer) -> None:
    from pygls.io_ import StdoutWriter, run_async

    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=HEADER_LIMIT_BYTES, loop=loop)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream, loop=loop), sys.stdin.buffer)
    except (ValueError, OSError) as exc:
        raise _NotAPipe(str(exc)) from None
    server._stop_event = threading.Event()  # what pygls' shutdown and exit handlers set
    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
    await run_async(stop_event=server._stop_event, reader=_PipeReader(stream), protocol=server.protocol,
                    logger=logging.getLogger("pygls.io"), error_handler=server.report_server_error)
