"""Optimisations that ``mode=optimized`` can switch on or off per request, for ablations.

Each optimisation registers itself here with a name and a default; ``ctxpress eval
--features`` and the wire format validate against this registry, so a new optimisation
only needs one ``register`` call to become measurable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    name: str
    description: str
    default: bool = True


REGISTRY: dict[str, Feature] = {}
# Switches measured and removed (docs/context.md, docs/inference.md): the v1 wire format named them, so a client
# that still sends one is not refused for it; it is dropped on arrival and changes nothing.
RETIRED: frozenset[str] = frozenset({"stable_head", "model_notes", "follow_up"})


def register(name: str, description: str, default: bool = True) -> Feature:
    feature = Feature(name, description, default)
    REGISTRY[name] = feature
    return feature


def resolve(overrides: dict[str, bool] | None) -> dict[str, bool]:
    """Every registered feature with its effective value."""
    values = {name: f.default for name, f in REGISTRY.items()}
    for name, value in (overrides or {}).items():
        if name not in REGISTRY:
            raise KeyError(name)
        values[name] = value
    return values


def parse_list(spec: str) -> dict[str, bool]:
    """``"-summaries,+crop,retrieval=off"`` -> {"summaries": False, "crop": True, "retrieval": False}."""
    out: dict[str, bool] = {}
    for raw in filter(None, (part.strip() for part in spec.split(","))):
        if "=" in raw:
            name, _, value = raw.partition("=")
            if value.lower() not in {"on", "off", "true", "false", "1", "0"}:
                raise ValueError(f"feature {name!r}: value must be on/off, got {value!r}")
            out[name] = value.lower() in {"on", "true", "1"}
        elif raw[0] in "+-":
            out[raw[1:]] = raw[0] == "+"
        else:
            out[raw] = True
        name = raw.partition("=")[0].lstrip("+-")
        if name not in REGISTRY:
            raise ValueError(f"unknown feature {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return out


register("crop", "tree-sitter block cropping of the file (off: the baseline window)")
register("summaries", "structured summaries of blocks that do not fit whole (off: whole or dropped)")
register("retrieval", "cross-file chunks from the repository index (pgvector + lexical, fused)")
register("prefix_cache", "file-level KV pool: the engine keeps each file's prompt KV (off: one shared context)")
register("speculative", "speculative decoding, n-gram or draft model chosen per request (off: plain greedy)")
register("nearby_first", "the code just above the enclosing block before class head, references and imports")
register("whole_file", "a file that fits the context budget is sent whole, not cropped")
register("fill_below", "in a file of <= 2 budgets, the budget left after packing goes to the lines below the block")
register("suffix_floor", "in a longer file, when the cursor's block ends soon after the cursor, an eighth of the "
         "budget is held for the code after it (with fill_below; context/assembly/below.py)")
register("constructor_attributes", "the enclosing class's Python constructor, when summarised, keeps the "
         "attributes it sets (self.name = value; syntax/attributes.py)")
register("similar", "lines elsewhere in the file that resemble the code at the cursor (rare shared identifiers)")
register("steady_excerpts", "while the file changes only inside the enclosing block, the excerpts chosen for it "
         "stay as they were, so a keystroke changes only the prompt's tail (and its KV)")
register("early_stop", "the engine stops once the text the editor gets can no longer change (a mid-line cursor's "
         "line ended, the code after the cursor re-typed, the block left); off: it runs to max_tokens")
register("prewarm", "on file_opened with a cursor (an editor's cursor at rest), the prompt for that place is "
         "assembled and processed in the engine in the background, at the lowest priority")
register("plan", "a prompt planned to the latency target (CTXPRESS_LATENCY_TARGET_MS) at the engine's measured speed, "
         "with the full prompt filled in behind the answer (off: always the full budget)")
