"""Build options and the compatibility rules checked before any GPU time is spent.

Each rule names the TensorRT-LLM source it comes from (see docs/gpu.md for the versions
read). A refusal is raised as :class:`IncompatibleOptions` carrying every broken rule at
once, so one run tells the user everything that must change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from build_engines.gpus import GPU_FAMILIES, GpuFamily

# Our names -> quantize.py --qformat values. "fp16" means "keep the checkpoint dtype".
WEIGHT_FORMATS: dict[str, str] = {
    "fp16": "full_prec",
    "int8_wo": "int8_wo",
    "int4_awq": "int4_awq",
    "fp8": "fp8",
}
# Our names -> quantize.py --kv_cache_dtype values (None: KV stays in the model dtype).
KV_CACHE_FORMATS: dict[str, str | None] = {"fp16": None, "int8": "int8", "fp8": "fp8"}


class IncompatibleOptions(ValueError):
    """The requested combination is known not to build or not to run."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("refusing to build:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class BuildOptions:
    target: Path
    draft: Path | None
    gpu: str
    out: Path
    weights: str = "auto"
    kv_cache: str = "auto"
    paged_context_fmha: bool = True
    kv_cache_reuse: bool = True
    max_draft_len: int = 5
    # Completion workloads: a cropped prompt of up to ~3k tokens, short outputs.
    max_input_len: int = 3072
    max_output_len: int = 256
    max_batch_size: int = 32
    max_num_tokens: int = 8192
    tp_size: int = 1
    dtype: str = "auto"
    calib_repo: Path = field(default_factory=lambda: Path("."))
    calib_size: int = 256
    calib_max_seq_len: int = 1024

    @property
    def family(self) -> GpuFamily:
        return GPU_FAMILIES[self.gpu]

    @property
    def resolved_weights(self) -> str:
        return self.family.default_weights if self.weights == "auto" else self.weights

    @property
    def resolved_kv_cache(self) -> str:
        return self.family.default_kv_cache if self.kv_cache == "auto" else self.kv_cache

    @property
    def max_seq_len(self) -> int:
        return self.max_input_len + self.max_output_len

    @property
    def speculative(self) -> bool:
        return self.draft is not None


def validate(opts: BuildOptions) -> list[str]:
    """Return every reason this combination must not be built (empty list: fine)."""
    problems: list[str] = []
    if opts.gpu not in GPU_FAMILIES:
        return [f"unknown GPU family {opts.gpu!r}; choose one of {sorted(GPU_FAMILIES)}"]
    weights, kv = opts.resolved_weights, opts.resolved_kv_cache
    if weights not in WEIGHT_FORMATS:
        problems.append(f"unknown weight format {weights!r}; choose one of {sorted(WEIGHT_FORMATS)}")
    if kv not in KV_CACHE_FORMATS:
        problems.append(f"unknown KV cache format {kv!r}; choose one of {sorted(KV_CACHE_FORMATS)}")
    if problems:
        return problems

    fam = opts.family
    if not fam.fp8 and "fp8" in (weights, kv):
        problems.append(
            f"FP8 needs SM 8.9 or newer; {fam.name} (SM {fam.compute_capability}) has no FP8 tensor cores. "
            "Use --weights int8_wo and --kv-cache fp16 on Ampere."
        )
    if kv == "int8" and opts.paged_context_fmha:
        # tensorrt_llm/builder.py raises "Paged Context FMHA doesn't work with int8 kv cache
        # currently." and the attention kernels assert the same (NVIDIA/TensorRT-LLM#2166).
        problems.append(
            "INT8 KV cache cannot be combined with paged context FMHA (TensorRT-LLM builder check; "
            "NVIDIA/TensorRT-LLM issue 2166). Paged context FMHA is what KV cache reuse and "
            "draft-target decoding need. On Ada/Hopper use --kv-cache fp8 (with --weights fp8); "
            "on Ampere keep --kv-cache fp16, or give up draft and reuse: "
            "--no-paged-context-fmha --no-kv-reuse and no --draft."
        )
    if kv == "fp8" and opts.paged_context_fmha and weights != "fp8":
        # builder.py: "FP8 Paged Context FMHA only works with fp8 quantization workflow currently."
        problems.append(
            "FP8 KV cache with paged context FMHA only works in the FP8 quantization workflow "
            "(--weights fp8); TensorRT-LLM builder check."
        )
    if opts.speculative and not opts.paged_context_fmha:
        # examples/draft_target_model/README.md: --use_paged_context_fmha=enable must be specified.
        problems.append("draft-target speculative decoding needs paged context FMHA (--paged-context-fmha).")
    if opts.speculative and not opts.kv_cache_reuse:
        # Every draft-target step resends prompt + accepted tokens; without block reuse the
        # target recomputes the whole prompt each step and speculation becomes a slowdown.
        problems.append("draft-target decoding needs KV cache reuse (drop --no-kv-reuse or the --draft).")
    if opts.kv_cache_reuse and not opts.paged_context_fmha:
        # docs/source/kv_cache_reuse.md: reuse requires a model built for paged context attention.
        problems.append("KV cache reuse needs an engine built with paged context FMHA (or pass --no-kv-reuse).")
    if opts.speculative and not 1 <= opts.max_draft_len <= 16:
        problems.append(f"--max-draft-len must be between 1 and 16 (got {opts.max_draft_len}); 4-10 is usual.")
    if opts.max_input_len < 1 or opts.max_output_len < 1:
        problems.append("--max-input-len and --max-output-len must be positive.")
    if opts.speculative and opts.draft is not None:
        problems.extend(_tokenizer_mismatch(opts.target, opts.draft))
    return problems


def _tokenizer_mismatch(target: Path, draft: Path) -> list[str]:
    """Draft and target must share a vocabulary: verification compares token ids."""
    try:
        t = json.loads((target / "config.json").read_text())
        d = json.loads((draft / "config.json").read_text())
    except (OSError, ValueError):
        return []  # checkpoints not present here (a dry run on another host): nothing to compare
    if t.get("vocab_size") != d.get("vocab_size"):
        return [
            (
                f"draft vocab_size {d.get('vocab_size')} != target vocab_size {t.get('vocab_size')}: "
                "draft tokens would be meaningless to the target."
            )
        ]
    return []


def check(opts: BuildOptions) -> None:
    problems = validate(opts)
    if problems:
        raise IncompatibleOptions(problems)
