"""Assembly entry point: the in-file context of one completion request, with its explanation.

Pipeline: whole file when it fits (whole_file.py) -> parse (cached, incremental) -> symbol table ->
enclosing block (mandatory) -> candidates from each source (class header, references, recent edits,
imports/constants, similar lines, nearby lines, neighbours) -> one packing pass in priority order under the
token budget -> rendering (excerpts in file order, then the enclosing block up to the cursor) -> a check of
the real token count (those three in selection.py) -> the lines below the block with what is left (below.py).
While the user types in one block, the excerpts chosen for it are kept (steady.py). What the stages share is
in assembly.py.

Any failure (unsupported language, parse failure, exception, or the assembly spending more
than ``timeout_ms`` of CPU time) degrades to the baseline window for that request: logged, counted in
``FALLBACK_COUNTS``, and the request still gets a prompt.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace

from context import steady
from context.assembly import Assembly, BlockOverBudget, Clock, ParseFailure, Timeout
from context.model import AssembledContext, ContextBlock
from context.options import DEFAULT_OPTIONS, AssemblyOptions
from context.packing.pack import (
    Candidate,
    Form,
    render_enclosing,
)
from context.packing.tokens import TokenCounter, memoized
from context.selection import pack_beside
from context.session import FileSession
from context.sources.below import fill_below
from context.sources.enclosing import find_enclosing
from context.sources.whole_file import whole_file_context
from context.sources.window import baseline_window, clamp_cursor
from syntax.grammars import detect_language, is_supported
from syntax.summaries import outline_of
from syntax.symbols.table import cheap_symbols, extract_symbols

log = logging.getLogger("ctxpress.context")

# Fallbacks by cause ("unsupported-language", "parse-failure", "block-over-budget", "timeout", "error"); the worker
# exports these as metrics.
FALLBACK_COUNTS: Counter[str] = Counter()

def _window_fallback(text: str, line: int, column: int, count_tokens: TokenCounter, budget: int) -> tuple[str, str]:
    """The baseline window, used when AST assembly is impossible and the caller gave no fallback."""
    line, column = clamp_cursor(text, line, column)
    window = baseline_window(text, line, column, count_tokens=count_tokens, budget_tokens=budget)
    return window.prefix, window.suffix


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


def assemble_context(
    text: str,
    path: str,
    line: int,
    column: int,
    *,
    count_tokens: TokenCounter,
    options: AssemblyOptions = DEFAULT_OPTIONS,
    session: FileSession | None = None,
) -> AssembledContext:
    """Assemble the in-file context for a cursor at 0-based (line, column) of ``text``. ``session``: the
    file's (its parsed versions and held excerpts are used and updated); None: a session of this call only."""
    t0 = time.perf_counter()
    # The timeout is on the assembly's own CPU time, not wall time: on the embedded appliance the
    # CPU engine shares the cores, and a thread that waits for a core has done no work worth
    # throwing away (the window fallback would wait for the same core). A file that is truly slow
    # to assemble still trips it; wall time is reported in ``elapsed_ms`` and the timings.
    deadline = time.thread_time() + options.timeout_ms / 1000.0
    lang = options.language or detect_language(path, text)
    base = dict(path=path, language=lang, line=line, column=column, budget_tokens=options.budget_tokens,
                file_lines=text.count("\n") + 1)
    if not is_supported(lang):
        return _fallback(text, line, column, count_tokens, options, t0,
                         "unsupported-language", f"unsupported language: {lang or 'unknown'}", base)
    assert lang is not None
    count_tokens = memoized(count_tokens)
    if options.whole_file:
        whole = whole_file_context(text, line, column, count_tokens, options.budget_tokens)
        if whole is not None:
            whole.elapsed_ms = (time.perf_counter() - t0) * 1000.0
            for k, v in base.items():
                setattr(whole, k, v)
            return whole
    try:
        result = _assemble(text, path, lang, line, column, count_tokens, options, Clock(deadline),
                           session if session is not None else FileSession("", path))
    except Timeout:
        return _fallback(text, line, column, count_tokens, options, t0, "timeout",
                         f"assembly exceeded {options.timeout_ms:g} ms", base)
    except ParseFailure as exc:
        return _fallback(text, line, column, count_tokens, options, t0, "parse-failure",
                         f"parse failure: {exc}", base)
    except BlockOverBudget as exc:
        return _fallback(text, line, column, count_tokens, options, t0, "block-over-budget", str(exc), base)
    except Exception as exc:  # never fail the request over its context: degrade and say why
        log.exception("context assembly failed for %s", path)
        return _fallback(text, line, column, count_tokens, options, t0, "error",
                         f"error: {type(exc).__name__}: {exc}", base)
    if options.exact_file_tokens:
        t_count = time.perf_counter()
        result.file_tokens = count_tokens(text)
        result.file_tokens_exact = True
        result.timings_ms["file_tokens"] = (time.perf_counter() - t_count) * 1000.0
    else:
        shown_chars = len(result.prefix) + len(result.suffix)
        per_char = result.context_tokens / shown_chars if shown_chars else 0.25
        result.file_tokens = max(result.context_tokens, round(len(text) * per_char))
    result.elapsed_ms = (time.perf_counter() - t0) * 1000.0
    for k, v in base.items():
        setattr(result, k, v)
    return result


