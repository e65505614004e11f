"""Warming a file an IDE opened (``ctxpress.v1.file_opened``): its parse, symbol table and token counts
done ahead of its first completion, on a background thread."""

from __future__ import annotations

import time

from context.packing.tokens import TokenCounter, exact_counter, memoized, warm_line_counts
from context.session import FileSession
from context.sources.imports import LISTED_KINDS
from context.sources.similar import index_words
from syntax.grammars import detect_language, is_supported
from syntax.summaries import outline_of
from syntax.symbols.table import extract_symbols


def warm_file(session: FileSession, text: str, language: str | None = None,
              count_tokens: TokenCounter | None = None) -> float:
    """Parse ``text`` into the file's session, build its symbol table and count its lines now, so the
    first completion in it pays only for an incremental re-parse. ``language``: our name for it (the wire's
    are ours), None: from the path and text. Returns milliseconds spent."""
    t0 = time.perf_counter()
    path = session.path
    lang = language or detect_language(path, text)
    if is_supported(lang):
        assert lang is not None
        parsed = session.trees.get(path, text, lang)
        table = extract_symbols(parsed)
        index_words(parsed)
        if count_tokens is not None:
            counter = memoized(count_tokens)
            warm_line_counts(parsed, counter)
            # Every block's summary, counted now, is a memo hit in the first request's packing;
            # so is every segment of the file (a line with the blank lines after it), of which
            # the rendered prompt is made.
            exact = exact_counter(counter)
            exact(text)
            outline = outline_of(table)
            for sym, summary, head in zip(table.symbols, outline.summaries, outline.heads, strict=True):
                exact(summary)
                if sym.kind in LISTED_KINDS:
                    exact(summary.lstrip())  # as the import and constant lists show it
                if head is not None:
                    exact(head)
    return (time.perf_counter() - t0) * 1000.0
