from ctxpress_core.languages import KNOWN_LANGUAGES, language_from_path


def test_language_from_path() -> None:
    assert language_from_path("src/app/main.py") == "python"
    assert language_from_path("web/App.TSX") == "tsx"
    assert language_from_path("lib.rs") == "rust"
    assert language_from_path("include/x.hpp") == "cpp"
    assert language_from_path("Makefile") == "text"
    assert "text" in KNOWN_LANGUAGES


def test_one_table_for_the_wire_and_the_parser() -> None:
    from ctxpress_core.wire.v1 import CompletionRequest
    from syntax.grammars import detect_language

    # a C++ header is reported and parsed as the same language
    header = "namespace n { class A {}; }\n"
    assert language_from_path("x.h", header) == detect_language("x.h", header) == "cpp"
    assert language_from_path("x.h", "struct a { int b; };\n") == detect_language("x.h", "int a;") == "c"
    for suffix in (".c++", ".ipp", ".h++"):
        assert language_from_path(f"a{suffix}") == detect_language(f"a{suffix}") == "cpp"
    # an editor's alias is accepted by the wire, normalised
    for alias, ours in (("typescriptreact", "tsx"), ("C++", "cpp"), ("js", "javascript"), ("rs", "rust")):
        request = CompletionRequest(repository="r", path="a", text="x", line=0, column=0, language=alias)
        assert request.language == ours
