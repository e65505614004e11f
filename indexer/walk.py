"""The files of a repository worth indexing, and the ones skipped with their reason.

git decides what belongs to the repository (tracked files plus untracked ones that .gitignore
does not exclude), so the walk honours every .gitignore, .git/info/exclude and the global excludes
exactly as git does. ``indexer.filters`` then drops secrets, vendored and generated code, binaries
and files over the size limit; tree-sitter languages we cannot cut into blocks are skipped too.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxpress_core.errors import CtxpressError
from indexer.filters import DEFAULT_MAX_FILE_BYTES, content_reason, path_reason
from syntax.grammars import detect_language, is_supported


class WalkError(CtxpressError):
    """The repository cannot be walked (not a directory, not a git work tree, git failed)."""


@dataclass
class SourceFile:
    path: str  # relative, '/'-separated
    language: str
    text: str


@dataclass
class Skipped:
    path: str
    reason: str


def _git(root: Path, *args: str, timeout: float = 60) -> bytes:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WalkError(f"git {' '.join(args)} failed: {exc}") from exc
    if proc.returncode != 0:
        raise WalkError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def repo_root(path: str | Path) -> Path:
    """The work tree root containing ``path``; ``WalkError`` when it is not inside a git work tree."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise WalkError(f"{p} is not a directory")
    return Path(_git(p, "rev-parse", "--show-toplevel").decode().strip()).resolve()


def index_root(path: str | Path) -> Path:
    """The folder ``ctxpress index PATH`` indexes: the git work tree containing it, or the folder
    itself when it is in no work tree or one that ignores it (an installed package in a venv),
    so that its files get paths relative to it, as an IDE inside it would name them."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise WalkError(f"{p} is not a directory")
    p = p.resolve()
    try:
        top = repo_root(p)
    except WalkError:
        return p
    if top != p and subprocess.run(["git", "-C", str(top), "check-ignore", "-q", str(p.relative_to(top))],
                                   capture_output=True, timeout=30, check=False).returncode == 0:
        return p
    return top


def is_work_tree_root(root: Path) -> bool:
    try:
        return repo_root(root) == root.resolve()
    except WalkError:
        return False


_WALK_SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".mypy_cache"})


def list_paths(root: Path) -> list[str]:
    """Files to consider: what git lists (tracked and not ignored) at a work tree's root; every file
    under a folder outside git (hidden and cache folders left out)."""
    if not is_work_tree_root(root):
        out = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _WALK_SKIP_DIRS and not d.startswith("."))
            rel = Path(folder).relative_to(root)
            out += [str(rel / n) if str(rel) != "." else n for n in names]
        return sorted(out)
    out_b = _git(root, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    return sorted({p for p in out_b.decode("utf-8", "surrogateescape").split("\0") if p})


# Why a listed path is not read: it goes through a symlinked folder (see ``outside``).
THROUGH_SYMLINK = "through a symlinked folder: outside what git lists"


def outside(root: Path, path: str) -> bool:
    """Whether ``root / path`` is not the file git names ``path``: a symlink on its way leads elsewhere.

    Checking the last component alone is not enough: a folder of the repository replaced by a symlink
    (``src -> ~/.ssh``, as a cloned repository can hold) makes ``src/config.py`` a file outside it, which git
    still lists (from its index, or as changed since the last indexed commit). Nor is staying inside the
    repository: ``lib -> private`` makes ``lib/keys.py`` the file ``private/keys.py`` that .gitignore keeps out.
    git itself never stores a path through a symlink, so a path that goes through one is never read; its content
    must never reach the index, where colleagues' prompts could retrieve it."""
    top = root.resolve()
    try:
        return (root / path).resolve() != top / path
    except (OSError, RuntimeError):  # a symlink loop: certainly not a file of the repository
        return True


def classify(path: str, data: bytes, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> SourceFile | Skipped:
    """One file's fate: a ``SourceFile`` to index, or ``Skipped`` with the reason."""
    reason = path_reason(path)
    if reason:
        return Skipped(path, reason)
    language = detect_language(path)
    if not is_supported(language):
        return Skipped(path, "unsupported language")
    reason = content_reason(data, max_bytes)
    if reason:
        return Skipped(path, reason)
    text = data.decode("utf-8")
    assert language is not None
    return SourceFile(path, detect_language(path, text) or language, text)


def iter_files(root: Path, paths: list[str], max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[SourceFile | Skipped]:
    for path in paths:
        reason = path_reason(path)
        if reason:  # never open a secret
            yield Skipped(path, reason)
            continue
        if not is_supported(detect_language(path)):
            yield Skipped(path, "unsupported language")
            continue
        full = root / path
        if outside(root, path):
            yield Skipped(path, THROUGH_SYMLINK)
            continue
        try:
            if full.is_symlink() or not full.is_file():
                yield Skipped(path, "not a regular file")
                continue
            if full.stat().st_size > max_bytes:
                yield Skipped(path, "too large")
                continue
            data = full.read_bytes()
        except OSError as exc:
            yield Skipped(path, f"unreadable: {exc.strerror or exc}")
            continue
        yield classify(path, data, max_bytes)


def head_commit(root: Path) -> str | None:
    try:
        return _git(root, "rev-parse", "--verify", "-q", "HEAD").decode().strip() or None
    except WalkError:
        return None


def changed_paths(root: Path, since: str | None) -> list[str]:
    """Paths git says changed: since commit ``since`` (when given and known) plus the working tree's
    uncommitted and untracked (not ignored) changes. Deleted paths are included (the caller sees them
    missing on disk, or no longer listed by ``list_paths``, and removes them from the index); for a rename both
    paths come back. A path that left the repository (``git rm --cached``, then ignored) is among them while its
    file stays on disk: only what ``list_paths`` lists is read."""
    paths: set[str] = set()
    if since:
        try:
            out = _git(root, "diff", "--name-only", "--no-renames", "-z", since, "HEAD")
            paths.update(p for p in out.decode("utf-8", "surrogateescape").split("\0") if p)
        except WalkError:
            since = None  # unknown (e.g. garbage-collected) commit: fall back to the working tree only
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
    for entry in status.decode("utf-8", "surrogateescape").split("\0"):
        if len(entry) > 3:
            paths.add(entry[3:])
    return sorted(p for p in paths if not p.endswith(os.sep))
