"""Language names and how to infer them from a path."""

from __future__ import annotations

from pathlib import PurePosixPath

_BY_SUFFIX: dict[str, str] = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".java": "java", ".rs": "rust",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
    ".cs": "csharp", ".rb": "ruby", ".php": "php", ".kt": "kotlin", ".kts": "kotlin",
    ".swift": "swift", ".scala": "scala", ".sh": "bash", ".bash": "bash", ".lua": "lua",
    ".sql": "sql", ".html": "html", ".css": "css", ".toml": "toml", ".yaml": "yaml",
    ".yml": "yaml", ".json": "json", ".md": "markdown", ".txt": "text",
}

KNOWN_LANGUAGES: frozenset[str] = frozenset(_BY_SUFFIX.values())


def language_from_path(path: str) -> str:
    """The language of a file by its suffix; ``text`` when unknown (baseline window only)."""
    return _BY_SUFFIX.get(PurePosixPath(path).suffix.lower(), "text")


# Editors' language ids (LSP ``languageId``, VS Code's names) that differ from ours.
_EDITOR_ALIASES: dict[str, str] = {
    "typescriptreact": "tsx", "javascriptreact": "javascript", "shellscript": "bash", "sh": "bash",
    "plaintext": "text", "c++": "cpp", "cs": "csharp", "py": "python", "golang": "go",
}


def language_from_editor(language_id: str | None) -> str | None:
    """Our name for an editor's language id; None when unknown (then the path decides)."""
    if not language_id:
        return None
    name = language_id.lower()
    name = _EDITOR_ALIASES.get(name, name)
    return name if name in KNOWN_LANGUAGES else None
