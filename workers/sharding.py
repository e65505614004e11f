"""Shard routing: one file's requests always reach the same completion worker / Triton.

The KV cache of a file's prompt prefix lives on the Triton instance that computed it, so
requests for the same (repository, file) must keep landing on the same shard. IDEs keep
sending to the gateway subject; the gateway republishes to ``ctxpress.v1.complete.<shard>``.

The hash is SHA-256 (stable across processes and Python versions, unlike ``hash()``),
and the shard is chosen by rendezvous (highest-random-weight) hashing so that changing
the shard count moves only about 1/N of the files instead of nearly all of them.
"""

from __future__ import annotations

import hashlib
import posixpath


def file_key(repository_id: str, file_path: str) -> bytes:
    """Normalise the path so "./a/b.py", "a//b.py" and "a\\b.py" are one file."""
    path = posixpath.normpath(file_path.replace("\\", "/")).lstrip("/")
    return f"{repository_id}\0{path}".encode()


def shard_for(repository_id: str, file_path: str, shards: int, exclude: frozenset[int] = frozenset()) -> int:
    """The file's shard; with ``exclude`` (shards found dead), the best of the others: only the
    dead shards' files move, and each to the shard it would go to anyway were that one gone."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    key = file_key(repository_id, file_path)
    best, best_weight = 0, -1
    for shard in range(shards):
        if shard in exclude and len(exclude) < shards:
            continue
        weight = int.from_bytes(hashlib.sha256(key + b"\0" + str(shard).encode()).digest()[:8], "big")
        if weight > best_weight:
            best, best_weight = shard, weight
    return best

