from __future__ import annotations

import argparse
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from build_engines import TENSORRT_LLM_VERSION
from build_engines.cli import register
from build_engines.options import BuildOptions, IncompatibleOptions, validate
from build_engines.plan import make_plan
from build_engines.runner import render_script, run_plan


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxpress")
    register(p.add_subparsers())
    return p


def _dry_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    a = _parser().parse_args(["build-engines", *args, "--dry-run"])
    rc = a.func(a)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _command(script: str, marker: str) -> list[str]:
    """The shell words of the step whose echo line contains `marker`."""
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("echo") and marker in line) + 1
    body = []
    for line in lines[start:]:
        if not line.strip():
            break
        body.append(line.rstrip("\\").strip())
    return shlex.split(" ".join(body))


def _flag(words: list[str], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words else None


def test_hopper_dry_run_uses_fp8_and_draft_flags(capsys: pytest.CaptureFixture[str], checkpoints: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    target, draft = checkpoints
    rc, script, _ = _dry_run(capsys, "--target", str(target), "--draft", str(draft), "--gpu", "hopper",
                             "--out", str(tmp_path / "out"))
    assert rc == 0
    quant = _command(script, "quantize target")
    assert _flag(quant, "--qformat") == "fp8" and _flag(quant, "--kv_cache_dtype") == "fp8"
    assert _flag(quant, "--calib_dataset") == str(tmp_path / "out" / "work" / "calibration")
    build = _command(script, "trtllm-build target")
    assert build[0] == "trtllm-build"
    assert _flag(build, "--speculative_decoding_mode") == "draft_tokens_external"
    assert _flag(build, "--max_draft_len") == "5"
    assert _flag(build, "--use_paged_context_fmha") == "enable"
    assert _flag(build, "--use_fp8_context_fmha") == "enable"
    assert _flag(build, "--kv_cache_type") == "paged"
    assert _flag(build, "--max_input_len") == "3072" and _flag(build, "--max_seq_len") == "3328"
    draft_build = _command(script, "trtllm-build draft")
    assert "--speculative_decoding_mode" not in draft_build  # only the target verifies drafts
    assert _flag(draft_build, "--use_paged_context_fmha") == "enable"  # draft reuses its KV too
    assert "set -euo pipefail" in script


def test_ampere_dry_run_avoids_fp8_and_int8_kv(capsys: pytest.CaptureFixture[str], checkpoints: tuple[Path, Path],
                                               tmp_path: Path) -> None:
    target, draft = checkpoints
    rc, script, _ = _dry_run(capsys, "--target", str(target), "--draft", str(draft), "--gpu", "ampere",
                             "--out", str(tmp_path / "o"))
    assert rc == 0
    quant = _command(script, "quantize target")
    assert _flag(quant, "--qformat") == "int8_wo"
    assert "--kv_cache_dtype" not in quant
    for flag in ("--use_fp8_context_fmha", "--qformat fp8", "--kv_cache_dtype fp8"):
        assert flag not in script


def test_ada_defaults_match_hopper_flags(capsys: pytest.CaptureFixture[str], checkpoints: tuple[Path, Path],
                                         tmp_path: Path) -> None:
    target, draft = checkpoints
    rc, script, _ = _dry_run(capsys, "--target", str(target), "--draft", str(draft), "--gpu", "ada",
                             "--out", str(tmp_path / "o"))
    assert rc == 0
    assert _flag(_command(script, "quantize draft"), "--kv_cache_dtype") == "fp8"


@pytest.mark.parametrize(
    ("gpu", "extra", "needle"),
    [
        ("hopper", ["--kv-cache", "int8"], "2166"),
        ("ampere", ["--kv-cache", "int8"], "paged context FMHA"),
        ("ampere", ["--weights", "fp8"], "FP8 needs SM 8.9"),
        ("ampere", ["--kv-cache", "fp8"], "FP8 needs SM 8.9"),
        ("hopper", ["--kv-cache", "fp8", "--weights", "int8_wo"], "FP8 quantization workflow"),
        ("hopper", ["--no-paged-context-fmha", "--no-kv-reuse"], "speculative decoding needs paged context FMHA"),
        ("hopper", ["--no-kv-reuse"], "needs KV cache reuse"),
        ("hopper", ["--max-draft-len", "0"], "--max-draft-len"),
    ],
)
def test_invalid_combinations_are_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str], checkpoints: tuple[Path, Path], tmp_path: Path,
    gpu: str, extra: list[str], needle: str,
) -> None:
    target, draft = checkpoints
    out = tmp_path / "never"
    rc, script, err = _dry_run(capsys, "--target", str(target), "--draft", str(draft), "--gpu", gpu,
                               "--out", str(out), *extra)
    assert rc == 2
    assert script == ""
    assert needle in err
    assert not out.exists()


