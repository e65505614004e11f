"""The LSP messages ``ctxpress lsp`` answers: a short handler each, calling the ``CtxpressServer``
(server.py), which holds the logic."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder
from pygls.exceptions import JsonRpcInvalidParams

from ctxpress.lsp.debounce import AdaptiveDebounce
from ctxpress.lsp.documents import Document, Encoding, PositionError
from ctxpress.lsp.options import LspOptions
from ctxpress.lsp.server import CtxpressServer
from ctxpress_core.languages import language_from_editor
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import FileOpened, FileSaved

log = logging.getLogger("ctxpress.lsp")

ACCEPT_COMMAND = "ctxpress.accept"
# ctxpress's own notification: the editor's cursor rests at a place it was moved to (editors/vscode sends it)
CURSOR_REST = "ctxpress/cursorRest"


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

    @server.feature(CURSOR_REST)
    def cursor_rest(ls: CtxpressServer, params: Any) -> None:
        """The editor's cursor came to rest somewhere it was moved to (a click, a jump, arrow keys; not typing): the
        appliance prepares the prompt for that place before the first keystroke there (a file_opened with the
        cursor). Params as a completion's: ``{"textDocument": {"uri"}, "position": {"line", "character"}}``."""
        try:
            uri, line, units = params.textDocument.uri, int(params.position.line), int(params.position.character)
        except (AttributeError, TypeError, ValueError):
            log.warning("%s without textDocument.uri and position: ignored", CURSOR_REST)
            return
        doc = ls.documents.get(uri)
        if doc is None or ls.too_large(doc) is not None:
            return
        try:
            line, column = doc.wire_position(doc.offset_at(line, units, ls.encoding))
        except PositionError:
            return  # out of step with the editor: the next completion says so
        where = ls.location(uri)
        event = FileOpened(repository=where.repository, path=where.path, text=doc.text, line=line, column=column,
                           language=language_from_editor(doc.language_id), features=ls.options.features)
        ls.appliance.publish_soon(ls.subject("file_opened"), event.model_dump_json(exclude_none=True).encode())

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
