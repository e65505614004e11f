"""Which of ggml's x86-64 CPU variants llama.cpp is compiled as for this host (``make install``, ``make peer``), and
how a loaded variant is recognised again (``serving.engine.cpu_kernels``).

ggml's ``GGML_CPU_ALL_VARIANTS`` (ggml/src/CMakeLists.txt of the pinned llama.cpp) compiles its CPU backend once per
x86-64 generation below. ``make install`` compiles only the one this host would load out of them (the highest
``ggml_backend_score`` its CPU runs): the same CMake feature switches as that variant, so the same kernels, once
instead of 13 times. ``GGML_NATIVE`` (``-march=native``) is not used: ggml refuses it beside ``GGML_BACKEND_DL``
on x86, and the loadable backend is what lets the engine check with ggml's own score, before loading, that the
build runs on the CPU it meets. The AMX variant is chosen only where the CPU lists AMX *and* Linux grants the tile
state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); elsewhere the best variant without AMX.

The Makefile runs this file with the system Python, before the virtualenv exists, so it imports nothing outside
the standard library::

    python3 serving/llama_build.py host   # this host's variant, then its CMake switches:
                                          # zen4 -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_SSE42=ON …
"""

from __future__ import annotations

import ctypes
import platform
import sys
from pathlib import Path

# ggml's CMake switches of an x86 variant, in the order ggml_add_cpu_backend_variant turns them off first.
X86_FEATURES = ("SSE42", "AVX", "AVX2", "BMI2", "AVX_VNNI", "FMA", "F16C",
                "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16")

_HASWELL = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")
# ggml/src/CMakeLists.txt (GGML_CPU_ALL_VARIANTS, x86): each variant and the switches it is compiled with.
VARIANTS: dict[str, tuple[str, ...]] = {
    "x64": (),
    "sse42": ("SSE42",),
    "sandybridge": ("SSE42", "AVX"),
    "ivybridge": ("SSE42", "AVX", "F16C"),
    "piledriver": ("SSE42", "AVX", "F16C", "FMA"),
    "haswell": _HASWELL,
    "skylakex": (*_HASWELL, "AVX512"),
    "cannonlake": (*_HASWELL, "AVX512", "AVX512_VBMI"),
    "cascadelake": (*_HASWELL, "AVX512", "AVX512_VNNI"),
    "icelake": (*_HASWELL, "AVX512", "AVX512_VBMI", "AVX512_VNNI"),
    "cooperlake": (*_HASWELL, "AVX512", "AVX512_VNNI", "AVX512_BF16"),
    "zen4": (*_HASWELL, "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"),
    "alderlake": (*_HASWELL, "AVX_VNNI"),
    "sapphirerapids": (*_HASWELL, "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8"),
}

# The matrix kernels a variant runs (what CTXPRESS_CPU_KERNELS names).
VARIANT_PATHS = {
    "sapphirerapids": "amx",
    "zen4": "avx512", "cooperlake": "avx512", "icelake": "avx512", "cascadelake": "avx512",
    "cannonlake": "avx512", "skylakex": "avx512",
    "alderlake": "avx2", "haswell": "avx2",
    "piledriver": "avx", "ivybridge": "avx", "sandybridge": "avx",
    "sse42": "sse", "x64": "sse",
}

