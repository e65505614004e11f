"""Other weight formats made from the packaged GGUF, for the kernel-path benchmark:
``python -m benchmarks.weight_formats [q4_0 q8_0 ...]`` writes ``<models dir>/<name>-<format>.gguf`` and prints
their paths (then ``python -m ctxpress.evaluation.kernel_paths --model PATH``).

Only the packaged Q4_K_M target is available (no F16 or Q8_0 of it is packaged, and nothing is downloaded),
so these are *re*-quantised from it with llama.cpp's own quantizer (``allow_requantize``): right for speed,
since ggml's kernels and repacking depend on the format only, but a re-quantised Q4_0 has lost more than one
made from F16, so its quality figures would understate a real Q4_0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q4_k_m": 15}  # llama.cpp's LLAMA_FTYPE_MOSTLY_*


def requantize(source: Path, target: Path, ftype: int, threads: int) -> float:
    """Seconds llama.cpp took to write ``target`` in ``ftype`` from ``source``."""
    from llama_cpp import llama_cpp as C

    from serving.engine.cpu_kernels import load_cpu_backend

    load_cpu_backend()
    params = C.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    params.allow_requantize = True
    started = time.perf_counter()
    partial = target.with_suffix(".partial")
    if C.llama_model_quantize(str(source).encode(), str(partial).encode(), params) != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp could not quantize {source} to {target.name}")
    partial.replace(target)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.weight_formats", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("formats", nargs="*", default=["q4_0", "q8_0"], choices=sorted(FTYPES))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    from ctxpress_core.settings import get_settings
    from serving.weights import TARGET, ensure_model

    source = ensure_model(TARGET, get_settings().models_dir)
    for name in args.formats:
        target = source.with_name(source.name.replace("q4_k_m", name))
        if not target.exists():
            seconds = requantize(source, target, FTYPES[name], args.threads)
            print(f"{name}: {target.stat().st_size / 2**20:.0f} MiB in {seconds:.0f} s", file=sys.stderr)
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
