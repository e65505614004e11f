"""The orchestration loop of the ctxpress_speculative BLS model, driven by fake engines on CPU."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "build_engines" / "triton_models" / "speculative.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ctxpress_speculative_model", _PATH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while decorating
    spec.loader.exec_module(mod)
    return mod


spec_mod = _load()
TRUTH = list(range(100, 200))  # what the target would generate, token by token


class FakeEngines:
    """Target = greedy TRUTH continuation; draft right except every `wrong_every`-th token."""

    def __init__(self, prompt_len: int, wrong_every: int = 4) -> None:
        self.prompt_len = prompt_len
        self.wrong_every = wrong_every
        self.target_calls: list[tuple[int, list[int], int, bool]] = []
        self.draft_calls = 0

    def _pos(self, tokens: list[int]) -> int:
        return len(tokens) - self.prompt_len

    async def draft(self, tokens: list[int], k: int) -> list[int]:
        self.draft_calls += 1
        pos = self._pos(tokens)
        return [TRUTH[pos + i] if (pos + i + 1) % self.wrong_every else -1 for i in range(k)]

    async def target(self, tokens: list[int], draft: list[int], n: int,
                     streaming: bool) -> AsyncIterator[tuple[list[int], int | None]]:
        self.target_calls.append((len(tokens), list(draft), n, streaming))
        pos = self._pos(tokens)
        accepted = 0
        while accepted < len(draft) and draft[accepted] == TRUTH[pos + accepted]:
            accepted += 1
        # Without drafts the target simply generates n tokens.
        new = TRUTH[pos: pos + (min(n, accepted + 1) if draft else n)]
        reused = (len(tokens) - 1) // 64  # as if every full block of the prefix was cached
        if streaming:
            for tok in new:
                yield [tok], reused
        else:
            yield new, reused


def _run(engines: FakeEngines, prompt_len: int, max_new: int, streaming: bool = False, min_prompt: int = 16,
         end_id: int = -99, stop: list[list[int]] | None = None) -> tuple[list[tuple[list[int], bool]], object]:
    emitted: list[tuple[list[int], bool]] = []
    s = spec_mod.Speculator(draft=engines.draft, target=engines.target, max_draft_len=4,
                            min_prompt_tokens=min_prompt, tokens_per_block=64)
    figures = asyncio.run(s.run(list(range(prompt_len)), max_new, end_id, stop or [], streaming,
                                lambda toks, f, final: emitted.append((toks, final))))
    return emitted, figures


def test_speculative_output_equals_target_output_and_counts_acceptance() -> None:
    eng = FakeEngines(prompt_len=200)
    emitted, f = _run(eng, 200, 20)
    assert len(emitted) == 1 and emitted[0][1]  # non-streaming: one final response
    assert emitted[0][0] == TRUTH[:20]  # speculation never changes what the target says
    assert f.completion_tokens == 20 and f.finish_reason == "length"
    assert f.draft_proposed > 0 and 0 < f.draft_accepted < f.draft_proposed
    assert f.draft_accepted == sum(len(d) for _, d, _, _ in eng.target_calls) - (f.draft_proposed - f.draft_accepted)
    assert f.prompt_tokens == 200 and f.cached_tokens == (199 // 64) * 64
    # every verification asked for at most max_draft_len + 1 tokens and never past max_new
    assert all(n <= 5 and len(d) <= 4 for _, d, n, _ in eng.target_calls)
    assert len(eng.target_calls) < 20  # fewer target steps than tokens: the point of drafting


def test_streaming_sends_deltas_that_add_up() -> None:
    emitted, _ = _run(FakeEngines(prompt_len=300), 300, 17, streaming=True)
    assert [t for chunk, _ in emitted for t in chunk] == TRUTH[:17]
    assert emitted[-1][1] and not any(final for _, final in emitted[:-1])
    assert len(emitted) > 2


def test_short_prompts_skip_the_draft() -> None:
    eng = FakeEngines(prompt_len=10)
    emitted, f = _run(eng, 10, 8, streaming=True, min_prompt=1024)
    assert eng.draft_calls == 0 and f.draft_proposed == 0
    assert [t for chunk, _ in emitted for t in chunk] == TRUTH[:8]
    assert eng.target_calls == [(10, [], 8, True)]  # one streaming target request


def test_end_id_and_stop_words_end_generation() -> None:
    _, f = _run(FakeEngines(prompt_len=200), 200, 50, end_id=TRUTH[6])
    assert f.completion_tokens == 6 and f.finish_reason == "stop"
    emitted, f = _run(FakeEngines(prompt_len=200), 200, 50, stop=[[TRUTH[3], TRUTH[4]]])
    assert emitted[-1][0] == TRUTH[:5] and f.finish_reason == "stop"


@pytest.mark.parametrize(
    ("arr", "words"),
    [
        (None, []),
        (np.array([[[0], [-1]]]), []),
        (np.array([[[5, 6, 7, 0], [2, 3, -1, -1]]]), [[5, 6], [7]]),
    ],
)
def test_decode_stop_words(arr: np.ndarray | None, words: list[list[int]]) -> None:
    assert spec_mod.decode_stop_words(arr) == words
