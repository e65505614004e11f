"""Which of llama.cpp's CPU kernels this process runs (AMX, AVX-512 or AVX2), chosen at run time.

llama-cpp-python is built with ggml's CPU backend as loadable variants (``GGML_BACKEND_DL`` and
``GGML_CPU_ALL_VARIANTS``, the Makefile's install rule): one ``libggml-cpu-<microarch>.so`` per x86-64
generation beside ``libllama.so``, none of them loaded until asked. Before the first model loads (so
before llama.cpp starts any thread) :func:`load_cpu_backend`:

1. asks Linux for the AMX tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``): without
   it the first tile instruction of a process is an illegal instruction (SIGILL), whatever CPUID says;
2. scores the variants of the path asked for with ggml's own ``ggml_backend_score`` (0: this CPU lacks
   an instruction set the variant was compiled for) and loads the best, never an AMX one unless the
   CPU has AMX *and* the kernel granted the tile state.

``CTXPRESS_CPU_KERNELS`` (or ``EngineConfig.cpu_kernels``) forces a path: ``auto`` (the default, the
best this host runs), ``amx``, ``avx512`` or ``avx2``; a path this CPU cannot run is refused with
:class:`KernelPathUnavailable`, never run. The choice holds for the whole process: ggml keeps one CPU
backend, so another path needs another process (the tests and ``ctxpress/evaluation/kernel_paths.py`` start one
per path).

A llama.cpp built the old way (one ``libggml-cpu.so`` linked in, no variants) still runs: its kernels are
reported as ``builtin`` and only ``auto`` is accepted.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ctxpress_core.errors import InferenceUnavailable

ENV = "CTXPRESS_CPU_KERNELS"
KERNEL_PATHS = ("auto", "amx", "avx512", "avx2")

# ggml's x86-64 variants (ggml/src/CMakeLists.txt, GGML_CPU_ALL_VARIANTS) by the matrix kernels they run.
VARIANT_PATHS = {
    "sapphirerapids": "amx",
    "zen4": "avx512", "cooperlake": "avx512", "icelake": "avx512", "cascadelake": "avx512",
    "cannonlake": "avx512", "skylakex": "avx512",
    "alderlake": "avx2", "haswell": "avx2",
    "piledriver": "avx", "ivybridge": "avx", "sandybridge": "avx",
    "sse42": "sse", "x64": "sse",
}

# Linux x86-64: asm/prctl.h and the xstate feature numbers.
SYS_ARCH_PRCTL = 158
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


class KernelPathUnavailable(InferenceUnavailable):
    """The kernel path asked for does not run on this host (or in this build, or this process): the engine cannot
    start as configured."""


@dataclass(frozen=True)
class AmxPermission:
    """What the CPU reports and what Linux answered to the request for the AMX tile state."""

    cpu_has_amx: bool  # /proc/cpuinfo lists amx_tile and amx_int8
    asked: bool  # the arch_prctl request was made (Linux on x86-64 only)
    granted: bool  # XTILEDATA is in the process's permitted xstate features afterwards
    reason: str  # "granted", or why not (the errno of the request)


@dataclass(frozen=True)
class CpuBackend:
    """The CPU backend this process loaded."""

    requested: str  # auto | amx | avx512 | avx2
    path: str  # amx | avx512 | avx2 | avx | sse | builtin
    variant: str  # ggml's variant name (zen4, haswell, sapphirerapids...) or "builtin"
    library: Path | None
    amx: AmxPermission
    features: dict[str, str] = field(default_factory=dict)  # ggml_backend_get_features of the backend
    scores: dict[str, int] = field(default_factory=dict)  # the candidates' ggml_backend_score

    def summary(self) -> dict[str, object]:
        return {"requested": self.requested, "path": self.path, "variant": self.variant,
                "amx_cpu": self.amx.cpu_has_amx, "amx_granted": self.amx.granted, "amx_reason": self.amx.reason}


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


def _linux_x86_64() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


def permitted_xfeatures() -> int | None:
    """The process's permitted xstate feature mask (ARCH_GET_XCOMP_PERM), or None where unknown."""
    if not _linux_x86_64():
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(0)
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_GET_XCOMP_PERM), ctypes.byref(mask)) != 0:
        return None
    return int(mask.value)


def request_amx() -> AmxPermission:
    """Ask Linux for the AMX tile state for this process (all its threads, present and future); safe
    to repeat, and on a CPU without AMX the kernel simply refuses."""
    flags = cpu_flags()
    has = {"amx_tile", "amx_int8"} <= flags
    if not _linux_x86_64():
        return AmxPermission(has, asked=False, granted=False, reason=f"not Linux on x86-64 ({sys.platform})")
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                      ctypes.c_long(XFEATURE_XTILEDATA))
    err = ctypes.get_errno() if rc != 0 else 0
    mask = permitted_xfeatures()
    granted = rc == 0 and mask is not None and bool(mask >> XFEATURE_XTILEDATA & 1)
    if granted:
        reason = "granted"
    elif rc != 0:
        reason = f"refused: {os.strerror(err)} (errno {err})" + ("" if has else "; the CPU reports no AMX")
    else:
        reason = "accepted but XTILEDATA is not in the permitted features"
    return AmxPermission(has, asked=True, granted=granted, reason=reason)


def requested_path(kernels: str | None = None) -> str:
    choice = (kernels or os.environ.get(ENV) or "auto").strip().lower()
    if choice not in KERNEL_PATHS:
        raise ValueError(f"unknown CPU kernel path {choice!r} ({ENV}); choose one of {', '.join(KERNEL_PATHS)}")
    return choice


