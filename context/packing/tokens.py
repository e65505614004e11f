"""A deterministic stand-in token counter (for tests and `explain` without a model tokenizer).

Roughly BPE-like on code: a word piece per 6 letters, one token per digit run, punctuation
character or newline-bearing whitespace run. Production passes the model's own tokenizer.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[A-Za-z_]+|\d+|\s+|[^\sA-Za-z_\d]")


def rough_token_count(text: str) -> int:
    n = 0
    for m in _TOKEN.finditer(text):
        s = m.group()
        if s.isspace():
            n += 1 if ("\n" in s or len(s) > 1) else 0
        else:
            n += 1 + (len(s) - 1) // 6
    return n
