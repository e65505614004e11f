"""What a request gets back from the CPU engine: the completion in chunks, the figures of its run, and
``GaveWay`` when it stepped aside for another request (``serving.engine.scheduler`` says which)."""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.engine.speculation import SpeculationChoice
from serving.engine.stop_text import StopText


class GaveWay(Exception):
    """A request stopped between two prompt chunks or two decode steps for another one; the KV processed
    so far stays in the file's sequence. Handed back as ``carried`` when the request runs again:
    ``processed`` prompt tokens and ``prompt_ms`` over its attempts so far, ``times`` it gave way, and,
    once it was decoding, where its decoding stands (``decoding``: the text already streamed stays sent)."""

    def __init__(self, processed: int, prompt_ms: float, times: int, decoding: Decoding | None = None) -> None:
        super().__init__(f"gave way after {processed} prompt tokens"
                         + (f" and {len(decoding.generated)} generated" if decoding is not None else ""))
        self.processed = processed
        self.prompt_ms = prompt_ms
        self.times = times
        self.decoding = decoding


@dataclass
class GenerationFigures:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    draft_proposed: int = 0
    draft_accepted: int = 0
    speculation: str = "none"
    finish_reason: str = "stop"
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    kv_bytes: int = 0
    evicted: int = 0
    gave_way: int = 0  # times it stepped aside for another request
    restored_tokens: int = 0  # of cached_tokens, read back from the disk tier
    restore_ms: float = 0.0
    token_ids: list[int] = field(default_factory=list)  # the completion's tokens (for verification)


@dataclass
class GenerationChunk:
    text: str
    figures: GenerationFigures
    final: bool = False


@dataclass
class Decoding:
    """A request's decoding: the tokens generated (and the text streamed) so far, its speculation and figures."""

    text: StopText
    choice: SpeculationChoice
    figures: GenerationFigures
    generated: list[int] = field(default_factory=list)
    decode_ms: float = 0.0  # over its runs before this one
