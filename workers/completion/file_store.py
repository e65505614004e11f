"""Files the worker has seen, by content hash, so an IDE can send a hash instead of text."""

from __future__ import annotations

from collections import OrderedDict


class FileStore:
    """LRU bounded by total characters."""

    def __init__(self, max_chars: int = 64 * 1024 * 1024) -> None:
        self.max_chars = max_chars
        self._files: OrderedDict[str, str] = OrderedDict()
        self._chars = 0

    def put(self, digest: str, text: str) -> None:
        if digest in self._files:
            self._files.move_to_end(digest)
            return
        self._files[digest] = text
        self._chars += len(text)
        while self._chars > self.max_chars and len(self._files) > 1:
            _, old = self._files.popitem(last=False)
            self._chars -= len(old)

    def get(self, digest: str) -> str | None:
        text = self._files.get(digest)
        if text is not None:
            self._files.move_to_end(digest)
        return text

    @property
    def chars(self) -> int:
        return self._chars

    def __len__(self) -> int:
        return len(self._files)
