"""``ctxpress build-engines`` and ``ctxpress triton-repo``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from build_engines.gpus import GPU_FAMILIES
from build_engines.options import (
    KV_CACHE_FORMATS,
    WEIGHT_FORMATS,
    BuildOptions,
    IncompatibleOptions,
)
from build_engines.plan import make_plan
from build_engines.runner import render_script, run_plan
from build_engines.triton_repo import RepoSettings, write_repository


def _on_off(p: argparse.ArgumentParser, name: str, default: bool, help_text: str) -> None:
    p.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=default, help=help_text)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    b = subparsers.add_parser(
        "build-engines",
        help="build TensorRT-LLM target (and draft) engines, or print the build as a script",
        description="Quantize and build TensorRT-LLM engines; refuses known-bad flag combinations up front.",
    )
    b.add_argument("--target", type=Path, required=True, help="HF checkpoint directory of the target model")
    b.add_argument("--draft", type=Path, help="HF checkpoint directory of the draft model (same tokenizer)")
    b.add_argument("--gpu", choices=sorted(GPU_FAMILIES), required=True)
    b.add_argument("--out", type=Path, required=True, help="output directory (engines, tokenizer, BUILD.json)")
    b.add_argument("--dry-run", action="store_true", help="print the build as a shell script instead of running it")
    b.add_argument("--weights", choices=["auto", *WEIGHT_FORMATS], default="auto",
                   help="weight format (auto: fp8 on ada/hopper, int8_wo on ampere)")
    b.add_argument("--kv-cache", choices=["auto", *KV_CACHE_FORMATS], default="auto",
                   help="KV cache format (auto: fp8 on ada/hopper, fp16 on ampere)")
    _on_off(b, "paged-context-fmha", True, "build with paged context FMHA (needed by KV reuse and draft decoding)")
    _on_off(b, "kv-reuse", True, "engine will serve with KV cache block reuse")
    b.add_argument("--max-draft-len", type=int, default=5)
    b.add_argument("--max-input-len", type=int, default=3072)
    b.add_argument("--max-output-len", type=int, default=256)
    b.add_argument("--max-batch-size", type=int, default=32)
    b.add_argument("--max-num-tokens", type=int, default=8192)
    b.add_argument("--tp-size", type=int, default=1)
    b.add_argument("--calib-repo", type=Path, default=Path("."),
                   help="repository whose code calibrates quantization (the one being served)")
    b.add_argument("--calib-size", type=int, default=256)
    b.set_defaults(func=build_engines_command)

    t = subparsers.add_parser("triton-repo", help="write the Triton model repository for built engines")
    t.add_argument("--engines", type=Path, required=True, help="the --out directory of build-engines")
    t.add_argument("--out", type=Path, required=True, help="model repository to (re)write")
    t.add_argument("--engines-mount", type=Path,
                   help="path of --engines inside the Triton container (default: its path here)")
    t.add_argument("--max-batch-size", type=int)
    t.add_argument("--queue-delay-us", type=int, default=5000)
    t.add_argument("--target-kv-fraction", type=float, default=0.6)
    t.add_argument("--draft-kv-fraction", type=float, default=0.25)
    t.add_argument("--speculate-min-prompt-tokens", type=int, default=1024)
    t.add_argument("--engine-cache-salt", action="store_true",
                   help="send each user's KV cache salt to the engines as cache_salt_id (needs a tensorrtllm "
                        "backend that reads it; see docs/security.md)")
    t.set_defaults(func=triton_repo_command)


def options_from_args(a: argparse.Namespace) -> BuildOptions:
    return BuildOptions(
        target=a.target, draft=a.draft, gpu=a.gpu, out=a.out, weights=a.weights, kv_cache=a.kv_cache,
        paged_context_fmha=a.paged_context_fmha, kv_cache_reuse=a.kv_reuse, max_draft_len=a.max_draft_len,
        max_input_len=a.max_input_len, max_output_len=a.max_output_len, max_batch_size=a.max_batch_size,
        max_num_tokens=a.max_num_tokens, tp_size=a.tp_size, calib_repo=a.calib_repo, calib_size=a.calib_size,
    )


def build_engines_command(a: argparse.Namespace) -> int:
    opts = options_from_args(a)
    try:
        steps = make_plan(opts)
    except IncompatibleOptions as exc:
        print(f"build-engines: {exc}", file=sys.stderr)
        return 2
    if a.dry_run:
        sys.stdout.write(render_script(opts, steps))
        return 0
    return run_plan(opts, steps)


def triton_repo_command(a: argparse.Namespace) -> int:
    settings = RepoSettings(
        engines=a.engines, out=a.out, engines_mount=a.engines_mount, max_batch_size=a.max_batch_size,
        max_queue_delay_us=a.queue_delay_us, target_kv_fraction=a.target_kv_fraction,
        draft_kv_fraction=a.draft_kv_fraction, speculate_min_prompt_tokens=a.speculate_min_prompt_tokens,
        engine_cache_salt=a.engine_cache_salt,
    )
    write_repository(settings)
    return 0
