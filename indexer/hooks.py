"""Install and remove the git hooks that keep the index fresh.

An existing hook is never overwritten: it is renamed ``<hook>.ctxpress-chained`` and our hook runs
it (same arguments, same stdin, its exit status kept). Uninstalling deletes our hooks and renames
the chained ones back. The hooks directory is the one git uses (``core.hooksPath`` honoured).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from indexer.walk import WalkError, repo_root

HOOKS = ("post-commit", "post-merge", "post-checkout", "post-rewrite")
MARKER = "ctxpress index hook"
CHAINED_SUFFIX = ".ctxpress-chained"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = PROJECT_ROOT / "infra" / "hooks" / "ctxpress-hook.sh"
PUBLISHER = PROJECT_ROOT / "indexer" / "hook_publish.py"


@dataclass
class HookReport:
    hooks_dir: Path
    installed: list[str] = field(default_factory=list)
    chained: list[str] = field(default_factory=list)  # pre-existing hooks now run by ours
    removed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)


def hooks_dir(root: Path) -> Path:
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "--git-path", "hooks"], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise WalkError(f"{root}: {out.stderr.strip()}")
    path = Path(out.stdout.strip())
    return path if path.is_absolute() else (root / path)


def is_ours(path: Path) -> bool:
    try:
        return MARKER in path.read_text(errors="replace")[:400]
    except OSError:
        return False


def render(repository: str, nats_url: str, python: str | None = None, credentials: Path | None = None) -> str:
    # Team mode: the hook reads the hooks credentials file when it runs, so no password is copied into .git/hooks.
    login = f" --credentials {shlex.quote(str(credentials))}" if credentials is not None else ""
    return (TEMPLATE.read_text()
            .replace("@PYTHON@", shlex.quote(python or sys.executable))
            .replace("@PUBLISHER@", shlex.quote(str(PUBLISHER)))
            .replace("@REPOSITORY@", shlex.quote(repository))
            .replace("@NATS_URL@", shlex.quote(nats_url))
            .replace("@CREDENTIALS@", login))


def install(path: str | Path, repository: str, nats_url: str, credentials: Path | None = None) -> HookReport:
    root = repo_root(path)
    directory = hooks_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    report = HookReport(directory)
    script = render(repository, nats_url, credentials=credentials)
    for name in HOOKS:
        hook = directory / name
        if (hook.exists() or hook.is_symlink()) and not is_ours(hook):
            chained = directory / (name + CHAINED_SUFFIX)
            if chained.exists():
                raise WalkError(f"{chained} already exists; move it away before installing")
            hook.rename(chained)
            report.chained.append(name)
        tmp = directory / f".{name}.ctxpress-tmp"
        tmp.write_text(script)
        tmp.chmod(0o755)
        tmp.replace(hook)  # atomic: a concurrent commit sees the old hook or the new one
        report.installed.append(name)
    return report


def uninstall(path: str | Path) -> HookReport:
    root = repo_root(path)
    directory = hooks_dir(root)
    report = HookReport(directory)
    for name in HOOKS:
        hook = directory / name
        chained = directory / (name + CHAINED_SUFFIX)
        if hook.exists() and is_ours(hook):
            hook.unlink()
            report.removed.append(name)
        if chained.exists() and not hook.exists():
            chained.rename(hook)
            report.restored.append(name)
    return report
