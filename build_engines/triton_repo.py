"""Write the Triton model repository for the engines described by a BUILD.json.

Models (see docs/gpu.md for why the orchestration is a BLS model of ours):

    ensemble ─┬─ preprocessing         (python: tokenize, stop words -> ids)
              ├─ ctxpress_speculative  (python BLS, decoupled: draft outside the batch,
              │     ├─ tensorrt_llm_draft   target verification batched in flight)
              │     └─ tensorrt_llm         (target, draft_tokens_external)
              └─ postprocessing        (python: detokenize)

Workers only ever call ``ensemble`` with the tensor names of ctxpress_core/inference.py.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from build_engines.manifest import read_manifest
from build_engines.pbtxt import Tensor, ensemble_step, parameters, q, tensors
from build_engines.plan import Layout

ENSEMBLE = "ensemble"
PREPROCESSING = "preprocessing"
POSTPROCESSING = "postprocessing"
TARGET = "tensorrt_llm"
DRAFT = "tensorrt_llm_draft"
ORCHESTRATOR = "ctxpress_speculative"

_TEMPLATES = Path(__file__).parent / "triton_models"

# Worker-facing tensors. They must equal ctxpress_core/inference.py (the tests compare them);
# they are repeated here because build_engines may not import serving.
ENSEMBLE_INPUTS = [
    Tensor("text_input", "TYPE_STRING", (1,)),
    Tensor("max_tokens", "TYPE_INT32", (1,)),
    Tensor("stream", "TYPE_BOOL", (1,), optional=True),
    Tensor("temperature", "TYPE_FP32", (1,), optional=True),
    Tensor("stop_words", "TYPE_STRING", (-1,), optional=True),
    Tensor("ctx_cache_key", "TYPE_STRING", (1,), optional=True),
    Tensor("ctx_speculation", "TYPE_STRING", (1,), optional=True),
    Tensor("ctx_request_id", "TYPE_STRING", (1,), optional=True),
    Tensor("ctx_deadline_ms", "TYPE_INT32", (1,), optional=True),
    Tensor("ctx_template_markers", "TYPE_INT32", (-1,), optional=True),
    Tensor("ctx_cache_salt", "TYPE_STRING", (1,), optional=True),
    Tensor("ctx_share", "TYPE_FP32", (1,), optional=True),
]
FIGURES = [
    Tensor("ctx_prompt_tokens", "TYPE_INT32", (1,)),
    Tensor("ctx_cached_tokens", "TYPE_INT32", (1,)),
    Tensor("ctx_completion_tokens", "TYPE_INT32", (1,)),
    Tensor("ctx_draft_tokens_proposed", "TYPE_INT32", (1,)),
    Tensor("ctx_draft_tokens_accepted", "TYPE_INT32", (1,)),
    Tensor("ctx_kv_bytes", "TYPE_INT32", (1,)),
    Tensor("ctx_restored_tokens", "TYPE_INT32", (1,)),
    Tensor("ctx_restore_ms", "TYPE_INT32", (1,)),
    Tensor("ctx_finish_reason", "TYPE_STRING", (1,)),
]
ENSEMBLE_OUTPUTS = [Tensor("text_output", "TYPE_STRING", (-1,)), *FIGURES]


@dataclass(frozen=True)
class RepoSettings:
    engines: Path
    out: Path
    engines_mount: Path | None = None  # where `engines` is mounted inside the Triton container
    max_batch_size: int | None = None  # default: the engine's
    # The seed's latency-first batching window: wait at most 5 ms to fill a batch.
    max_queue_delay_us: int = 5000
    # Fractions of *free* GPU memory at load time; the draft loads into what the target left.
    target_kv_fraction: float = 0.6
    draft_kv_fraction: float = 0.25
    # Speculation pays off only on long prompts (seed: > 1024 tokens); shorter ones go straight to the target.
    speculate_min_prompt_tokens: int = 1024
    preprocessing_instances: int = 4
    priority_levels: int = 2
    # Send each request's salt to the engines as `cache_salt_id` (TensorRT-LLM's per-request KV reuse salt), so
    # one user's requests never reuse another's blocks. Off by default: the tensorrtllm backend as of the pinned
    # version reads no such input (docs/security.md, round 3), and the reported figure is scoped without it.
    engine_cache_salt: bool = False


def _common_trtllm_params(engine_dir: str, fraction: float, reuse: bool, chunked: bool) -> dict[str, str]:
    return {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": engine_dir,
        "max_beam_width": "1",
        # Latency first: never pause a running request to admit another one.
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": f"{fraction:g}",
        "enable_kv_cache_reuse": "true" if reuse else "false",
        "enable_chunked_context": "true" if chunked else "false",
        # The orchestrator wants only new tokens back, not the prompt echoed.
        "exclude_input_in_output": "true",
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
    }


_TRTLLM_INPUTS = [
    Tensor("input_ids", "TYPE_INT32", (-1,), ragged=True),
    Tensor("input_lengths", "TYPE_INT32", (1,), scalar=True),
    Tensor("request_output_len", "TYPE_INT32", (1,), scalar=True),
    Tensor("draft_input_ids", "TYPE_INT32", (-1,), optional=True, ragged=True),
    Tensor("end_id", "TYPE_INT32", (1,), optional=True, scalar=True),
    Tensor("pad_id", "TYPE_INT32", (1,), optional=True, scalar=True),
    Tensor("stop_words_list", "TYPE_INT32", (2, -1), optional=True, ragged=True),
    Tensor("bad_words_list", "TYPE_INT32", (2, -1), optional=True, ragged=True),
    Tensor("temperature", "TYPE_FP32", (1,), optional=True, scalar=True),
    Tensor("runtime_top_k", "TYPE_INT32", (1,), optional=True, scalar=True),
    Tensor("runtime_top_p", "TYPE_FP32", (1,), optional=True, scalar=True),
    Tensor("beam_width", "TYPE_INT32", (1,), optional=True, scalar=True),
    Tensor("streaming", "TYPE_BOOL", (1,), optional=True, scalar=True),
    Tensor("exclude_input_in_output", "TYPE_BOOL", (1,), optional=True, scalar=True),
    Tensor("return_perf_metrics", "TYPE_BOOL", (1,), optional=True, scalar=True),
    Tensor("return_num_input_tokens", "TYPE_BOOL", (1,), optional=True, scalar=True),
    Tensor("return_num_output_tokens", "TYPE_BOOL", (1,), optional=True, scalar=True),
    Tensor("stop", "TYPE_BOOL", (1,), optional=True, scalar=True),
]
# Declared only with RepoSettings.engine_cache_salt: the uint64 salt the executor's Request takes.
_CACHE_SALT_INPUT = Tensor("cache_salt_id", "TYPE_UINT64", (1,), optional=True, scalar=True)
_TRTLLM_OUTPUTS = [
    Tensor("output_ids", "TYPE_INT32", (-1, -1)),
    Tensor("sequence_length", "TYPE_INT32", (-1,)),
    Tensor("kv_cache_alloc_new_blocks", "TYPE_INT32", (1,)),
    Tensor("kv_cache_reused_blocks", "TYPE_INT32", (1,)),
    Tensor("kv_cache_alloc_total_blocks", "TYPE_INT32", (1,)),
    Tensor("acceptance_rate", "TYPE_FP32", (1,)),
    Tensor("total_accepted_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("total_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("num_input_tokens", "TYPE_INT32", (1,)),
    Tensor("num_output_tokens", "TYPE_INT32", (1,)),
]


def _dynamic_batching(delay_us: int, priority_levels: int) -> str:
    # Two priority levels mirror the seed's two queues: level 1 for requests the worker
    # marks as already late (>5 ms waiting), level 2 (default) for fresh ones.
    return (
        "dynamic_batching {\n"
        f"  max_queue_delay_microseconds: {delay_us}\n"
        f"  priority_levels: {priority_levels}\n"
        f"  default_priority_level: {priority_levels}\n"
        "}"
    )


def trtllm_config(name: str, engine_dir: str, s: RepoSettings, batch: int, fraction: float,
                  reuse: bool, chunked: bool, decoupled: bool) -> str:
    return "\n".join([
        f"name: {q(name)}",
        'backend: "tensorrtllm"',
        f"max_batch_size: {batch}",
        f"model_transaction_policy {{ decoupled: {'true' if decoupled else 'false'} }}",
        _dynamic_batching(s.max_queue_delay_us, s.priority_levels),
        tensors("input", [*_TRTLLM_INPUTS, _CACHE_SALT_INPUT] if s.engine_cache_salt else _TRTLLM_INPUTS),
        tensors("output", _TRTLLM_OUTPUTS),
        # The backend places the engine on the GPU itself; Triton's instance is a CPU handle.
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
        parameters(_common_trtllm_params(engine_dir, fraction, reuse, chunked)),
    ]) + "\n"


PRE_INPUTS = [
    Tensor("QUERY", "TYPE_STRING", (1,)),
    Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (1,)),
    Tensor("STOP_WORDS_DICT", "TYPE_STRING", (-1,), optional=True),
]
PRE_OUTPUTS = [
    Tensor("INPUT_ID", "TYPE_INT32", (-1,)),
    Tensor("REQUEST_INPUT_LEN", "TYPE_INT32", (1,)),
    Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (1,)),
    Tensor("STOP_WORDS_IDS", "TYPE_INT32", (2, -1)),
    Tensor("OUT_END_ID", "TYPE_INT32", (1,)),
    Tensor("OUT_PAD_ID", "TYPE_INT32", (1,)),
]
POST_INPUTS = [
    Tensor("TOKENS_BATCH", "TYPE_INT32", (-1, -1)),
    Tensor("SEQUENCE_LENGTH", "TYPE_INT32", (-1,)),
]
POST_OUTPUTS = [Tensor("OUTPUT", "TYPE_STRING", (-1,))]
ORCH_INPUTS = [
    Tensor("input_ids", "TYPE_INT32", (-1,)),
    Tensor("input_lengths", "TYPE_INT32", (1,)),
    Tensor("request_output_len", "TYPE_INT32", (1,)),
    Tensor("end_id", "TYPE_INT32", (1,)),
    Tensor("pad_id", "TYPE_INT32", (1,)),
    Tensor("stop_words_list", "TYPE_INT32", (2, -1), optional=True),
    Tensor("temperature", "TYPE_FP32", (1,), optional=True),
    Tensor("streaming", "TYPE_BOOL", (1,), optional=True),
    # TensorRT-LLM reuses KV blocks by prefix on its own (enable_kv_cache_reuse): the file key is
    # accepted for the wire contract and not needed; "none" turns the draft model off.
    Tensor("ctx_cache_key", "TYPE_STRING", (1,), optional=True),
    Tensor("ctx_speculation", "TYPE_STRING", (1,), optional=True),
    # The caller's deadline: past it nobody reads the answer, so generation stops (a cancelled gRPC
    # stream stops it too, through Triton's request cancellation).
    Tensor("ctx_request_id", "TYPE_STRING", (1,), optional=True),
    Tensor("ctx_deadline_ms", "TYPE_INT32", (1,), optional=True),
    # The offsets of the prompt template's own FIM markers: accepted for the wire contract; this path's
    # preprocessor tokenizes with the tokenizer's own special-token matching (see docs/security.md).
    Tensor("ctx_template_markers", "TYPE_INT32", (-1,), optional=True),
    # Whose earlier prompts the reply's cached tokens may count, and (engine_cache_salt) the engine may reuse.
    Tensor("ctx_cache_salt", "TYPE_STRING", (1,), optional=True),
    # The user's weight in the CPU engine's shares between users: accepted for the wire contract; TensorRT-LLM's
    # in-flight batching serves requests side by side instead of in turns.
    Tensor("ctx_share", "TYPE_FP32", (1,), optional=True),
]
ORCH_OUTPUTS = [Tensor("output_ids", "TYPE_INT32", (-1, -1)), Tensor("sequence_length", "TYPE_INT32", (-1,)), *FIGURES]


def python_config(name: str, batch: int, inputs: list[Tensor], outputs: list[Tensor], params: dict[str, str],
                  instances: int, decoupled: bool = False, batching: str | None = None) -> str:
    parts = [f"name: {q(name)}", 'backend: "python"', f"max_batch_size: {batch}"]
    if decoupled:
        parts.append("model_transaction_policy { decoupled: true }")
    if batching:
        parts.append(batching)
    parts += [
        tensors("input", inputs),
        tensors("output", outputs),
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]",
        parameters(params),
    ]
    return "\n".join(parts) + "\n"


def ensemble_config(batch: int) -> str:
    steps = [
        ensemble_step(
            PREPROCESSING,
            {"QUERY": "text_input", "REQUEST_OUTPUT_LEN": "max_tokens", "STOP_WORDS_DICT": "stop_words"},
            {"INPUT_ID": "_INPUT_ID", "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
             "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN", "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
             "OUT_END_ID": "_END_ID", "OUT_PAD_ID": "_PAD_ID"},
        ),
        ensemble_step(
            ORCHESTRATOR,
            {"input_ids": "_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
             "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_END_ID", "pad_id": "_PAD_ID",
             "stop_words_list": "_STOP_WORDS_IDS", "temperature": "temperature", "streaming": "stream",
             "ctx_cache_key": "ctx_cache_key", "ctx_speculation": "ctx_speculation",
             "ctx_request_id": "ctx_request_id", "ctx_deadline_ms": "ctx_deadline_ms",
             "ctx_template_markers": "ctx_template_markers", "ctx_cache_salt": "ctx_cache_salt",
             "ctx_share": "ctx_share"},
            {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH",
             **{f.name: f.name for f in FIGURES}},
        ),
        ensemble_step(
            POSTPROCESSING,
            {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"},
            {"OUTPUT": "text_output"},
        ),
    ]
    return "\n".join([
        f"name: {q(ENSEMBLE)}",
        'platform: "ensemble"',
        f"max_batch_size: {batch}",
        tensors("input", ENSEMBLE_INPUTS),
        tensors("output", ENSEMBLE_OUTPUTS),
        "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}",
    ]) + "\n"


def _tokens_per_block(engine: dict[str, object]) -> int:
    build = engine.get("engine_build_config")
    if isinstance(build, dict):
        plugin = build.get("plugin_config")
        if isinstance(plugin, dict) and isinstance(plugin.get("tokens_per_block"), int):
            return int(plugin["tokens_per_block"])
    return 32  # fallback only for ctx_cached_tokens arithmetic; the engine's value wins


def write_repository(s: RepoSettings, echo: object = print) -> list[Path]:
    """Write every model directory; returns the config.pbtxt paths written."""
    say = echo if callable(echo) else print
    manifest = read_manifest(s.engines)
    resolved = manifest["resolved"]
    options = manifest["options"]
    engines = manifest["engines"]
    assert isinstance(resolved, dict) and isinstance(options, dict) and isinstance(engines, dict)
    batch = s.max_batch_size or int(options["max_batch_size"])
    reuse = bool(resolved["kv_cache_reuse"])
    chunked = bool(resolved["paged_context_fmha"])
    speculative = bool(resolved["speculative"]) and "draft" in engines
    mount = s.engines_mount or s.engines.resolve()
    layout = Layout(mount)
    tokenizer_dir = str(layout.tokenizer)

    if s.out.exists():
        shutil.rmtree(s.out)
    written: list[Path] = []

    def model(name: str, config: str, template: str | None) -> None:
        d = s.out / name
        (d / "1").mkdir(parents=True)
        if template:
            shutil.copyfile(_TEMPLATES / template, d / "1" / "model.py")
        (d / "config.pbtxt").write_text(config)
        written.append(d / "config.pbtxt")
        say(f"  wrote {name}/config.pbtxt")

    say(f"triton-repo: {s.out} (speculative={'on' if speculative else 'off'}, kv reuse={'on' if reuse else 'off'})")
    tok = {"tokenizer_dir": tokenizer_dir}
    model(PREPROCESSING, python_config(PREPROCESSING, batch, PRE_INPUTS, PRE_OUTPUTS, tok, s.preprocessing_instances),
          "preprocessing.py")
    model(POSTPROCESSING, python_config(POSTPROCESSING, batch, POST_INPUTS, POST_OUTPUTS,
                                        {**tok, "skip_special_tokens": "true"}, s.preprocessing_instances),
          "postprocessing.py")
    model(TARGET, trtllm_config(TARGET, str(layout.engine("target")), s, batch, s.target_kv_fraction,
                                reuse, chunked, decoupled=True), None)
    if speculative:
        model(DRAFT, trtllm_config(DRAFT, str(layout.engine("draft")), s, batch, s.draft_kv_fraction,
                                   reuse, chunked, decoupled=False), None)
    orch_params = {
        "target_model": TARGET,
        "draft_model": DRAFT if speculative else "",
        "max_draft_len": str(resolved["max_draft_len"] if speculative else 0),
        "speculate_min_prompt_tokens": str(s.speculate_min_prompt_tokens),
        "tokens_per_block": str(_tokens_per_block(engines["target"])),
        "engine_cache_salt": "true" if s.engine_cache_salt else "false",
    }
    # No queue delay here: the window belongs to the target, where verification is batched.
    model(ORCHESTRATOR, python_config(ORCHESTRATOR, batch, ORCH_INPUTS, ORCH_OUTPUTS, orch_params, 1,
                                      decoupled=True, batching=_dynamic_batching(0, s.priority_levels)),
          "speculative.py")
    model(ENSEMBLE, ensemble_config(batch), None)
    (s.out / ENSEMBLE / "1" / ".keep").write_text("")
    say(f"triton-repo: {len(written)} models written; serve with tritonserver --model-repository {s.out}")
    return written
