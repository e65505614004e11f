"""Assembly entry point: the in-file context of one completion request, with its explanation.

Pipeline: whole file when it fits (whole_file.py) -> parse (cached, incremental) -> symbol table ->
enclosing block (mandatory) -> candidates from each source (class header, references, recent edits,
imports/constants, similar lines, nearby lines, neighbours) -> one packing pass in priority order under the
token budget -> rendering (excerpts in file order, then the enclosing block up to the cursor) -> a check of
the real token count -> the lines below the block with what is left (below.py). While the user types in one
block, the excerpts chosen for it are kept (steady.py).

Any failure (unsupported language, parse failure, exception, or the assembly spending more
than ``timeout_ms`` of CPU time) degrades to the baseline window for that request: logged, counted in
``FALLBACK_COUNTS``, and the request still gets a prompt.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from context import steady
from context.model import AssembledContext, ContextBlock
from context.options import DEFAULT_OPTIONS, AssemblyOptions
from context.packing.line_tokens import LineRangeTokens, exact_counter, line_range_estimator
from context.packing.memo import TokenCounter, memoized
from context.packing.pack import (
    TIER_REFERENCED,
    Candidate,
    Form,
    Rendered,
    form_tokens,
    merge_duplicates,
    pack,
    render_enclosing,
    render_prompt,
)
from context.session import FileSession
from context.sources.below import fill_below
from context.sources.class_header import class_header_candidates
from context.sources.enclosing import Enclosing, find_enclosing
from context.sources.file_head import FileHead, with_head
from context.sources.imports import import_candidates
from context.sources.nearby import nearby_candidates
from context.sources.neighbours import neighbour_candidates
from context.sources.recent_edits import recent_edit_candidates
from context.sources.references import referenced_candidates
from context.sources.similar import similar_candidates
from context.sources.whole_file import whole_file_context
from context.sources.window import baseline_window, clamp_cursor
from ctxpress_core.languages import normalize_language
from ctxpress_core.wire.v1 import wire_lines
from syntax.grammars import detect_language, is_supported
from syntax.parsed_file import ParsedFile
from syntax.summaries import elision_marker
from syntax.symbols.model import FileSymbols
from syntax.symbols.table import cheap_symbols, extract_symbols

log = logging.getLogger("ctxpress.context")

# Fallbacks by cause ("unsupported-language", "parse-failure", "block-over-budget", "timeout", "error"); the worker
# exports these as metrics.
FALLBACK_COUNTS: Counter[str] = Counter()

# One referenced/edited block may take at most this share of the budget whole; beyond that its
# summary is used, so that one large helper cannot crowd out every other signature.
MAX_WHOLE_SHARE = 0.25
# With the nearby_first feature: the share of the budget held back for the code above the block
# while the class header, references, edits and imports are packed (they keep their order and
# report, but take whole bodies only from what is left; cheap signatures still fit).
NEARBY_FIRST_SHARE = 0.6
# Dropped blocks retried against the real rendered count (each retry renders and counts once).
SECOND_CHANCE_MAX = 6


class _Timeout(Exception):
    pass


class _ParseFailure(Exception):
    pass


class _BlockOverBudget(Exception):
    """The cursor's block cut to its least (the cursor line up to the cursor, and the suffix's first line) is
    still over the budget: nothing the packer may drop would bring the prompt within it."""


class _Clock:
    """Each stage's wall time, and the deadline on the assembly's own CPU time."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.timings: dict[str, float] = {}
        self._stage_started = time.perf_counter()

    def check(self, stage: str) -> None:
        """Record ``stage``'s wall time; raise when the assembly's CPU time is past the deadline."""
        now = time.perf_counter()
        self.timings[stage] = (now - self._stage_started) * 1000.0
        if time.thread_time() > self.deadline:
            raise _Timeout(stage)
        self._stage_started = now


@dataclass
class _Assembly:
    """One assembly's inputs and what every stage of it uses, worked out once."""

    text: str
    path: str
    lang: str
    line: int  # within the file's lines
    column: int
    options: AssemblyOptions
    parsed: ParsedFile
    table: FileSymbols
    count_tokens: TokenCounter  # memoised
    clock: _Clock
    cursor_byte: int = 0
    marker_tokens: int = 0  # an elision marker in the file's comment syntax
    estimate_lines: LineRangeTokens = field(init=False)
    # Blocks' forms are counted by memoised segments too (``exact``, also in packing): a long one
    # (an import list's summary runs to thousands of characters) is past the whole-text memo's
    # size limit and would be tokenized again at every request.
    exact: TokenCounter = field(init=False)
    file_lines: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.cursor_byte = self.parsed.cursor_byte(self.line, self.column)
        self.marker_tokens = self.count_tokens(elision_marker(self.lang, 999, 1099, "    "))
        self.estimate_lines = line_range_estimator(self.parsed, self.count_tokens)
        self.exact = exact_counter(self.count_tokens)
        self.file_lines = wire_lines(self.text)

    head: FileHead | None = None  # stable_head: what the cursor's part is assembled beside

    @property
    def budget(self) -> int:
        """The cursor's part of the prompt: the budget less the file's head."""
        return self.options.budget_tokens - (self.head.tokens if self.head is not None else 0)

    def prompt_tokens(self, prefix: str, suffix: str) -> int:
        return self.exact(prefix) + self.exact(suffix)

    def render(self, chosen: list[Candidate], enc: Enclosing, suffix: str | None = None) -> Rendered:
        return render_prompt(chosen, enc.prefix_pieces, enc.suffix if suffix is None else suffix, self.lang,
                             self.file_lines)