def _fallback(
    text: str, line: int, column: int, count_tokens: TokenCounter, options: AssemblyOptions, t0: float, cause: str,
    reason: str, base: dict[str, object],
) -> AssembledContext:
    FALLBACK_COUNTS[cause] += 1
    log.warning("context fallback to baseline window for %s: %s", base.get("path"), reason)
    if options.fallback is not None:
        prefix, suffix = options.fallback()
    else:
        prefix, suffix = _window_fallback(text, line, column, count_tokens, options.budget_tokens)
    tokens = count_tokens(prefix) + count_tokens(suffix)
    shown = len(prefix) + len(suffix)
    file_tokens = max(tokens, round(len(text) * tokens / shown)) if shown else tokens
    ctx = AssembledContext(
        prefix=prefix, suffix=suffix, blocks=[], dropped=[], strategy="window-fallback", fallback_reason=reason,
        file_tokens=file_tokens, context_tokens=tokens, elapsed_ms=(time.perf_counter() - t0) * 1000.0,
    )
    for k, v in base.items():
        setattr(ctx, k, v)
    return ctx


def _assemble(
    text: str, path: str, lang: str, line: int, column: int, count_tokens: TokenCounter, options: AssemblyOptions,
    clock: Clock, session: FileSession,
) -> AssembledContext:
    # The cursor line is parsed blank: half-typed code there (an open bracket, an unclosed
    # string) makes tree-sitter's error recovery re-parse and mangle the rest of the file; the
    # line itself is rendered from the real text, and its identifiers are read from that text.
    parsed = session.trees.get(path, text, lang, blank_line=line)
    clock.check("parse")
    line = max(0, min(line, parsed.line_count - 1))
    table = cheap_symbols(parsed) or extract_symbols(parsed)
    # Half-typed code always has error nodes; only a tree with nothing recognisable is a failure.
    if parsed.tree.root_node.has_error and not table.symbols and text.strip():
        raise ParseFailure("no declarations recognised in an erroneous tree")
    clock.check("symbols")
    outline = outline_of(table)
    a = Assembly(text, path, lang, line, column, options, parsed, table, outline, count_tokens, clock)
    return _assemble_beside(a, session)


