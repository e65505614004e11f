"""The in-file context of one completion request, and the one place its strategy is chosen
(``in_file_context``): the window around the cursor (``crop`` off: mode=baseline, the feature off, or a file with
lines too long to parse, cut), the whole file when it fits the budget (feature ``whole_file``), else the assembly:
the file cropped to the budget by its syntax, with its explanation; and the window again when the assembly fails
(``AssemblyFailed``): logged, counted in ``FALLBACK_COUNTS``, and the request still gets a prompt. CPU-bound:
runs in an executor.

The assembly: parse (cached, incremental) -> symbol table -> the excerpts held while the user types in one block
(steady.py), else: enclosing block (mandatory) -> candidates from each source (class header, references, recent
edits, imports/constants, similar lines, nearby lines, neighbours) -> one packing pass in priority order under the
token budget -> rendering (excerpts in file order, then the enclosing block up to the cursor) -> a check of the
real token count (those in selection.py) -> the lines below the block with what is left (below.py). What the
stages share is in state.py.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace

from context.assembly import steady
from context.assembly.below import fill_below
from context.assembly.selection import pack_beside
from context.assembly.state import Assembly, AssemblyFailed, Clock
from context.model import AssembledContext, ContextBlock
from context.options import DEFAULT_OPTIONS, AssemblyOptions
from context.packing.pack import Candidate, Form
from context.packing.tokens import TokenCounter, file_tokens, memoized
from context.session import FileSession
from context.sources.whole_file import whole_file_context
from context.sources.window import baseline_window, clamp_cursor
from context.warm import warm_file
from syntax.grammars import detect_language, is_supported
from syntax.summaries import outline_of
from syntax.symbols.table import cheap_symbols, extract_symbols

__all__ = ["FALLBACK_COUNTS", "AssemblyFailed", "in_file_context"]

log = logging.getLogger("ctxpress.context")

# The window sent instead of the assembly, by cause (AssemblyFailed.cause).
FALLBACK_COUNTS: Counter[str] = Counter()


def in_file_context(text: str, path: str, line: int, column: int, *, count_tokens: TokenCounter,
                    options: AssemblyOptions = DEFAULT_OPTIONS, crop: bool = True, session: FileSession | None = None,
                    window_lines: int = 200, window_grid: int = 1) -> AssembledContext:
    """The in-file context for a cursor at 0-based (line, column) of ``text``, within ``options.budget_tokens``:
    the window unless ``crop``, else the whole file, the assembly, or the window when that fails (unsupported
    language, parse failure, a block over the budget alone, an exception, or more than ``options.timeout_ms`` of
    CPU time). ``session``: the file's (its parsed versions and held excerpts are used and updated); None: one of
    this call only. ``window_lines``: the window's lines either side of the cursor (the settings' window_lines);
    ``window_grid``: the window's first line a multiple of it (baseline_window's ``start_grid``)."""
    if session is not None and not session.parsed():
        # A file's first request, no file_opened before it: its warm-up (in proportion to the file) is done outside
        # the assembly's deadline, which is for the work at each keystroke; else a long file's first request would
        # fall back to the window every time, and the prompt of its next request share nothing with it.
        warm_file(session, text, options.language, count_tokens=count_tokens)
    t0 = time.perf_counter()
    lang = options.language or detect_language(path, text)
    count_tokens = memoized(count_tokens)
    ctx = None if crop else _window(text, line, column, count_tokens, options.budget_tokens, window_lines,
                                    grid=window_grid)
    if ctx is None and options.whole_file and lang is not None and is_supported(lang):
        ctx = whole_file_context(text, line, column, count_tokens, options.budget_tokens)
    if ctx is None:
        # The timeout is on the assembly's own CPU time, not wall time: on the embedded appliance the CPU engine
        # shares the cores, and a thread that waits for a core has done no work worth throwing away (the window
        # would wait for the same core). A file that is truly slow to assemble still trips it; wall time is
        # reported in ``elapsed_ms`` and the timings.
        clock = Clock(time.thread_time() + options.timeout_ms / 1000.0, options.timeout_ms)
        options = replace(options, language=lang)
        session = session if session is not None else FileSession("", path)
        try:
            if lang is None or not is_supported(lang):
                raise AssemblyFailed("unsupported-language", f"unsupported language: {lang or 'unknown'}")
            a = _parsed(text, path, lang, line, column, count_tokens, options, clock, session)
            key = steady.key(options, lang)
            kept = (steady.lookup(session.steady, text, key, options.recent_edit_lines)
                    if options.steady_excerpts else None)
            reused = steady.kept_excerpts(a, kept) if kept is not None else None
            if kept is not None:
                clock.check("steady")
            if reused is None:
                ctx = _packed(a, session, key)
            else:
                ctx, session.steady = reused
        except Exception as exc:  # never fail the request over its context: the window is sent, and why is said
            failed = exc if isinstance(exc, AssemblyFailed) else AssemblyFailed(
                "error", f"error: {type(exc).__name__}: {exc}")
            if failed is not exc:
                log.exception("context assembly failed for %s", path)
            FALLBACK_COUNTS[failed.cause] += 1
            log.warning("context fallback to baseline window for %s: %s", path, failed.reason)
            ctx = _window(text, line, column, count_tokens, options.budget_tokens, window_lines, failed.reason)
    counting = options.exact_file_tokens and not ctx.file_tokens_exact  # the whole file's count is exact already
    t_count = time.perf_counter()
    counted = ctx.file_tokens if ctx.file_tokens_exact else file_tokens(
        text, count_tokens if counting else None, shown_chars=len(ctx.prefix) + len(ctx.suffix),
        shown_tokens=ctx.context_tokens)
    timings = ({**ctx.timings_ms, "file_tokens": (time.perf_counter() - t_count) * 1000.0} if counting
               else ctx.timings_ms)
    return replace(ctx, path=path, language=lang, line=line, column=column, budget_tokens=options.budget_tokens,
                   file_lines=text.count("\n") + 1, file_tokens=counted,
                   file_tokens_exact=ctx.file_tokens_exact or options.exact_file_tokens, timings_ms=timings,
                   elapsed_ms=(time.perf_counter() - t0) * 1000.0)


def _window(text: str, line: int, column: int, count_tokens: TokenCounter, budget: int, window_lines: int,
            fallback_reason: str | None = None, grid: int = 1) -> AssembledContext:
    line, column = clamp_cursor(text, line, column)
    w = baseline_window(text, line, column, count_tokens=count_tokens, window_lines=window_lines, budget_tokens=budget,
                        start_grid=grid)
    return AssembledContext(
        # counted whole: per-line sums (used for packing) overcount at line seams
        prefix=w.prefix, suffix=w.suffix, blocks=[], dropped=[], fallback_reason=fallback_reason,
        strategy="window-fallback" if fallback_reason else "window",
        file_tokens=0, context_tokens=count_tokens(w.prefix) + count_tokens(w.suffix), elapsed_ms=0.0, window=w)


def _parsed(text: str, path: str, lang: str, line: int, column: int, count_tokens: TokenCounter,
            options: AssemblyOptions, clock: Clock, session: FileSession) -> Assembly:
    # The cursor line is parsed blank: half-typed code there (an open bracket, an unclosed
    # string) makes tree-sitter's error recovery re-parse and mangle the rest of the file; the
    # line itself is rendered from the real text, and its identifiers are read from that text.
    parsed = session.trees.get(path, text, lang, blank_line=line)
    clock.check("parse")
    line = max(0, min(line, parsed.line_count - 1))
    table = cheap_symbols(parsed) or extract_symbols(parsed)
    # Half-typed code always has error nodes; only a tree with nothing recognisable is a failure.
    if parsed.tree.root_node.has_error and not table.symbols and text.strip():
        raise AssemblyFailed("parse-failure", "parse failure: no declarations recognised in an erroneous tree")
    clock.check("symbols")
    return Assembly(text, path, lang, line, column, options, parsed, table, outline_of(table), count_tokens, clock)


def _packed(a: Assembly, session: FileSession, key: tuple[object, ...]) -> AssembledContext:
    """The enclosing block and the excerpts packed beside it, the lines below it with what is left, and the
    excerpts held for the next request in the block."""
    packed = pack_beside(a)
    filled = fill_below(a, packed) if a.options.fill_below else None
    if filled is not None:
        a.clock.check("fill")
    below: ContextBlock | None
    rendered, total, chosen, below = filled or (packed.rendered, packed.total, packed.chosen, None)
    enc = packed.enc
    blocks = [enc.block(), *(_block(c, c.chosen) for c in sorted(chosen, key=lambda c: c.priority))]
    dropped = [_block(c, None, f"{c.drop_reason} ({c.reason})")
               for c in sorted(packed.dropped, key=lambda c: c.priority)]
    if a.options.steady_excerpts:
        # Held excerpts are rendered beside the block alone. The lines a short file is filled with would be cut as
        # the block grows, so that file's excerpts are chosen afresh; those of the suffix floor are left out while
        # typing: in the suffix, after the typed text, the engine would process them again at every keystroke.
        holds = enc.symbol is not None and (below is None or packed.held_below)
        session.steady = steady.hold(a, key, enc, rendered, blocks[1:], dropped) if holds else None
    if below is not None:
        blocks.append(below)
    return AssembledContext(
        prefix=rendered.prefix, suffix=rendered.suffix, blocks=blocks, dropped=dropped, strategy="ast",
        fallback_reason=None, file_tokens=0, context_tokens=total, elapsed_ms=0.0, timings_ms=a.clock.timings,
        stable_chars=len(rendered.excerpt_text),
    )


def _block(c: Candidate, form: Form | None, reason: str | None = None) -> ContextBlock:
    f = form or c.forms[-1]
    why = reason or c.reason
    if form is not None and form.note:
        why = f"{why}; {form.note}"
    # A form may show less than the candidate's whole range (nearby lines: the part that fit).
    start = min((p.start_line for p in f.pieces), default=c.start_line)
    end = max((p.end_line for p in f.pieces), default=c.end_line)
    return ContextBlock(kind=c.kind, name=c.name, start_line=start, end_line=end, form=f.name,
                        tokens=f.tokens, reason=why)
