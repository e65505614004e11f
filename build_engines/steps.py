"""Entry point for the plan's own steps: ``python3 -m build_engines.steps SUBCOMMAND``.

Steps run as separate processes (like trtllm-build) so a dry-run script and a real run
execute exactly the same commands.
"""

from __future__ import annotations

import argparse
import inspect
import os
import runpy
import shutil
import sys
from pathlib import Path

from build_engines.calibration import build_calibration_set
from build_engines.manifest import write_manifest

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model",
    "special_tokens_map.json", "generation_config.json", "config.json",
)

# Defaults of examples/quantization/quantize.py (TensorRT-LLM 1.x) for the keyword-only
# parameters of quantize_and_export that we do not set ourselves.
_QUANTIZE_DEFAULTS: dict[str, object] = {
    "device": "cuda", "device_map": "auto", "batch_size": 1, "awq_block_size": 128,
    "pp_size": 1, "cp_size": 1, "seed": 1234, "tokenizer_max_seq_length": 2048,
    "num_medusa_heads": 4, "num_medusa_layers": 1, "max_draft_len": 63, "medusa_hidden_act": "silu",
    "medusa_model_dir": None, "quant_medusa_head": False, "auto_quantize_bits": None,
    "quantize_lm_head": False, "export_format": "tensorrt_llm", "kv_cache_dtype": None,
}


def _quantize(argv: list[str]) -> int:
    """Run quantize.py with its own flags.

    The pip wheel does not ship ``examples/``; inside NVIDIA's container it lives at
    $TRTLLM_EXAMPLES_DIR. Without it we call the library function quantize.py wraps.
    """
    examples = os.environ.get("TRTLLM_EXAMPLES_DIR")
    script = Path(examples, "quantization", "quantize.py") if examples else None
    if script is not None and script.exists():
        sys.argv = [str(script), *argv]
        runpy.run_path(str(script), run_name="__main__")
        return 0
    p = argparse.ArgumentParser(prog="quantize")
    for flag in ("model_dir", "output_dir", "dtype", "qformat", "calib_dataset", "kv_cache_dtype"):
        p.add_argument(f"--{flag}")
    for flag in ("tp_size", "calib_size", "calib_max_seq_length"):
        p.add_argument(f"--{flag}", type=int)
    args = p.parse_args(argv)
    from tensorrt_llm.quantization import quantize_and_export  # GPU host only

    given = {k: v for k, v in vars(args).items()}
    params = inspect.signature(quantize_and_export).parameters
    kwargs = {name: given[name] if name in given else _QUANTIZE_DEFAULTS.get(name) for name in params}
    quantize_and_export(**kwargs)
    return 0


def _copy_tokenizer(src: Path, dst: Path) -> int:
    dst.mkdir(parents=True, exist_ok=True)
    copied = [n for n in TOKENIZER_FILES if (src / n).exists()]
    for name in copied:
        shutil.copy2(src / name, dst / name)
    if not any(n in copied for n in ("tokenizer.json", "vocab.json", "tokenizer.model")):
        print(f"no tokenizer files in {src}", file=sys.stderr)
        return 1
    print(f"copied {len(copied)} tokenizer files to {dst}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python3 -m build_engines.steps {calibrate,quantize,copy-tokenizer,manifest} ...", file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "quantize":
        return _quantize(rest)
    p = argparse.ArgumentParser(prog=f"build_engines.steps {cmd}")
    if cmd == "calibrate":
        p.add_argument("--repo", type=Path, required=True)
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--size", type=int, default=256)
        p.add_argument("--max-chars", type=int, default=4096)
        a = p.parse_args(rest)
        s = build_calibration_set(a.repo, a.out, a.size, a.max_chars)
        print(f"calibration set: {s.samples} samples from {s.files} files of {s.source_repo} (sha256 {s.sha256[:12]})")
        return 0
    if cmd == "copy-tokenizer":
        p.add_argument("--src", type=Path, required=True)
        p.add_argument("--dst", type=Path, required=True)
        a = p.parse_args(rest)
        return _copy_tokenizer(a.src, a.dst)
    if cmd == "manifest":
        p.add_argument("--out", type=Path, required=True)
        a = p.parse_args(rest)
        m = write_manifest(a.out, progress=lambda msg: print(msg, flush=True))
        print(f"wrote {a.out / 'BUILD.json'} ({len(m['engines'])} engines)")  # type: ignore[arg-type]
        return 0
    print(f"unknown step {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
