"""The in-file context of a request, as the completion worker builds it (no services: the model's tokenizer)."""

from __future__ import annotations

from context.build import ContextLibrary, FileView
from context.chunks import CrossFileChunks
from context.prepare import Prepared, request_features
from ctxpress.evaluation.bench import third_party_root
from ctxpress.evaluation.cases import cut_out
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, content_hash
from serving.tokenizer import Tokenizer, memoized_counter
from syntax.warm import warm_up

LONG_FILE = third_party_root() / "engine" / "result.py"  # SQLAlchemy, 2,000+ lines


async def _prepared(settings: Settings, tokenizer: Tokenizer, request: CompletionRequest, text: str) -> Prepared:
    library = ContextLibrary(settings, memoized_counter(tokenizer.count), settings.model_name)
    return (await library.build_prompt(request, FileView(text, content_hash(text), None, ()), None)).prepared


async def test_a_long_files_first_request_without_file_opened_is_assembled(tokenizer: Tokenizer) -> None:
    """No file_opened before it: the file's warm-up is done first, outside the assembly's 20 ms, so the request
    gets the assembled context, not the window."""
    warm_up()
    settings = Settings()
    assert settings.assembly_timeout_ms == 20.0
    text, _ = cut_out(LONG_FILE.read_text(encoding="utf-8"), 1500, 8)
    request = CompletionRequest(repository="sqlalchemy", path="engine/result.py", text=text, line=1500, column=8)
    prepared = await _prepared(settings, tokenizer, request, text)
    assert prepared.report.strategy == "ast", prepared.report.degraded
    assert prepared.report.degraded is None


async def test_a_baseline_request_gets_no_features_whatever_it_asks_for(tokenizer: Tokenizer) -> None:
    """The registry's features are optimized mode's: a baseline request asking for some gets the window, and
    none of them is carried on (not early_stop either)."""
    text = "def f(x):\n    return x\n"
    request = CompletionRequest(repository="r", path="f.py", text=text, line=1, column=4, mode="baseline",
                                features={"crop": True, "early_stop": True, "retrieval": True})
    assert request_features(request) == {}
    assert not CrossFileChunks.wanted(request_features(request))
    prepared = await _prepared(Settings(), tokenizer, request, text)
    assert (prepared.features, prepared.report.strategy) == ({}, "window")
    optimized = request.model_copy(update={"mode": "optimized"})
    assert request_features(optimized)["early_stop"] and CrossFileChunks.wanted(request_features(optimized))
