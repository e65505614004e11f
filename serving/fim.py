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


def fim_prompt(prefix: str, suffix: str) -> str:
    """Prefix-suffix-middle order, the one the model was trained with."""
    return f"{FIM_PREFIX}{prefix}{FIM_SUFFIX}{suffix}{FIM_MIDDLE}"
