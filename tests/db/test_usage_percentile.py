"""The latency histogram's buckets and the percentiles read from them (pure logic of db/usage_rollup.py)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from db.usage_rollup import BUCKETS, LATENCY_BOUNDS_MS, bucket_of, bucket_range, percentile


def histogram(values: list[float]) -> list[int]:
    counts = [0] * BUCKETS
    for value in values:
        counts[bucket_of(value)] += 1
    return counts


def exact(values: list[float], q: float) -> float:
    """percentile_disc: the first value whose cumulative share reaches q."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_edges_rise_and_are_at_most_5_ms_or_20_percent_apart() -> None:
    bounds = (0.0, *LATENCY_BOUNDS_MS)
    assert all(b > a for a, b in itertools.pairwise(bounds))
    assert all(b - a <= max(5.0, 0.2 * a) for a, b in itertools.pairwise(bounds) if b <= 6400)


def test_bucket_of_matches_the_edges() -> None:
    assert bucket_of(0) == 0
    assert bucket_of(4.99) == 0
    assert bucket_of(5) == 1  # an edge opens its bucket, as width_bucket does
    assert bucket_range(bucket_of(237.0)) == (200.0, 240.0)
    assert bucket_range(bucket_of(10**6)) == (60000.0, math.inf)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("q", [0.5, 0.95])
def test_the_percentile_lies_in_the_exact_values_bucket(seed: int, q: float) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(5, 1) for _ in range(rng.randint(1, 400))]
    read = percentile(histogram(values), q)
    assert read is not None
    low, high = bucket_range(bucket_of(exact(values, q)))
    assert low <= read < high


def test_empty_and_open_ended() -> None:
    assert percentile([0] * BUCKETS, 0.5) is None
    assert percentile(histogram([70000.0, 90000.0]), 0.95) == 60000.0
    assert percentile(histogram([7.0]), 0.5) == 7.5  # the middle of [5, 10) for a single value
