"""The KV pool's disk tier: a file's KV, written out when its sequence is evicted (and at shutdown),
read back when the file is asked for again instead of processing its prompt anew.

Reading a file's KV back takes milliseconds where processing its prompt again takes seconds on a
CPU, so the pool's few slots stop bounding how many open files stay warm. One file per
(model, KV type, repository, path) key, holding the tokens its KV covers, so a request restores
only when the stored tokens share a long enough prefix with its prompt. A file whose header,
fingerprint or checksum does not match is deleted and counted, never loaded. The directory is
kept under a byte budget, least recently used files going first, of the owner holding the most bytes: a file's
name starts with a tag of its key's owner (``kv_pool.key_owner``), so one user's files cannot push every other
user's out of the tier.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
import zlib
from array import array
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from serving.engine.kv_pool import key_owner

log = logging.getLogger(__name__)

MAGIC = b"CTXKV001"
# magic, fingerprint (32 bytes), token count, blob length, blob crc32
_HEADER = struct.Struct("<8s32sQQI")
SUFFIX = ".kv"
OWNER_TAG_CHARS = 12


@dataclass
class DiskTierStats:
    saved: int = 0
    saved_bytes: int = 0
    restored: int = 0
    restored_tokens: int = 0
    dropped: int = 0  # files that did not match or were damaged: deleted, never used
    evicted_files: int = 0  # removed to stay within the budget


@dataclass(frozen=True)
class Stored:
    tokens: list[int]
    blob: bytes


class KVDiskTier:
    """Files under ``directory``; ``fingerprint`` names what a KV blob is only valid for (the
    model file, its KV cell type, the llama.cpp build)."""

    def __init__(self, directory: Path, budget_bytes: int, fingerprint: str) -> None:
        self.directory = directory
        self.budget_bytes = budget_bytes
        self.fingerprint = hashlib.sha256(fingerprint.encode()).digest()
        self.stats = DiskTierStats()
        self._lock = threading.Lock()  # saves run on a writer thread while the engine reads
        # Owner-only: a KV blob is the model's state after reading a file, from which that file (someone's code)
        # can be recovered; umask's 0644/0755 let every local user read them. chmod also closes a folder an
        # earlier version made, and the files in it with it.
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)

    def path_for(self, key: str) -> Path:
        owner = key_owner(key) or ""
        tag = hashlib.sha256(self.fingerprint + b"owner:" + owner.encode()).hexdigest()[:OWNER_TAG_CHARS]
        return self.directory / f"{tag}-{hashlib.sha256(self.fingerprint + key.encode()).hexdigest()[:40]}{SUFFIX}"

    def save(self, key: str, tokens: list[int], blob: bytes) -> None:
        """Write atomically (a reader never sees half a file), then keep within the budget."""
        if not tokens or not blob or len(blob) > self.budget_bytes:
            return
        path = self.path_for(key)
        header = _HEADER.pack(MAGIC, self.fingerprint, len(tokens), len(blob), zlib.crc32(blob))
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            # O_EXCL: a name left by a crash is not reused (and cannot be a link planted to write elsewhere)
            tmp.unlink(missing_ok=True)
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(header)
                f.write(array("i", tokens).tobytes())
                f.write(blob)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("KV of %s not written to disk: %s", key, exc)
            tmp.unlink(missing_ok=True)
            return
        with self._lock:
            self.stats.saved += 1
            self.stats.saved_bytes += len(blob)
        self._keep_budget(keep=path)

    def tokens_of(self, key: str) -> list[int] | None:
        """The tokens a stored file covers (the header only), or None."""
        path = self.path_for(key)
        try:
            with open(path, "rb") as f:
                head = f.read(_HEADER.size)
                n_tokens, _n_blob, _crc = self._header(head)
                raw = f.read(4 * n_tokens)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._drop(path, str(exc))
            return None
        if len(raw) != 4 * n_tokens:
            self._drop(path, "truncated token list")
            return None
        return array("i", raw).tolist()

    def load(self, key: str) -> Stored | None:
        """The whole file, checked; None (and the file deleted) when anything does not match."""
        path = self.path_for(key)
        try:
            data = path.read_bytes()
            n_tokens, n_blob, crc = self._header(data[:_HEADER.size])
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._drop(path, str(exc))
            return None
        start = _HEADER.size + 4 * n_tokens
        blob = data[start:]
        if len(blob) != n_blob or zlib.crc32(blob) != crc:
            self._drop(path, "damaged (length or checksum)")
            return None
        os.utime(path)  # recently used: the last to go when over budget
        return Stored(array("i", data[_HEADER.size:start]).tolist(), blob)

    def restored(self, tokens: int) -> None:
        with self._lock:
            self.stats.restored += 1
            self.stats.restored_tokens += tokens

    def discard(self, key: str, why: str) -> None:
        """A stored file the engine could not use (llama.cpp refused its state)."""
        self._drop(self.path_for(key), why)

    def usage(self) -> tuple[int, int]:
        """(files, bytes) on disk now."""
        files = list(self.directory.glob(f"*{SUFFIX}"))
        return len(files), sum(_size(f) for f in files)

    def _header(self, head: bytes) -> tuple[int, int, int]:
        """(tokens, blob length, blob checksum) of a file written for this fingerprint."""
        if len(head) != _HEADER.size:
            raise ValueError("truncated header")
        magic, fingerprint, n_tokens, n_blob, crc = _HEADER.unpack(head)
        if magic != MAGIC:
            raise ValueError("not a ctxpress KV file")
        if fingerprint != self.fingerprint:
            raise ValueError("written for another model, KV type or llama.cpp build")
        return n_tokens, n_blob, crc

    def _drop(self, path: Path, why: str) -> None:
        log.warning("KV file %s dropped: %s", path.name, why)
        path.unlink(missing_ok=True)
        with self._lock:
            self.stats.dropped += 1

    def _keep_budget(self, keep: Path) -> None:
        """Over the budget, the owner holding the most bytes gives up their least recently used file (never
        ``keep``, the file just written), until the tier fits."""
        with self._lock:
            files = sorted(self.directory.glob(f"*{SUFFIX}"), key=_mtime)
            sizes = {f: _size(f) for f in files}
            total = sum(sizes.values())
            by_owner: Counter[str] = Counter()
            for f in files:
                by_owner[_owner_tag(f)] += sizes[f]
            candidates = [f for f in files if f != keep]
            while total > self.budget_bytes and candidates:
                most = max(by_owner[_owner_tag(f)] for f in candidates)
                victim = next(f for f in candidates if by_owner[_owner_tag(f)] == most)  # oldest first
                candidates.remove(victim)
                total -= sizes[victim]
                by_owner[_owner_tag(victim)] -= sizes[victim]
                victim.unlink(missing_ok=True)
                self.stats.evicted_files += 1


def _owner_tag(path: Path) -> str:
    """The owner tag of a file's name ("" for a file named before tags: one owner of its own)."""
    tag, dash, _ = path.name.partition("-")
    return tag if dash else ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
