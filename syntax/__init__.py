"""Syntax of source files: tree-sitter grammars and parsing (``ParsedFile``), the cursor line's
blanking, the incremental per-file tree cache, and the symbol table and references read from a tree."""
