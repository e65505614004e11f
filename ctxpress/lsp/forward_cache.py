"""The forward cache: a suggestion on screen that the user starts typing is served on from memory.

When the text before the cursor is the text it was shown at plus a start of the suggestion, and
the text after the cursor is unchanged, the rest of the suggestion is what the model would be
asked to continue: it is served at once, with no request (llama.vscode and Tabby do the same).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shown:
    completion_id: str
    before: str  # the document up to the cursor when it was shown
    after: str  # the document after the cursor
    completion: str


@dataclass(frozen=True)
class Hit:
    completion_id: str
    rest: str  # what is left of the suggestion after what the user typed
    typed: str


class ForwardCache:
    """One suggestion per document (the one on screen)."""

    def __init__(self) -> None:
        self._shown: dict[str, Shown] = {}

    def remember(self, uri: str, shown: Shown) -> None:
        self._shown[uri] = shown

    def forget(self, uri: str) -> Shown | None:
        return self._shown.pop(uri, None)

    def forget_completion(self, completion_id: str) -> None:
        """The suggestion was accepted: it is no longer on screen anywhere."""
        for uri in [u for u, shown in self._shown.items() if shown.completion_id == completion_id]:
            del self._shown[uri]

    def lookup(self, uri: str, before: str, after: str) -> Hit | None:
        shown = self._shown.get(uri)
        if shown is None or len(before) < len(shown.before) or after != shown.after:
            return None
        if not before.startswith(shown.before):
            return None
        typed = before[len(shown.before):]
        if len(typed) >= len(shown.completion) or not shown.completion.startswith(typed):
            return None
        return Hit(shown.completion_id, shown.completion[len(typed):], typed)
