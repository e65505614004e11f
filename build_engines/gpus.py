"""GPU families the build supports and what their hardware can do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuFamily:
    name: str
    compute_capability: str
    # FP8 tensor cores exist from SM 8.9 (Ada) on; Ampere (SM 8.0/8.6) has none.
    fp8: bool
    default_weights: str
    default_kv_cache: str


GPU_FAMILIES: dict[str, GpuFamily] = {
    # Ampere: no FP8, and INT8 KV cannot be combined with paged context FMHA (which draft
    # decoding and KV reuse need), so the default KV cache stays in the model dtype.
    "ampere": GpuFamily("ampere", "8.0/8.6", fp8=False, default_weights="int8_wo", default_kv_cache="fp16"),
    # Ada and Hopper: FP8 weights+activations make FP8 KV legal with paged context FMHA;
    # FP8 KV is the 8-bit KV cache the seed's INT8 KV becomes on these GPUs.
    "ada": GpuFamily("ada", "8.9", fp8=True, default_weights="fp8", default_kv_cache="fp8"),
    "hopper": GpuFamily("hopper", "9.0", fp8=True, default_weights="fp8", default_kv_cache="fp8"),
}
