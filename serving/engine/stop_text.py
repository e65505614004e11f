"""A completion's text as its tokens come: incremental UTF-8 decoding that ends at a stop string."""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class StopText:
    """Incremental UTF-8 decoding with stop strings: text is released only once no stop string
    can still start in it."""

    def __init__(self, stop: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._text = ""
        self._released = 0
        self.stopped = False

    def feed(self, data: bytes) -> bool:
        self._text += self._decoder.decode(data)
        for s in self._stop:
            at = self._text.find(s, max(0, self._released - len(s)))
            if at != -1:
                self._text = self._text[:at]
                self.stopped = True
                return True
        return False

    def take(self, final: bool = False) -> str:
        if final and not self.stopped:
            self._text += self._decoder.decode(b"", final=True)
        end = len(self._text) if (final or self.stopped) else max(self._released, len(self._text) - self._hold)
        out = self._text[self._released:end]
        self._released = end
        return out
