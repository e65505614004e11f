"""The orchestration loop of the ctxpress_speculative BLS model, driven by fake engines on CPU."""

from __future__ import annotations

import asyncio
import importlib.util
import json
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


# --- the cached-token figure across users (docs/security.md, round 3: the GPU cache) -----------------------------

TPB = 8  # tokens per KV block in these tests


class _Tensor:
    def __init__(self, name: str, value: np.ndarray) -> None:
        self._name, self._value = name, np.asarray(value)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._value


class _Response:
    def __init__(self, output_tensors: list[_Tensor], error: object = None) -> None:
        self.tensors = {t.name(): t for t in output_tensors}
        self._error = error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> object:
        return self._error


class GlobalPrefixCache:
    """TensorRT-LLM's block reuse as the BLS model sees it: one cache per engine for every request, blocks found
    by the hash of all tokens up to them; a request's ``cache_salt_id`` enters its first block's key."""

    def __init__(self) -> None:
        self.blocks: set[tuple[object, ...]] = set()
        self.calls: list[tuple[str, int | None, int]] = []  # (model, salt id, reused blocks)

    def serve(self, model: str, inputs: dict[str, _Tensor]) -> _Response:
        tokens = inputs["input_ids"].as_numpy().reshape(-1).tolist()
        salt_t = inputs.get("cache_salt_id")
        salt = None if salt_t is None else int(salt_t.as_numpy().reshape(-1)[0])
        keys, key = [], (model, salt)
        for start in range(0, len(tokens) // TPB * TPB, TPB):
            key = (key, tuple(tokens[start:start + TPB]))
            keys.append(key)
        reused = 0
        for k in keys[: (len(tokens) - 1) // TPB]:  # the last token is always computed
            if k not in self.blocks:
                break
            reused += 1
        self.blocks.update(keys)
        self.calls.append((model, salt, reused))
        n = int(inputs["request_output_len"].as_numpy().reshape(-1)[0])
        out = np.array([[TRUTH[:n]]], dtype=np.int32)
        return _Response([_Tensor("output_ids", out), _Tensor("sequence_length", np.array([[n]], dtype=np.int32)),
                          _Tensor("kv_cache_reused_blocks", np.array([[reused]], dtype=np.int32))])


class FakeBackendUtils:
    """The part of triton_python_backend_utils the BLS model uses, over a ``GlobalPrefixCache``."""

    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    Tensor = _Tensor
    InferenceResponse = _Response

    def __init__(self, engine: GlobalPrefixCache) -> None:
        class InferenceRequest:
            def __init__(self, model_name: str, requested_output_names: list[str], inputs: list[_Tensor]) -> None:
                self.model, self.inputs = model_name, {t.name(): t for t in inputs}

            async def async_exec(self, decoupled: bool = False) -> object:
                response = engine.serve(self.model, self.inputs)
                if not decoupled:
                    return response

                async def stream() -> AsyncIterator[_Response]:
                    yield response
                    yield _Response([])  # the empty final-flag response
                return stream()

        self.InferenceRequest = InferenceRequest

    @staticmethod
    def get_input_tensor_by_name(request: object, name: str) -> _Tensor | None:
        return request.inputs.get(name)  # type: ignore[attr-defined]

    @staticmethod
    def get_output_tensor_by_name(response: _Response, name: str) -> _Tensor | None:
        return response.tensors.get(name)

    @staticmethod
    def TritonError(message: str) -> str:  # pb_utils' name
        return message


class _Sender:
    def __init__(self) -> None:
        self.sent: list[_Response] = []

    def send(self, response: _Response, flags: int = 0) -> None:
        self.sent.append(response)


class _Request:
    def __init__(self, prompt: list[int], salt: str | None, speculation: str | None = None) -> None:
        self.inputs = {
            "input_ids": _Tensor("input_ids", np.array([prompt], dtype=np.int32)),
            "input_lengths": _Tensor("input_lengths", np.array([[len(prompt)]], dtype=np.int32)),
            "request_output_len": _Tensor("request_output_len", np.array([[6]], dtype=np.int32)),
            "end_id": _Tensor("end_id", np.array([[-99]], dtype=np.int32)),
        }
        if salt is not None:
            self.inputs["ctx_cache_salt"] = _Tensor("ctx_cache_salt", np.array([[salt.encode()]], dtype=object))
        if speculation is not None:
            self.inputs["ctx_speculation"] = _Tensor("ctx_speculation",
                                                     np.array([[speculation.encode()]], dtype=object))
        self.sender = _Sender()

    def get_response_sender(self) -> _Sender:
        return self.sender


@pytest.fixture
def bls(monkeypatch: pytest.MonkeyPatch) -> tuple[GlobalPrefixCache, object]:
    engine = GlobalPrefixCache()
    monkeypatch.setattr(spec_mod, "pb_utils", FakeBackendUtils(engine))
    return engine, spec_mod


def _model(engine_cache_salt: bool, draft: bool = True) -> object:
    params = {"target_model": "tensorrt_llm", "draft_model": "tensorrt_llm_draft" if draft else "",
              "max_draft_len": "3", "speculate_min_prompt_tokens": "16", "tokens_per_block": str(TPB),
              "engine_cache_salt": "true" if engine_cache_salt else "false"}
    model = spec_mod.TritonPythonModel()
    model.initialize({"model_config": json.dumps({"parameters": {k: {"string_value": v}
                                                                 for k, v in params.items()}})})
    return model


def _cached_tokens(model: object, prompt: list[int], salt: str | None, speculation: str | None = None) -> int:
    request = _Request(prompt, salt, speculation)
    asyncio.run(model.execute([request]))  # type: ignore[attr-defined]
    final = request.sender.sent[-1]
    assert not final.has_error(), final.error()
    return int(final.tensors["ctx_cached_tokens"].as_numpy().reshape(-1)[0])


BOBS_PROMPT = list(range(1000, 1100))  # 12 full blocks of 8 and 4 tokens


@pytest.mark.parametrize("draft", [False, True], ids=["target-only", "speculative"])
def test_a_user_is_not_told_that_another_users_prompt_was_cached(bls: tuple[GlobalPrefixCache, object],
                                                                 draft: bool) -> None:
    """alice sends bob's exact prompt after him: the engine (no salt) reuses his blocks, the reply says 0."""
    engine, _ = bls
    model = _model(engine_cache_salt=False, draft=draft)
    assert _cached_tokens(model, BOBS_PROMPT, "bob-salt") == 0  # nothing cached yet
    before = len(engine.calls)
    assert _cached_tokens(model, BOBS_PROMPT, "alice-salt") == 0
    alices_first_target_call = next(c for c in engine.calls[before:] if c[0] == "tensorrt_llm")
    assert alices_first_target_call[2] == 12  # though the engine reused all of bob's blocks
    # bob's own repeat reports the reuse
    assert _cached_tokens(model, BOBS_PROMPT, "bob-salt") == 12 * TPB
    # carol's guess that shares bob's first 5 blocks: nothing; her own repeat: what she sent
    guess = BOBS_PROMPT[:40] + [7] * 60
    assert _cached_tokens(model, guess, "carol-salt") == 0
    assert _cached_tokens(model, guess, "carol-salt") == 12 * TPB


def test_the_engine_salt_goes_to_draft_and_target_and_keeps_users_apart(
        bls: tuple[GlobalPrefixCache, object]) -> None:
    engine, _ = bls
    model = _model(engine_cache_salt=True)
    _cached_tokens(model, BOBS_PROMPT, "bob-salt")
    bob_calls = len(engine.calls)
    _cached_tokens(model, BOBS_PROMPT, "alice-salt")
    alice = engine.calls[bob_calls:]
    assert {m for m, _, _ in alice} == {"tensorrt_llm", "tensorrt_llm_draft"}
    assert {s for _, s, _ in alice} == {spec_mod.cache_salt_id("alice-salt")}
    assert [reused for _, _, reused in alice[:2]] == [0, 0]  # neither engine reused any of bob's blocks for her
    assert spec_mod.cache_salt_id("alice-salt") != spec_mod.cache_salt_id("bob-salt")
    assert _cached_tokens(model, BOBS_PROMPT, "bob-salt") == 12 * TPB


def test_without_the_engine_salt_no_salt_id_is_sent(bls: tuple[GlobalPrefixCache, object]) -> None:
    engine, _ = bls
    _cached_tokens(_model(engine_cache_salt=False), BOBS_PROMPT, "bob-salt")
    assert engine.calls and all(salt is None for _, salt, _ in engine.calls)


def test_the_ledger_counts_leading_blocks_a_salt_sent() -> None:
    ledger = spec_mod.ReuseLedger(tokens_per_block=4)
    ledger.record("a", list(range(10)))  # blocks [0..3], [4..7]; 8, 9 are not a full block
    assert ledger.seen("a", list(range(10))) == 2
    assert ledger.seen("a", list(range(8)) + [99] * 8) == 2
    assert ledger.seen("a", [0, 1, 2, 99, 4, 5, 6, 7]) == 0  # a block counts with all before it
    assert ledger.seen("b", list(range(10))) == 0
    assert ledger.chain(list(range(4, 8))) != ledger.chain(list(range(8)))[1:]  # a hash covers its prefix


def test_the_ledger_is_bounded() -> None:
    ledger = spec_mod.ReuseLedger(tokens_per_block=2, max_salts=2, max_blocks=3)
    ledger.record("a", [1, 2, 3, 4, 5, 6, 7, 8])  # 4 blocks: the first is forgotten
    assert ledger.seen("a", [1, 2, 3, 4]) == 0
    ledger.record("a", [1, 2])  # back, and the least recent block ([3, 4]) goes in its place
    assert ledger.seen("a", [1, 2, 3, 4]) == 1
    ledger.record("b", [1, 2])
    ledger.record("c", [1, 2])  # the third salt: the least recent ("a") is forgotten
    assert ledger.seen("a", [1, 2]) == 0 and ledger.seen("b", [1, 2]) == 1 and ledger.seen("c", [1, 2]) == 1


def test_string_inputs_are_read_as_triton_gives_them(bls: tuple[GlobalPrefixCache, object]) -> None:
    """A string tensor's items are bytes (no numpy scalar): "none" turns the draft off."""
    engine, _ = bls
    _cached_tokens(_model(engine_cache_salt=False), BOBS_PROMPT, "bob-salt", speculation="none")
    assert [model for model, _, _ in engine.calls] == ["tensorrt_llm"]
