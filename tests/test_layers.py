"""The layers of the project, as pyproject.toml's import-linter contracts state them, hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


PACKAGES = ("benchmarks", "build_engines", "context", "ctxpress", "ctxpress_core", "db", "indexer", "serving", "syntax",
            "workers", "tests")


def test_every_import_of_a_project_module_names_one_that_exists() -> None:
    """Imports inside functions too, which neither importing the modules nor the contracts execute."""
    import ast
    import importlib.util

    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    if name.split(".")[0] in PACKAGES and importlib.util.find_spec(name) is None:
                        missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert missing == []


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle among the project's modules (imports inside functions included)."""
    import grimp

    graph = grimp.build_graph(*(p for p in PACKAGES if p != "tests"), cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(root: str) -> None:  # Tarjan's strongly connected components, iteratively
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert cycles == []


MAX_MODULE_LINES = 400


def test_no_module_is_over_the_size_limit() -> None:
    long = []
    for package in PACKAGES:
        if package == "tests":
            continue
        for path in sorted((ROOT / package).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            lines = path.read_text(encoding="utf-8").count("\n")
            if lines > MAX_MODULE_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines}")
    assert long == []
