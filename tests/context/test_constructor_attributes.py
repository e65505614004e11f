"""A method far below a long constructor sees the attributes the constructor sets (feature
``constructor_attributes``); with the switch off it sees the signature only."""

from __future__ import annotations

from collections.abc import Callable

from ctx_samples import CROP_ONLY

from context.assembly import in_file_context
from context.options import AssemblyOptions


def _source() -> tuple[str, int, int]:
    setup = "".join(f"        self._option_{i} = (\n            parent.option_{i}\n            if option_{i} is None\n"
                    f"            else validate(option_{i})\n        )\n" for i in range(30))
    methods = "".join(f"    def method_{i}(self, value):\n        total = value * {i}\n        return total + {i}\n\n"
                      for i in range(60))
    text = ("class Settings:\n    def __init__(self, parent, **options):\n"
            f"{setup}        self._cached_database = None\n\n{methods}"
            "    def database(self):\n        if self._fallback is None:\n            return None\n"
            "        if self.\n")
    lines = text.splitlines()
    return text, len(lines) - 1, len(lines[-1])


def test_the_constructors_attributes_reach_a_method_far_below(count_tokens: Callable[[str], int]) -> None:
    text, line, column = _source()
    for on in (True, False):
        ctx = in_file_context(text, "settings.py", line, column, count_tokens=count_tokens, options=AssemblyOptions(
            timeout_ms=5000, constructor_attributes=on, **CROP_ONLY))
        ctor = next(b for b in ctx.blocks if b.kind == "constructor")
        assert ctor.form == "summary" and "def __init__(self, parent, **options):" in ctx.prefix
        assert ("self._cached_database = None\n" in ctx.prefix) is on
        assert ("self._option_7 = ...\n" in ctx.prefix) is on
        assert ("with the attributes it sets" in ctor.reason) is on
