"""Lines elsewhere in the file that look like the code at the cursor, verbatim.

Code repeats itself: the overloads of one function, the same keyword arguments passed at
every call of a helper, a dispatch table's next entry. A window shows such lines only when
they happen to be near the cursor; this source finds them anywhere in the file. The query is
the identifiers of the cursor line (up to the cursor) and of the few lines above it, weighted
by rarity in the file (an inverse document frequency over lines, as BM25 does), so ``self``
and ``return`` count for little and ``info_cache`` for much. Each match brings the lines
around it (the line after a match is often the very line being typed).

Cheap by construction: the query's rarest words are found by substring search over the file's
bytes (no per-line loop in Python; line numbers come from the parsed file's line starts, which
are shifted, not recomputed, from one version to the next), and scoring touches only lines that
share a word with the query; the lines the query comes from, and those already in the prompt,
are never offered. ~1-2 ms on a 2,000-line file.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Callable

from context.packing.pack import TIER_SIMILAR, Candidate, Form, Piece
from context.packing.tokens import LineRangeTokens
from syntax.parsed_file import ParsedFile

# Non-blank lines above the cursor line that join the query (the cursor line counts double).
QUERY_LINES = 3
CURSOR_LINE_WEIGHT = 2.0
# A match brings this many lines before and after it.
LINES_BEFORE = 2
LINES_AFTER = 3
MAX_SNIPPETS = 4
# A word on at most 1/RARE_LINES_DIVISOR of the file's lines is rare (a match needs one).
RARE_LINES_DIVISOR = 20
# Only the rarest query words are looked up (they carry almost all of the score).
MAX_QUERY_WORDS = 12
# A line must share this share of the query's weight to be offered (below it, matches are
# mostly on common words and cost more budget than they bring).
MIN_SCORE_SHARE = 0.4
# Query identifiers shorter than this carry no signal (i, x, n).
MIN_IDENT_CHARS = 2

_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# Bytes that continue an identifier (non-ASCII letters too: their UTF-8 bytes are >= 0x80).
_IDENT_BYTES = frozenset(b"_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") | frozenset(
    range(128, 256))


def _occurrences(text: bytes, word: bytes) -> list[int]:
    """Offsets of ``word`` as a whole identifier (str.find is a fast substring search; a regex
    with a look-behind would try every offset of the text)."""
    out: list[int] = []
    find = text.find
    size = len(word)
    pos = find(word)
    while pos != -1:
        end = pos + size
        if (pos == 0 or text[pos - 1] not in _IDENT_BYTES) and (end == len(text) or text[end] not in _IDENT_BYTES):
            out.append(pos)
        pos = find(word, end)
    return out


# A maximal run of identifier bytes: a word occurs as a whole identifier exactly where a run
# equals it (the definition _occurrences checks occurrence by occurrence).
_RUN = re.compile(rb"[A-Za-z0-9_\x80-\xff]+")


class _WordIndex:
    """Where words occur in one version of a file, found once per word and reused for every
    later version that differs from it on the cursor line only: while the user types on that
    line, and at each new cursor of a file otherwise as it was (two substring passes over a
    100-200 KB file per query word were ~2 ms of every request). The version a file is opened
    at is indexed whole, off the request path (see index_words): every word's lines are known."""

    def __init__(self, text: bytes, starts: list[int]) -> None:
        self.text, self.starts = text, starts
        self._counts: dict[bytes, int] = {}
        self._lines: dict[bytes, frozenset[int]] = {}
        self._complete = False  # every word of the text is in _lines

    def index_all(self) -> None:
        lines: dict[bytes, set[int]] = {}
        text, starts = self.text, self.starts
        for i in range(len(starts) - 1):
            for run in _RUN.findall(text, starts[i], starts[i + 1]):
                found = lines.get(run)
                if found is None:
                    lines[run] = {i}
                else:
                    found.add(i)
        self._lines = {w: frozenset(found) for w, found in lines.items()}
        self._complete = True

    def same_but_line(self, text: bytes, starts: list[int], line: int) -> bool:
        """Is ``text`` this version with at most line ``line`` changed?"""
        mine = self.starts
        return (len(mine) == len(starts) and mine[line] == starts[line]
                and self.text[:mine[line]] == text[:starts[line]]
                and self.text[mine[line + 1]:] == text[starts[line + 1]:])

    def line_text(self, line: int) -> bytes:
        return self.text[self.starts[line]:self.starts[line + 1]]

    def count(self, word: bytes) -> int:
        """Substring count in this version."""
        n = self._counts.get(word)
        if n is None:
            n = self._counts[word] = self.text.count(word)
        return n

    def lines(self, word: bytes) -> frozenset[int]:
        """Lines where ``word`` occurs as an identifier."""
        found = self._lines.get(word)
        if found is None:
            if self._complete:
                return frozenset()
            starts = self.starts
            found = self._lines[word] = frozenset(bisect_right(starts, pos) - 1
                                                  for pos in _occurrences(self.text, word))
        return found


