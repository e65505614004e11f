"""The KV pool's bookkeeping: stickiness per file, prefix reuse, LRU eviction, bounds."""

from __future__ import annotations

import pytest

from serving.engine.kv_pool import KVPool, Lease


def test_a_file_returns_to_its_own_slot_and_reuses_its_prefix() -> None:
    pool = KVPool(n_slots=2, cells_per_slot=100)
    first = pool.lease("repo:a.py", [1, 2, 3, 4], room=4)
    first.slot.tokens = [1, 2, 3, 4]
    again = pool.lease("repo:a.py", [1, 2, 3, 9, 9], room=4)
    assert again.slot is first.slot and again.reused == 3 and again.evicted == []


def test_an_identical_prompt_still_leaves_one_token_to_process() -> None:
    pool = KVPool(n_slots=1, cells_per_slot=100)
    lease = pool.lease("k", [5, 6, 7], room=1)
    lease.slot.tokens = [5, 6, 7]
    assert pool.lease("k", [5, 6, 7], room=1).reused == 2  # the last token's logits are needed


def test_least_recently_used_file_is_evicted_and_the_bound_holds() -> None:
    pool = KVPool(n_slots=2, cells_per_slot=100)
    for key in ("a", "b"):
        pool.lease(key, [1, 2], room=1).slot.tokens = [1, 2]
    pool.lease("a", [1, 2, 3], room=1).slot.tokens = [1, 2, 3]  # a is now the most recent
    lease = pool.lease("c", [7, 8], room=1)
    assert lease.evicted == ["b"]
    lease.slot.tokens = [7, 8]
    assert sorted(s.key for s in pool.slots) == ["a", "c"]
    assert pool.stats.evictions == 1 and len([s for s in pool.slots if s.tokens]) <= 2


def test_a_slot_taken_from_another_key_reuses_none_of_its_tokens() -> None:
    """Keys are per user in team mode: reusing the previous owner's prefix would report, in the
    reply's cached tokens, how much of a guessed prompt matches another user's code."""
    pool = KVPool(n_slots=1, cells_per_slot=100)
    pool.lease("model:alice:repo:secret.py", [1, 2, 3, 4, 5], room=1).slot.tokens = [1, 2, 3, 4, 5]
    probe = pool.lease("model:mallory:repo:secret.py", [1, 2, 3, 4, 9], room=1)
    assert probe.reused == 0 and probe.evicted == ["model:alice:repo:secret.py"]
    assert pool.stats.reused_tokens == 0 and pool.stats.hits == 0
    probe.slot.tokens = [1, 2, 3, 4, 9]
    assert pool.lease("model:mallory:repo:secret.py", [1, 2, 3, 4, 9, 7], room=1).reused == 5


def test_unkeyed_prompts_share_one_slot_like_a_single_llama_context() -> None:
    pool = KVPool(n_slots=3, cells_per_slot=100)
    pool.lease(None, [1, 2, 3], room=1).slot.tokens = [1, 2, 3]
    lease = pool.lease(None, [9, 9], room=1)
    assert lease.reused == 0 and lease.slot.tokens == [1, 2, 3]  # same slot, nothing in common
    lease.slot.tokens = [9, 9]
    assert pool.lease(None, [9, 9, 4], room=1).reused == 2
    assert len([s for s in pool.slots if s.tokens]) == 1


def test_a_prompt_larger_than_a_slot_is_refused_before_anything_changes() -> None:
    pool = KVPool(n_slots=1, cells_per_slot=10)
    pool.lease("a", [1, 2], room=1).slot.tokens = [1, 2]
    with pytest.raises(ValueError, match="does not fit"):
        pool.lease("b", list(range(8)), room=5)
    assert pool.slots[0].key == "a" and pool.slots[0].tokens == [1, 2]


def _leased(pool: KVPool, key: str, prompt: list[int]) -> Lease:
    """A lease whose prompt the engine then processed (its slot holds the prompt's tokens)."""
    lease = pool.lease(key, prompt, room=1)
    lease.slot.tokens = list(prompt)
    return lease


def test_a_user_opening_file_after_file_evicts_their_own_not_everyone_elses() -> None:
    """Team mode keys name their user (model:user:repository:path): alice's new files take her own slots back
    once she holds her share, and bob's files stay."""
    pool = KVPool(n_slots=4, cells_per_slot=64)
    _leased(pool, "m:bob:r:b1.py", [1, 2, 3])
    for i in range(10):
        _leased(pool, f"m:alice:r:a{i}.py", [1, 2, 3])
    held = sorted(s.key or "" for s in pool.slots)
    assert held == ["m:alice:r:a7.py", "m:alice:r:a8.py", "m:alice:r:a9.py", "m:bob:r:b1.py"]
    assert pool.lease("m:bob:r:b1.py", [1, 2, 3, 4], room=1).reused == 3  # bob's KV was kept


def test_a_user_under_their_share_takes_the_slot_of_the_user_holding_the_most() -> None:
    pool = KVPool(n_slots=4, cells_per_slot=64)
    _leased(pool, "m:bob:r:b1.py", [1, 2])  # least recently used of all
    for i in range(3):
        _leased(pool, f"m:alice:r:a{i}.py", [1, 2])
    lease = _leased(pool, "m:carol:r:c1.py", [1, 2])
    assert lease.evicted == ["m:alice:r:a0.py"]  # not bob's older slot: alice holds three
    lease = _leased(pool, "m:bob:r:b2.py", [1, 2])
    assert lease.evicted == ["m:bob:r:b1.py"]  # two each, his new file counted: his own oldest goes


def test_one_owner_evicts_least_recently_used_as_before() -> None:
    pool = KVPool(n_slots=2, cells_per_slot=64)
    _leased(pool, "m:r:a.py", [1, 2])
    _leased(pool, "m:r:b.py", [1, 2])
    _leased(pool, "m:r:a.py", [1, 2, 3])
    assert pool.lease("m:r:c.py", [1, 2], room=1).evicted == ["m:r:b.py"]


def test_a_team_accounts_pool_key_names_its_account() -> None:
    from context.prompt import cache_key
    from ctxpress_core.wire.v1 import CompletionRequest
    from serving.engine.kv_pool import key_owner

    request = CompletionRequest(repository="api", path="src/a.py", text="x = 1\n", line=0, column=5, mode="optimized")
    account = "alice@1796644800123456"
    assert key_owner(cache_key("m", request, {"prefix_cache": True}, account)) == account
    assert key_owner(cache_key("m", request, {"prefix_cache": False}, account)) == account
