"""The embedded CPU engine: llama.cpp (through llama-cpp-python) on a GGUF code model.

One ``Llama`` context serves requests one at a time; llama.cpp keeps the previous
prompt's KV state and re-uses its longest common token prefix, which is what makes a
keystroke after a keystroke cheap. The figures we report (prompt tokens, tokens served
from that cache) are computed the same way llama-cpp-python decides its prefix match.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class GenerationFigures:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    draft_proposed: int = 0
    draft_accepted: int = 0
    finish_reason: str = "stop"
    prompt_ms: float = 0.0
    decode_ms: float = 0.0


@dataclass
class GenerationChunk:
    text: str
    figures: GenerationFigures
    final: bool = False


@dataclass
class EngineConfig:
    model_path: Path
    n_ctx: int = 4096
    n_threads: int = 0
    n_batch: int = 512
    extra: dict[str, object] = field(default_factory=dict)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class LlamaEngine:
    def __init__(self, config: EngineConfig) -> None:
        from llama_cpp import Llama  # heavy import, only in the serving process

        threads = config.n_threads or os.cpu_count() or 1
        self.config = config
        self.model_name = config.model_path.stem
        self._lock = threading.Lock()
        self._llm = Llama(
            model_path=str(config.model_path),
            n_ctx=config.n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_batch=config.n_batch,
            verbose=False,
            **config.extra,  # type: ignore[arg-type]
        )

    def tokenize(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
    ) -> Iterator[GenerationChunk]:
        """Stream the completion; the last chunk has ``final=True`` and the full figures."""
        with self._lock:
            yield from self._generate_locked(prompt, max_tokens=max_tokens, temperature=temperature, stop=stop)

    def _generate_locked(
        self, prompt: str, *, max_tokens: int, temperature: float, stop: Sequence[str]
    ) -> Iterator[GenerationChunk]:
        llm = self._llm
        tokens = self.tokenize(prompt)
        figures = GenerationFigures(prompt_tokens=len(tokens))
        previous = llm._input_ids[: llm.n_tokens].tolist()
        figures.cached_tokens = min(_common_prefix(previous, tokens), max(len(tokens) - 1, 0))
        room = self.config.n_ctx - len(tokens) - 1
        if room <= 0:
            raise ValueError(f"prompt of {len(tokens)} tokens does not fit a context of {self.config.n_ctx}")
        started = time.perf_counter()
        first_token_at: float | None = None
        pieces: list[str] = []
        stream = llm.create_completion(
            tokens,
            max_tokens=min(max_tokens, room),
            temperature=temperature,
            top_k=1 if temperature == 0 else 40,
            stop=list(stop) or None,
            stream=True,
        )
        for chunk in stream:
            choice = chunk["choices"][0]  # type: ignore[index]
            if first_token_at is None:
                first_token_at = time.perf_counter()
            text = choice.get("text") or ""
            if choice.get("finish_reason"):
                figures.finish_reason = str(choice["finish_reason"])
            if text:
                pieces.append(text)
                yield GenerationChunk(text=text, figures=figures)
        done = time.perf_counter()
        first_token_at = first_token_at or done
        figures.prompt_ms = (first_token_at - started) * 1000
        figures.decode_ms = (done - first_token_at) * 1000
        figures.completion_tokens = len(self.tokenize("".join(pieces))) if pieces else 0
        yield GenerationChunk(text="", figures=figures, final=True)
