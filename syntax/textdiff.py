"""Where two versions of a text differ: common prefix and suffix, found with memcmp-speed slicing.

Texts are bytes or str; offsets index them.
"""

from __future__ import annotations

from typing import AnyStr


def common_prefix_len(a: AnyStr, b: AnyStr) -> int:
    """Length of the longest common prefix of two texts (bytes or str)."""
    # Binary search over slice equality: O(n log n) in C memcmp instead of a Python loop.
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def diff_region(old: AnyStr, new: AnyStr) -> tuple[int, int, int]:
    """The one region where ``new`` differs from ``old`` (bytes or str): (start, end in old, end
    in new), from their common prefix and suffix."""
    start = common_prefix_len(old, new)
    tail = common_suffix_len(old, new, min(len(old), len(new)) - start)
    return start, len(old) - tail, len(new) - tail


def common_suffix_len(a: AnyStr, b: AnyStr, limit: int) -> int:
    """Length of the longest common suffix of two texts, at most ``limit`` (bytes or str)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def diff_region_within(old: bytes, new: bytes, limit: int) -> tuple[int, int, int] | None:
    """The one region where ``new`` differs from ``old``: (start, old end, new end), or None when
    it spans more than ``limit`` bytes."""
    if abs(len(old) - len(new)) > limit:
        return None
    start, old_end, new_end = diff_region(old, new)
    if max(old_end, new_end) - start > limit:
        return None
    return start, old_end, new_end


# Two differing regions are parsed as two edits when at least this many bytes between them agree.
SEPARATE_EDITS_MIN_GAP = 4096


def second_region(old: bytes, new: bytes, start: int, old_end: int, new_end: int) -> tuple[int, int] | None:
    """Where the first of two separate differences ends, as (end in old, end in new), when
    old[start:old_end] and new[start:new_end] differ at both ends but agree on a long stretch
    after the first line that differs; None otherwise (one edit will do)."""
    if min(old_end, new_end) - start < SEPARATE_EDITS_MIN_GAP:
        return None
    # The first difference is taken to end with its line in each version (a typed-in line).
    first_old = old.find(b"\n", start, old_end)
    first_new = new.find(b"\n", start, new_end)
    if first_old == -1 or first_new == -1:
        return None
    same = common_prefix_len(old[first_old:old_end], new[first_new:new_end])
    if same < SEPARATE_EDITS_MIN_GAP:
        return None
    return first_old, first_new