def _assemble_beside(a: Assembly, session: FileSession) -> AssembledContext:
    """The enclosing block and the excerpts beside it: held while the user types in the block, else packed."""
    text, line, options, parsed, clock = a.text, a.line, a.options, a.parsed, a.clock
    # what the held excerpts were chosen with: any change chooses afresh
    steady_options = (a.lang, a.budget, options.summaries, options.constructor_attributes, options.nearby_first,
                      options.similar, options.fill_below, options.suffix_floor)
    kept = (steady.lookup(session.steady, text, steady_options, options.recent_edit_lines)
            if options.steady_excerpts else None)
    if kept is not None:
        held = _steady(a, session, kept)
        clock.check("steady")
        if held is not None:
            return held
    packed = pack_beside(a)
    enc, rendered, total, chosen, floor = packed.enc, packed.rendered, packed.total, packed.chosen, packed.held_below
    below: ContextBlock | None = None
    if options.fill_below:
        filled = fill_below(parsed, enc, chosen, total, a.budget, a.estimate_lines, a.prompt_tokens,
                            lambda kept, suffix: a.render(kept, enc, suffix), held=floor)
        if filled is not None:
            rendered, total, chosen, below = filled
            clock.check("fill")
    blocks = [enc.block(), *(_block(c, c.chosen) for c in sorted(chosen, key=lambda c: c.priority))]
    if below is not None:
        blocks.append(below)
    dropped = [_block(c, None, f"{c.drop_reason} ({c.reason})")
               for c in sorted(packed.dropped, key=lambda c: c.priority)]
    # Held excerpts are rendered beside the block alone. The lines a short file is filled with would be cut as the
    # block grows, so that file's excerpts are chosen afresh; those of the suffix floor are left out while typing:
    # in the suffix, after the typed text, the engine would process them again at every keystroke.
    if options.steady_excerpts and enc.symbol is not None and (below is None or floor):
        block_end = max(enc.end_line, line)
        session.steady = steady.Held(
            text=text, options=steady_options, block_name=enc.name, block_start=enc.start_line, block_end=block_end,
            excerpt_text=rendered.excerpt_text, segments=rendered.segments, above=rendered.above,
            blocks=blocks[1:len(blocks) - (below is not None)],
            dropped=dropped, outside_edits=frozenset(r for r in options.recent_edit_lines
                                                     if not (enc.start_line <= r[0] and r[1] <= block_end)))
    elif options.steady_excerpts:
        session.steady = None
    return AssembledContext(
        prefix=rendered.prefix, suffix=rendered.suffix, blocks=blocks, dropped=dropped, strategy="ast",
        fallback_reason=None, file_tokens=0, context_tokens=total, elapsed_ms=0.0, timings_ms=clock.timings,
        stable_chars=len(rendered.excerpt_text),
    )


def _steady(a: Assembly, session: FileSession, kept: steady.Kept) -> AssembledContext | None:
    """The held excerpts, then the enclosing block rendered afresh; None when the cursor left the
    block they were chosen for, or the block alone no longer fits beside any of them."""
    held = kept.held
    enc = find_enclosing(a.outline, a.line, a.cursor_byte, a.budget, a.count_tokens, a.marker_tokens)
    if enc.symbol is None or enc.name != held.block_name or enc.start_line != held.block_start:
        return None
    segments = [steady.moved(s, kept) for s in held.segments]
    excerpt_text, above = held.excerpt_text, held.above
    first = enc.prefix_pieces[0].start_line if enc.prefix_pieces else enc.start_line
    for _attempt in range(4):
        prefix = excerpt_text + render_enclosing(enc.prefix_pieces, above, a.lang, a.file_lines)
        total = a.exact(prefix) + a.exact(enc.suffix)
        if total <= a.budget:
            break
        if not segments:
            return None
        # the block grew: cut from the excerpts' end, so that their head (and its KV) stays
        excerpt_text, segments = steady.trim(excerpt_text, segments, total - a.budget, a.exact)
        above = max((s.end_line for s in segments if s.end_line < first), default=-1)
    else:
        return None
    shown = [(s.start_line, s.end_line) for s in segments]
    blocks: list[ContextBlock] = []
    dropped = [steady.moved(b, kept) for b in held.dropped]
    for block in held.blocks:
        moved = steady.moved(block, kept)
        if any(x <= moved.end_line and moved.start_line <= y for x, y in shown):
            blocks.append(moved)
        else:
            dropped.append(replace(moved, reason=f"cut while typing: the enclosing block grew ({moved.reason})"))
    session.steady = replace(
        held, text=a.text, block_end=max(enc.end_line, a.line, held.block_end + kept.delta),
        excerpt_text=excerpt_text, segments=segments, above=above, blocks=blocks, dropped=dropped)
    return AssembledContext(
        prefix=prefix, suffix=enc.suffix,
        blocks=[enc.block(), *(replace(b, reason=f"{b.reason}; {steady.NOTE}") for b in blocks)],
        dropped=dropped, strategy="ast", fallback_reason=None, file_tokens=0, context_tokens=total, elapsed_ms=0.0,
        timings_ms=a.clock.timings, stable_chars=len(excerpt_text), steady=True,
    )


