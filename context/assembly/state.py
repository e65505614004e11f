"""One assembly's state, shared by its stages: its inputs and what every stage uses, worked out once
(``Assembly``); the clock of its stages and its deadline; the enclosing block with the excerpts packed beside
it (``Packed``); the failure that sends the request to the window instead (``AssemblyFailed``); and the
render-count-trim loop every stage fits its prompt to the budget with (``FitToBudget``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from context.options import AssemblyOptions
from context.packing.pack import Candidate, Rendered, render_prompt
from context.packing.tokens import LineRangeTokens, TokenCounter, exact_counter, line_range_estimator
from context.sources.enclosing import Enclosing
from ctxpress_core.wire.v1 import wire_lines
from syntax.parsed_file import ParsedFile
from syntax.summaries import Outline, elision_marker
from syntax.symbols.model import FileSymbols


class AssemblyFailed(Exception):
    """The assembly cannot give this request a prompt: the caller sends the window. ``cause``: the metrics' label
    ("unsupported-language", "parse-failure", "block-over-budget", "timeout", "error"); ``reason``: the report's."""

    def __init__(self, cause: str, reason: str) -> None:
        super().__init__(reason)
        self.cause, self.reason = cause, reason


class Clock:
    """Each stage's wall time, and the deadline on the assembly's own CPU time."""

    def __init__(self, deadline: float, timeout_ms: float) -> None:
        self.deadline = deadline
        self.timeout_ms = timeout_ms
        self.timings: dict[str, float] = {}
        self._stage_started = time.perf_counter()

    def check(self, stage: str) -> None:
        """Record ``stage``'s wall time; raise when the assembly's CPU time is past the deadline."""
        now = time.perf_counter()
        self.timings[stage] = (now - self._stage_started) * 1000.0
        if time.thread_time() > self.deadline:
            raise AssemblyFailed("timeout", f"assembly exceeded {self.timeout_ms:g} ms")
        self._stage_started = now


@dataclass
class Assembly:
    """One assembly's inputs and what every stage of it uses, worked out once."""

    text: str
    path: str
    lang: str
    line: int  # within the file's lines
    column: int
    options: AssemblyOptions
    parsed: ParsedFile
    table: FileSymbols
    outline: Outline
    count_tokens: TokenCounter  # memoised
    clock: Clock
    cursor_byte: int = field(init=False)
    marker_tokens: int = field(init=False)  # an elision marker in the file's comment syntax
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

    @property
    def budget(self) -> int:
        return self.options.budget_tokens

    def render(self, chosen: list[Candidate], enc: Enclosing, suffix: str | None = None) -> tuple[Rendered, int]:
        """The prompt of ``chosen`` beside ``enc``, and its real token count."""
        rendered = render_prompt(chosen, enc.prefix_pieces, enc.suffix if suffix is None else suffix, self.lang,
                                 self.file_lines)
        return rendered, self.exact(rendered.prefix) + self.exact(rendered.suffix)


@dataclass
class Packed:
    """The enclosing block and the excerpts packed beside it, rendered."""

    enc: Enclosing
    chosen: list[Candidate]
    dropped: list[Candidate]
    rendered: Rendered
    total: int  # the rendered prompt's real token count
    held_below: int = 0  # suffix_floor: tokens left for the lines below the block (below.py)


class FitToBudget:
    """The bookkeeping of a "render, count, trim, retry" loop. Token counts of pieces are not additive (merges
    across boundaries, markers): the prompt is rendered and counted for real, and while that is over the budget,
    trimmed by the excess and rendered again, at most ``tries`` times (None: until nothing is left to trim)."""

    def __init__(self, budget: int, tries: int | None = None) -> None:
        self.budget, self.tries_left, self.excess = budget, tries, 0

    def over(self, total: int) -> bool:
        """``total`` is over the budget and a try is left: the caller trims by ``excess`` and renders again."""
        self.excess = total - self.budget
        if self.excess <= 0:
            return False
        if self.tries_left is not None:
            self.tries_left -= 1
        return self.tries_left != 0

    @property
    def fits(self) -> bool:
        return self.excess <= 0
