from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.services

SOURCE = '''import math


def hypotenuse(a: float, b: float) -> float:
    """Length of the long side."""
    squares = a * a + b * b
    result = math.sqrt(squares)
    return result


def describe(a: float, b: float) -> str:
    """The triangle in words."""
    long_side = hypotenuse(a, b)
    area = a * b / 2
    perimeter = a + b + long_side
    words = [f"sides {a} and {b}", f"hypotenuse {long_side:.2f}"]
    words.append(f"area {area:.2f}")
    words.append(f"perimeter {perimeter:.2f}")
    return ", ".join(words)
'''


@pytest.mark.parametrize("mode", ["optimized", "baseline"])
def test_demo_prints_completions_and_timings(appliance: Any, tmp_path: Path, mode: str) -> None:
    source = tmp_path / "geometry.py"
    source.write_text(SOURCE)
    run = appliance.ctxpress("demo", "--file", str(source), "-n", "1", "--typing", "3", "--mode", mode)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "completion:" in run.stdout and "timings ms:" in run.stdout and "Summary: 1 completions" in run.stdout
    # then the typing replay (the body of describe typed back), and cold against warm
    assert "Typing replay: a function body" in run.stdout and "[t3]" in run.stdout
    assert "  cold: the file's first completion" in run.stdout and "  warm: while typing, 2 completions" in run.stdout
    assert ("window, lines" in run.stdout) == (mode == "baseline")
    assert appliance.ctxpress("status").returncode == 0  # the demo leaves a running appliance running
