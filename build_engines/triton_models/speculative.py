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
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
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


@dataclass
class Speculator:
    draft: DraftFn | None
    target: TargetFn
    max_draft_len: int
    min_prompt_tokens: int
    tokens_per_block: int
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
                f.cached_tokens = reused * self.tokens_per_block
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
    return default if t is None else t.as_numpy().reshape(-1)[0].item()


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

            speculation = _scalar(request, "ctx_speculation", b"")
            speculation = speculation.decode() if isinstance(speculation, bytes) else str(speculation or "")
            spec = Speculator(
                draft=self._draft_fn(end_id, pad_id) if self.draft_model and speculation != "none" else None,
                target=self._target_fn(end_id, pad_id, temperature),
                max_draft_len=self.max_draft_len,
                min_prompt_tokens=self.min_prompt_tokens,
                tokens_per_block=self.tokens_per_block,
            )
            await spec.run(prompt, max_new, end_id, stop_words, streaming, emit)
        except RequestAbandoned:
            sender.send(pb_utils.InferenceResponse(output_tensors=[]), flags=final_flag)
        except Exception as exc:  # one bad request must not take the model down
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc))),
                        flags=final_flag)

    def _inputs(self, tokens: list[int], out_len: int, end_id: int, pad_id: int) -> list[object]:
        t = pb_utils.Tensor
        return [
            t("input_ids", np.array([tokens], dtype=np.int32)),
            t("input_lengths", np.array([[len(tokens)]], dtype=np.int32)),
            t("request_output_len", np.array([[out_len]], dtype=np.int32)),
            t("end_id", np.array([[end_id]], dtype=np.int32)),
            t("pad_id", np.array([[pad_id]], dtype=np.int32)),
            t("exclude_input_in_output", np.array([[True]], dtype=bool)),
        ]

    def _draft_fn(self, end_id: int, pad_id: int) -> DraftFn:
        async def draft(tokens: list[int], k: int) -> list[int]:
            req = pb_utils.InferenceRequest(
                model_name=self.draft_model, requested_output_names=["output_ids", "sequence_length"],
                inputs=self._inputs(tokens, k, end_id, pad_id),
            )
            resp = await req.async_exec()
            if resp.has_error():
                raise RuntimeError(resp.error().message())
            return _new_tokens(resp)

        return draft

    def _target_fn(self, end_id: int, pad_id: int, temperature: object) -> TargetFn:
        async def target(tokens: list[int], draft: list[int], out_len: int,
                         streaming: bool) -> AsyncIterator[tuple[list[int], int | None]]:
            inputs = self._inputs(tokens, out_len, end_id, pad_id)
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
