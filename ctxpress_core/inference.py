"""Triton tensor contract between the workers and any inference backend.

The names follow TensorRT-LLM's ``ensemble`` model (tensorrtllm_backend,
``all_models/inflight_batcher_llm/ensemble/config.pbtxt``) so that a worker cannot
tell the embedded CPU engine from a GPU deployment. The ``CTX_*`` outputs are our
per-request figures; a GPU deployment produces them from its BLS model, and a
backend that does not know them simply omits them (the worker treats a missing
figure as unknown, never as zero).
"""

from __future__ import annotations

from dataclasses import dataclass

# The model a worker talks to. TensorRT-LLM calls its text-in/text-out model "ensemble".
COMPLETION_MODEL = "ensemble"
# The embedding model (issue 5) is served the same way, as a second Triton model.
EMBEDDING_MODEL = "embedder"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    triton_dtype: str  # Triton wire dtype: "BYTES", "INT32", "FP32", "BOOL", "UINT64"
    dims: tuple[int, ...]
    optional: bool = False


CTX_CACHE_KEY = "ctx_cache_key"
CTX_SPECULATION = "ctx_speculation"
CTX_REQUEST_ID = "ctx_request_id"
CTX_DEADLINE_MS = "ctx_deadline_ms"
# Character offsets in ``text_input`` where the prompt template's own special tokens (serving.fim.TEMPLATE_MARKERS)
# begin; everything else is text, tokenized with special tokens off, so a file containing "<|fim_middle|>" cannot
# steer the model. Absent: the whole input is parsed for special tokens (what a TensorRT-LLM ensemble does).
# Negative offsets are ignored (a prompt without markers sends [-1]).
CTX_TEMPLATE_MARKERS = "ctx_template_markers"
# Whose prompts a request's KV may be reused from, and whose earlier prompts its ``ctx_cached_tokens`` may count:
# a keyed hash of the user (context.prompt.cache_salt), never the name. An engine that shares KV blocks across
# requests (TensorRT-LLM) would otherwise tell one user, through that figure, what another one sent. The embedded
# CPU engine also shares its time between users by this value (serving.engine.scheduler).
CTX_CACHE_SALT = "ctx_cache_salt"
# The request's user's weight in those shares (1 by default; below 1 for a user the worker knows to be flooding:
# workers.fair_share.Flooding), clamped to [CTX_SHARE_MIN, 1].
CTX_SHARE = "ctx_share"
CTX_SHARE_MIN = 1 / 64
# A second model of the embedded server: ``ctx_request_id`` in, the request is abandoned (dropped
# from the engine's queue, or stopped at its next prompt chunk or decode step, its KV kept).
CANCEL_MODEL = "ctxpress_cancel"

# Inputs the worker sends. dims exclude the batch dimension (Triton's max_batch_size > 0 convention).
COMPLETION_INPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("text_input", "BYTES", (1,)),
    TensorSpec("max_tokens", "INT32", (1,)),
    TensorSpec("stream", "BOOL", (1,), optional=True),
    TensorSpec("temperature", "FP32", (1,), optional=True),
    TensorSpec("stop_words", "BYTES", (-1,), optional=True),
    # Our extensions (a TensorRT-LLM ensemble ignores unknown optional inputs of its BLS model):
    # the file a prompt belongs to, for the engine's file-level KV pool ("" = none), and the
    # speculation mode ("auto" | "none" | "ngram" | "draft"; "" = the engine's default).
    TensorSpec("ctx_cache_key", "BYTES", (1,), optional=True),
    TensorSpec("ctx_speculation", "BYTES", (1,), optional=True),
    # The caller's id for the request (what ``CANCEL_MODEL`` names) and how many milliseconds it
    # still waits when it sends it: past that nobody reads the answer, so the engine drops it.
    TensorSpec(CTX_REQUEST_ID, "BYTES", (1,), optional=True),
    TensorSpec(CTX_DEADLINE_MS, "INT32", (1,), optional=True),
    TensorSpec(CTX_TEMPLATE_MARKERS, "INT32", (-1,), optional=True),
    TensorSpec(CTX_CACHE_SALT, "BYTES", (1,), optional=True),
    TensorSpec(CTX_SHARE, "FP32", (1,), optional=True),
)

# Outputs the worker reads.
COMPLETION_OUTPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("text_output", "BYTES", (-1,)),
)

# Extra per-request figures (one INT32 each); optional on every backend.
CTX_PROMPT_TOKENS = "ctx_prompt_tokens"
CTX_CACHED_TOKENS = "ctx_cached_tokens"
CTX_COMPLETION_TOKENS = "ctx_completion_tokens"
CTX_DRAFT_PROPOSED = "ctx_draft_tokens_proposed"
CTX_DRAFT_ACCEPTED = "ctx_draft_tokens_accepted"
CTX_FINISH_REASON = "ctx_finish_reason"  # BYTES: "stop" | "length" | "error"
CTX_KV_BYTES = "ctx_kv_bytes"  # KV memory of the request's sequence after it, in bytes
# Of the cached tokens, those read back from the KV pool's disk tier, and the milliseconds it took.
CTX_RESTORED_TOKENS = "ctx_restored_tokens"
CTX_RESTORE_MS = "ctx_restore_ms"

FIGURE_OUTPUTS: tuple[TensorSpec, ...] = (
    TensorSpec(CTX_PROMPT_TOKENS, "INT32", (1,), optional=True),
    TensorSpec(CTX_CACHED_TOKENS, "INT32", (1,), optional=True),
    TensorSpec(CTX_COMPLETION_TOKENS, "INT32", (1,), optional=True),
    TensorSpec(CTX_DRAFT_PROPOSED, "INT32", (1,), optional=True),
    TensorSpec(CTX_DRAFT_ACCEPTED, "INT32", (1,), optional=True),
    TensorSpec(CTX_KV_BYTES, "INT32", (1,), optional=True),
    TensorSpec(CTX_RESTORED_TOKENS, "INT32", (1,), optional=True),
    TensorSpec(CTX_RESTORE_MS, "INT32", (1,), optional=True),
    TensorSpec(CTX_FINISH_REASON, "BYTES", (1,), optional=True),
)

# The embedding model: one text in, one L2-normalised vector out per batch row. A GPU deployment
# serves the same ONNX file with Triton's onnxruntime backend behind these names.
EMBEDDING_DIM = 384
# the embedder's weights, recorded with every index so that vectors of another model are never compared
EMBEDDING_MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
EMBEDDING_MAX_BATCH = 32
EMBEDDING_INPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("text", "BYTES", (1,)),
)
EMBEDDING_OUTPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("embedding", "FP32", (EMBEDDING_DIM,)),
)
