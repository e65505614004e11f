"""A small Python file the shift and splice tests edit, and how they compare tables."""

from __future__ import annotations

import dataclasses

SOURCE = '''import os


class Store:
    """Keeps things."""

    def put(self, key, value):
        """Store one value."""
        self.items[key] = value
        return value

    def get(self, key):
        return self.items.get(key)


def helper(x):
    return x * 2
'''


def fields(table):  # type: ignore[no-untyped-def]
    return [dataclasses.astuple(s) for s in table]
