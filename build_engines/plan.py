"""Turn validated :class:`BuildOptions` into an ordered list of shell-level steps.

The same plan is either executed (:mod:`build_engines.runner`) or printed as a shell
script (:mod:`build_engines.script`), so a dry run shows exactly what a real run does.
Flags are those of TensorRT-LLM 1.2.x ``trtllm-build`` and ``examples/quantization/quantize.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from build_engines import TENSORRT_LLM_VERSION
from build_engines.options import KV_CACHE_FORMATS, WEIGHT_FORMATS, BuildOptions, check

# Marks argv[0] of steps that run this package; the runner swaps in sys.executable.
PYTHON = "python3"


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Layout:
    """Where everything lands under --out. triton-repo reads the same layout."""

    out: Path

    @property
    def manifest(self) -> Path:
        return self.out / "BUILD.json"

    @property
    def plan_json(self) -> Path:
        return self.out / "work" / "plan.json"

    @property
    def calib_dir(self) -> Path:
        return self.out / "work" / "calibration"

    def checkpoint(self, role: str) -> Path:
        return self.out / "work" / "checkpoints" / role

    def engine(self, role: str) -> Path:
        return self.out / "engines" / role

    @property
    def tokenizer(self) -> Path:
        return self.out / "tokenizer"


def quantize_argv(opts: BuildOptions, layout: Layout, role: str, model_dir: Path) -> tuple[str, ...]:
    argv = [
        PYTHON, "-m", "build_engines.steps", "quantize",
        "--model_dir", str(model_dir),
        "--output_dir", str(layout.checkpoint(role)),
        "--dtype", opts.dtype,
        "--qformat", WEIGHT_FORMATS[opts.resolved_weights],
        "--tp_size", str(opts.tp_size),
        # Calibration on code from the repository being served, never generic news text:
        # KV and activation ranges of code differ from prose (indentation runs, identifiers).
        "--calib_dataset", str(layout.calib_dir),
        "--calib_size", str(opts.calib_size),
        "--calib_max_seq_length", str(opts.calib_max_seq_len),
    ]
    kv = KV_CACHE_FORMATS[opts.resolved_kv_cache]
    if kv is not None:
        argv += ["--kv_cache_dtype", kv]
    return tuple(argv)


def trtllm_build_argv(opts: BuildOptions, layout: Layout, role: str) -> tuple[str, ...]:
    argv = [
        "trtllm-build",
        "--checkpoint_dir", str(layout.checkpoint(role)),
        "--output_dir", str(layout.engine(role)),
        "--max_batch_size", str(opts.max_batch_size),
        "--max_input_len", str(opts.max_input_len),
        "--max_seq_len", str(opts.max_seq_len),
        "--max_num_tokens", str(opts.max_num_tokens),
        "--max_beam_width", "1",
        # Paged KV is what in-flight batching and block reuse work on.
        "--kv_cache_type", "paged",
        "--gemm_plugin", "auto",
        "--use_paged_context_fmha", "enable" if opts.paged_context_fmha else "disable",
    ]
    if opts.resolved_kv_cache == "fp8" and opts.paged_context_fmha:
        # The builder turns this on itself for FP8 KV + paged context FMHA; say it explicitly.
        argv += ["--use_fp8_context_fmha", "enable"]
    if role == "target" and opts.speculative:
        argv += ["--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", str(opts.max_draft_len)]
    return tuple(argv)


def make_plan(opts: BuildOptions) -> list[Step]:
    """Validate, then list every step. Raises IncompatibleOptions before anything runs."""
    check(opts)
    layout = Layout(opts.out)
    roles: list[tuple[str, Path]] = [("target", opts.target)]
    if opts.draft is not None:
        roles.append(("draft", opts.draft))
    steps = [
        Step(
            "calibration set",
            (PYTHON, "-m", "build_engines.steps", "calibrate", "--repo", str(opts.calib_repo),
             "--out", str(layout.calib_dir), "--size", str(opts.calib_size),
             "--max-chars", str(opts.calib_max_seq_len * 4)),
            "samples of the served repository's own code for activation/KV calibration",
        )
    ]
    for role, model_dir in roles:
        steps.append(Step(
            f"quantize {role}", quantize_argv(opts, layout, role, model_dir),
            f"weights {opts.resolved_weights}, KV cache {opts.resolved_kv_cache} -> TensorRT-LLM checkpoint",
        ))
    for role, _ in roles:
        steps.append(Step(f"trtllm-build {role}", trtllm_build_argv(opts, layout, role), f"{role} engine"))
    steps.append(Step(
        "tokenizer",
        (PYTHON, "-m", "build_engines.steps", "copy-tokenizer",
         "--src", str(opts.target), "--dst", str(layout.tokenizer)),
        "pre/postprocessing tokenize with the target's tokenizer (the draft shares it)",
    ))
    steps.append(Step(
        "manifest",
        (PYTHON, "-m", "build_engines.steps", "manifest", "--out", str(opts.out)),
        "BUILD.json: versions, flags, hashes, calibration set, date",
    ))
    return steps


def plan_record(opts: BuildOptions, steps: list[Step]) -> dict[str, object]:
    """What the manifest step reads back: the options and the exact commands."""
    raw = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
    return {
        "tensorrt_llm_pinned": TENSORRT_LLM_VERSION,
        "options": raw,
        "resolved": {
            "weights": opts.resolved_weights,
            "kv_cache": opts.resolved_kv_cache,
            "max_seq_len": opts.max_seq_len,
            "speculative": opts.speculative,
            "max_draft_len": opts.max_draft_len if opts.speculative else 0,
            "kv_cache_reuse": opts.kv_cache_reuse,
            "paged_context_fmha": opts.paged_context_fmha,
        },
        "steps": [{"name": s.name, "argv": list(s.argv)} for s in steps],
    }