@dataclass
class _Packed:
    """The enclosing block and the excerpts packed beside it, rendered."""

    enc: Enclosing
    chosen: list[Candidate]
    dropped: list[Candidate]
    rendered: Rendered
    total: int  # the rendered prompt's real token count


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
    lang = normalize_language(options.language) if options.language else detect_language(path, text)
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
        result = _assemble(text, path, lang, line, column, count_tokens, options, _Clock(deadline),
                           session if session is not None else FileSession("", path))
    except _Timeout:
        return _fallback(text, line, column, count_tokens, options, t0, "timeout",
                         f"assembly exceeded {options.timeout_ms:g} ms", base)
    except _ParseFailure as exc:
        return _fallback(text, line, column, count_tokens, options, t0, "parse-failure",
                         f"parse failure: {exc}", base)
    except _BlockOverBudget as exc:
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
    clock: _Clock, session: FileSession,
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
        raise _ParseFailure("no declarations recognised in an erroneous tree")
    clock.check("symbols")
    a = _Assembly(text, path, lang, line, column, options, parsed, table, count_tokens, clock)
    if options.stable_head:
        a.head = session.file_head(table, lang, a.file_lines, int(options.budget_tokens * options.head_share), a.exact)
        clock.check("head")
    return with_head(_assemble_cursor_part(a, session), a.head)


def _assemble_cursor_part(a: _Assembly, session: FileSession) -> AssembledContext:
    """Everything of the prompt that depends on the cursor: the enclosing block and the excerpts beside it."""
    text, line, options, parsed, clock = a.text, a.line, a.options, a.parsed, a.clock
    # what the held excerpts were chosen with: any change chooses afresh
    steady_options = (a.lang, a.budget, options.summaries, options.nearby_first, options.similar, options.fill_below,
                      options.stable_head)
    kept = (steady.lookup(session.steady, text, steady_options, options.recent_edit_lines)
            if options.steady_excerpts else None)
    if kept is not None:
        held = _steady(a, session, kept)
        clock.check("steady")
        if held is not None:
            return held
    packed = _pack(a)
    enc, rendered, total, chosen = packed.enc, packed.rendered, packed.total, packed.chosen
    below: ContextBlock | None = None
    if options.fill_below:
        filled = fill_below(parsed, enc, chosen, total, a.budget, a.estimate_lines, a.prompt_tokens,
                            lambda kept, suffix: a.render(kept, enc, suffix))
        if filled is not None:
            rendered, total, chosen, below = filled
            clock.check("fill")
    blocks = [enc.block(), *(_block(c, c.chosen) for c in sorted(chosen, key=lambda c: c.priority))]
    if below is not None:
        blocks.append(below)
    dropped = [_block(c, None, f"{c.drop_reason} ({c.reason})")
               for c in sorted(packed.dropped, key=lambda c: c.priority)]
    if options.steady_excerpts and enc.symbol is not None and below is None:
        block_end = max(enc.end_line, line)
        session.steady = steady.Held(
            text=text, options=steady_options, block_name=enc.name, block_start=enc.start_line, block_end=block_end,
            excerpt_text=rendered.excerpt_text, segments=rendered.segments, above=rendered.above, blocks=blocks[1:],
            dropped=dropped, outside_edits=frozenset(r for r in options.recent_edit_lines
                                                     if not (enc.start_line <= r[0] and r[1] <= block_end)))
    elif options.steady_excerpts:
        session.steady = None
    return AssembledContext(
        prefix=rendered.prefix, suffix=rendered.suffix, blocks=blocks, dropped=dropped, strategy="ast",
        fallback_reason=None, file_tokens=0, context_tokens=total, elapsed_ms=0.0, timings_ms=clock.timings,
        stable_chars=len(rendered.excerpt_text),
    )


