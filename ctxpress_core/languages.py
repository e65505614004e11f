"""Language names and how to infer them from a path."""

from __future__ import annotations

from pathlib import PurePosixPath

_BY_SUFFIX: dict[str, str] = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".java": "java", ".rs": "rust",
    ".c": "c", ".h": "c",  # a .h showing C++ constructs is cpp: see language_from_path
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
    ".h++": "cpp", ".ipp": "cpp",
    ".cs": "csharp", ".rb": "ruby", ".php": "php", ".kt": "kotlin", ".kts": "kotlin",
    ".swift": "swift", ".scala": "scala", ".sh": "bash", ".bash": "bash", ".lua": "lua",
    ".sql": "sql", ".html": "html", ".css": "css", ".toml": "toml", ".yaml": "yaml",
    ".yml": "yaml", ".json": "json", ".md": "markdown", ".txt": "text",
}

KNOWN_LANGUAGES: frozenset[str] = frozenset(_BY_SUFFIX.values())

# Line-comment syntax, used for elision markers in the assembled prompt.
LINE_COMMENT: dict[str, str] = {
    "python": "#",
    "javascript": "//",
    "typescript": "//",
    "tsx": "//",
    "go": "//",
    "java": "//",
    "rust": "//",
    "c": "//",
    "cpp": "//",
}

# How a language delimits its blocks: by indentation, or by braces (post-processing ends a completion where its
# block ends). A language in neither has no block rules there; its brackets and strings still count.
INDENTED_BLOCKS: frozenset[str] = frozenset({"python"})
BRACED_BLOCKS: frozenset[str] = frozenset(
    {"javascript", "typescript", "tsx", "go", "java", "rust", "c", "cpp", "csharp", "kotlin", "swift", "scala",
     "php"}
)


# A header is shared by C and C++; the C grammar turns these into error nodes.
_CPP_HEADER_MARKERS: tuple[str, ...] = ("class ", "namespace ", "template<", "template <", "public:")


def language_from_path(path: str, text: str | None = None) -> str:
    """The language of a file by its suffix (a ``.h`` whose ``text`` shows C++ constructs: cpp);
    ``text`` when unknown (baseline window only)."""
    suffix = PurePosixPath(path.replace("\\", "/")).suffix.lower()
    language = _BY_SUFFIX.get(suffix, "text")
    if suffix == ".h" and text is not None and any(m in text[:20_000] for m in _CPP_HEADER_MARKERS):
        return "cpp"
    return language


# Editors' language ids (LSP ``languageId``, VS Code's names) and short names that differ from ours.
_EDITOR_ALIASES: dict[str, str] = {
    "typescriptreact": "tsx", "javascriptreact": "javascript", "shellscript": "bash", "sh": "bash",
    "plaintext": "text", "c++": "cpp", "cxx": "cpp", "cs": "csharp", "py": "python", "golang": "go",
    "js": "javascript", "ts": "typescript", "rs": "rust",
}


def normalize_language(language: str) -> str:
    """Our name for ``language`` when it is an alias; otherwise the name itself, lowered."""
    name = language.strip().lower()
    return _EDITOR_ALIASES.get(name, name)


def language_from_editor(language_id: str | None) -> str | None:
    """Our name for an editor's language id; None when unknown (then the path decides)."""
    if not language_id:
        return None
    name = normalize_language(language_id)
    return name if name in KNOWN_LANGUAGES else None
