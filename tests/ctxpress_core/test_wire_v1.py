import pytest
from pydantic import ValidationError

from ctxpress_core.errors import UnsupportedLanguage
from ctxpress_core.features import RETIRED
from ctxpress_core.wire.v1 import CompletionRequest, FileOpened, content_hash


def base(**over: object) -> dict[str, object]:
    return {"repository": "r", "path": "a.py", "text": "x = 1\n", "line": 0, "column": 0, **over}


def test_minimal_request_has_defaults() -> None:
    req = CompletionRequest.model_validate(base())
    assert req.mode == "optimized"
    assert req.max_tokens == 64
    assert req.language is None


@pytest.mark.parametrize(
    "over",
    [
        {"line": -1},
        {"column": -3},
        {"line": "4"},  # strict: no silent coercion of wrong types
        {"max_tokens": 0},
        {"max_tokens": 10_000},
        {"mode": "fast"},
        {"repository": ""},
        {"unexpected": 1},
        {"content_hash": "0" * 64},  # both text and hash
        {"text": None},  # neither
        {"content_hash": "xyz", "text": None},
    ],
)
def test_invalid_requests_are_rejected(over: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        CompletionRequest.model_validate(base(**over))


def test_hash_instead_of_text() -> None:
    req = CompletionRequest.model_validate(base(text=None, content_hash=content_hash("x = 1\n")))
    assert req.text is None and req.content_hash is not None


def test_unknown_language_is_its_own_error() -> None:
    with pytest.raises(ValidationError) as info:
        CompletionRequest.model_validate(base(language="klingon"))
    causes = [e.get("ctx", {}).get("error") for e in info.value.errors()]
    assert any(isinstance(c, UnsupportedLanguage) for c in causes)


def test_file_opened_carries_the_requests_switches_and_refuses_unknown_ones() -> None:
    opened = FileOpened.model_validate_json('{"repository": "r", "path": "a.py", "text": "x = 1\\n",'
                                            ' "features": {"similar": false}}')
    assert opened.features == {"similar": False} and opened.line is None
    with pytest.raises(ValidationError, match="unknown features"):
        FileOpened.model_validate_json('{"repository": "r", "path": "a.py", "text": "", "features": {"warp": true}}')


def test_a_retired_switch_is_accepted_and_dropped() -> None:
    """A switch measured and removed was part of the v1 format: a client still sending it gets its completion."""
    assert {"stable_head", "model_notes", "follow_up"} <= RETIRED
    for name in RETIRED:
        request = CompletionRequest.model_validate(base(features={name: True, "similar": False}))
        assert request.features == {"similar": False}
        opened = FileOpened.model_validate({"repository": "r", "path": "a.py", "text": "", "features": {name: True}})
        assert opened.features == {}
    with pytest.raises(ValidationError, match="unknown features"):
        CompletionRequest.model_validate(base(features={"warp": True}))
