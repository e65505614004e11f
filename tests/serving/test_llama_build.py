"""How llama.cpp is compiled for this host (serving/llama_build.py, the Makefile's install and peer rules) and how
the engine recognises the build it meets (serving.engine.cpu_kernels): pure, nothing is compiled or loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from serving.engine.cpu_kernels import VARIANT_PATHS, build_kind, path_of_features
from serving.llama_build import (
    CPUINFO_FLAGS,
    VARIANTS,
    X86_FEATURES,
    best_variant,
    features_of_score,
    score,
    variant_cmake_args,
    variant_of_score,
)

ROOT = Path(__file__).resolve().parents[2]
EVERY_FLAG = set().union(*CPUINFO_FLAGS.values())
HASWELL = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}
AVX512 = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}
ZEN4 = HASWELL | AVX512 | {"avx512vbmi", "avx512_vnni", "avx512_bf16", "avx_vnni"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_tile", "amx_int8", "amx_bf16"}


@pytest.mark.parametrize(("flags", "amx_granted", "variant"), [
    (ZEN4, False, "zen4"),  # this project's AMD EPYC hosts (AVX-VNNI too: AVX-512 still scores higher)
    (SAPPHIRE_RAPIDS, True, "sapphirerapids"),
    (SAPPHIRE_RAPIDS, False, "zen4"),  # AMX listed, the tile state refused: never the AMX variant
    (HASWELL, False, "haswell"),
    (HASWELL | {"avx_vnni"}, False, "alderlake"),
    (HASWELL | AVX512, False, "skylakex"),
    (HASWELL | AVX512 | {"avx512_vnni"}, False, "cascadelake"),
    ({"sse4_2", "avx"}, False, "sandybridge"),
    (set(), False, "x64"),
])
def test_the_host_gets_the_variant_ggml_would_load_out_of_all_of_them(flags: set[str], amx_granted: bool,
                                                                      variant: str) -> None:
    assert best_variant(flags, amx_granted) == variant


def test_a_variants_score_names_it_again_and_its_path() -> None:
    for variant, switches in VARIANTS.items():
        value = score(variant, EVERY_FLAG)
        assert value > 0
        assert variant_of_score(value) == variant
        assert path_of_features(features_of_score(value) or frozenset()) == VARIANT_PATHS[variant]
        assert set(switches) - {"AMX_TILE"} == set(features_of_score(value) or ())
    assert features_of_score(0) is None and variant_of_score(0) is None  # a build for another CPU
    assert score("zen4", HASWELL) == 0


def test_a_variants_cmake_switches_name_every_x86_feature_once() -> None:
    for variant, switches in VARIANTS.items():
        args = variant_cmake_args(variant)
        assert args[:2] == ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON"]  # ggml refuses NATIVE beside BACKEND_DL
        on = {a.removeprefix("-DGGML_").removesuffix("=ON") for a in args[2:] if a.endswith("=ON")}
        assert on == set(switches)
        assert len(args[2:]) == len(X86_FEATURES) == len(set(X86_FEATURES))


def test_the_makefile_builds_for_this_hosts_variant_and_keys_the_cache_by_it() -> None:
    host = subprocess.run([sys.executable, "serving/llama_build.py", "host"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split()
    variant, args = host[0], host[1:]
    assert variant in VARIANTS or variant == "native"
    dry = subprocess.run(["make", "-n", "install", "VENV=/nonexistent", "PYTHON=" + sys.executable], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert f"CMAKE_ARGS=\"{' '.join(args)}" in dry
    assert f"/llama-wheels/{variant}-" in dry and f".installed-{variant}-" in dry
    assert "-include " + str(ROOT / "serving" / "gcc_amx_tile_fix.h") in dry
    every = subprocess.run(["make", "-n", "install", "LLAMA_VARIANTS=all", "VENV=/nonexistent",
                            "PYTHON=" + sys.executable], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "-DGGML_CPU_ALL_VARIANTS=ON" in every and "/llama-wheels/all-" in every
    peer = subprocess.run(["make", "-n", "peer", "VENV=/nonexistent", "PYTHON=" + sys.executable,
                           "PEER_DIR=/nonexistent/peer"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "-DGGML_BACKEND_DL=OFF" in peer and "--target llama-server" in peer
    assert "-include " + str(ROOT / "serving" / "gcc_amx_tile_fix.h") in peer
    assert all(a in peer for a in args if a.startswith("-DGGML_") and "BACKEND_DL" not in a)


def test_the_build_kind_is_read_from_the_file_names(tmp_path: Path) -> None:
    assert build_kind(tmp_path) == "none"
    (tmp_path / "libggml-cpu.so").touch()
    assert build_kind(tmp_path) == "host"
    (tmp_path / "libggml-cpu-zen4.so").touch()
    assert build_kind(tmp_path) == "variants"