# path -> the word index of a recent version of it (see _WordIndex)
_WORD_INDEXES: dict[str, _WordIndex] = {}
_WORD_INDEX_FILES = 64


def index_words(parsed: ParsedFile) -> None:
    """Index every word of this version of the file now (it was just opened: ~10-20 ms for 3,000
    lines, in the background), so that requests at new cursors look words up rather than scan."""
    index = _WordIndex(parsed.source, [*parsed.line_starts, len(parsed.source) + 1])
    index.index_all()
    _keep_index(parsed.path, index)


def _word_index(parsed: ParsedFile, line: int, starts: list[int]) -> _WordIndex:
    known = _WORD_INDEXES.get(parsed.path)
    if known is not None and known.same_but_line(parsed.source, starts, line):
        return known
    index = _WordIndex(parsed.source, starts)
    _keep_index(parsed.path, index)
    return index


def _keep_index(path: str, index: _WordIndex) -> None:
    if len(_WORD_INDEXES) >= _WORD_INDEX_FILES:
        _WORD_INDEXES.clear()
    _WORD_INDEXES[path] = index


# path -> the excerpts offered at a cursor line: (line, the word index they were found with,
# [(start, end, reason)]). While the user types on that line, the same excerpts are offered again:
# the query grows a word at a time, and an excerpt set that changed with it would change the
# prompt before the enclosing block at every keystroke, and the engine would process it all again
# (measured, retyping lines inside functions: 70 % of each prompt reused with a fresh query per
# keystroke, 88 % without the similar lines at all).
_OFFERED: dict[str, tuple[int, _WordIndex, list[tuple[int, int, str]]]] = {}


def _idents(line: bytes) -> set[bytes]:
    return {w for w in _IDENT.findall(line) if len(w) >= MIN_IDENT_CHARS}


def _query(line_text: Callable[[int], bytes], line: int, column: int) -> tuple[dict[bytes, float], set[int]]:
    """Weighted query words, and the lines they come from (never matches of themselves)."""
    weights: dict[bytes, float] = {}
    used = {line}
    for word in _idents(line_text(line)[:column]):
        weights[word] = CURSOR_LINE_WEIGHT
    taken = 0
    i = line - 1
    while i >= 0 and taken < QUERY_LINES:
        if line_text(i).strip():
            for word in _idents(line_text(i)):
                weights.setdefault(word, 1.0)
            used.add(i)
            taken += 1
        i -= 1
    return weights, used


def similar_candidates(
    parsed: ParsedFile,
    line: int,
    column: int,
    shown: list[tuple[int, int]],
    estimate_lines: LineRangeTokens,
    marker_tokens: int,
) -> list[Candidate]:
    """Up to ``MAX_SNIPPETS`` excerpts around the lines most like the cursor's, outside ``shown``."""
    text = parsed.source
    starts = [*parsed.line_starts, len(text) + 1]
    n = len(starts) - 1
    if line >= n:
        return []

    def line_text(i: int) -> bytes:
        return text[starts[i]:starts[i + 1] - 1]

    column = parsed.cursor_byte(line, column) - starts[line]
    query, query_lines = _query(line_text, line, column)
    if not query:
        return []
    words = _word_index(parsed, line, starts)
    held = _OFFERED.get(parsed.path)
    if held is not None and held[0] == line and held[1] is words:
        # typed on at the same line, the rest of the file as it was: what was offered here
        return [_candidate(text, starts, a, b, reason, rank, estimate_lines, marker_tokens)
                for rank, (a, b, reason) in enumerate(r for r in held[2] if not any(
                    x <= r[1] and r[0] <= y for x, y in shown))]
    cursor_text = text[starts[line]:starts[line + 1]]
    scored = _scored_lines(words, query, query_lines, line, cursor_text, n)
    out: list[Candidate] = []
    taken: list[tuple[int, int]] = list(shown)
    for share, anchor in scored:
        if share < MIN_SCORE_SHARE or len(out) >= MAX_SNIPPETS:
            break
        if any(a <= anchor <= b for a, b in shown):  # (checked here, for the few best only)
            continue
        span = _excerpt_span(anchor, taken, n, line_text)
        if span is None:
            continue
        start, end = span
        reason = f"resembles the code at the cursor (line {anchor + 1} shares {share:.0%} of its rare identifiers)"
        out.append(_candidate(text, starts, start, end, reason, len(out), estimate_lines, marker_tokens))
        taken.append(span)
    _remember_offer(parsed.path, line, words, out)
    return out


