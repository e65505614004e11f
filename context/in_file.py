"""The in-file context of a prompt, and the one place its strategy is chosen: the window around the cursor
(``crop`` off: mode=baseline, the feature off, or a file with lines too long to parse), the whole file when it
fits the budget (feature ``whole_file``), else the assembly (context/assembly/), and the window again when the
assembly fails: logged, counted in ``FALLBACK_COUNTS``, and the request still gets a prompt."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace

from context.assembly import AssemblyFailed, assemble_context
from context.model import AssembledContext
from context.options import DEFAULT_OPTIONS, AssemblyOptions
from context.packing.tokens import TokenCounter, file_tokens, memoized
from context.session import FileSession
from context.sources.whole_file import whole_file_context
from context.sources.window import baseline_window, clamp_cursor
from syntax.grammars import detect_language, is_supported

log = logging.getLogger("ctxpress.context")

# The window sent instead of the assembly, by cause (AssemblyFailed.cause); the worker exports these as metrics.
FALLBACK_COUNTS: Counter[str] = Counter()

WINDOW_LINES = 200  # the window's lines either side of the cursor, unless the caller's settings say otherwise


def in_file_context(
    text: str,
    path: str,
    line: int,
    column: int,
    *,
    count_tokens: TokenCounter,
    options: AssemblyOptions = DEFAULT_OPTIONS,
    crop: bool = True,
    session: FileSession | None = None,
    window_lines: int = WINDOW_LINES,
) -> AssembledContext:
    """The in-file context for a cursor at 0-based (line, column) of ``text``, within ``options.budget_tokens``:
    the window unless ``crop``, else the whole file, the assembly, or the window when that fails."""
    t0 = time.perf_counter()
    lang = options.language or detect_language(path, text)
    count_tokens = memoized(count_tokens)
    whole = (whole_file_context(text, line, column, count_tokens, options.budget_tokens)
             if crop and options.whole_file and lang is not None and is_supported(lang) else None)
    if not crop:
        ctx = _window(text, line, column, count_tokens, options.budget_tokens, window_lines, "window", None)
    elif whole is not None:
        ctx = whole
    else:
        try:
            ctx = assemble_context(text, path, line, column, count_tokens=count_tokens,
                                   options=replace(options, language=lang), session=session)
        except AssemblyFailed as failed:
            FALLBACK_COUNTS[failed.cause] += 1
            log.warning("context fallback to baseline window for %s: %s", path, failed.reason)
            ctx = _window(text, line, column, count_tokens, options.budget_tokens, window_lines, "window-fallback",
                          failed.reason)
    timings = dict(ctx.timings_ms)
    if ctx.file_tokens_exact:
        counted = ctx.file_tokens
    elif options.exact_file_tokens:
        t_count = time.perf_counter()
        counted = file_tokens(text, count_tokens)
        timings["file_tokens"] = (time.perf_counter() - t_count) * 1000.0
    else:
        counted = file_tokens(text, None, shown_chars=len(ctx.prefix) + len(ctx.suffix),
                              shown_tokens=ctx.context_tokens)
    return replace(ctx, path=path, language=lang, line=line, column=column, budget_tokens=options.budget_tokens,
                   file_lines=text.count("\n") + 1, file_tokens=counted,
                   file_tokens_exact=ctx.file_tokens_exact or options.exact_file_tokens, timings_ms=timings,
                   elapsed_ms=(time.perf_counter() - t0) * 1000.0)


def _window(text: str, line: int, column: int, count_tokens: TokenCounter, budget: int, window_lines: int,
            strategy: str, reason: str | None) -> AssembledContext:
    line, column = clamp_cursor(text, line, column)
    w = baseline_window(text, line, column, count_tokens=count_tokens, window_lines=window_lines, budget_tokens=budget)
    return AssembledContext(
        # counted whole: per-line sums (used for packing) overcount at line seams
        prefix=w.prefix, suffix=w.suffix, blocks=[], dropped=[], strategy=strategy, fallback_reason=reason,
        file_tokens=0, context_tokens=count_tokens(w.prefix) + count_tokens(w.suffix), elapsed_ms=0.0, window=w)
