"""What one assembly is asked for: the budget, the deadline, the language, the recent edits, and which of the
assembly's optimisations are on.

The switches carry the names the optimisations are registered under (``ctxpress_core.features``) and
its defaults, so a request's resolved features become options by name, with nothing to map by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from context.model import DEFAULT_BUDGET_TOKENS
from ctxpress_core.features import REGISTRY


def _switch(name: str) -> Any:
    """The field of the registered optimisation ``name`` (the field is named the same: see SWITCHES)."""
    return field(default=REGISTRY[name].default, metadata={"feature": name})


def _not_choosing(default: Any) -> Any:
    """A field held excerpts (assembly/steady.py) outlive a change of; every other field is in their key."""
    return field(default=default, metadata={"steady": False})


@dataclass(frozen=True)
class AssemblyOptions:
    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    # on the assembly's own CPU time: more than this, and the request gets the fallback
    timeout_ms: float = _not_choosing(20.0)
    # ours (ctxpress_core.languages), settled by the caller; None: from the path and text (the key has the result)
    language: str | None = _not_choosing(None)
    # 0-based inclusive line ranges, most recent first (IDE edits and ``indexer.changes.changed_line_ranges``);
    # held excerpts compare the edits outside their block themselves
    recent_edit_lines: Sequence[tuple[int, int]] = _not_choosing(())
    # count the whole file with the token counter (slow with a real tokenizer on big files: ~100 ms for 40k
    # tokens); otherwise it is estimated from the characters per token of the assembled context
    exact_file_tokens: bool = _not_choosing(False)
    # a file that fits the budget is sent whole (strategy "whole-file"): no cropping can beat it
    whole_file: bool = _switch("whole_file")
    summaries: bool = _switch("summaries")
    constructor_attributes: bool = _switch("constructor_attributes")
    nearby_first: bool = _switch("nearby_first")
    similar: bool = _switch("similar")
    # in a short file, the budget left after packing goes to the lines below the block (below.py)
    fill_below: bool = _switch("fill_below")
    suffix_floor: bool = _switch("suffix_floor")  # and in a longer file, a share of the budget held for them
    steady_excerpts: bool = _switch("steady_excerpts")

    @classmethod
    def with_features(cls, features: Mapping[str, bool], **options: Any) -> AssemblyOptions:
        """``options`` with every switch taken from ``features`` (a resolved feature set) by its name."""
        return cls(**options, **{name: features[name] for name in SWITCHES})


# The fields that are switches of registered optimisations.
SWITCHES: tuple[str, ...] = tuple(f.name for f in fields(AssemblyOptions) if "feature" in f.metadata)

DEFAULT_OPTIONS = AssemblyOptions()