def _scored_lines(words: _WordIndex, query: dict[bytes, float], query_lines: set[int], line: int,
                  cursor_text: bytes, n: int) -> list[tuple[float, int]]:
    """(share of the query's best possible score, line) of the lines sharing a rare word with the
    query, best first; none of the lines the query comes from."""
    # Where the query's rarest words occur. Substring counts (fast) pick them; a word on more than
    # a third of the lines says little about similarity and is not looked up.
    # (counted in the indexed version, whose cursor line may differ: that line is recounted)
    indexed_text = words.line_text(line)
    counts = {w: words.count(w) - indexed_text.count(w) + cursor_text.count(w) for w in query}
    rare = sorted((c, w) for w, c in counts.items() if 0 < c <= n // 3)[:MAX_QUERY_WORDS]
    lines_of: dict[bytes, set[int]] = {}
    for _count, word in rare:
        found = set(words.lines(word))
        found.discard(line)
        if _occurrences(cursor_text, word):
            found.add(line)
        if found:
            lines_of[word] = found
    if not lines_of:
        return []
    idf = {w: math.log(1.0 + n / (1 + len(found))) for w, found in lines_of.items()}
    # The most a line could score: common words count at their (small) idf as if looked up.
    best = sum(query[w] * idf.get(w, math.log(1.0 + n / (1 + counts[w]))) for w in query if counts[w])
    scores: dict[int, float] = {}
    for w, found in lines_of.items():
        weight = query[w] * idf[w]
        for i in found:
            scores[i] = scores.get(i, 0.0) + weight
    # A line must share at least one rare word: matches on common words alone are noise.
    rare_lines = {i for w, found in lines_of.items() if len(found) <= n // RARE_LINES_DIVISOR for i in found}
    return sorted(((score / best, i) for i, score in scores.items()
                   if i in rare_lines and i not in query_lines), reverse=True)


def _excerpt_span(anchor: int, taken: list[tuple[int, int]], n: int,
                  line_text: Callable[[int], bytes]) -> tuple[int, int] | None:
    """The lines a match at ``anchor`` brings, cut short of what ``taken`` shows already (None: it is
    shown already, or nothing is left)."""
    start, end = max(0, anchor - LINES_BEFORE), min(n - 1, anchor + LINES_AFTER)
    # Never repeat what is shown already (the enclosing block, an earlier match).
    for a, b in taken:
        if a <= anchor <= b:
            return None
        if b < anchor and b >= start:
            start = b + 1
        if a > anchor and a <= end:
            end = a - 1
    if start > end:
        return None
    while start < anchor and not line_text(start).strip():
        start += 1
    return start, end


def _remember_offer(path: str, line: int, words: _WordIndex, offered: list[Candidate]) -> None:
    if len(_OFFERED) >= _WORD_INDEX_FILES:
        _OFFERED.clear()
    _OFFERED[path] = (line, words, [(c.start_line, c.end_line, c.reason) for c in offered])


def _candidate(text: bytes, starts: list[int], start: int, end: int, reason: str, rank: int,
               estimate_lines: LineRangeTokens, marker_tokens: int) -> Candidate:
    excerpt = text[starts[start]:starts[end + 1] - 1].decode("utf-8", "replace") + "\n"
    return Candidate(
        kind="similar", name=f"lines {start + 1}-{end + 1}", start_line=start, end_line=end,
        tier=TIER_SIMILAR, rank=rank, reason=reason,
        forms=[Form("whole", [Piece(start, end, excerpt, verbatim=True)],
                    tokens=estimate_lines(start, end) + marker_tokens)],
    )
