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
'''


@pytest.mark.parametrize("mode", ["optimized", "baseline"])
def test_demo_prints_completions_and_timings(appliance: Any, tmp_path: Path, mode: str) -> None:
    source = tmp_path / "geometry.py"
    source.write_text(SOURCE)
    run = appliance.ctxpress("demo", "--file", str(source), "-n", "1", "--mode", mode)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "completion:" in run.stdout and "timings ms:" in run.stdout and "Summary: 1 completions" in run.stdout
    assert ("window, lines" in run.stdout) == (mode == "baseline")
    assert appliance.ctxpress("status").returncode == 0  # the demo leaves a running appliance running
