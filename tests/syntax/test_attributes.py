"""A Python constructor's attribute summary: the attributes it sets, once each, values kept when short."""

from __future__ import annotations

from syntax.attributes import constructor_attributes
from syntax.parsed_file import parse_text
from syntax.symbols.table import extract_symbols

SOURCE = '''\
class Settings:
    def __init__(
        self,
        parent=None,
        # why the star: keyword-only from here on
        *,
        limit: int = 5,  # type: ignore
        label: str = "a  # not a comment",
    ) -> None:
        """Settings for one run."""
        self._fallback = parent or DEFAULT
        if limit < 0:
            self._limit = 0
        self._limit = limit
        self._cached: Database | None = None
        self._long = (
            first_part
            + second_part
        )
        self.count += 1
        self.items == []
        self.view.width = 3
        self._label = label  # shown as typed
        self._mark = "a  # not a comment"
        self._text = "a value that goes on for much longer than a summary line should carry, really"

    def run(self) -> None:
        return None
'''


def _ctor(text: str, language: str = "python") -> str | None:
    parsed = parse_text(text, language)
    table = extract_symbols(parsed)
    sym = next(s for s in table.symbols if s.name in ("__init__", "constructor"))
    return constructor_attributes(parsed, sym)


def test_keeps_the_signature_without_comments_and_each_attribute_once() -> None:
    assert _ctor(SOURCE) == '''\
    def __init__(
        self,
        parent=None,
        *,
        limit: int = 5,
        label: str = "a  # not a comment",
    ) -> None:
        """Settings for one run."""
        self._fallback = parent or DEFAULT
        self._limit = 0
        self._cached: Database | None = None
        self._long = ...
        self._label = label
        self._mark = "a  # not a comment"
        self._text = ...
        ...
'''


def test_none_without_attributes_or_outside_python() -> None:
    assert _ctor("class A:\n    def __init__(self, x):\n        super().__init__()\n        run(x)\n") is None
    js = "class A {\n  constructor(x) {\n    this.x = x;\n  }\n}\n"
    assert _ctor(js, "javascript") is None
