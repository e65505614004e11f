"""``ctxpress lsp``'s options: the editor's settings over the environment's defaults."""

from __future__ import annotations

from ctxpress.lsp.options import LspOptions
from ctxpress_core.settings import Settings


def test_the_editors_settings_override_the_defaults() -> None:
    options, problem = LspOptions.from_editor(Settings(), {"maxTokens": 12, "maxDecodeMs": 800})
    assert problem is None and (options.max_tokens, options.max_decode_ms) == (12, 800)
    # the peers' default cap (llama.vim, llama.vscode), unless the environment says none
    assert LspOptions.from_editor(Settings(), None)[0].max_decode_ms == 1000
    assert LspOptions.from_editor(Settings(lsp_max_decode_ms=0), None)[0].max_decode_ms is None


def test_invalid_settings_are_reported_and_the_defaults_used() -> None:
    options, problem = LspOptions.from_editor(Settings(), {"maxDecodeMs": 0})
    assert problem is not None and "maxDecodeMs" in problem and options.max_decode_ms == 1000
    assert LspOptions.from_editor(Settings(), [1])[1] == "initializationOptions must be an object"
