"""The KV pool's disk tier: files checked before use, kept within a budget; on the real model, an
evicted file's KV (and the pool kept over a restart) read back gives the completion computed from
scratch while its prompt is not processed again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from serving.engine.cpu_engine import LlamaEngine
from serving.engine.engine_config import EngineConfig
from serving.engine.kv_disk import KVDiskTier
from serving.engine.pool_disk import DISK_MIN_TOKENS
from serving.fim import STOP_WORDS
from tests.serving.prompts import fim_prompts

TOKENS = list(range(100, 400))


def test_a_saved_file_comes_back_with_its_tokens(tmp_path: Path) -> None:
    tier = KVDiskTier(tmp_path, budget_bytes=1 << 20, fingerprint="model-a")
    tier.save("repo:a.py", TOKENS, b"\x01\x02" * 500)
    assert tier.tokens_of("repo:a.py") == TOKENS
    stored = tier.load("repo:a.py")
    assert stored is not None and stored.tokens == TOKENS and stored.blob == b"\x01\x02" * 500
    assert tier.tokens_of("repo:b.py") is None and tier.load("repo:b.py") is None


def test_a_damaged_file_is_dropped_never_used(tmp_path: Path) -> None:
    tier = KVDiskTier(tmp_path, budget_bytes=1 << 20, fingerprint="model-a")
    tier.save("k", TOKENS, bytes(range(256)) * 4)
    path = tier.path_for("k")
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # one byte of the KV flipped
    path.write_bytes(bytes(data))
    assert tier.tokens_of("k") == TOKENS  # the header is intact
    assert tier.load("k") is None
    assert not path.exists() and tier.stats.dropped == 1

    tier.save("k", TOKENS, b"x" * 100)
    path.write_bytes(path.read_bytes()[:40])  # cut short
    assert tier.tokens_of("k") is None and not path.exists() and tier.stats.dropped == 2


def test_a_file_for_another_model_is_dropped(tmp_path: Path) -> None:
    KVDiskTier(tmp_path, budget_bytes=1 << 20, fingerprint="model-a").save("k", TOKENS, b"x" * 100)
    other = KVDiskTier(tmp_path, budget_bytes=1 << 20, fingerprint="model-b")
    # the key names the file through the fingerprint, so look at model-a's file under model-b's eyes
    other.path_for("k").write_bytes(KVDiskTier(tmp_path, 1 << 20, "model-a").path_for("k").read_bytes())
    assert other.load("k") is None and other.stats.dropped == 1


def test_the_budget_removes_the_least_recently_used_files(tmp_path: Path) -> None:
    tier = KVDiskTier(tmp_path, budget_bytes=2500, fingerprint="m")
    for key in ("a", "b", "c"):
        tier.save(key, TOKENS[:10], b"x" * 1000)
        path = tier.path_for(key)
        stamp = {"a": 1_000, "b": 2_000, "c": 3_000}[key]
        os.utime(path, (stamp, stamp))
    # a and b no longer fit beside c: the oldest (a) went when c was written
    assert tier.load("a") is None and tier.load("b") is not None and tier.load("c") is not None
    assert tier.stats.evicted_files == 1
    files, size = tier.usage()
    assert files == 2 and size <= 2500


def _completion(engine: LlamaEngine, prompt: str, key: str) -> tuple[str, object]:
    chunks = list(engine.generate(prompt, max_tokens=16, stop=STOP_WORDS, cache_key=key, speculation="none"))
    return "".join(c.text for c in chunks), chunks[-1].figures


@pytest.mark.services
def test_an_evicted_file_and_the_pool_after_a_restart_come_back_from_disk(model_path: Path, tmp_path: Path) -> None:
    config = EngineConfig(model_path=model_path, n_ctx=1024, n_slots=1, kv_disk_dir=tmp_path / "kv",
                          kv_disk_budget_bytes=512 << 20)
    first, second = fim_prompts()[:2]
    engine = LlamaEngine(config)
    cold_text, cold = _completion(engine, first, "repo:first.py")
    assert cold.prompt_tokens > DISK_MIN_TOKENS and cold.restored_tokens == 0  # type: ignore[attr-defined]
    _completion(engine, second, "repo:second.py")  # one slot: first.py is evicted, its KV written out
    assert engine.disk is not None
    engine.disk.writes_done()
    assert engine.status()["disk"]["saved"] == 1

    text, again = _completion(engine, first, "repo:first.py")
    assert again.restored_tokens >= cold.prompt_tokens - 1  # type: ignore[attr-defined]
    assert again.cached_tokens == again.restored_tokens  # type: ignore[attr-defined]
    assert text == cold_text

    assert engine.save_pool() == 1  # first.py, in the slot now
    del engine
    restarted = LlamaEngine(config)
    text, after = _completion(restarted, first, "repo:first.py")
    assert after.restored_tokens >= cold.prompt_tokens - 1 and text == cold_text  # type: ignore[attr-defined]

    # a damaged file is not used: the prompt is processed again and the completion is the same
    restarted.save_pool()
    path = restarted.disk.tier.path_for("repo:second.py") if restarted.disk else None
    assert path is not None and path.exists()
    path.write_bytes(path.read_bytes()[:-100])
    text2, fresh = _completion(restarted, second, "repo:second.py")
    assert fresh.restored_tokens == 0 and restarted.status()["disk"]["dropped"] == 1  # type: ignore[attr-defined]
    assert text2.strip()



def test_one_users_files_cannot_push_every_other_users_out_of_the_tier(tmp_path: Path) -> None:
    """alice saves file after file: over the budget, the user holding the most bytes loses their oldest file, so
    bob's one older file stays."""
    blob = b"\x07" * 1000
    tier = KVDiskTier(tmp_path, budget_bytes=4 * (len(blob) + 2000), fingerprint="model-a")
    tier.save("m:bob:r:b.py", TOKENS, blob)
    os.utime(tier.path_for("m:bob:r:b.py"), (1, 1))  # the least recently used file of all
    for i in range(8):
        tier.save(f"m:alice:r:a{i}.py", TOKENS, blob)
        os.utime(tier.path_for(f"m:alice:r:a{i}.py"), (10 + i, 10 + i))
    assert tier.load("m:bob:r:b.py") is not None
    assert tier.load("m:alice:r:a7.py") is not None and tier.load("m:alice:r:a0.py") is None
    assert tier.usage()[1] <= tier.budget_bytes
