"""The jump scenario's cursors, and the busy host a benchmark can run beside."""

from __future__ import annotations

import ast
import time

import pytest

from ctxpress.evaluation.bench import jump_cursors, third_party_root
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.busy import BackgroundLoad

LONG_FILE = third_party_root() / "engine" / "result.py"


def test_jump_cursors_are_in_different_functions_of_the_file() -> None:
    cfg = BenchConfig("nats://unused", "unused", jump_cursors=6, seed=3)
    cases = jump_cursors(LONG_FILE, cfg)
    assert len(cases) == 6 and {c.path for c in cases} == {"result.py"}
    tree = ast.parse(LONG_FILE.read_text(encoding="utf-8"))
    spans = [(n.lineno - 1, (n.end_lineno or n.lineno) - 1) for n in ast.walk(tree)
             if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    innermost = [max(s for s in spans if s[0] < c.line <= s[1]) for c in cases]
    assert len(set(innermost)) == 6
    assert [c.line for c in jump_cursors(LONG_FILE, cfg)] == [c.line for c in cases]  # the seed decides
    assert sorted(c.line for c in cases) != [c.line for c in cases]  # a reader jumps, not reads top to bottom


def test_background_load_keeps_a_core_busy_until_stopped() -> None:
    # At normal priority: niced (the default), it gets a tenth of a core on a host whose cores are busy at normal
    # priority (a `make check` shard beside this one), and it is that it runs that is tested here, not its share.
    busy = BackgroundLoad(1, nice=0)
    busy.start()
    time.sleep(1.0)
    busy.stop()
    assert busy.cpu_s > 0.2
    with pytest.raises(ValueError):
        BackgroundLoad(10_000)
