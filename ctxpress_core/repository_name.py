"""Which repository a clone is: one rule for every door that names it (``ctxpress index``, the git hooks that
``ctxpress hooks install`` writes, the language server, the HTTP bridge's Tabby door).

1. ``git config ctxpress.repository`` in the clone, when set (for a remote whose last component is ambiguous:
   two teams' ``api``, a fork);
2. else the last path component of the ``origin`` remote's URL, less ``.git``;
3. else the work tree folder's name (a repository with no origin: nobody else clones it).

The folder's name alone let a teammate's clone named like another repository (``git clone …/web.git api``) index
into ``api`` and read ``api``'s index as if it were ``web``'s. An explicit name (``--name``, the editor's
``repository`` option, the bridge's header) still wins over the rule.

The clone's own config file is read (``.git/config``, a worktree's common one), not global config or its
includes: what names a repository belongs to that repository, and the language server reads it on each open
without running git.
"""

from __future__ import annotations

import configparser
from pathlib import Path, PurePosixPath

MAX_NAME_CHARS = 256  # as the wire format's repository field


def name_from_url(url: str | None) -> str | None:
    """``https://github.com/org/name.git``, ``git@host:org/name.git``, ``/srv/git/name`` → ``name``."""
    if not url:
        return None
    name = PurePosixPath(url.strip().rstrip("/").replace(":", "/")).name.removesuffix(".git")
    return name or None


def _config_file(root: Path) -> Path:
    git = root / ".git"
    if git.is_file():  # a worktree or submodule: "gitdir: <path>", whose config may be the common one
        target = git.read_text(errors="replace").partition("gitdir:")[2].strip()
        git = (root / target).resolve() if target else git
        common = git / "commondir"
        if common.is_file():
            git = (git / common.read_text(errors="replace").strip()).resolve()
    return git / "config"


def _unquote(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"')
    return value or None


def clone_config(root: Path) -> tuple[str | None, str | None]:
    """(``ctxpress.repository``, the ``origin`` remote's URL) of the clone at ``root``; None where not set."""
    config = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        config.read(_config_file(root), encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError):
        return None, None
    return (_unquote(config.get("ctxpress", "repository", fallback=None)),
            _unquote(config.get('remote "origin"', "url", fallback=None)))


def repository_name(root: Path) -> str:
    """The rule above for the work tree (or plain folder) at ``root``."""
    configured, origin = clone_config(root)
    for name in (configured, name_from_url(origin)):
        if name and len(name) <= MAX_NAME_CHARS:
            return name
    return root.name
