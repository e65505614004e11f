"""The file-level KV cache pool: which sequence of the engine's KV cache holds which file's prompt.

llama.cpp keeps several sequences in one context (``n_seq_max``), each in its own stream of
``n_ctx`` cells (not a unified cache: there, every sequence's attention would span every file's
cells, masked, and decoding would slow down as the pool fills). Each slot remembers the tokens
whose KV it holds; a request keyed by (repository, path, model) goes back to its file's slot and
only the tokens after the common prefix are processed. The pool's memory is bounded by its
number of slots (slots x cells x bytes per cell): a file that needs a slot when all are taken
evicts the least recently used one, never fails. Pure bookkeeping, no llama.cpp here, so the
policy is unit-tested on its own.

Fair share between users (team mode: a key names its user, ``key_owner``): the slot given up is the least
recently used one of the owner holding the most slots, counting the slot the new file takes. A user opening
file after file evicts their own files once they hold their share, never everyone else's.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


SHARED = "<shared>"  # the key of requests that name no file


def key_owner(key: str | None) -> str | None:
    """Whose a pool key is: its second part (``context.prompt.cache_key``: ``model:user:repository:path`` in
    team mode, ``model:user:shared``; single-user mode's ``model:repository:path`` gives the repository, one
    owner per repository). Keys of another form (the shared context, the engine's own checks) have none."""
    if key is None:
        return None
    parts = key.split(":", 2)
    return parts[1] if len(parts) == 3 else None


@dataclass
class Slot:
    seq_id: int
    key: str | None = None
    tokens: list[int] = field(default_factory=list)  # what this sequence's KV cells hold, in order
    last_used: int = 0


@dataclass
class Lease:
    """The slot a request uses, how much of its prompt is already there, and what had to go."""

    slot: Slot
    reused: int  # prompt tokens whose KV is kept
    evicted: list[str]  # keys of the slots emptied to make room
    # the file whose KV the slot still holds until the caller trims it, and its tokens (for the
    # disk tier to keep it)
    displaced: tuple[str, list[int]] | None = None


@dataclass
class PoolStats:
    requests: int = 0
    hits: int = 0  # requests that reused at least one token
    reused_tokens: int = 0
    prompt_tokens: int = 0
    evictions: int = 0


class KVPool:
    def __init__(self, n_slots: int, cells_per_slot: int) -> None:
        if n_slots < 1 or cells_per_slot < 1:
            raise ValueError("a KV pool needs at least one slot and one cell")
        self.slots = [Slot(seq_id=i) for i in range(n_slots)]
        self.cells_per_slot = cells_per_slot
        self.stats = PoolStats()
        self._clock = itertools.count(1)

    def used_cells(self) -> int:
        return sum(len(s.tokens) for s in self.slots)

    def _slot_of(self, key: str) -> Slot | None:
        return next((s for s in self.slots if s.key == key), None)

    @staticmethod
    def reusable(held: Sequence[int], prompt: Sequence[int]) -> int:
        """Prompt tokens a sequence holding ``held`` gives back (never the last one: its logits start
        the completion)."""
        return min(common_prefix(held, prompt), max(len(prompt) - 1, 0))

    def peek(self, key: str | None, prompt: Sequence[int]) -> int:
        """Prompt tokens the file's slot would give back now (changes nothing: for estimating a
        request's cost, from another thread than the engine's, hence the copy of its tokens)."""
        slot = self._slot_of(SHARED if key is None else key)
        return 0 if slot is None else self.reusable(list(slot.tokens), prompt)

    def lease(self, key: str | None, prompt: Sequence[int], room: int) -> Lease:
        """Choose the slot for ``prompt`` (plus ``room`` cells for generated tokens).

        A keyed request goes to its file's slot; a file seen for the first time takes an empty
        slot or the least recently used one, whose file is then evicted and none of whose tokens
        are reused. Requests without a key
        all share one slot, which is exactly llama.cpp's single-context prefix reuse (the
        baseline, and the pool switched off). The caller trims the slot's KV to ``reused``
        tokens and processes the rest of the prompt.
        """
        key = SHARED if key is None else key
        if len(prompt) + room > self.cells_per_slot:
            raise ValueError(f"prompt of {len(prompt)} tokens (+{room} to generate) does not fit a context "
                             f"of {self.cells_per_slot}")
        slot = self._slot_of(key)
        evicted: list[str] = []
        displaced = None
        if slot is None:
            slot = self._victim(key)
            if slot.tokens and slot.key != key:
                evicted.append(slot.key or f"seq{slot.seq_id}")
                if slot.key is not None:
                    displaced = (slot.key, list(slot.tokens))
        # Another key's tokens are never reused: the reply's cached-token count would tell this
        # caller how much of their prompt matches what the slot's previous owner sent.
        reused = self.reusable(slot.tokens, prompt) if slot.key == key else 0
        slot.key = key
        slot.last_used = next(self._clock)
        self.stats.requests += 1
        self.stats.prompt_tokens += len(prompt)
        self.stats.reused_tokens += reused
        self.stats.hits += reused > 0
        self.stats.evictions += len(evicted)
        return Lease(slot=slot, reused=reused, evicted=evicted, displaced=displaced)

    def _victim(self, key: str) -> Slot:
        """An empty slot, else the least recently used slot of the owner holding the most slots (the new key's
        owner counted with the slot it is about to take), ties going to the least recently used."""
        empty = [s for s in self.slots if not s.tokens]
        if empty:
            return min(empty, key=lambda s: s.last_used)
        held = Counter(key_owner(s.key) for s in self.slots)
        held[key_owner(key)] += 1
        most = max(held[key_owner(s.key)] for s in self.slots)
        return min((s for s in self.slots if held[key_owner(s.key)] == most), key=lambda s: s.last_used)
