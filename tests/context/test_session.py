"""A file's session per (repository, path): two repositories with the same relative path share nothing,
and the registry stays within its bound however many files it sees."""

from __future__ import annotations

from collections.abc import Callable

from ctx_samples import CROP_ONLY

from context.assembly import in_file_context
from context.model import AssembledContext
from context.options import AssemblyOptions
from context.session import FileSession, FileSessions

Counter = Callable[[str], int]
PATH = "app/service.py"
HELPERS = "".join(f"def helper_{i}(values):\n    \"\"\"Step {i} of the pipeline.\"\"\"\n"
                  f"    scaled = [v * {i} for v in values]\n    return sum(scaled) + {i}\n\n\n" for i in range(30))
OPTIONS = AssemblyOptions(budget_tokens=300, timeout_ms=5000, **CROP_ONLY)


def _file(helper: int, typed: str) -> tuple[str, int, int]:
    """The same file in two repositories (forks): only the body of ``main`` differs, which calls another helper."""
    head = f"{HELPERS}def main(values):\n    total = helper_{helper}(values)\n    return total + {typed}"
    text = head + "\n\n\ndef after():\n    return None\n"
    return text, head.count("\n"), len(head) - head.rfind("\n") - 1


def _assemble(session: FileSession, helper: int, typed: str, count_tokens: Counter) -> AssembledContext:
    text, line, column = _file(helper, typed)
    return in_file_context(text, PATH, line, column, count_tokens=count_tokens, options=OPTIONS, session=session)


def test_the_same_path_in_two_repositories_keeps_its_own_steady_excerpts(count_tokens: Counter) -> None:
    sessions = FileSessions()
    _assemble(sessions.get("fork-a", PATH, None), 3, "", count_tokens)
    typed_in_a = _assemble(sessions.get("fork-a", PATH, None), 3, "1", count_tokens)
    assert typed_in_a.steady and "def helper_3(" in typed_in_a.prefix  # typing on in A keeps A's excerpts
    # B's file equals A's but inside main: A's held excerpts must not stand in for B's own choice
    in_b = _assemble(sessions.get("fork-b", PATH, None), 17, "1", count_tokens)
    alone = _assemble(FileSession("fork-b", PATH), 17, "1", count_tokens)
    assert not in_b.steady
    assert "def helper_17(" in in_b.prefix and "def helper_3(" not in in_b.prefix
    assert (in_b.prefix, in_b.suffix) == (alone.prefix, alone.suffix)  # as if A had never been seen


def test_the_same_path_in_two_repositories_has_its_own_parse_tree(count_tokens: Counter) -> None:
    sessions = FileSessions()
    a, b = sessions.get("fork-a", PATH, None), sessions.get("fork-b", PATH, None)
    _assemble(a, 3, "", count_tokens)
    _assemble(b, 17, "", count_tokens)
    assert a.trees is not b.trees
    assert (a.trees.full_parses, b.trees.full_parses) == (1, 1)  # B's version is not parsed as an edit of A's
    _assemble(a, 3, "1", count_tokens)  # typing on in A: an edit of A's own last version
    assert a.trees.full_parses == 1 and a.trees.incremental_parses + a.trees.shifted_without_parse >= 1


def test_sessions_are_bounded_and_counted(count_tokens: Counter) -> None:
    sessions = FileSessions(max_files=3)
    first = sessions.get("r", "f0.py", None)
    for i in range(10):
        _assemble(sessions.get("r", f"f{i}.py", None), 3, "", count_tokens)
        assert len(sessions) <= 3
    assert sessions.counts() == {"file_sessions": 3, "tree_cache_files": 3, "steady_excerpt_files": 3,
                                 "held_chunk_files": 0}
    assert sessions.get("r", "f0.py", None) is not first  # the least recently used went, all of its state with it
    assert sessions.get("r", "f9.py", None) is sessions.get("r", "f9.py", None)