def _pack(a: _Assembly) -> _Packed:
    """The enclosing block and the excerpts that fit beside it. An enclosing block cut to the budget may still
    leave the rendered prompt over it (markers, merges): it is cut again by the excess, at most three times."""
    enclosing_budget = a.budget
    for _attempt in range(3):
        enc = find_enclosing(a.table, a.line, a.cursor_byte, enclosing_budget, a.count_tokens, a.marker_tokens)
        remaining = a.budget - enc.tokens - a.marker_tokens
        candidates, reserve = _candidates_beside(a, enc, remaining)
        a.clock.check("candidates")
        result = pack(candidates, max(0, remaining), a.exact, a.marker_tokens,
                      max_whole_tokens=int(a.budget * MAX_WHOLE_SHARE), shown=enc.shown_ranges,
                      estimate_lines=a.estimate_lines, reserve=reserve)
        packed = _shed(a, enc, result.chosen, result.dropped)
        a.clock.check("pack")
        _second_chance(a, packed)
        a.clock.check("second-chance")
        if packed.total <= a.budget:
            break
        enclosing_budget = max(1, enclosing_budget - (packed.total - a.budget) - a.marker_tokens)
    if packed.total > a.budget and not packed.chosen:
        raise _BlockOverBudget(f"the cursor's block alone takes {packed.total} tokens of a {a.budget}-token budget")
    return packed


def _candidates_beside(a: _Assembly, enc: Enclosing, remaining: int) -> tuple[list[Candidate], int]:
    """Every source's candidates for the room ``remaining`` beside ``enc``, and the tokens held for the nearby
    lines (nearby_first)."""
    candidates = _candidates(a.table, enc, a.line, a.options.recent_edit_lines)
    if a.head is not None and a.head.imports:  # those the head could not show too (docs/context.md: measured)
        candidates = [c for c in candidates if c.key != "imports"]
    if a.options.similar:
        candidates += similar_candidates(a.parsed, a.line, a.column, enc.shown_ranges, a.estimate_lines,
                                         a.marker_tokens)
    nearby = nearby_candidates(a.table, enc, a.estimate_lines, max(0, remaining), a.marker_tokens)
    reserve = 0
    if a.options.nearby_first and nearby:
        # Measured on the long-file eval: the window-like lines above the block are worth more
        # to a small model than whole bodies of helpers; their signatures still go in first.
        # The reserve never takes the room of the class head's and references' cheapest forms.
        signatures = sum(form_tokens(c.forms[-1], a.exact, a.marker_tokens, a.estimate_lines)
                         for c in candidates if c.tier <= TIER_REFERENCED)
        fits = [f.tokens for f in nearby[0].forms if f.tokens <= int(a.budget * NEARBY_FIRST_SHARE)]
        reserve = max(0, min(max(fits, default=0), remaining - signatures))
        nearby[0].reason += f"; {reserve} tokens held for it (nearby_first)"
    candidates += nearby
    if not a.options.summaries:  # ablation: a block goes in whole or not at all
        candidates = [c for c in candidates if _drop_summary_forms(c)]
    return candidates, reserve


def _shed(a: _Assembly, enc: Enclosing, chosen: list[Candidate], dropped: list[Candidate]) -> _Packed:
    """Token counts of pieces are not exactly additive (merges across boundaries, markers): count
    the rendered prompt (exactly, by memoised segments: see line_tokens) and shed the
    lowest-priority blocks until it fits."""
    while True:
        rendered = a.render(chosen, enc)
        total = a.prompt_tokens(rendered.prefix, rendered.suffix)
        if total <= a.budget or not chosen:
            return _Packed(enc, chosen, dropped, rendered, total)
        victim = max(chosen, key=lambda c: c.priority)
        chosen.remove(victim)
        victim.drop_reason = f"shed after rendering: prompt was {total} tokens > budget {a.budget}"
        dropped.append(victim)


def _second_chance(a: _Assembly, packed: _Packed) -> None:
    """The estimate is pessimistic (a marker per piece): offer the slack of the real count to
    the dropped blocks, by their estimates, then verify with one more real count."""
    slack = a.budget - packed.total
    added: list[Candidate] = []
    for cand in sorted(packed.dropped, key=lambda c: c.priority)[:SECOND_CHANCE_MAX]:
        fitting = [f for f in cand.forms if f.tokens and f.tokens - a.marker_tokens <= slack]
        if fitting:
            cand.chosen = fitting[0]
            slack -= fitting[0].tokens - a.marker_tokens
            added.append(cand)
    if not added:
        return
    trial = a.render([*packed.chosen, *added], packed.enc)
    trial_total = a.prompt_tokens(trial.prefix, trial.suffix)
    if trial_total <= a.budget:
        packed.chosen += added
        for cand in added:
            packed.dropped.remove(cand)
        packed.rendered, packed.total = trial, trial_total
    else:
        for cand in added:
            cand.chosen = None


def _steady(a: _Assembly, session: FileSession, kept: steady.Kept) -> AssembledContext | None:
    """The held excerpts, then the enclosing block rendered afresh; None when the cursor left the
    block they were chosen for, or the block alone no longer fits beside any of them."""
    held = kept.held
    enc = find_enclosing(a.table, a.line, a.cursor_byte, a.budget, a.count_tokens, a.marker_tokens)
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


