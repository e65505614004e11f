"""Which of llama.cpp's CPU kernels this process runs (AMX, AVX-512 or AVX2), chosen at run time.

llama-cpp-python is built with ggml's CPU backend as a loadable library (``GGML_BACKEND_DL``, the Makefile's
install rule), not loaded until asked: by default the one variant of ggml's list this host runs best
(``libggml-cpu.so``, compiled with that variant's switches: ``serving/llama_build.py``), or with
``LLAMA_VARIANTS=all`` one ``libggml-cpu-<microarch>.so`` per x86-64 generation. Before the first model loads (so
before llama.cpp starts any thread) :func:`load_cpu_backend`:

1. asks Linux for the AMX tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``): without
   it the first tile instruction of a process is an illegal instruction (SIGILL), whatever CPUID says;
2. scores the variants of the path asked for with ggml's own ``ggml_backend_score`` (0: this CPU lacks
   an instruction set the variant was compiled for) and loads the best, never an AMX one unless the
   CPU has AMX *and* the kernel granted the tile state. A host build's one library is recognised by its score
   (which names the switches it was compiled with), so it is reported as its variant (``zen4``…).

``CTXPRESS_CPU_KERNELS`` (or ``EngineConfig.cpu_kernels``) forces a path: ``auto`` (the default, the
best this host runs), ``amx``, ``avx512`` or ``avx2``; a path this CPU cannot run, or that this build does not
hold (a host build holds one), is refused with :class:`KernelPathUnavailable`, never run. The choice holds for the
whole process: ggml keeps one CPU backend, so another path needs another process (the tests and
``ctxpress/evaluation/kernel_paths.py`` start one per path).

A llama.cpp built with the CPU backend linked in (no ``GGML_BACKEND_DL``) still runs: its kernels are
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
from serving.llama_build import (
    ARCH_GET_XCOMP_PERM,
    ARCH_REQ_XCOMP_PERM,
    SYS_ARCH_PRCTL,
    VARIANT_PATHS,
    XFEATURE_XTILEDATA,
    cpu_flags,
    features_of_score,
    variant_of_score,
)

ENV = "CTXPRESS_CPU_KERNELS"
KERNEL_PATHS = ("auto", "amx", "avx512", "avx2")
HOST_LIBRARY = "libggml-cpu.so"  # a host build's one CPU backend (a build with the backend linked in has it too)
ALL_VARIANTS = "LLAMA_VARIANTS=all"


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
    variant: str  # ggml's variant name (zen4, haswell, sapphirerapids...), "native" or "builtin"
    library: Path | None
    amx: AmxPermission
    features: dict[str, str] = field(default_factory=dict)  # ggml_backend_get_features of the backend
    scores: dict[str, int] = field(default_factory=dict)  # the candidates' ggml_backend_score
    build: str = "variants"  # variants (LLAMA_VARIANTS=all) | host (one variant, this host's) | builtin

    def summary(self) -> dict[str, object]:
        return {"requested": self.requested, "path": self.path, "variant": self.variant, "build": self.build,
                "amx_cpu": self.amx.cpu_has_amx, "amx_granted": self.amx.granted, "amx_reason": self.amx.reason}


def build_kind(lib_dir: Path) -> str:
    """What llama-cpp-python's ``lib_dir`` holds, by its file names alone (nothing is loaded): ``variants`` (every
    x86-64 variant, LLAMA_VARIANTS=all), ``host`` (one loadable CPU backend, or the CPU backend linked in: one path
    either way), or ``none``."""
    if any(lib_dir.glob("libggml-cpu-*.so")):
        return "variants"
    if (lib_dir / HOST_LIBRARY).is_file():
        return "host"
    return "none"


def installed_lib_dir() -> Path | None:
    """llama-cpp-python's lib/ in this Python, found without loading it (None: not installed)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def path_of_features(features: frozenset[str]) -> str:
    """The kernel path of the switches a CPU backend was compiled with."""
    for switch, path in (("AMX_INT8", "amx"), ("AVX512", "avx512"), ("AVX2", "avx2"), ("AVX", "avx")):
        if switch in features:
            return path
    return "sse"


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
    if existing is None and not variants and (lib_dir / HOST_LIBRARY).is_file():
        return _load_host_build(ggml, lib_dir / HOST_LIBRARY, choice, amx)
    if existing is not None or not variants:
        # A build with the CPU backend linked in, or one loaded before us: its kernels are what they are.
        if existing is None:
            raise KernelPathUnavailable(f"no CPU backend in {lib_dir}: neither libggml-cpu*.so nor a "
                                        "built-in one (reinstall with `make install`)")
        if choice != "auto":
            raise KernelPathUnavailable(f"this llama.cpp build has no loadable CPU variants in {lib_dir}, so the "
                                        f"{choice} kernels cannot be forced (reinstall with `make install`)")
        return CpuBackend(choice, "builtin", "builtin", None, amx, _features(ggml, existing), build="builtin")

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


def _load_host_build(ggml: ctypes.CDLL, library: Path, choice: str, amx: AmxPermission) -> CpuBackend:
    """A host build's one CPU backend (``make install``): its score says whether this CPU runs it and which
    switches it was compiled with, so which path it is; a path it is not is refused."""
    if choice == "amx" and not amx.granted:
        raise KernelPathUnavailable(f"AMX kernels asked for, but the AMX tile state is not available: {amx.reason}")
    value = _score(library)
    features = features_of_score(value)
    if features is None:
        raise KernelPathUnavailable(f"{library} was compiled for another CPU than this one (ggml's score 0): "
                                    "`make install` builds llama.cpp for the host it runs on; run it on this host "
                                    f"(or `make install {ALL_VARIANTS}` for a build that runs on every x86-64 host)")
    variant = variant_of_score(value) or "native"
    path = path_of_features(features)
    if path == "amx" and not amx.granted:
        raise KernelPathUnavailable(f"this llama.cpp holds only the AMX kernels ({variant}), and the AMX tile state "
                                    f"is not available: {amx.reason}; `make install` on this host builds without AMX")
    if choice not in ("auto", path):
        raise KernelPathUnavailable(f"this llama.cpp is built for this host only, with the {path} kernels "
                                    f"({variant}): the {choice} kernels are not in it "
                                    f"(`make install {ALL_VARIANTS}` builds every variant)")
    reg = ggml.ggml_backend_load(str(library).encode())
    if not reg:
        raise KernelPathUnavailable(f"ggml could not load {library}")
    return CpuBackend(choice, path, variant, library, amx, _features(ggml, reg), {variant: value}, build="host")


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
