"""One assembly's state, shared by its stages (assemble.py, selection.py): its inputs and what every stage
uses, worked out once (``Assembly``); the clock of its stages and its deadline; the enclosing block with the
excerpts packed beside it (``Packed``); and the signals that send the request to the window instead."""

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


class Timeout(Exception):
    pass


class ParseFailure(Exception):
    pass


class BlockOverBudget(Exception):
    """The cursor's block cut to its least (the cursor line up to the cursor, and the suffix's first line) is
    still over the budget: nothing the packer may drop would bring the prompt within it."""


class Clock:
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
            raise Timeout(stage)
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

    held_below: int = 0  # suffix_floor: tokens the packing leaves for the lines below the enclosing block

    @property
    def budget(self) -> int:
        """The prompt's budget, less what is held for the lines below while the excerpts are packed."""
        return self.options.budget_tokens - self.held_below

    def prompt_tokens(self, prefix: str, suffix: str) -> int:
        return self.exact(prefix) + self.exact(suffix)

    def render(self, chosen: list[Candidate], enc: Enclosing, suffix: str | None = None) -> Rendered:
        return render_prompt(chosen, enc.prefix_pieces, enc.suffix if suffix is None else suffix, self.lang,
                             self.file_lines)


@dataclass
class Packed:
    """The enclosing block and the excerpts packed beside it, rendered."""

    enc: Enclosing
    chosen: list[Candidate]
    dropped: list[Candidate]
    rendered: Rendered
    total: int  # the rendered prompt's real token count
    held_below: int = 0  # suffix_floor: tokens left for the lines below the block (context/sources/below.py)
