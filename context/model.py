"""What in-file assembly produces: the assembled prompt parts and the blocks of context chosen or dropped,
each with the reason (the data every stage of the context library passes on; no logic of its own)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from context.sources.window import Window
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import BlockReport

DEFAULT_BUDGET_TOKENS: int = Settings.model_fields["context_budget_tokens"].default


@dataclass
class ContextBlock:
    """A block of the assembled context: the wire's ``BlockReport`` as a plain dataclass, because the assembler
    moves held blocks with ``dataclasses.replace`` as it does its other line-numbered records (steady.moved)."""

    kind: str
    name: str
    start_line: int  # 0-based, inclusive
    end_line: int
    form: str  # "whole" | "summary" | "partial"
    tokens: int
    reason: str

    def to_report(self) -> BlockReport:
        """The block as the wire format reports it (the same fields: tests/context/test_model.py)."""
        return BlockReport(**asdict(self))


@dataclass
class AssembledContext:
    prefix: str  # excerpts + the code up to the cursor; ends exactly at the cursor
    suffix: str  # budgeted code after the cursor (FIM)
    blocks: list[ContextBlock]
    dropped: list[ContextBlock]
    strategy: str  # "window" | "whole-file" | "ast" | "window-fallback"
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
    window: Window | None = None  # strategies "window" and "window-fallback": the lines it shows

    @property
    def compression_ratio(self) -> float:
        return self.file_tokens / self.context_tokens if self.context_tokens else 0.0
