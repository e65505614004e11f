"""The CPU kernel path chosen at run time (serving.engine.cpu_kernels), on this machine's CPU and this install's
llama.cpp: the AMX tile state is asked for and Linux's answer agrees with the CPU; ``auto`` loads the best
variant the CPU runs and never AMX without the tile state; a forced fallback (AVX2, AVX-512) loads the real
model and completes where the build holds it, and is refused where it does not (a host build holds one path); a
path the CPU cannot run is refused, never run into an illegal instruction.

ggml keeps one CPU backend a process, so each case runs in a process of its own."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from serving.engine.cpu_kernels import XFEATURE_XTILEDATA, build_kind, cpu_flags, installed_lib_dir
from serving.llama_build import VARIANT_PATHS, amx_tile_state_granted, best_variant

ROOT = Path(__file__).resolve().parents[2]
X86_LINUX = sys.platform.startswith("linux") and platform.machine() == "x86_64"
AVX512 = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}


def installed_build() -> str:
    lib_dir = installed_lib_dir()
    return "none" if lib_dir is None else build_kind(lib_dir)


def host_path() -> str:
    """The one kernel path a host build of this machine holds."""
    return VARIANT_PATHS[best_variant(cpu_flags(), amx_tile_state_granted())]


def run_python(code: str, kernels: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CTXPRESS_CPU_KERNELS"}
    if kernels is not None:
        env["CTXPRESS_CPU_KERNELS"] = kernels
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode != -signal.SIGILL, f"illegal instruction:\n{done.stderr[-2000:]}"
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    return dict(json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1]))


@pytest.mark.skipif(not X86_LINUX, reason="the AMX tile state is a Linux x86-64 matter")
def test_the_amx_tile_state_is_asked_for_and_the_answer_agrees_with_the_kernel_and_the_cpu() -> None:
    done = run_python("""
        import json
        from serving.engine.cpu_kernels import permitted_xfeatures, request_amx
        before = permitted_xfeatures()
        answer = request_amx()
        print(json.dumps({"before": before, "after": permitted_xfeatures(), **vars(answer)}))
    """)
    got = last_json(done)
    tiles = 1 << XFEATURE_XTILEDATA
    print(f"AMX: CPU reports it: {got['cpu_has_amx']}; tile state: {got['reason']}; "
          f"permitted xstate features {got['before']:#x} -> {got['after']:#x}")
    assert got["asked"] is True
    assert isinstance(got["before"], int) and not got["before"] & tiles  # a fresh process has not been given it
    assert isinstance(got["after"], int)
    assert got["granted"] == bool(got["after"] & tiles)  # what we report is what Linux now permits
    if got["granted"]:
        assert got["cpu_has_amx"] and {"amx_tile", "amx_int8"} <= cpu_flags()
    else:
        assert got["reason"] != "granted"
    if not {"amx_tile", "amx_int8"} <= cpu_flags():
        assert not got["granted"]


def test_auto_loads_the_best_variant_this_cpu_runs_and_amx_only_with_the_tile_state() -> None:
    got = last_json(run_python("""
        import json
        from serving.engine.cpu_kernels import load_cpu_backend
        b = load_cpu_backend()
        print(json.dumps({**b.summary(), "features": b.features, "scores": b.scores}))
    """))
    print(f"auto: {got['variant']} ({got['path']}), AMX tile state: {got['amx_reason']}, scores {got['scores']}")
    assert got["path"] != "builtin", "this llama.cpp has its CPU backend linked in: `make install` builds it loadable"
    assert got["build"] == installed_build()
    features = {k for k, v in dict(got["features"]).items() if v == "1"}  # type: ignore[call-overload]
    scores = dict(got["scores"])  # type: ignore[call-overload]
    assert scores[got["variant"]] == max(scores.values()) > 0
    assert (got["path"] == "amx") == (bool(got["amx_granted"]) and "sapphirerapids" in scores)
    assert ("AMX_INT8" in features) == (got["path"] == "amx")
    flags = cpu_flags()
    if "AVX512" in features:
        assert AVX512 <= flags
    if not got["amx_granted"] and AVX512 <= flags and "avx512_vnni" in flags:
        assert got["path"] == "avx512"


COMPLETE = """
    import json
    from pathlib import Path
    from serving.engine.cpu_engine import LlamaEngine
    from serving.engine.engine_config import EngineConfig
    from serving.fim import STOP_WORDS
    from tests.serving.prompts import fim_prompts
    engine = LlamaEngine(EngineConfig(model_path=Path({model!r}), n_ctx=1024, n_slots=1, n_threads=2,
                                      speculation="none"))
    chunks = list(engine.generate(fim_prompts()[1], max_tokens=16, stop=STOP_WORDS))
    backend = engine.target.cpu_backend
    print(json.dumps({{**backend.summary(), "features": backend.features,
                      "text": "".join(c.text for c in chunks), "tokens": chunks[-1].figures.completion_tokens}}))
