"""How sure a difference between two arms is, over the same cases: the mean of the per-case differences with a
paired percentile bootstrap interval (cases resampled with replacement, seeded, so a run can be repeated)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RESAMPLES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    points: float  # mean difference (second - first) x 100
    low: float
    high: float
    cases: int  # cases answered in both arms


def paired_interval(first: Sequence[dict[str, Any]], second: Sequence[dict[str, Any]], key: str,
                    resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> Interval | None:
    """``second[key] - first[key]`` over the cases (by ``id``) both arms answered without an error; None if
    there are none."""
    a = {r["id"]: r[key] for r in first if not r.get("error") and r.get(key) is not None}
    b = {r["id"]: r[key] for r in second if not r.get("error") and r.get(key) is not None}
    diffs = [b[i] - a[i] for i in a if i in b]
    if not diffs:
        return None
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(resamples))
    tail = (1 - level) / 2
    low = means[int(tail * (resamples - 1))]
    high = means[int((1 - tail) * (resamples - 1))]
    return Interval(statistics.fmean(diffs) * 100, low * 100, high * 100, len(diffs))
