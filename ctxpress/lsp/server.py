"""The language server behind ``ctxpress lsp``: its own copy of the open documents, and inline completion
(LSP 3.18) and plain completion asked of the appliance over NATS (``ctxpress.v1.complete``). The LSP
handlers that call it are in handlers.py; the stdio loop that runs it, in stdio.py.

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
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from ctxpress.lsp.appliance import Appliance, Unreachable, editor_subject
from ctxpress.lsp.debounce import AdaptiveDebounce
from ctxpress.lsp.documents import Document, Encoding, PositionError
from ctxpress.lsp.forward_cache import ForwardCache, Shown
from ctxpress.lsp.options import LspOptions
from ctxpress.lsp.repository import Location, locate
from ctxpress.lsp.suggestion import without_following_lines
from ctxpress_core.identity import NatsCredentials, TeamConfigError, load_credentials
from ctxpress_core.languages import language_from_editor
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, Feedback

log = logging.getLogger("ctxpress.lsp")

STATUS_NOTIFICATION = "ctxpress/status"
VERSION = "0.1.0"


@dataclass
class Figures:
    requests: int = 0
    cache_hits: int = 0
    last_latency_ms: float | None = None


class OwnDocumentsProtocol(LanguageServerProtocol):
    """pygls keeps a copy of every open document in its workspace, splitting the whole text into
    lines at each change; this server keeps its own (``Document``) and never reads pygls' copy, so
    open, change and close go straight to its handlers (handlers.py)."""

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
            max_decode_ms=self.options.max_decode_ms, scenario=self.options.scenario, features=self.options.features)
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
            if error.get("code") in ("overloaded", "rate_limited"):  # no suggestion this time, and why
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