# What /proc/cpuinfo lists for each switch.
CPUINFO_FLAGS = {
    "SSE42": {"sse4_2"}, "AVX": {"avx"}, "F16C": {"f16c"}, "FMA": {"fma"}, "AVX2": {"avx2"}, "BMI2": {"bmi2"},
    "AVX_VNNI": {"avx_vnni"}, "AVX512": {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"},
    "AVX512_VBMI": {"avx512vbmi"}, "AVX512_VNNI": {"avx512_vnni"}, "AVX512_BF16": {"avx512_bf16"},
    "AMX_TILE": {"amx_tile"}, "AMX_INT8": {"amx_int8"}, "AMX_BF16": {"amx_bf16"},
}

# ggml_backend_cpu_x86_score (ggml-cpu/arch/x86/cpu-feats.cpp): 1, plus this bit for each switch compiled in, or 0
# where the CPU lacks one. So a variant's score, less 1, names the switches it was compiled with.
SCORE_BITS = {"FMA": 1, "F16C": 1 << 1, "SSE42": 1 << 2, "BMI2": 1 << 3, "AVX": 1 << 4, "AVX2": 1 << 5,
              "AVX_VNNI": 1 << 6, "AVX512": 1 << 7, "AVX512_VBMI": 1 << 8, "AVX512_BF16": 1 << 9,
              "AVX512_VNNI": 1 << 10, "AMX_INT8": 1 << 11}

# Linux x86-64: asm/prctl.h and the xstate feature numbers.
SYS_ARCH_PRCTL = 158
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty where there is no /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def linux_x86_64() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


def amx_tile_state_granted() -> bool:
    """Whether Linux grants this process the AMX tile state (it is asked for; harmless where refused)."""
    if not linux_x86_64():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                    ctypes.c_long(XFEATURE_XTILEDATA)) != 0:
        return False
    mask = ctypes.c_ulong(0)
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_GET_XCOMP_PERM), ctypes.byref(mask)) != 0:
        return False
    return bool(mask.value >> XFEATURE_XTILEDATA & 1)


def score(variant: str, flags: set[str]) -> int:
    """ggml's score of ``variant`` on a CPU listing ``flags`` (0: it does not run there)."""
    features = VARIANTS[variant]
    if any(not CPUINFO_FLAGS[f] <= flags for f in features):
        return 0
    return 1 + sum(SCORE_BITS.get(f, 0) for f in features)


def best_variant(flags: set[str], amx_granted: bool) -> str:
    """The variant ggml would load on this CPU out of all of them; never AMX without the tile state."""
    runnable = {v: score(v, flags) for v in VARIANTS if amx_granted or VARIANT_PATHS[v] != "amx"}
    return max(runnable, key=lambda v: runnable[v])


def features_of_score(value: int) -> frozenset[str] | None:
    """The switches a variant was compiled with, read back from its score on a CPU that runs it (None: 0)."""
    if value <= 0:
        return None
    bits = value - 1
    return frozenset(f for f, bit in SCORE_BITS.items() if bits & bit)


def variant_of_score(value: int) -> str | None:
    """The variant of ggml's list whose score this is (AMX_TILE is not scored, AMX_INT8 is), or None."""
    features = features_of_score(value)
    if features is None:
        return None
    for name, switches in VARIANTS.items():
        if frozenset(s for s in switches if s in SCORE_BITS) == features:
            return name
    return None


def variant_cmake_args(variant: str) -> list[str]:
    """The CMake switches that compile ggml's CPU backend as ``variant`` alone (what ggml_add_cpu_backend_variant
    sets), as one loadable library (GGML_BACKEND_DL)."""
    on = set(VARIANTS[variant])
    return ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON",
            *(f"-DGGML_{f}={'ON' if f in on else 'OFF'}" for f in X86_FEATURES)]


def host_variant() -> str:
    """This host's variant, or ``native`` where ggml has no variants to choose from (not Linux on x86-64)."""
    if not linux_x86_64() or not cpu_flags():
        return "native"
    return best_variant(cpu_flags(), amx_tile_state_granted())


def host_cmake_args(variant: str) -> list[str]:
    if variant == "native":  # another architecture: ggml's own -march=native, its CPU backend linked in
        return ["-DGGML_NATIVE=ON", "-DGGML_BACKEND_DL=OFF"]
    return variant_cmake_args(variant)


def main(argv: list[str]) -> int:
    if argv != ["host"]:
        print("usage: python3 serving/llama_build.py host", file=sys.stderr)
        return 2
    variant = host_variant()
    print(" ".join([variant, *host_cmake_args(variant)]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
