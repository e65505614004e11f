"""Assembly entry point: the in-file context of one completion request, with its explanation.

Pipeline: parse (cached, incremental) -> symbol table -> enclosing block (mandatory) ->
candidates from each source (class header, references, recent edits, imports/constants,
nearby lines, neighbours) -> one packing pass in priority order under the token budget -> rendering (excerpts
in file order, then the enclosing block up to the cursor) -> a check of the real token count.

Any failure (unsupported language, parse failure, exception, or the assembly spending more
than ``timeout_ms`` of CPU time) degrades to the baseline window for that request: logged, counted in
``FALLBACK_COUNTS``, and the request still gets a prompt.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ctxpress.core.languages import normalize_language
from ctxpress.core.settings import Settings
from ctxpress.core.wire.v1 import wire_lines
from indexer.summaries import elision_marker
from indexer.syntax.grammars import detect_language, is_supported
from indexer.syntax.parsed_file import ParsedFile
from indexer.syntax.symbols.model import FileSymbols
from indexer.syntax.symbols.table import cheap_symbols, extract_symbols
from indexer.syntax.tree_cache import TREE_CACHE, TreeCache
from workers.context import steady as steady_excerpts
from workers.context.blocks import summary_piece
from workers.context.class_header import class_header_candidates
from workers.context.enclosing import Enclosing, find_enclosing
from workers.context.imports import import_candidates
from workers.context.line_tokens import LineRangeTokens, exact_counter, line_range_estimator, warm_line_counts
from workers.context.nearby import nearby_candidates
from workers.context.neighbours import neighbour_candidates
from workers.context.packing import (
    MAX_CHARS_PER_TOKEN,
    TIER_REFERENCED,
    Candidate,
    Form,
    Rendered,
    TokenCounter,
    form_tokens,
    memoized,
    merge_duplicates,
    pack,
    render_enclosing,
    render_prompt,
)
from workers.context.recent_edits import recent_edit_candidates
from workers.context.references import referenced_candidates
from workers.context.similar import index_words, similar_candidates
from workers.context.window import baseline_window, clamp_cursor, split_at_cursor

log = logging.getLogger("ctxpress.context")

# Fallbacks by cause ("unsupported-language", "parse-failure", "timeout", "error"); the worker
# exports these as metrics.
FALLBACK_COUNTS: Counter[str] = Counter()

DEFAULT_BUDGET_TOKENS: int = Settings.model_fields["context_budget_tokens"].default
# One referenced/edited block may take at most this share of the budget whole; beyond that its
# summary is used, so that one large helper cannot crowd out every other signature.
MAX_WHOLE_SHARE = 0.25
# With the nearby_first feature: the share of the budget held back for the code above the block
# while the class header, references, edits and imports are packed (they keep their order and
# report, but take whole bodies only from what is left; cheap signatures still fit).
NEARBY_FIRST_SHARE = 0.6
# Dropped blocks retried against the real rendered count (each retry renders and counts once).
SECOND_CHANCE_MAX = 6
# Files of at most this many budgets get the budget left after packing filled with the lines
# below the enclosing block, verbatim, as the FIM suffix a window would show (see _fill_below).
# Longer files do not: there the prompt is already near full and every token is prefill time.
FILL_MAX_FILE_BUDGETS = 2.0
# Less slack than this is not worth a second rendering.
FILL_MIN_TOKENS = 24


@dataclass
class ContextBlock:
    kind: str
    name: str
    start_line: int  # 0-based, inclusive
    end_line: int
    form: str  # "whole" | "summary" | "partial"
    tokens: int
    reason: str


@dataclass
class AssembledContext:
    prefix: str  # excerpts + the code up to the cursor; ends exactly at the cursor
    suffix: str  # budgeted code after the cursor (FIM)
    blocks: list[ContextBlock]
    dropped: list[ContextBlock]
    strategy: str  # "whole-file" | "ast" | "window-fallback"
    fallback_reason: str | None
    file_tokens: int
    context_tokens: int
    elapsed_ms: float
    # Additions beyond the worker's contract, for logs and `ctxpress explain`.
    path: str = ""
    language: str | None = None
    line: int = 0
    column: int = 0
    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    file_tokens_exact: bool = False
    file_lines: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    # Length of the prefix's stable part (the excerpts before the enclosing block): it changes
    # least while the user types, so the engine's KV of it is reused; 0 for the window fallback.
    stable_chars: int = 0
    # The excerpts are the previous request's, kept while the user types in the same block.
    steady: bool = False

    @property
    def compression_ratio(self) -> float:
        return self.file_tokens / self.context_tokens if self.context_tokens else 0.0


class _Timeout(Exception):
    pass


class _ParseFailure(Exception):
    pass


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
    count_tokens: Callable[[str], int],
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    language: str | None = None,
    recent_edit_lines: Sequence[tuple[int, int]] = (),
    timeout_ms: float = 20.0,
    fallback: Callable[[], tuple[str, str]] | None = None,
    exact_file_tokens: bool = False,
    cache: TreeCache | None = None,
    summaries: bool = True,
    nearby_first: bool = True,
    similar: bool = True,
    whole_file: bool = True,
    fill_below: bool = True,
    steady: bool = True,
) -> AssembledContext:
    """Assemble the in-file context for a cursor at 0-based (line, column) of ``text``.

    ``whole_file``: a file that fits the budget is sent whole (strategy "whole-file"): no
    cropping can beat it. ``fill_below``: in a file of at most FILL_MAX_FILE_BUDGETS budgets, the
    budget left after packing goes to the lines below the enclosing block.

    ``recent_edit_lines``: 0-based inclusive line ranges, most recent first (IDE edits and
    ``indexer.changes.changed_line_ranges``). ``exact_file_tokens``: count the whole file with
    ``count_tokens`` (slow with a real tokenizer on big files: ~100 ms for 40k tokens), otherwise
    it is estimated from the characters-per-token of the assembled context.
    """
    t0 = time.perf_counter()
    # The timeout is on the assembly's own CPU time, not wall time: on the embedded appliance the
    # CPU engine shares the cores, and a thread that waits for a core has done no work worth
    # throwing away (the window fallback would wait for the same core). A file that is truly slow
    # to assemble still trips it; wall time is reported in ``elapsed_ms`` and the timings.
    deadline = time.thread_time() + timeout_ms / 1000.0
    lang = normalize_language(language) if language else detect_language(path, text)
    base = dict(path=path, language=lang, line=line, column=column, budget_tokens=budget_tokens,
                file_lines=text.count("\n") + 1)
    if not is_supported(lang):
        return _fallback(text, line, column, count_tokens, budget_tokens, fallback, t0,
                         "unsupported-language", f"unsupported language: {lang or 'unknown'}", base)
    assert lang is not None
    count_tokens = memoized(count_tokens)
    if whole_file:
        whole = _whole_file(text, line, column, count_tokens, budget_tokens)
        if whole is not None:
            whole.elapsed_ms = (time.perf_counter() - t0) * 1000.0
            for k, v in base.items():
                setattr(whole, k, v)
            return whole
    try:
        result = _assemble(text, path, lang, line, column, count_tokens, budget_tokens, recent_edit_lines,
                           deadline, cache if cache is not None else TREE_CACHE, summaries, nearby_first, similar,
                           fill_below, steady)
    except _Timeout:
        return _fallback(text, line, column, count_tokens, budget_tokens, fallback, t0, "timeout",
                         f"assembly exceeded {timeout_ms:g} ms", base)
    except _ParseFailure as exc:
        return _fallback(text, line, column, count_tokens, budget_tokens, fallback, t0, "parse-failure",
                         f"parse failure: {exc}", base)
    except Exception as exc:  # never fail the request over its context: degrade and say why
        log.exception("context assembly failed for %s", path)
        return _fallback(text, line, column, count_tokens, budget_tokens, fallback, t0, "error",
                         f"error: {type(exc).__name__}: {exc}", base)
    if exact_file_tokens:
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
    text: str, line: int, column: int, count_tokens: TokenCounter, budget: int,
    fallback: Callable[[], tuple[str, str]] | None, t0: float, cause: str, reason: str, base: dict[str, object],
) -> AssembledContext:
    FALLBACK_COUNTS[cause] += 1
    log.warning("context fallback to baseline window for %s: %s", base.get("path"), reason)
    prefix, suffix = fallback() if fallback is not None else _window_fallback(text, line, column, count_tokens, budget)
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


def _whole_file(text: str, line: int, column: int, count_tokens: TokenCounter, budget: int) -> AssembledContext | None:
    """The whole file as prefix and suffix, when it fits the budget (None otherwise).

    On short files a window sees everything and cropping can only lose: measured on the
    short-file eval, the 48 of 100 cursors in files that fit 1,024 tokens got 491 tokens of
    excerpts where the file had 571."""
    if len(text) > budget * MAX_CHARS_PER_TOKEN:
        return None  # cannot fit: do not pay for counting it
    exact = exact_counter(count_tokens)
    tokens = exact(text)
    if tokens > budget:
        return None
    line, column = clamp_cursor(text, line, column)
    lines, before, after = split_at_cursor(text, line, column)
    prefix = "".join(lines[:line]) + before
    suffix = after + "".join(lines[line + 1:])
    cursor = len(prefix)
    shown = exact(prefix) + exact(suffix)  # the cut at the cursor may split a token
    if shown > budget:
        return None
    whole = ContextBlock(kind="file", name="whole file", start_line=0, end_line=text.count("\n"),
                         form="whole", tokens=shown, reason=f"the whole file fits the budget ({shown} <= {budget})")
    return AssembledContext(
        prefix=prefix, suffix=suffix, strategy="whole-file", fallback_reason=None, blocks=[whole], dropped=[],
        file_tokens=tokens, file_tokens_exact=True, context_tokens=shown, elapsed_ms=0.0,
        stable_chars=_top_level_start(lines, line, cursor),
    )


def _top_level_start(lines: list[str], line: int, cursor: int) -> int:
    """Offset of the start of the top-level statement holding the cursor line (its decorators and
    comments included): the part of the file above it does not change while the user types
    there, and cross-file chunks go in at this point. A text scan: no parse for a whole file."""
    i = min(line, len(lines) - 1)
    while i > 0:
        stripped = lines[i].strip()
        if stripped and not lines[i][0].isspace() and stripped[0] not in ")]}":
            break
        i -= 1
    while i > 0 and lines[i - 1][:1] in ("@", "#", "/"):
        i -= 1  # decorators and comments belong to what follows them
    return min(cursor, sum(len(x) for x in lines[:i]))


def _check(deadline: float, timings: dict[str, float], stage: str, t_stage: float) -> float:
    """Record a stage's wall time; raise when the assembly's CPU time is past ``deadline``."""
    now = time.perf_counter()
    timings[stage] = (now - t_stage) * 1000.0
    if time.thread_time() > deadline:
        raise _Timeout(stage)
    return now


def _assemble(
    text: str, path: str, lang: str, line: int, column: int, count_tokens: TokenCounter, budget: int,
    recent_edit_lines: Sequence[tuple[int, int]], deadline: float, cache: TreeCache, summaries: bool = True,
    nearby_first: bool = True,
    similar: bool = True,
    fill_below: bool = True,
    steady: bool = True,
) -> AssembledContext:
    timings: dict[str, float] = {}
    t = time.perf_counter()
    # The cursor line is parsed blank: half-typed code there (an open bracket, an unclosed
    # string) makes tree-sitter's error recovery re-parse and mangle the rest of the file; the
    # line itself is rendered from the real text, and its identifiers are read from that text.
    parsed = cache.get(path, text, lang, blank_line=line)
    t = _check(deadline, timings, "parse", t)
    line = max(0, min(line, parsed.line_count - 1))
    table = cheap_symbols(parsed) or extract_symbols(parsed)
    root = parsed.tree.root_node
    # Half-typed code always has error nodes; only a tree with nothing recognisable is a failure.
    if root.has_error and not table.symbols and text.strip():
        raise _ParseFailure("no declarations recognised in an erroneous tree")
    t = _check(deadline, timings, "symbols", t)

    cursor_byte = parsed.cursor_byte(line, column)
    lang_marker_tokens = count_tokens(elision_marker(lang, 999, 1099, "    "))
    estimate_lines = line_range_estimator(parsed, count_tokens)
    # Blocks' forms are counted by memoised segments too (``exact`` below, in packing): a long one
    # (an import list's summary runs to thousands of characters) is past the whole-text memo's
    # size limit and would be tokenized again at every request.
    exact = exact_counter(count_tokens)

    def prompt_tokens(prefix: str, suffix: str) -> int:
        return exact(prefix) + exact(suffix)

    file_lines = wire_lines(text)
    options = (lang, budget, summaries, nearby_first, similar, fill_below)
    kept = steady_excerpts.lookup(cache, path, text, options, recent_edit_lines) if steady else None
    if kept is not None:
        held = _steady(cache, path, kept, text, table, line, cursor_byte, budget, count_tokens, exact, lang,
                       lang_marker_tokens, file_lines, timings)
        if held is not None:
            _check(deadline, timings, "steady", t)
            return held
        t = _check(deadline, timings, "steady", t)

    enclosing_budget = budget
    for _attempt in range(3):
        enc = find_enclosing(table, line, cursor_byte, enclosing_budget, count_tokens, lang_marker_tokens)
        remaining = budget - enc.tokens - lang_marker_tokens
        candidates = _candidates(table, enc, line, recent_edit_lines)
        if similar:
            candidates += similar_candidates(parsed, line, column, enc.shown_ranges, estimate_lines,
                                             lang_marker_tokens)
        nearby = nearby_candidates(table, enc, estimate_lines, max(0, remaining), lang_marker_tokens)
        reserve = 0
        if nearby_first and nearby:
            # Measured on the long-file eval: the window-like lines above the block are worth more
            # to a small model than whole bodies of helpers; their signatures still go in first.
            # The reserve never takes the room of the class head's and references' cheapest forms.
            signatures = sum(form_tokens(c.forms[-1], exact, lang_marker_tokens, estimate_lines)
                             for c in candidates if c.tier <= TIER_REFERENCED)
            fits = [f.tokens for f in nearby[0].forms if f.tokens <= int(budget * NEARBY_FIRST_SHARE)]
            reserve = max(0, min(max(fits, default=0), remaining - signatures))
            nearby[0].reason += f"; {reserve} tokens held for it (nearby_first)"
        candidates += nearby
        if not summaries:  # ablation: a block goes in whole or not at all
            candidates = [c for c in candidates if _drop_summary_forms(c)]
        t = _check(deadline, timings, "candidates", t)
        result = pack(candidates, max(0, remaining), exact, lang_marker_tokens,
                      max_whole_tokens=int(budget * MAX_WHOLE_SHARE), shown=enc.shown_ranges,
                      estimate_lines=estimate_lines, reserve=reserve)
        chosen, dropped = result.chosen, result.dropped
        # Token counts of pieces are not exactly additive (merges across boundaries, markers):
        # count the rendered prompt (exactly, by memoised segments: see line_tokens) and shed the
        # lowest-priority blocks until it fits.
        while True:
            rendered = render_prompt(chosen, enc.prefix_pieces, enc.suffix, lang, file_lines)
            total = prompt_tokens(rendered.prefix, rendered.suffix)
            if total <= budget or not chosen:
                break
            victim = max(chosen, key=lambda c: c.priority)
            chosen.remove(victim)
            victim.drop_reason = f"shed after rendering: prompt was {total} tokens > budget {budget}"
            dropped.append(victim)
        t = _check(deadline, timings, "pack", t)
        # The estimate is pessimistic (a marker per piece): offer the slack of the real count to
        # the dropped blocks, by their estimates, then verify with one more real count.
        slack = budget - total
        added: list[Candidate] = []
        for cand in sorted(dropped, key=lambda c: c.priority)[:SECOND_CHANCE_MAX]:
            fitting = [f for f in cand.forms if f.tokens and f.tokens - lang_marker_tokens <= slack]
            if fitting:
                cand.chosen = fitting[0]
                slack -= fitting[0].tokens - lang_marker_tokens
                added.append(cand)
        if added:
            trial = render_prompt([*chosen, *added], enc.prefix_pieces, enc.suffix, lang, file_lines)
            trial_total = prompt_tokens(trial.prefix, trial.suffix)
            if trial_total <= budget:
                chosen += added
                for cand in added:
                    dropped.remove(cand)
                rendered, total = trial, trial_total
            else:
                for cand in added:
                    cand.chosen = None
        t = _check(deadline, timings, "second-chance", t)
        if total <= budget:
            break
        enclosing_budget = max(1, enclosing_budget - (total - budget) - lang_marker_tokens)
    below: ContextBlock | None = None
    if (fill_below and budget - total >= FILL_MIN_TOKENS and enc.suffix_end_line is not None
            and estimate_lines(0, parsed.line_count - 1) <= FILL_MAX_FILE_BUDGETS * budget):
        filled = _fill_below(parsed, enc, chosen, total, budget, estimate_lines, prompt_tokens,
                             lambda kept, suffix: render_prompt(kept, enc.prefix_pieces, suffix, lang, file_lines))
        if filled is not None:
            rendered, total, chosen, below = filled
            t = _check(deadline, timings, "fill", t)
    blocks = [ContextBlock(kind=enc.kind, name=enc.name, start_line=enc.start_line, end_line=enc.end_line,
                           form=enc.form, tokens=enc.tokens, reason=enc.reason)]
    blocks += [_block(c, c.chosen) for c in sorted(chosen, key=lambda c: c.priority)]
    if below is not None:
        blocks.append(below)
    dropped_blocks = [_block(c, None, f"{c.drop_reason} ({c.reason})")
                      for c in sorted(dropped, key=lambda c: c.priority)]
    if steady and enc.symbol is not None and below is None:
        steady_excerpts.remember(cache, path, steady_excerpts.Held(
            text=text, options=options, block_name=enc.name, block_start=enc.start_line,
            block_end=max(enc.end_line, line), excerpt_text=rendered.excerpt_text, segments=rendered.segments,
            above=rendered.above, blocks=blocks[1:], dropped=dropped_blocks,
            outside_edits=frozenset(r for r in recent_edit_lines
                                    if not (enc.start_line <= r[0] and r[1] <= max(enc.end_line, line)))))
    elif steady:
        steady_excerpts.forget(cache, path)
    return AssembledContext(
        prefix=rendered.prefix, suffix=rendered.suffix, blocks=blocks, dropped=dropped_blocks, strategy="ast",
        fallback_reason=None, file_tokens=0, context_tokens=total, elapsed_ms=0.0, timings_ms=timings,
        stable_chars=len(rendered.excerpt_text),
    )


def _steady(
    cache: TreeCache, path: str, kept: steady_excerpts.Kept, text: str, table: FileSymbols, line: int,
    cursor_byte: int, budget: int,
    count_tokens: TokenCounter, exact: TokenCounter, lang: str, marker_tokens: int, file_lines: list[str],
    timings: dict[str, float],
) -> AssembledContext | None:
    """The held excerpts, then the enclosing block rendered afresh; None when the cursor left the
    block they were chosen for, or the block alone no longer fits beside any of them."""
    held = kept.held
    enc = find_enclosing(table, line, cursor_byte, budget, count_tokens, marker_tokens)
    if enc.symbol is None or enc.name != held.block_name or enc.start_line != held.block_start:
        return None
    segments = [steady_excerpts.moved(s, kept) for s in held.segments]
    excerpt_text, above = held.excerpt_text, held.above
    first = enc.prefix_pieces[0].start_line if enc.prefix_pieces else enc.start_line
    for _attempt in range(4):
        prefix = excerpt_text + render_enclosing(enc.prefix_pieces, above, lang, file_lines)
        total = exact(prefix) + exact(enc.suffix)
        if total <= budget:
            break
        if not segments:
            return None
        # the block grew: cut from the excerpts' end, so that their head (and its KV) stays
        excerpt_text, segments = steady_excerpts.trim(excerpt_text, segments, total - budget, exact)
        above = max((s.end_line for s in segments if s.end_line < first), default=-1)
    else:
        return None
    shown = [(s.start_line, s.end_line) for s in segments]
    blocks: list[ContextBlock] = []
    dropped = [steady_excerpts.moved(b, kept) for b in held.dropped]
    for block in held.blocks:
        moved = steady_excerpts.moved(block, kept)
        if any(a <= moved.end_line and moved.start_line <= b for a, b in shown):
            blocks.append(moved)
        else:
            dropped.append(replace(moved, reason=f"cut while typing: the enclosing block grew ({moved.reason})"))
    steady_excerpts.remember(cache, path, replace(
        held, text=text, block_end=max(enc.end_line, line, held.block_end + kept.delta), excerpt_text=excerpt_text,
        segments=segments, above=above, blocks=blocks, dropped=dropped))
    enc_block = ContextBlock(kind=enc.kind, name=enc.name, start_line=enc.start_line, end_line=enc.end_line,
                             form=enc.form, tokens=enc.tokens, reason=enc.reason)
    return AssembledContext(
        prefix=prefix, suffix=enc.suffix, blocks=[enc_block, *(replace(b, reason=f"{b.reason}; {steady_excerpts.NOTE}")
                                                               for b in blocks)],
        dropped=dropped, strategy="ast", fallback_reason=None, file_tokens=0, context_tokens=total, elapsed_ms=0.0,
        timings_ms=timings, stable_chars=len(excerpt_text), steady=True,
    )


def _fill_below(
    parsed: ParsedFile, enc: Enclosing, chosen: list[Candidate], total: int, budget: int,
    estimate_lines: LineRangeTokens, prompt_tokens: Callable[[str, str], int],
    render: Callable[[list[Candidate], str], Rendered],
) -> tuple[Rendered, int, list[Candidate], ContextBlock] | None:
    """Spend the budget packing left over on the lines after the enclosing block, appended to the
    FIM suffix in file order (the siblings below are the file's idioms too, and where a window
    would show them). Excerpts those lines cover verbatim (a sibling's signature) leave the
    prefix and give their tokens to the fill. Lines are taken by estimate, then the prompt is
    counted for real and trimmed until it fits."""
    assert enc.suffix_end_line is not None
    first = enc.suffix_end_line + 1
    last_line = parsed.line_count - 1
    if first > last_line:
        return None
    slack = budget - total
    end = first - 1
    kept = list(chosen)
    def covered(c: Candidate, last: int) -> bool:
        return c.chosen is not None and bool(c.chosen.pieces) and all(
            first <= p.start_line and p.end_line <= last for p in c.chosen.pieces)

    while end < last_line:
        cost = estimate_lines(end + 1, end + 1)
        newly = [c for c in kept if covered(c, end + 1)]
        freed = sum(c.chosen.tokens for c in newly if c.chosen is not None)
        if cost > slack + freed:
            break
        end += 1
        kept = [c for c in kept if c not in newly]
        slack += freed - cost
    if end < first:
        return None
    for _attempt in range(4):
        rendered = render(kept, enc.suffix + parsed.lines_text(first, end))
        real = prompt_tokens(rendered.prefix, rendered.suffix)
        if real <= budget:
            block = ContextBlock(
                kind="below", name=f"lines below {enc.name}", start_line=first, end_line=end, form="whole",
                tokens=real - total,
                reason=(f"budget left after packing, on a file of <= {FILL_MAX_FILE_BUDGETS:g} budgets: "
                        f"the code after the enclosing block, verbatim ({end - first + 1} lines)"))
            return rendered, real, kept, block
        excess = real - budget
        while end >= first and excess > 0:  # trim from the far end by estimate, then recount
            excess -= estimate_lines(end, end)
            end -= 1
        if end < first:
            return None
    return None


def warm_file(
    path: str, text: str, language: str | None = None, cache: TreeCache | None = None,
    count_tokens: TokenCounter | None = None,
) -> float:
    """Parse ``text``, build its symbol table and count its lines now (an IDE opened the file), so
    the first completion in it pays only for an incremental re-parse. Returns milliseconds spent."""
    t0 = time.perf_counter()
    lang = normalize_language(language) if language else detect_language(path, text)
    if is_supported(lang):
        assert lang is not None
        parsed = (cache if cache is not None else TREE_CACHE).get(path, text, lang)
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
            for group in import_candidates(table, set(), set()):
                for piece in group.forms[0].pieces:
                    exact(piece.text)
            for sym in table.symbols:
                piece = summary_piece(parsed, sym)
                exact(piece.text)
                if piece.open_text is not None:
                    exact(piece.open_text)
    return (time.perf_counter() - t0) * 1000.0


def _drop_summary_forms(candidate: Candidate) -> bool:
    candidate.forms = [f for f in candidate.forms if f.name != "summary"]
    return bool(candidate.forms)


def _candidates(
    table: FileSymbols, enc: Enclosing, line: int, recent_edit_lines: Sequence[tuple[int, int]]
) -> list[Candidate]:
    parsed = table.parsed
    sym = enc.symbol
    out: list[Candidate] = []
    header = class_header_candidates(table, line, sym)
    out += header
    covered = [(p.start_line, p.end_line) for c in header for p in c.forms[0].pieces]
    # References: from what the model will see of the enclosing block, nearest the cursor first.
    start = min(a for a, _ in enc.shown_ranges)
    end = max(b for _, b in enc.shown_ranges)
    region = (parsed.line_byte(start), parsed.line_end_byte(end))
    refs = [c for c in referenced_candidates(table, region, line, sym)
            if not any(a <= c.start_line and c.end_line <= b for a, b in covered)]
    out += refs
    out += recent_edit_candidates(table, recent_edit_lines, line)
    referenced_idx = {int(c.key.split(":")[1]) for c in refs if c.key.startswith("sym:")}
    used_names = set(parsed.text(*region).replace(".", " ").split()) if region[1] - region[0] < 200_000 else set()
    out += import_candidates(table, _identifier_words(used_names), referenced_idx)
    out += neighbour_candidates(table, line, sym, referenced_idx)
    return merge_duplicates(out)


def _identifier_words(tokens: set[str]) -> set[str]:
    words: set[str] = set()
    for tok in tokens:
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", tok))
    return words


def explain(ctx: AssembledContext) -> str:
    """Human-readable context report: what was chosen and why, what was dropped, and the prompt."""
    out: list[str] = []
    ratio = f"{ctx.compression_ratio:.1f}:1" if ctx.context_tokens else "n/a"
    out.append(f"context for {ctx.path or '<text>'} at line {ctx.line + 1}, column {ctx.column + 1} "
               f"(language: {ctx.language or 'unknown'})")
    out.append(f"strategy: {ctx.strategy}" + (f" (fallback: {ctx.fallback_reason})" if ctx.fallback_reason else ""))
    approx = "" if ctx.file_tokens_exact else "~"
    out.append(f"tokens: {ctx.context_tokens} of budget {ctx.budget_tokens}; file {approx}{ctx.file_tokens} tokens "
               f"in {ctx.file_lines} lines; compression {ratio}; assembled in {ctx.elapsed_ms:.1f} ms")
    if ctx.timings_ms:
        out.append("stages: " + ", ".join(f"{k} {v:.1f} ms" for k, v in ctx.timings_ms.items()))
    out.append("")

    def table(title: str, rows: list[ContextBlock]) -> None:
        out.append(f"{title} ({len(rows)}):")
        if not rows:
            out.append("  (none)")
        for i, b in enumerate(rows, 1):
            out.append(f"  {i:>2}. {b.kind:<11} {b.name:<36} lines {b.start_line + 1}-{b.end_line + 1}  "
                       f"{b.form:<7} {b.tokens:>5} tok  {b.reason}")

    table("chosen", ctx.blocks)
    table("dropped for the budget", ctx.dropped)
    out.append("")
    out.append("----- prompt prefix (ends at the cursor) -----")
    out.append(ctx.prefix + "<CURSOR>")
    out.append("----- prompt suffix -----")
    out.append(ctx.suffix)
    out.append("----- end -----")
    return "\n".join(out)