def test_int8_kv_is_buildable_only_without_paged_context_fmha_draft_and_reuse(
    capsys: pytest.CaptureFixture[str], checkpoints: tuple[Path, Path], tmp_path: Path,
) -> None:
    target, _ = checkpoints
    rc, script, err = _dry_run(capsys, "--target", str(target), "--gpu", "ampere", "--out", str(tmp_path / "o"),
                               "--kv-cache", "int8", "--no-paged-context-fmha", "--no-kv-reuse")
    assert rc == 0, err
    assert _flag(_command(script, "quantize target"), "--kv_cache_dtype") == "int8"
    assert _flag(_command(script, "trtllm-build target"), "--use_paged_context_fmha") == "disable"
    assert "trtllm-build draft" not in script


def test_all_problems_reported_at_once(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = checkpoints
    opts = BuildOptions(target=target, draft=draft, gpu="ampere", out=tmp_path, weights="fp8", kv_cache="int8")
    problems = validate(opts)
    assert len(problems) >= 2
    with pytest.raises(IncompatibleOptions):
        make_plan(opts)


def test_vocab_mismatch_refused(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = checkpoints
    (draft / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    problems = validate(BuildOptions(target=target, draft=draft, gpu="hopper", out=tmp_path))
    assert any("vocab_size" in p for p in problems)


def test_script_is_valid_bash(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = checkpoints
    opts = BuildOptions(target=target, draft=draft, gpu="hopper", out=tmp_path / "o")
    script = tmp_path / "build.sh"
    script.write_text(render_script(opts, make_plan(opts)))
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0


def test_run_plan_executes_in_order_and_stops_on_failure(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = checkpoints
    opts = BuildOptions(target=target, draft=draft, gpu="hopper", out=tmp_path / "o")
    steps = make_plan(opts)
    seen: list[list[str]] = []
    lines: list[str] = []

    def fake(argv: list[str]) -> int:
        seen.append(argv)
        return 1 if argv[0] == "trtllm-build" else 0

    rc = run_plan(opts, steps, execute=fake, echo=lines.append)
    assert rc == 1
    assert [a[0] for a in seen][-1] == "trtllm-build"
    assert len(seen) == 4  # calibration, 2x quantize, first build: then it stopped
    assert any("failed" in line for line in lines)
    plan = json.loads((tmp_path / "o" / "work" / "plan.json").read_text())
    assert plan["tensorrt_llm_pinned"] == TENSORRT_LLM_VERSION
    assert plan["resolved"]["kv_cache"] == "fp8"


def test_run_plan_prints_a_summary(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = checkpoints
    opts = BuildOptions(target=target, draft=draft, gpu="hopper", out=tmp_path / "o")
    lines: list[str] = []
    assert run_plan(opts, make_plan(opts), execute=lambda argv: 0, echo=lines.append) == 0
    assert lines[-1].strip().startswith("total")
    assert sum(line.startswith("[") for line in lines) == len(make_plan(opts))


def test_pinned_version_matches_pyproject_gpu_extra() -> None:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("pyproject.toml not written yet")
    text = pyproject.read_text()
    if "tensorrt-llm" not in text and "tensorrt_llm" not in text:
        pytest.skip("gpu extra not added yet")
    assert f"=={TENSORRT_LLM_VERSION}" in text
