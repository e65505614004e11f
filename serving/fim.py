"""Fill-in-the-middle prompt format of the served code model (Qwen2.5-Coder).

The worker formats the prompt, as it would for a TensorRT-LLM ensemble whose
``text_input`` is the whole prompt string.
"""

from __future__ import annotations

FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"

# Tokens that end a completion. The engine also stops on the model's own end-of-generation
# tokens; listing them as stop words keeps a backend that detokenizes them as text honest.
STOP_WORDS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|fim_pad|>",
    "<|file_sep|>",
    "<|repo_name|>",
    "<|im_end|>",
    "<|im_start|>",
)


# The special tokens this template writes into a prompt. Anywhere else in a prompt, the same strings are text: a
# file may contain "<|fim_middle|>" (this very module does), and read as the special token it would end the
# prompt's prefix early and steer the model. The worker sends the offsets of its own markers with the prompt
# (``fim_markers``, inference.CTX_TEMPLATE_MARKERS); the engine parses special tokens only there.
TEMPLATE_MARKERS: tuple[str, ...] = (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)


def fim_markers(prefix: str, suffix: str, *, middle_from: int | None = None,
                within: int | None = None) -> tuple[int, ...]:
    """Where ``fim_prompt`` (same arguments) puts its markers: character offsets into the prompt. ``within``:
    only the markers wholly inside the prompt's first ``within`` characters (a head of it)."""
    cut = len(prefix) if middle_from is None else max(0, min(middle_from, len(prefix)))
    at_suffix = len(FIM_PREFIX) + cut
    spans = [(0, FIM_PREFIX), (at_suffix, FIM_SUFFIX), (at_suffix + len(FIM_SUFFIX) + len(suffix), FIM_MIDDLE)]
    return tuple(at for at, marker in spans if within is None or at + len(marker) <= within)


def fim_prompt(prefix: str, suffix: str, *, middle_from: int | None = None) -> str:
    """Prefix-suffix-middle order (PSM, what the model card shows; the model does not take SPM).

    In PSM the suffix follows the typed text and is processed again on every keystroke.
    ``middle_from`` keeps it: the prefix from that offset on (the cursor line, or the block being
    written) opens the middle, as if the model had written it, so what the user types lands at the
    very end of the prompt and what comes before it stays the same from one keystroke to the next.
    """
    if middle_from is not None:
        cut = max(0, min(middle_from, len(prefix)))
        return f"{FIM_PREFIX}{prefix[:cut]}{FIM_SUFFIX}{suffix}{FIM_MIDDLE}{prefix[cut:]}"
    return f"{FIM_PREFIX}{prefix}{FIM_SUFFIX}{suffix}{FIM_MIDDLE}"

