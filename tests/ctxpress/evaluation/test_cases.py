import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ctxpress.evaluation.cases import Case, cut_out, make_cases, read_cases, restore, trivial_line, write_cases

PY = '''"""A module."""
import os


def walk(root):
    """Walk the tree.

    Returns names.
    """
    names = []
    for entry in os.scandir(root):
        # skip hidden files
        if entry.name.startswith("."):
            continue
        names.append(entry.name)
    return names


class Store:
    def __init__(self, path):
        self.path = path
        self.items = {}

    def get(self, key):
        value = self.items.get(key)
        return value
'''

GO = '''package main

import "fmt"

func Sum(values []int) int {
\ttotal := 0
\tfor _, v := range values {
\t\ttotal += v
\t}
\treturn total
}

func main() {
\tfmt.Println(Sum([]int{1, 2, 3}))
}
'''


def make_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "walk.py").write_text(PY)
    (repo / "main.go").write_text(GO)
    (repo / "README.md").write_text("# not code\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    return repo


def test_cut_out_and_restore_give_the_file_back() -> None:
    text = "a = 1\r\nb = compute(a)\nc\n"
    cut, removed = cut_out(text, 1, 4)
    assert cut == "a = 1\r\nb = \nc\n" and removed == "compute(a)"
    assert restore(cut, 1, 4, removed) == text


@given(st.lists(st.text(alphabet="ab (){}\t", max_size=12), min_size=1, max_size=8), st.data())
def test_cut_out_restore_roundtrip(lines: list[str], data: st.DataObject) -> None:
    text = "\n".join(lines) + "\n"
    line = data.draw(st.integers(0, len(lines) - 1))
    column = data.draw(st.integers(0, len(lines[line])))
    cut, removed = cut_out(text, line, column)
    assert restore(cut, line, column, removed) == text


def test_trivial_lines() -> None:
    for line in ["", "}", "});", ")", "# comment", "// c", "/* x */", "]"]:
        assert trivial_line(line), line
    for line in ["return x", "x = {}", "foo(bar)"]:
        assert not trivial_line(line), line


def test_make_cases_picks_function_body_lines_deterministically(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    cases = make_cases(repo, n=8, seed=7)
    again = make_cases(repo, n=8, seed=7)
    assert cases == again and len(cases) == 8
    assert {c.path for c in cases} == {"pkg/walk.py", "main.go"}  # spread over files
    for case in cases:
        text = (repo / case.path).read_text()
        line = text.splitlines()[case.line]
        assert line[case.column:] == case.expected
        assert not trivial_line(line.strip())
        assert "Walk the tree" not in line and "Returns names" not in line  # not the docstring
        assert not line.lstrip().startswith(("def ", "class ", "func "))  # inside a body
        assert len(case.expected.strip()) >= 3
    assert make_cases(repo, n=8, seed=8) != cases


def test_min_lines_filter(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    assert {c.path for c in make_cases(repo, n=5, seed=1, min_lines=20)} == {"pkg/walk.py"}


def test_cases_file_roundtrip(tmp_path: Path) -> None:
    cases = [Case("a:1:2", "/r", "a.py", 1, 2, "x + 1")]
    write_cases(cases, tmp_path / "c.jsonl")
    assert read_cases(tmp_path / "c.jsonl") == cases


def test_cross_file_cases_use_a_name_defined_only_in_another_file(tmp_path: Path) -> None:
    repo = tmp_path / "pkg"
    repo.mkdir()
    (repo / "helpers.py").write_text(
        "def normalize_weights(values):\n    total = sum(values)\n    return [v / total for v in values]\n\n\n"
        "class WeightTable:\n    pass\n")
    (repo / "model.py").write_text(
        "from helpers import normalize_weights, WeightTable\n\n\n"
        "def local_helper(x):\n    return x + 1\n\n\n"
        "def train(values):\n"
        "    counts = local_helper(len(values))\n"
        "    weights = normalize_weights(values)\n"
        "    table = WeightTable()\n"
        "    label = 'normalize_weights'\n"
        "    return weights, table, counts, label\n")
    cases = make_cases(repo, n=20, seed=0, cross_file=True)
    assert cases
    for case in cases:
        assert case.path == "model.py"
        assert "normalize_weights(" in case.expected or "WeightTable(" in case.expected
    lines = {c.line for c in cases}
    assert 8 not in lines  # local_helper is defined in the same file
    assert 11 not in lines  # the name only appears inside a string there
