"""The completion model's tensors: a request decoded from Triton's inputs, a response encoded as its outputs.

Names and shapes are TensorRT-LLM's ``ensemble`` plus our figures (``ctxpress_core.inference``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxpress_core import inference
from serving.engine.generation import GenerationFigures


def _scalar(inputs: dict[str, np.ndarray], name: str, default: Any) -> Any:
    value = inputs.get(name)
    if value is None or value.size == 0:
        return default
    return value.reshape(-1)[0]


def _share(raw: Any) -> float:
    value = float(raw)
    return min(1.0, max(inference.CTX_SHARE_MIN, value)) if math.isfinite(value) else 1.0


def text_value(inputs: dict[str, np.ndarray], name: str) -> str:
    raw = _scalar(inputs, name, b"")
    return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)


def _decode_list(value: np.ndarray | None) -> list[str]:
    if value is None:
        return []
    out = []
    for item in value.reshape(-1):
        text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
        if text:
            out.append(text)
    return out


def response_tensors(text: str, figures: GenerationFigures, *, final: bool = True) -> dict[str, np.ndarray]:
    """One response of a completion; a streamed piece before the last says no finish reason (empty)."""
    def i32(v: int) -> np.ndarray:
        return np.array([[v]], dtype=np.int32)

    return {
        "text_output": np.array([[text.encode("utf-8")]], dtype=object),
        inference.CTX_PROMPT_TOKENS: i32(figures.prompt_tokens),
        inference.CTX_CACHED_TOKENS: i32(figures.cached_tokens),
        inference.CTX_COMPLETION_TOKENS: i32(figures.completion_tokens),
        inference.CTX_DRAFT_PROPOSED: i32(figures.draft_proposed),
        inference.CTX_DRAFT_ACCEPTED: i32(figures.draft_accepted),
        inference.CTX_KV_BYTES: i32(figures.kv_bytes),
        inference.CTX_RESTORED_TOKENS: i32(figures.restored_tokens),
        inference.CTX_RESTORE_MS: i32(round(figures.restore_ms)),
        inference.CTX_FINISH_REASON: np.array([[figures.finish_reason.encode() if final else b""]], dtype=object),
    }


@dataclass(frozen=True)
class CompletionInputs:
    """One completion request's inputs, decoded from Triton's tensors."""

    prompt: str
    max_tokens: int
    stream: bool
    temperature: float
    stop: list[str]
    cache_key: str | None
    speculation: str | None
    budget_ms: int  # the caller's deadline from now (0: none)
    markers: list[int] | None  # where the template's special tokens are (None: parse the whole prompt)
    request_id: str | None
    tenant: str | None  # whose request it is, for the engine's shares between users (the cache salt's keyed hash)
    share: float  # the tenant's weight in those shares (inference.CTX_SHARE)

    @classmethod
    def of(cls, inputs: dict[str, np.ndarray]) -> CompletionInputs:
        raw = _scalar(inputs, "text_input", b"")
        raw_markers = inputs.get(inference.CTX_TEMPLATE_MARKERS)
        return cls(
            prompt=raw.decode("utf-8") if isinstance(raw, bytes) else str(raw),
            max_tokens=int(_scalar(inputs, "max_tokens", 64)),
            stream=bool(_scalar(inputs, "stream", False)),
            temperature=float(_scalar(inputs, "temperature", 0.0)),
            stop=_decode_list(inputs.get("stop_words")),
            cache_key=text_value(inputs, inference.CTX_CACHE_KEY) or None,
            speculation=text_value(inputs, inference.CTX_SPECULATION) or None,
            budget_ms=int(_scalar(inputs, inference.CTX_DEADLINE_MS, 0)),
            markers=None if raw_markers is None else [int(m) for m in np.asarray(raw_markers).reshape(-1)],
            request_id=text_value(inputs, inference.CTX_REQUEST_ID) or None,
            tenant=text_value(inputs, inference.CTX_CACHE_SALT) or None,
            share=_share(_scalar(inputs, inference.CTX_SHARE, 1.0)),
        )