def variant_of(library: Path) -> str:
    """``libggml-cpu-zen4.so`` -> ``zen4``."""
    return library.name.removeprefix("libggml-cpu-").split(".so")[0]


def path_of(variant: str) -> str:
    return VARIANT_PATHS.get(variant, "other")


_lock = threading.Lock()
_loaded: CpuBackend | None = None


def load_cpu_backend(kernels: str | None = None) -> CpuBackend:
    """Load the CPU backend for ``kernels`` (None: ``CTXPRESS_CPU_KERNELS``, else auto) once per process;
    later calls return it, or refuse a different forced path."""
    global _loaded
    choice = requested_path(kernels)
    with _lock:
        if _loaded is None:
            _loaded = _load(choice)
        elif choice != "auto" and choice != _loaded.path:
            raise KernelPathUnavailable(f"this process already runs the {_loaded.path} kernels "
                                        f"({_loaded.variant}); the path is chosen once per process")
        return _loaded


def _ggml() -> tuple[ctypes.CDLL, Path]:
    import llama_cpp.llama_cpp as binding  # loads libllama, and with it libggml and libggml-base

    lib_dir = Path(binding.__file__).parent / "lib"
    # ggml's functions as libllama sees them (dlsym searches a library's dependencies): the wheel holds
    # libggml.so and libggml.so.0 as two files, and opening the first by its path would load a second ggml
    # with a registry of its own, which llama.cpp never sees.
    ggml: ctypes.CDLL = binding._lib
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    ggml.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_reg_get.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_name.restype = ctypes.c_char_p
    ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    return ggml, lib_dir


class _Feature(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


def _features(ggml: ctypes.CDLL, reg: int) -> dict[str, str]:
    address = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
    if not address:
        return {}
    get = ctypes.CFUNCTYPE(ctypes.POINTER(_Feature), ctypes.c_void_p)(address)
    found: dict[str, str] = {}
    table = get(reg)
    i = 0
    while table[i].name is not None:
        found[table[i].name.decode()] = (table[i].value or b"").decode()
        i += 1
    return found


def _cpu_reg(ggml: ctypes.CDLL) -> int | None:
    for i in range(ggml.ggml_backend_reg_count()):
        reg = ggml.ggml_backend_reg_get(i)
        if (ggml.ggml_backend_reg_name(reg) or b"").decode().upper() == "CPU":
            return int(reg)
    return None


def _score(library: Path) -> int:
    """ggml's own score of a variant on this CPU (what ggml_backend_load_best compares); 0: it does not
    run here. Only the variant's feature check runs, compiled without its instruction sets."""
    try:
        handle = ctypes.CDLL(str(library), mode=os.RTLD_LOCAL | os.RTLD_LAZY)
        score = handle.ggml_backend_score
    except (OSError, AttributeError):
        return 0
    score.restype = ctypes.c_int
    return int(score())


def _load(choice: str) -> CpuBackend:
    amx = request_amx()  # first: before any of llama.cpp's threads, before any variant is scored or loaded
    ggml, lib_dir = _ggml()
    existing = _cpu_reg(ggml)
    variants = sorted(lib_dir.glob("libggml-cpu-*.so"))
    if existing is not None or not variants:
        # A build with the CPU backend linked in, or one loaded before us: its kernels are what they are.
        if existing is None:
            raise KernelPathUnavailable(f"no CPU backend in {lib_dir}: neither libggml-cpu-*.so variants nor a "
                                        "built-in one (reinstall with `make install`)")
        if choice != "auto":
            raise KernelPathUnavailable(f"this llama.cpp build has no loadable CPU variants in {lib_dir}, so the "
                                        f"{choice} kernels cannot be forced (reinstall with `make install`)")
        return CpuBackend(choice, "builtin", "builtin", None, amx, _features(ggml, existing))

    flags = cpu_flags()
    candidates = [lib for lib in variants
                  if _allowed(path_of(variant_of(lib)), choice, amx) and _cpu_can(path_of(variant_of(lib)), flags)]
    if choice == "amx" and not amx.granted:
        raise KernelPathUnavailable(f"AMX kernels asked for, but the AMX tile state is not available: {amx.reason}")
    scores = {variant_of(lib): _score(lib) for lib in candidates}
    runnable = [lib for lib in candidates if scores[variant_of(lib)] > 0]
    if not runnable:
        raise KernelPathUnavailable(f"no {choice} variant of llama.cpp's CPU backend runs on this CPU "
                                    f"(scores: {scores or 'no such variant built'})")
    best = max(runnable, key=lambda lib: scores[variant_of(lib)])
    reg = ggml.ggml_backend_load(str(best).encode())
    if not reg:
        raise KernelPathUnavailable(f"ggml could not load {best}")
    variant = variant_of(best)
    return CpuBackend(choice, path_of(variant), variant, best, amx, _features(ggml, reg), scores)


# What /proc/cpuinfo must list before a path's variants are even opened for scoring (ggml's score then
# checks each variant's exact instruction sets with CPUID).
PATH_FLAGS = {
    "amx": {"amx_tile", "amx_int8", "avx512f", "avx512_vnni"},
    "avx512": {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"},
    "avx2": {"avx2", "fma", "f16c"},
}


def _cpu_can(path: str, flags: set[str]) -> bool:
    return not flags or PATH_FLAGS.get(path, set()) <= flags


def _allowed(path: str, choice: str, amx: AmxPermission) -> bool:
    if path == "amx" and not amx.granted:
        return False  # its tile instructions would stop the process
    return choice == "auto" or path == choice
