"""The CPU engine's configuration: the model, its KV cache (cells, slots, cell type, disk tier) and
speculation (the draft model, the default mode)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SPECULATION_MODES = ("auto", "none", "ngram", "draft")


@dataclass
class EngineConfig:
    model_path: Path
    n_ctx: int = 4096  # KV cells per sequence: the longest prompt + completion one file may have
    n_threads: int = 0
    n_batch: int = 512
    kv_type: str = "f16"  # "f16" | "q8_0" | "q4_0"
    n_slots: int = 4  # files whose KV is kept at once
    draft_model_path: Path | None = None
    draft_n_ctx: int = 4096
    speculation: str = "auto"  # default per request: "auto" | "none" | "ngram" | "draft"
    kv_disk_dir: Path | None = None  # the pool's disk tier (None: off)
    kv_disk_budget_bytes: int = 0
    cpu_kernels: str | None = None  # "auto" | "amx" | "avx512" | "avx2"; None: CTXPRESS_CPU_KERNELS, else auto
