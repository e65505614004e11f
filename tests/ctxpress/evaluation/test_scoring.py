import pytest

from ctxpress.evaluation.scoring import edit_similarity, exact_match, identifier_f1, identifier_match, score


def test_exact_match_ignores_surrounding_whitespace() -> None:
    assert exact_match("  return x + 1  ", "return x + 1")
    assert not exact_match("return x + 2", "return x + 1")


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("abc", "abc", 1.0),
        ("", "", 1.0),
        ("abc", "", 0.0),
        ("kitten", "sitting", 1 - 3 / 7),
        ("self.x", "self.y", 1 - 1 / 6),
    ],
)
def test_edit_similarity(pred: str, gold: str, expected: float) -> None:
    assert edit_similarity(pred, gold) == pytest.approx(expected)


def test_identifier_scores() -> None:
    assert identifier_match("foo(bar, 1)", "foo( bar ,2)")  # same identifiers, numbers differ
    assert not identifier_match("foo(baz)", "foo(bar)")
    assert identifier_f1("foo(baz)", "foo(bar)") == pytest.approx(0.5)
    assert identifier_f1("", "") == 1.0
    assert identifier_f1("x", "") == 0.0


def test_score_uses_the_first_line_only() -> None:
    s = score("total += value\n    return total", "total += value")
    assert s["exact_match"] == 1.0 and s["edit_similarity"] == 1.0
