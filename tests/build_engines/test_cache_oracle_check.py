"""The helper logic of the GPU host's cached-token check (benchmarks/cache_oracle.py, run by infra/gpu-check.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.cache_oracle import probe_text, probe_tokens, problems
from build_engines.triton_models.speculative import ReuseLedger

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_clean_run_has_no_problems() -> None:
    assert problems({"bob_first": 0, "bob_repeat": 512, "alice": 0}) == []
    assert problems({"bob_first": 0, "bob_repeat": 512, "alice": 0, "engine_bob_first": 0,
                     "engine_bob_repeat": 18, "engine_alice": 0}) == []


def test_alice_told_of_bobs_blocks_is_a_problem() -> None:
    (found,) = problems({"bob_first": 0, "bob_repeat": 512, "alice": 512})
    assert "alice was told 512" in found
    assert problems({"bob_first": 0, "bob_repeat": 512, "alice": None})  # no figure is not a pass


def test_a_run_without_reuse_proves_nothing() -> None:
    (found,) = problems({"bob_first": 0, "bob_repeat": 0, "alice": 0})
    assert "proves nothing" in found
    assert any("proves nothing" in p for p in problems(
        {"bob_first": 0, "bob_repeat": 64, "alice": 0, "engine_bob_repeat": 0, "engine_alice": 0}))


def test_an_engine_that_ignores_the_salt_is_a_problem() -> None:
    (found,) = problems({"bob_first": 0, "bob_repeat": 512, "alice": 0, "engine_bob_first": 0,
                         "engine_bob_repeat": 18, "engine_alice": 18})
    assert "ignores cache_salt_id" in found


def test_probe_inputs_are_fresh_and_span_many_blocks() -> None:
    a, b = probe_text("n1"), probe_text("n2")
    assert a != b and a.startswith("# n1\n") and len(a) > 4000
    tokens = probe_tokens(12345)
    assert len(tokens) == 600 and all(0 <= t < 2048 for t in tokens)
    assert probe_tokens(12345) == tokens and probe_tokens(54321)[0] != tokens[0]
    assert len(ReuseLedger(tokens_per_block=32).chain(tokens)) == 18


def test_the_gpu_check_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(REPO_ROOT / "infra" / "gpu-check.sh")]).returncode == 0
