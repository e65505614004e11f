"""Steady excerpts: while the user edits inside one block, the excerpts before it stay as they were.

Why: the engine keeps each file's prompt KV and reuses it up to the first character that differs
(serving/engine/kv_pool.py), and on 2 cores every token after that point costs ~17 ms of prompt
processing. The excerpts are the prompt's head and the enclosing block its tail, so a keystroke
should change the tail only. Chosen afresh at every keystroke they do not stay put: `similar`'s
query and the references follow the typed words, the budget left beside a growing block moves a
marginal excerpt in or out (the imports, first in file order, take everything after them along),
and the elision markers after the block name line numbers that grow with every new line.

So the excerpts chosen for a block are kept, as rendered text, while the file changes only inside
that block and the cursor stays in it: the next request renders the block afresh after them.
When the block grows past the budget, excerpts are cut from the end of their text (the part
nearest the block, then lines of the last excerpt), which keeps the head intact. Markers inside
the kept text name the lines as they were when the excerpts were chosen; the report's line ranges
are the current ones. A move to another block, an edit outside the block, other options or
another budget: the excerpts are chosen afresh. Each file's are held in its session (session.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TypeVar

from context.assembly.state import Assembly, FitToBudget
from context.model import AssembledContext, ContextBlock
from context.options import AssemblyOptions
from context.packing.pack import Rendered, Segment, TokenCounter, render_enclosing
from context.sources.enclosing import Enclosing, find_enclosing
from syntax.textdiff import diff_region

# Cutting lines of the last excerpt stops here; below this many lines it goes whole.
MIN_LINES_LEFT = 2
NOTE = "kept while typing in the same block"

_Lines = TypeVar("_Lines", Segment, ContextBlock)


@dataclass
class Held:
    """The excerpts of the last request in a file, and the version and block they were for."""

    text: str
    options: tuple[object, ...]  # ``key``: language, budget, switches: any change re-chooses
    block_name: str
    block_start: int  # the enclosing block's lines in ``text``
    block_end: int
    excerpt_text: str
    segments: list[Segment]
    above: int  # the last line an excerpt above the block shows (-1: none): the gap marker's start
    blocks: list[ContextBlock]  # the excerpts' (the enclosing block is reported afresh)
    dropped: list[ContextBlock]
    outside_edits: frozenset[tuple[int, int]]  # the request's recent-edit ranges outside the block


@dataclass
class Kept:
    """Held excerpts that still apply to a request, shifted to its version of the file."""

    held: Held
    edit_first: int  # first and last changed line, in the held version
    edit_last: int
    delta: int  # lines added (+) or removed (-) by the change


def key(options: AssemblyOptions, lang: str) -> tuple[object, ...]:
    """What held excerpts were chosen with: the language and every option that is not marked ``steady=False``
    (AssemblyOptions), so that a new switch re-chooses them without being listed here."""
    return (lang, *(getattr(options, f.name) for f in fields(options) if f.metadata.get("steady", True)))


def lookup(held: Held | None, text: str, options: tuple[object, ...],
           recent_edit_lines: Sequence[tuple[int, int]] = ()) -> Kept | None:
    """The excerpts ``held`` for the file (its session's) if ``text`` differs from their version only
    inside their block (and they were chosen with the same options), else None."""
    if held is None or held.options != options:
        return None
    old = held.text
    if old == text:
        first = last = held.block_start
        delta = 0
    else:
        start, old_end, new_end = diff_region(old, text)
        first = old.count("\n", 0, start)
        last = first + old.count("\n", start, old_end)
        delta = text.count("\n", start, new_end) - (last - first)
    if not (held.block_start <= first and last <= held.block_end):
        return None
    if any(s.start_line <= last and first <= s.end_line for s in held.segments):
        return None  # an excerpt shows a part of the block that changed (a partly shown block)
    outside = {r for r in recent_edit_lines if not (held.block_start <= r[0] and r[1] <= held.block_end + delta)}
    if outside != set(held.outside_edits):
        return None
    return Kept(held, first, last, delta)


def shift(line: int, kept: Kept) -> int:
    """A held line number in the request's version (lines after the change move by its delta)."""
    return line + kept.delta if line > kept.edit_last else line


def moved(item: _Lines, kept: Kept) -> _Lines:
    """A held segment or block with its lines in the request's version."""
    return replace(item, start_line=shift(item.start_line, kept), end_line=shift(item.end_line, kept))


def trim(excerpt_text: str, segments: list[Segment], excess: int, count_tokens: TokenCounter
         ) -> tuple[str, list[Segment]]:
    """Cut about ``excess`` tokens from the end of the excerpt text: whole segments, or the last
    lines of a verbatim one when that is enough. Returns what is left (a prefix of the text)."""
    segments = list(segments)
    end = len(excerpt_text)
    while excess > 0 and segments:
        seg = segments[-1]
        body = excerpt_text[seg.offset:end]
        whole = count_tokens(body)
        lines = body.splitlines(keepends=True)
        if seg.verbatim and whole > excess and len(lines) > MIN_LINES_LEFT:
            # the segment's marker (if any) is its first line; the file's lines follow it
            cut = len(lines)
            removed = 0
            while cut > MIN_LINES_LEFT and removed < excess:
                cut -= 1
                removed += count_tokens(lines[cut])
            if removed >= excess:
                shown = cut - (len(lines) - (seg.end_line - seg.start_line + 1))
                segments[-1] = replace(seg, end_line=seg.start_line + max(0, shown) - 1)
                return excerpt_text[:seg.offset] + "".join(lines[:cut]), segments
        segments.pop()
        end = seg.offset
        excess -= whole
    return excerpt_text[:end], segments


def hold(a: Assembly, key_: tuple[object, ...], enc: Enclosing, rendered: Rendered, blocks: list[ContextBlock],
         dropped: list[ContextBlock]) -> Held:
    """The excerpts just chosen beside ``enc``, held for the next request in the block."""
    block_end = max(enc.end_line, a.line)
    return Held(text=a.text, options=key_, block_name=enc.name, block_start=enc.start_line, block_end=block_end,
                excerpt_text=rendered.excerpt_text, segments=rendered.segments, above=rendered.above, blocks=blocks,
                dropped=dropped, outside_edits=frozenset(r for r in a.options.recent_edit_lines
                                                         if not (enc.start_line <= r[0] and r[1] <= block_end)))


def kept_excerpts(a: Assembly, kept: Kept) -> tuple[AssembledContext, Held] | None:
    """The held excerpts, then the enclosing block rendered afresh, and what the file's session holds now; None
    when the cursor left the block they were chosen for, or the block alone no longer fits beside any of them."""
    held = kept.held
    enc = find_enclosing(a.outline, a.line, a.cursor_byte, a.budget, a.count_tokens, a.marker_tokens)
    if enc.symbol is None or enc.name != held.block_name or enc.start_line != held.block_start:
        return None
    first = enc.prefix_pieces[0].start_line if enc.prefix_pieces else enc.start_line
    excerpt_text, segments, above = held.excerpt_text, [moved(s, kept) for s in held.segments], held.above
    fit = FitToBudget(a.budget, tries=4)
    while True:
        prefix = excerpt_text + render_enclosing(enc.prefix_pieces, above, a.lang, a.file_lines)
        total = a.exact(prefix) + a.exact(enc.suffix)
        if not fit.over(total):
            break
        if not segments:
            return None
        # the block grew: cut from the excerpts' end, so that their head (and its KV) stays
        excerpt_text, segments = trim(excerpt_text, segments, fit.excess, a.exact)
        above = max((s.end_line for s in segments if s.end_line < first), default=-1)
    if not fit.fits:
        return None
    ranges = [(s.start_line, s.end_line) for s in segments]
    blocks: list[ContextBlock] = []
    dropped = [moved(b, kept) for b in held.dropped]
    for block in held.blocks:
        block = moved(block, kept)
        if any(x <= block.end_line and block.start_line <= y for x, y in ranges):
            blocks.append(block)
        else:
            dropped.append(replace(block, reason=f"cut while typing: the enclosing block grew ({block.reason})"))
    now_held = replace(
        held, text=a.text, block_end=max(enc.end_line, a.line, held.block_end + kept.delta),
        excerpt_text=excerpt_text, segments=segments, above=above, blocks=blocks, dropped=dropped)
    return AssembledContext(
        prefix=prefix, suffix=enc.suffix,
        blocks=[enc.block(), *(replace(b, reason=f"{b.reason}; {NOTE}") for b in blocks)],
        dropped=dropped, strategy="ast", fallback_reason=None, file_tokens=0, context_tokens=total, elapsed_ms=0.0,
        timings_ms=a.clock.timings, stable_chars=len(excerpt_text), steady=True,
    ), now_held
