"""Where two versions of a text differ: one region, bounded, or two far apart."""

from __future__ import annotations

from syntax.textdiff import (
    SEPARATE_EDITS_MIN_GAP,
    common_prefix_len,
    diff_region,
    diff_region_within,
    second_region,
)


def test_one_region_from_the_common_prefix_and_suffix() -> None:
    assert common_prefix_len(b"abcdef", b"abcxef") == 3
    assert diff_region(b"abcdef", b"abcXYdef") == (3, 3, 5)  # an insertion
    assert diff_region("abcdef", "abf") == (2, 5, 2)  # a deletion, in str as in bytes
    assert diff_region(b"same", b"same") == (4, 4, 4)
    assert diff_region_within(b"a" * 100 + b"b", b"a" * 100 + b"c", 1) == (100, 101, 101)
    assert diff_region_within(b"x" + b"a" * 10 + b"y", b"X" + b"a" * 10 + b"Y", 4) is None  # spans 12 bytes


def test_two_edits_far_apart_are_two_regions() -> None:
    middle = b"unchanged line\n" * (SEPARATE_EDITS_MIN_GAP // 15 + 1)
    old = b"first\n" + middle + b"last\n"
    new = b"first typed\n" + middle + b"last typed\n"
    start, old_end, new_end = diff_region(old, new)
    assert second_region(old, new, start, old_end, new_end) == (old.index(b"\n"), new.index(b"\n"))
    near = b"first\n" + b"x\n" + b"last\n"
    region = diff_region(near, near.replace(b"first", b"one").replace(b"last", b"two"))
    assert second_region(near, near.replace(b"first", b"one").replace(b"last", b"two"), *region) is None