"""


@pytest.mark.services  # loads the real model
@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_a_forced_fallback_path_loads_the_model_and_completes(model_path: Path, path: str) -> None:
    if path == "avx512" and not AVX512 <= cpu_flags():
        pytest.skip("this CPU has no AVX-512")
    if installed_build() == "host" and path != host_path():
        pytest.skip(f"llama.cpp is built for this host ({host_path()} kernels) alone: "
                    "`make install LLAMA_VARIANTS=all` builds the fallbacks")
    got = last_json(run_python(COMPLETE.format(model=str(model_path)), kernels=path))
    features = {k for k, v in dict(got["features"]).items() if v == "1"}  # type: ignore[call-overload]
    print(f"{path}: {got['variant']} {sorted(features)} completed {got['text']!r}")
    assert got["requested"] == path and got["path"] == path
    assert "AMX_INT8" not in features
    assert ("AVX512" in features) == (path == "avx512")
    assert "AVX2" in features
    assert got["tokens"] and str(got["text"]).strip()


def test_a_path_this_cpu_cannot_run_is_refused_not_run() -> None:
    probe = last_json(run_python("""
        import json
        from serving.engine.cpu_kernels import request_amx
        print(json.dumps(vars(request_amx())))
    """))
    if probe["granted"]:
        pytest.skip("this host runs AMX, the highest path: no path it lacks")
    done = run_python("""
        from serving.engine.cpu_kernels import KernelPathUnavailable, load_cpu_backend
        try:
            load_cpu_backend()
        except KernelPathUnavailable as exc:
            print("refused:", exc)
    """, kernels="amx")
    assert done.returncode != -signal.SIGILL
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: AMX kernels asked for, but the AMX tile state is not available" in done.stdout


@pytest.mark.skipif(not X86_LINUX, reason="a host build's variants are x86-64's")
def test_a_host_build_runs_its_one_path_and_refuses_the_others_it_does_not_hold() -> None:
    if installed_build() != "host":
        pytest.skip("this llama.cpp holds every variant (LLAMA_VARIANTS=all)")
    own = host_path()
    other = "avx2" if own != "avx2" else "avx512"
    done = run_python("""
        from serving.engine.cpu_kernels import KernelPathUnavailable, load_cpu_backend
        try:
            load_cpu_backend()
        except KernelPathUnavailable as exc:
            print("refused:", exc)
    """, kernels=other)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"refused: this llama.cpp is built for this host only, with the {own} kernels" in done.stdout
    assert "LLAMA_VARIANTS=all" in done.stdout
    got = last_json(run_python("""
        import json
        from serving.engine.cpu_kernels import load_cpu_backend
        print(json.dumps(load_cpu_backend().summary()))
    """, kernels=own))
    assert got["path"] == own and got["build"] == "host"


# ggml's ggml_tile_config_init() (ggml-cpu/amx/mmq.cpp of llama-cpp-python 0.3.36), as it fills the configuration.
TILE_CONFIG = """
#include <immintrin.h>
#include <cstdint>
struct tile_config_t { uint8_t palette_id = 0; uint8_t start_row = 0; uint8_t reserved_0[14] = {0};
                       uint16_t colsb[16] = {0}; uint8_t rows[16] = {0}; };
void ggml_tile_config_init(void) {
    alignas(64) tile_config_t tc = {};
    tc.palette_id = 1;
    tc.rows[0] = 8;   tc.colsb[0] = 64;
    tc.rows[2] = 16;  tc.colsb[2] = 32;
    tc.rows[4] = 16;  tc.colsb[4] = 64;
    _tile_loadconfig(&tc);
}
"""


def stores_before_ldtilecfg(flags: list[str], tmp_path: Path) -> list[str]:
    source = tmp_path / "tile_config.cpp"
    source.write_text(TILE_CONFIG)
    asm = subprocess.run(["g++", "-O3", "-mamx-tile", "-mamx-int8", "-mavx512f", *flags, "-S", "-o", "-", str(source)],
                         capture_output=True, text=True, check=True).stdout
    body = asm[asm.index("ggml_tile_config_initv:"):asm.index("ldtilecfg")]
    return [line.strip() for line in body.splitlines() if re.match(r"\s*(v?mov\w*)\s.*\(%[re]sp\)\s*$", line)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ (the one llama.cpp is compiled with)")
def test_with_the_forced_include_the_tile_configuration_keeps_its_rows_and_widths(tmp_path: Path) -> None:
    plain = stores_before_ldtilecfg([], tmp_path)
    fixed = stores_before_ldtilecfg(["-include", str(ROOT / "serving" / "gcc_amx_tile_fix.h")], tmp_path)
    print(f"stores into the tile configuration before ldtilecfg: {len(plain)} plain {plain}, "
          f"{len(fixed)} with serving/gcc_amx_tile_fix.h {fixed}")
    # zeroing and palette, then at least one store of the rows and one of the column widths
    assert len(fixed) >= 4
    assert len(fixed) >= len(plain)


@pytest.mark.services  # loads the real model
def test_the_kernel_path_benchmark_measures_each_path_in_its_process_and_reports_what_cannot_run(
        model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctxpress.evaluation.kernel_paths import main

    assert main(["--model", str(model_path), "--paths", "auto,avx2,amx", "--prompt-tokens", "64", "--decode", "4",
                 "--batch", "32", "--rounds", "1", "--passes", "1"]) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])
    print(out)
    assert figures["baseline"] == "auto" and figures["prompt_tokens"] == 64
    rows = figures["results"]
    if installed_build() == "host" and host_path() != "avx2":
        assert "built for this host" in figures["build"]
        assert "LLAMA_VARIANTS=all" in figures["unavailable"]["avx2"]
    else:
        assert rows["avx2"]["variant"] in ("haswell", "alderlake") and "AVX512" not in rows["avx2"]["features"]
    for row in rows.values():
        assert row["prompt_tokens_per_s"] > 0 and row["ms_per_token"] > 0
    assert rows["auto"]["prompt_vs_base"] == 1.0
    amx_runs = {"amx_tile", "amx_int8"} <= cpu_flags() and "amx" in rows
    assert amx_runs or "AMX tile state is not available" in figures["unavailable"]["amx"]
