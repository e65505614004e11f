"""ctxpress_speculative: draft-aware orchestration as a decoupled BLS model (Triton python backend).

Why not TensorRT-LLM's stock tensorrt_llm_bls: it serves draft-target decoding one request
at a time (batch size 1) and without streaming. Here every request is its own coroutine
(async execute, decoupled mode), so while one request waits on its draft, the target's
in-flight batcher is verifying other requests' proposals: draft proposals run outside the
batch, only target verification is batched - the seed's design.

Per request:
  prompt shorter than ``speculate_min_prompt_tokens`` (or no draft engine): target only.
  otherwise loop: draft proposes k tokens -> target verifies them with draft_input_ids
  (draft_tokens_external) and returns the accepted prefix + one token of its own; KV cache
  reuse makes each step pay only for the new tokens.

TensorRT-LLM's KV block reuse is global: without more, a request's reused blocks (``ctx_cached_tokens``) would
tell its user how much of their prompt matches what anyone else sent. So each request carries its user's salt
(``ctx_cache_salt``): the figure counts only blocks the same salt sent before (``ReuseLedger``), and with the
``engine_cache_salt`` parameter the salt also goes to the engines as ``cache_salt_id``, which keeps one salt's
blocks from being reused by another (a backend that reads that input; docs/security.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

try:  # present inside Triton's python backend only; tests inject a stand-in
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised only outside Triton
    pb_utils = None

# (tokens so far, k) -> proposed tokens
DraftFn = Callable[[list[int], int], Awaitable[list[int]]]
# (tokens so far, draft tokens, max new, streaming) -> chunks of (new tokens, reused KV blocks or None)
TargetFn = Callable[[list[int], list[int], int, bool], AsyncIterator[tuple[list[int], int | None]]]
EmitFn = Callable[[list[int], "Figures", bool], None]


@dataclass
class Figures:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    draft_proposed: int = 0
    draft_accepted: int = 0
    finish_reason: str = "length"


class ReuseLedger:
    """The KV blocks each salt's prompts produced, as the engine names them: a hash chain over
    ``tokens_per_block``-token blocks (a block's hash covers every token before it), so a prompt's leading blocks
    that a salt sent before are found by prefix. Bounded: the most recently sent ``max_blocks`` blocks of each of
    the ``max_salts`` most recent salts (forgetting one only lowers what its user is told was cached)."""

    def __init__(self, tokens_per_block: int, max_salts: int = 256, max_blocks: int = 8192) -> None:
        self.tokens_per_block = tokens_per_block
        self.max_salts = max_salts
        self.max_blocks = max_blocks
        self._salts: OrderedDict[str, OrderedDict[bytes, None]] = OrderedDict()

    def chain(self, tokens: Sequence[int]) -> list[bytes]:
        """The hashes of the full blocks of ``tokens``, in order."""
        n = self.tokens_per_block
        ids = np.asarray(tokens[: len(tokens) // n * n], dtype="<i8")
        hashes: list[bytes] = []
        parent = b""
        for start in range(0, len(ids), n):
            parent = hashlib.blake2b(parent + ids[start:start + n].tobytes(), digest_size=16).digest()
            hashes.append(parent)
        return hashes

    def seen(self, salt: str, tokens: Sequence[int]) -> int:
        """How many leading blocks of ``tokens`` this salt has sent before."""
        known = self._salts.get(salt)
        count = 0
        for h in self.chain(tokens) if known else []:
            if h not in known:  # type: ignore[operator]
                break
            count += 1
        return count

    def record(self, salt: str, tokens: Sequence[int]) -> None:
        known = self._salts.pop(salt, None) or OrderedDict()
        self._salts[salt] = known  # the most recent salt last
        while len(self._salts) > self.max_salts:
            self._salts.popitem(last=False)
        for h in self.chain(tokens):
            known[h] = None
            known.move_to_end(h)
        while len(known) > self.max_blocks:
            known.popitem(last=False)


def cache_salt_id(salt: str) -> int:
    """The engine's uint64 ``cache_salt_id`` of a salt string (TensorRT-LLM hashes its own string salts to 8
    bytes the same way)."""
    return int.from_bytes(hashlib.blake2b(salt.encode(), digest_size=8).digest(), "little")


@dataclass
class Speculator:
    draft: DraftFn | None
    target: TargetFn
    max_draft_len: int
    min_prompt_tokens: int
    tokens_per_block: int
    # Of the engine's reused blocks, at most this many are reported: the leading blocks of the prompt that its
    # user sent before (ReuseLedger); the rest were another user's, and saying so would tell what they sent.
    reportable_blocks: int | None = None
    figures: Figures = field(default_factory=Figures)

    async def run(self, prompt: list[int], max_new: int, end_id: int, stop_words: list[list[int]],
                  streaming: bool, emit: EmitFn) -> Figures:
        f = self.figures = Figures(prompt_tokens=len(prompt))
        generated: list[int] = []
        pending: list[int] = []  # tokens not yet sent (non-streaming sends everything at the end)
        first_call = True

        def take(new: list[int], reused: int | None) -> bool:
            """Append new tokens; True when generation must stop."""
            nonlocal first_call
            if first_call and reused is not None:
                shown = reused if self.reportable_blocks is None else min(reused, self.reportable_blocks)
                f.cached_tokens = shown * self.tokens_per_block
            first_call = False
            for tok in new:
                if tok == end_id:
                    f.finish_reason = "stop"
                    return True
                generated.append(tok)
                pending.append(tok)
                if len(generated) >= max_new:
                    f.finish_reason = "length"
                    return True
                if any(sw and generated[-len(sw):] == sw for sw in stop_words):
                    f.finish_reason = "stop"
                    return True
            return False

        def flush(final: bool) -> None:
            f.completion_tokens = len(generated)
            if streaming or final:
                emit(list(pending), f, final)
                pending.clear()

        use_draft = self.draft is not None and self.max_draft_len > 0 and len(prompt) >= self.min_prompt_tokens
        if not use_draft:
            async for new, reused in self.target(prompt, [], max_new, streaming):
                if take(new, reused):
                    break
                flush(final=False)
            flush(final=True)
            return f

        assert self.draft is not None
        while True:
            remaining = max_new - len(generated)
            k = min(self.max_draft_len, remaining - 1)
            proposal = (await self.draft(prompt + generated, k))[:k] if k > 0 else []
            verified: list[int] = []
            reused: int | None = None
            async for new, r in self.target(prompt + generated, proposal, len(proposal) + 1, False):
                verified += new
                reused = r if reused is None else reused
            accepted = 0
            while accepted < min(len(proposal), len(verified)) and verified[accepted] == proposal[accepted]:
                accepted += 1
            f.draft_proposed += len(proposal)
            f.draft_accepted += accepted
            if not verified or take(verified, reused):
                if not verified:
                    f.finish_reason = "stop"  # the target produced nothing: it ended
                break
            flush(final=False)
        flush(final=True)
        return f


def decode_stop_words(arr: np.ndarray | None) -> list[list[int]]:
    """[2, N] TensorRT-LLM word list (flat ids, end offsets padded with -1) -> list of id lists."""
    if arr is None:
        return []
    a = np.asarray(arr).reshape(2, -1)
    ids, offsets = a[0].tolist(), [o for o in a[1].tolist() if o >= 0]
    words, start = [], 0
    for end in offsets:
        if end > start:
            words.append(ids[start:end])
        start = end
    return words


def _scalar(request: object, name: str, default: object) -> object:
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    value = t.as_numpy().reshape(-1)[0]
    return value.item() if isinstance(value, np.generic) else value  # a string tensor's items are bytes already


def _text(request: object, name: str) -> str:
    value = _scalar(request, name, b"")
    return value.decode() if isinstance(value, bytes) else str(value or "")


class RequestAbandoned(Exception):
    """The caller cancelled the request or its deadline passed."""


def _cancelled(request: object) -> bool:
    is_cancelled = getattr(request, "is_cancelled", None)  # Triton >= 23.10
    return bool(is_cancelled()) if callable(is_cancelled) else False


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.target_model = p["target_model"]
        self.draft_model = p.get("draft_model") or None
        self.max_draft_len = int(p.get("max_draft_len", "0"))
        self.min_prompt_tokens = int(p.get("speculate_min_prompt_tokens", "1024"))
        self.tokens_per_block = int(p.get("tokens_per_block", "32"))
        self.engine_cache_salt = p.get("engine_cache_salt", "false") == "true"
        self.ledger = ReuseLedger(self.tokens_per_block, int(p.get("reuse_ledger_salts", "256")),
                                  int(p.get("reuse_ledger_blocks", "8192")))

    async def execute(self, requests: list[object]) -> None:
        # Decoupled: responses go through each request's sender; requests run concurrently.
        await asyncio.gather(*(self._serve(r) for r in requests))

    async def _serve(self, request: object) -> None:
        sender = request.get_response_sender()  # type: ignore[attr-defined]
        final_flag = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
            length = int(_scalar(request, "input_lengths", ids.shape[-1]))
            prompt = ids.reshape(-1)[:length].astype(np.int32).tolist()
            max_new = int(_scalar(request, "request_output_len", 64))
            end_id = int(_scalar(request, "end_id", -1))
            pad_id = int(_scalar(request, "pad_id", end_id))
            temperature = _scalar(request, "temperature", None)
            streaming = bool(_scalar(request, "streaming", False))
            stop_t = pb_utils.get_input_tensor_by_name(request, "stop_words_list")
            stop_words = decode_stop_words(None if stop_t is None else stop_t.as_numpy())

            budget_ms = _scalar(request, "ctx_deadline_ms", 0)
            deadline = time.monotonic() + int(budget_ms) / 1000 if budget_ms else None  # type: ignore[call-overload]

            def emit(tokens: list[int], f: Figures, final: bool) -> None:
                # A caller that went away (Triton's request cancellation) or stopped waiting: the
                # rest would be generated for nobody.
                if not final and (_cancelled(request) or (deadline is not None and time.monotonic() > deadline)):
                    raise RequestAbandoned
                sender.send(self._response(tokens, f), flags=final_flag if final else 0)

            speculation = _text(request, "ctx_speculation")
            # No salt (an older worker): one ledger for all such requests, as their engine blocks are shared too.
            salt = _text(request, "ctx_cache_salt")
            salt_id = cache_salt_id(salt) if salt and self.engine_cache_salt else None
            seen = self.ledger.seen(salt, prompt)
            self.ledger.record(salt, prompt)
            spec = Speculator(
                draft=self._draft_fn(end_id, pad_id, salt_id) if self.draft_model and speculation != "none" else None,
                target=self._target_fn(end_id, pad_id, temperature, salt_id),
                max_draft_len=self.max_draft_len,
                min_prompt_tokens=self.min_prompt_tokens,
                tokens_per_block=self.tokens_per_block,
                reportable_blocks=seen,
            )
            await spec.run(prompt, max_new, end_id, stop_words, streaming, emit)
        except RequestAbandoned:
            sender.send(pb_utils.InferenceResponse(output_tensors=[]), flags=final_flag)
        except Exception as exc:  # one bad request must not take the model down
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc))),
                        flags=final_flag)

    def _inputs(self, tokens: list[int], out_len: int, end_id: int, pad_id: int,
                salt_id: int | None) -> list[object]:
        t = pb_utils.Tensor
        inputs = [
            t("input_ids", np.array([tokens], dtype=np.int32)),
            t("input_lengths", np.array([[len(tokens)]], dtype=np.int32)),
            t("request_output_len", np.array([[out_len]], dtype=np.int32)),
            t("end_id", np.array([[end_id]], dtype=np.int32)),
            t("pad_id", np.array([[pad_id]], dtype=np.int32)),
            t("exclude_input_in_output", np.array([[True]], dtype=bool)),
        ]
        if salt_id is not None:
            inputs.append(t("cache_salt_id", np.array([[salt_id]], dtype=np.uint64)))
        return inputs

    def _draft_fn(self, end_id: int, pad_id: int, salt_id: int | None) -> DraftFn:
        async def draft(tokens: list[int], k: int) -> list[int]:
            req = pb_utils.InferenceRequest(
                model_name=self.draft_model, requested_output_names=["output_ids", "sequence_length"],
                inputs=self._inputs(tokens, k, end_id, pad_id, salt_id),
            )
            resp = await req.async_exec()
            if resp.has_error():
                raise RuntimeError(resp.error().message())
            return _new_tokens(resp)

        return draft

    def _target_fn(self, end_id: int, pad_id: int, temperature: object, salt_id: int | None) -> TargetFn:
        async def target(tokens: list[int], draft: list[int], out_len: int,
                         streaming: bool) -> AsyncIterator[tuple[list[int], int | None]]:
            inputs = self._inputs(tokens, out_len, end_id, pad_id, salt_id)
            inputs.append(pb_utils.Tensor("streaming", np.array([[streaming]], dtype=bool)))
            inputs.append(pb_utils.Tensor("return_perf_metrics", np.array([[True]], dtype=bool)))
            if draft:
                inputs.append(pb_utils.Tensor("draft_input_ids", np.array([draft], dtype=np.int32)))
            if temperature is not None:
                inputs.append(pb_utils.Tensor("temperature", np.array([[temperature]], dtype=np.float32)))
            req = pb_utils.InferenceRequest(
                model_name=self.target_model,
                requested_output_names=["output_ids", "sequence_length", "kv_cache_reused_blocks"],
                inputs=inputs,
            )
            # The target is decoupled (it streams on the non-speculative path).
            async for resp in await req.async_exec(decoupled=True):
                if resp.has_error():
                    raise RuntimeError(resp.error().message())
                if pb_utils.get_output_tensor_by_name(resp, "output_ids") is None:
                    continue  # the empty final-flag response
                reused_t = pb_utils.get_output_tensor_by_name(resp, "kv_cache_reused_blocks")
                reused = None if reused_t is None else int(reused_t.as_numpy().reshape(-1)[0])
                yield _new_tokens(resp), reused

        return target

    def _response(self, tokens: list[int], f: Figures) -> object:
        t = pb_utils.Tensor
        i32 = np.int32
        return pb_utils.InferenceResponse(output_tensors=[
            t("output_ids", np.array([[tokens]], dtype=i32)),
            t("sequence_length", np.array([[len(tokens)]], dtype=i32)),
            t("ctx_prompt_tokens", np.array([[f.prompt_tokens]], dtype=i32)),
            t("ctx_cached_tokens", np.array([[f.cached_tokens]], dtype=i32)),
            t("ctx_completion_tokens", np.array([[f.completion_tokens]], dtype=i32)),
            t("ctx_draft_tokens_proposed", np.array([[f.draft_proposed]], dtype=i32)),
            t("ctx_draft_tokens_accepted", np.array([[f.draft_accepted]], dtype=i32)),
            t("ctx_kv_bytes", np.array([[-1]], dtype=i32)),  # unknown here: the worker reads -1 as missing
            t("ctx_restored_tokens", np.array([[-1]], dtype=i32)),  # no disk tier on this path
            t("ctx_restore_ms", np.array([[-1]], dtype=i32)),
            t("ctx_finish_reason", np.array([[f.finish_reason.encode()]], dtype=object)),
        ])


def _new_tokens(resp: object) -> list[int]:
    out = pb_utils.get_output_tensor_by_name(resp, "output_ids").as_numpy()  # [1, beam, len]
    seq = pb_utils.get_output_tensor_by_name(resp, "sequence_length")
    row = out.reshape(-1, out.shape[-1])[0]
    n = row.shape[0] if seq is None else min(int(seq.as_numpy().reshape(-1)[0]), row.shape[0])
    return row[:n].astype(np.int32).tolist()
