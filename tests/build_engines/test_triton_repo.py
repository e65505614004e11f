"""End-to-end on CPU: a faked GPU build -> BUILD.json -> model repository parsed with Triton's schema."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from build_engines.options import BuildOptions
from build_engines.plan import make_plan
from build_engines.runner import run_plan
from build_engines.triton_repo import RepoSettings, write_repository
from ctxpress_core import inference

WIRE_TO_ENUM = {"BYTES": mc.TYPE_STRING, "INT32": mc.TYPE_INT32, "FP32": mc.TYPE_FP32, "BOOL": mc.TYPE_BOOL}
REPO_ROOT = Path(__file__).resolve().parents[2]


def _fake_gpu(argv: list[str]) -> int:
    """Run our own (pure Python) steps for real; fake what needs a GPU."""
    if argv[0] == "trtllm-build":
        out = Path(argv[argv.index("--output_dir") + 1])
        out.mkdir(parents=True)
        (out / "rank0.engine").write_bytes(b"engine:" + out.name.encode())
        (out / "config.json").write_text(json.dumps({"build_config": {"plugin_config": {"tokens_per_block": 64}}}))
        return 0
    if "quantize" in argv:
        Path(argv[argv.index("--output_dir") + 1]).mkdir(parents=True)
        return 0
    return subprocess.run(argv, check=False, cwd=REPO_ROOT).returncode


def _build(tmp_path: Path, checkpoints: tuple[Path, Path], code_repo: Path, speculative: bool = True) -> Path:
    target, draft = checkpoints
    opts = BuildOptions(target=target, draft=draft if speculative else None, gpu="hopper",
                        out=tmp_path / "engines", calib_repo=code_repo, calib_size=64)
    assert run_plan(opts, make_plan(opts), execute=_fake_gpu, echo=lambda _: None) == 0
    return opts.out


def _parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


@pytest.fixture
def repo(tmp_path: Path, checkpoints: tuple[Path, Path], code_repo: Path) -> dict[str, mc.ModelConfig]:
    engines = _build(tmp_path, checkpoints, code_repo)
    paths = write_repository(RepoSettings(engines=engines, out=tmp_path / "models",
                                          engines_mount=Path("/engines")), echo=lambda _: None)
    return {p.parent.name: _parse(p) for p in paths}


def test_manifest_records_versions_flags_hashes_calibration(tmp_path: Path, checkpoints: tuple[Path, Path],
                                                           code_repo: Path) -> None:
    engines = _build(tmp_path, checkpoints, code_repo)
    m = json.loads((engines / "BUILD.json").read_text())
    assert m["versions"]["tensorrt_llm_pinned"] == "1.2.1"
    assert m["resolved"] == {**m["resolved"], "weights": "fp8", "kv_cache": "fp8", "speculative": True}
    build_argv = next(s["argv"] for s in m["steps"] if s["name"] == "trtllm-build target")
    assert "draft_tokens_external" in build_argv
    assert set(m["engines"]) == {"target", "draft"}
    assert len(m["engines"]["target"]["engine_sha256"]["rank0.engine"]) == 64
    assert m["engines"]["target"]["engine_sha256"] != m["engines"]["draft"]["engine_sha256"]
    assert "model.safetensors" in m["engines"]["draft"]["hf_checkpoint_sha256"]
    calib = m["calibration"]
    # One ~1.5 kB chunk per file at the default 4096 chars: 12 samples, fewer than the 64 asked for.
    assert calib["samples"] == 12 and calib["files"] == 12  # only code files, not README/blob
    assert m["created_utc"].endswith("+00:00")
    assert (engines / "tokenizer" / "tokenizer.json").exists()


def test_calibration_set_is_code_and_deterministic(tmp_path: Path, code_repo: Path) -> None:
    from build_engines.calibration import build_calibration_set

    a = build_calibration_set(code_repo, tmp_path / "a", size=10, max_chars=300)
    b = build_calibration_set(code_repo, tmp_path / "b", size=10, max_chars=300)
    assert a.sha256 == b.sha256 and a.samples == 10
    rows = [json.loads(line) for line in (tmp_path / "a" / "train.jsonl").read_text().splitlines()]
    assert all(("def f" in r["text"] or "return x" in r["text"]) and len(r["text"]) <= 300 for r in rows)
    assert len({r["text"] for r in rows}) == 10


def test_every_config_parses_and_expected_models_exist(repo: dict[str, mc.ModelConfig]) -> None:
    assert set(repo) == {"preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_draft",
                         "ctxpress_speculative", "ensemble"}
    for name, cfg in repo.items():
        assert cfg.name == name


def test_ensemble_accepts_what_workers_send(repo: dict[str, mc.ModelConfig]) -> None:
    ens = repo[inference.COMPLETION_MODEL]
    assert ens.platform == "ensemble"
    inputs = {i.name: i for i in ens.input}
    assert set(inputs) == {s.name for s in inference.COMPLETION_INPUTS}
    for spec in inference.COMPLETION_INPUTS:
        assert inputs[spec.name].data_type == WIRE_TO_ENUM[spec.triton_dtype], spec.name
        assert tuple(inputs[spec.name].dims) == spec.dims, spec.name
        assert inputs[spec.name].optional == spec.optional, spec.name
    outputs = {o.name: o for o in ens.output}
    for spec in (*inference.COMPLETION_OUTPUTS, *inference.FIGURE_OUTPUTS):
        assert outputs[spec.name].data_type == WIRE_TO_ENUM[spec.triton_dtype], spec.name
        assert tuple(outputs[spec.name].dims) == spec.dims, spec.name


def test_ensemble_wiring_is_consistent(repo: dict[str, mc.ModelConfig]) -> None:
    """Each step maps onto real tensors of its model, internal tensors agree in dtype and
    shape, and everything consumed was produced earlier (or is an ensemble input)."""
    ens = repo["ensemble"]
    available = {i.name: (i.data_type, tuple(i.dims)) for i in ens.input}
    for step in ens.ensemble_scheduling.step:
        model = repo[step.model_name]
        m_in = {i.name: i for i in model.input}
        m_out = {o.name: o for o in model.output}
        for key, src in step.input_map.items():
            assert key in m_in, f"{step.model_name} has no input {key}"
            assert src in available, f"{src} consumed by {step.model_name} before it is produced"
            assert available[src][0] == m_in[key].data_type, (step.model_name, key)
            assert available[src][1] == tuple(m_in[key].dims), (step.model_name, key)
        required = {n for n, t in m_in.items() if not t.optional}
        assert required <= set(step.input_map), f"{step.model_name} misses required inputs"
        for key, dst in step.output_map.items():
            assert key in m_out, f"{step.model_name} has no output {key}"
            available[dst] = (m_out[key].data_type, tuple(m_out[key].dims))
    for out in ens.output:
        assert out.name in available and available[out.name] == (out.data_type, tuple(out.dims))


def test_tensorrt_llm_configs_carry_the_serving_knobs(repo: dict[str, mc.ModelConfig]) -> None:
    target, draft = repo["tensorrt_llm"], repo["tensorrt_llm_draft"]
    for cfg in (target, draft):
        p = {k: v.string_value for k, v in cfg.parameters.items()}
        assert cfg.backend == "tensorrtllm"
        assert p["gpt_model_type"] == "inflight_fused_batching"
        assert p["enable_kv_cache_reuse"] == "true"
        assert p["exclude_input_in_output"] == "true"
        assert 0 < float(p["kv_cache_free_gpu_mem_fraction"]) < 1
        assert cfg.dynamic_batching.max_queue_delay_microseconds == 5000
        assert cfg.dynamic_batching.priority_levels == 2
        assert cfg.max_batch_size == 32
    assert target.parameters["gpt_model_path"].string_value == "/engines/engines/target"
    assert draft.parameters["gpt_model_path"].string_value == "/engines/engines/draft"
    fractions = [float(c.parameters["kv_cache_free_gpu_mem_fraction"].string_value) for c in (target, draft)]
    assert fractions[0] > fractions[1]
    assert target.model_transaction_policy.decoupled  # streaming on the non-speculative path
    assert not draft.model_transaction_policy.decoupled
    assert {"input_ids", "draft_input_ids", "request_output_len", "streaming"} <= {i.name for i in target.input}
    assert {"output_ids", "kv_cache_reused_blocks", "total_accepted_draft_tokens"} <= {o.name for o in target.output}


def test_orchestrator_is_decoupled_and_knows_both_models(repo: dict[str, mc.ModelConfig]) -> None:
    orch = repo["ctxpress_speculative"]
    p = {k: v.string_value for k, v in orch.parameters.items()}
    assert orch.backend == "python" and orch.model_transaction_policy.decoupled
    assert p["target_model"] == "tensorrt_llm" and p["draft_model"] == "tensorrt_llm_draft"
    assert p["max_draft_len"] == "5" and p["speculate_min_prompt_tokens"] == "1024"
    assert p["tokens_per_block"] == "64"  # read from the engine's build config
    assert repo["preprocessing"].parameters["tokenizer_dir"].string_value == "/engines/tokenizer"


def test_model_files_are_in_place(tmp_path: Path, checkpoints: tuple[Path, Path], code_repo: Path) -> None:
    engines = _build(tmp_path, checkpoints, code_repo)
    out = tmp_path / "models"
    write_repository(RepoSettings(engines=engines, out=out), echo=lambda _: None)
    for name in ("preprocessing", "postprocessing", "ctxpress_speculative"):
        source = (out / name / "1" / "model.py").read_text()
        assert "class TritonPythonModel" in source
        compile(source, name, "exec")
    assert (out / "ensemble" / "1").is_dir()
    # Without --engines-mount, paths point at the engines where they are.
    target = _parse(out / "tensorrt_llm" / "config.pbtxt")
    assert target.parameters["gpt_model_path"].string_value == str((engines / "engines" / "target").resolve())


def test_without_draft_there_is_no_draft_model(tmp_path: Path, checkpoints: tuple[Path, Path], code_repo: Path) -> None:
    engines = _build(tmp_path, checkpoints, code_repo, speculative=False)
    paths = write_repository(RepoSettings(engines=engines, out=tmp_path / "m"), echo=lambda _: None)
    names = {p.parent.name for p in paths}
    assert "tensorrt_llm_draft" not in names
    orch = _parse(tmp_path / "m" / "ctxpress_speculative" / "config.pbtxt")
    assert orch.parameters["draft_model"].string_value == ""


def test_triton_repo_cli_needs_a_manifest(tmp_path: Path) -> None:
    import argparse

    from build_engines.cli import register

    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    a = p.parse_args(["triton-repo", "--engines", str(tmp_path / "none"), "--out", str(tmp_path / "m")])
    with pytest.raises(SystemExit, match=r"BUILD\.json"):
        a.func(a)


def test_the_engine_cache_salt_is_an_option(tmp_path: Path, checkpoints: tuple[Path, Path], code_repo: Path,
                                            repo: dict[str, mc.ModelConfig]) -> None:
    """Off (the default): the engines declare no salt input and the orchestrator sends none; on: both engines
    take TensorRT-LLM's uint64 cache_salt_id and the orchestrator is told to send it."""
    for name in ("tensorrt_llm", "tensorrt_llm_draft"):
        assert "cache_salt_id" not in {i.name for i in repo[name].input}
    assert repo["ctxpress_speculative"].parameters["engine_cache_salt"].string_value == "false"
    engines = _build(tmp_path / "salted", checkpoints, code_repo)
    paths = write_repository(RepoSettings(engines=engines, out=tmp_path / "salted" / "m", engine_cache_salt=True),
                             echo=lambda _: None)
    salted = {p.parent.name: _parse(p) for p in paths}
    for name in ("tensorrt_llm", "tensorrt_llm_draft"):
        salt = {i.name: i for i in salted[name].input}["cache_salt_id"]
        assert salt.data_type == mc.TYPE_UINT64 and salt.optional and tuple(salt.reshape.shape) == ()
    assert salted["ctxpress_speculative"].parameters["engine_cache_salt"].string_value == "true"
