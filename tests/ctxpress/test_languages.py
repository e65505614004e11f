from ctxpress.languages import KNOWN_LANGUAGES, language_from_path


def test_language_from_path() -> None:
    assert language_from_path("src/app/main.py") == "python"
    assert language_from_path("web/App.TSX") == "tsx"
    assert language_from_path("lib.rs") == "rust"
    assert language_from_path("include/x.hpp") == "cpp"
    assert language_from_path("Makefile") == "text"
    assert "text" in KNOWN_LANGUAGES
