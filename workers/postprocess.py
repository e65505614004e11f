"""Trim a raw model completion to what an IDE should show.

Small code models drift: they re-type the code that already follows the cursor, open a
markdown fence, or start explaining themselves in prose. Each rule below cuts the
completion at the first sign of one of these.
"""

from __future__ import annotations

import re

_PROSE = re.compile(
    r"^\s*(Explanation|Note|Output|Example usage|This (code|function|method|will|is)|Here (is|'s)|In this)\b",
    re.IGNORECASE,
)
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")
_FENCE = "```"
# A suffix line shorter than this is too common ("}", "return") to prove a repeat.
_MIN_REPEAT_CHARS = 6
_SUFFIX_LINES_CHECKED = 3


def _suffix_anchor_lines(suffix: str) -> list[str]:
    lines = suffix.split("\n")[1:]  # [0] is the rest of the cursor line
    out = []
    for line in lines:
        stripped = line.strip()
        if len(stripped) >= _MIN_REPEAT_CHARS:
            out.append(stripped)
        if len(out) == _SUFFIX_LINES_CHECKED:
            break
    return out


def clean_completion(completion: str, suffix: str) -> str:
    text = completion
    special = _SPECIAL.search(text)
    if special:
        text = text[: special.start()]
    fence = text.find(_FENCE)
    if fence != -1:
        text = text[:fence]

    lines = text.split("\n")
    anchors = set(_suffix_anchor_lines(suffix))
    kept: list[str] = []
    for index, line in enumerate(lines):
        if index > 0 and line.strip() in anchors:
            break  # the model is re-typing what already follows the cursor
        if index > 0 and _PROSE.match(line):
            break
        kept.append(line)
    text = "\n".join(kept)

    # The rest of the cursor line is already there: do not repeat it at the end.
    rest_of_line = suffix.split("\n", 1)[0]
    if rest_of_line.strip() and "\n" not in text and text.endswith(rest_of_line):
        text = text[: len(text) - len(rest_of_line)]
    # Trailing blank lines are noise in a ghost-text suggestion.
    return text.rstrip() if "\n" in text else text
