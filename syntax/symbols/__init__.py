"""Blocks of a source file (functions, methods, classes, constants, imports, ...) and references.

``model``: the table; ``extract``: reading it from a tree, one classifier per language (``lang``);
``shift`` and ``splice``: carrying the previous version's table past an edit; ``table``: the
memoized entry points; ``references``: identifier uses. Lines are 0-based and inclusive.
"""
