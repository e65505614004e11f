"""The walk of one request through the project's modules: how far the in-file context of one completion
wanders, measured so that a restructuring can be judged by it (issue #33).

One cold request (a fresh file session: the parse and warm-up included; with ``--after``, a jump in the open
file) on SQLAlchemy's engine/result.py is traced with ``sys.setprofile``: its prompt, as the completion worker
builds it (``ContextLibrary.build_prompt``, no retriever; its executor steps run on the traced thread). The
*current module* is the module of the innermost project frame; each change of it starts a *stay*; calls from one
stay into the same module (a loop, a generator resumed) are one step.
Reported:

- stays, and the modules entered (distinct);
- returns: stays in a module already left once (stays − modules);
- climbs: calls from a module into one of a higher layer (the layers of pyproject's import contract), i.e.
  control handed back up through a callback or a closure;
- crossings between top-level packages, each direction;
- depth: the module-to-module calls from ``build_prompt``'s module to the first assembly stage entered (STAGES),
  with their path (issue #45: how many layers of orchestration stand between the request and the assembly).

    python -m benchmarks.request_walk [--sequence] [--fold-leaves] [--after LINE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tomllib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from context.build import ContextLibrary, FileView
from ctxpress.evaluation.bench import third_party_root
from ctxpress.evaluation.cases import cut_out
from ctxpress_core.settings import Settings, get_settings
from ctxpress_core.wire.v1 import CompletionRequest, content_hash
from syntax.warm import warm_up
from workers.completion.worker import load_tokenizer

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
FILE = "engine/result.py"
LINE, COLUMN = 1500, 8
# The assembly's stages, and what they share (context/assembly/): the end of the depth's path.
STAGES = frozenset({"context.assembly.selection", "context.assembly.below", "context.assembly.steady",
                    "context.assembly.state"})
_ENTERED = itertools.count()  # the order nodes are first entered in


def layer_ranks() -> tuple[dict[str, int], tuple[str, ...]]:
    """Each top-level package's rank in the first plain layers contract (higher: nearer the top)."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers" and "containers" not in c)
    ranks: dict[str, int] = {}
    for depth, layer in enumerate(reversed(contract["layers"]), start=1):
        for name in layer.replace("|", ":").split(":"):
            ranks[name.strip()] = depth
    return ranks, tuple(config["root_packages"])


@dataclass
class Node:
    """A call from one module into another; calls within a module are part of its node."""

    module: str
    children: list[Node] = field(default_factory=list)
    entered: int = field(default_factory=lambda: next(_ENTERED))

    def child(self, module: str) -> Node:
        """The child for this call: a repeated call from the same stay (a loop, a generator resumed, another
        function of the same module) is the same step of the walk."""
        for c in self.children:
            if c.module == module:
                return c
        self.children.append(Node(module))
        return self.children[-1]

    def tour(self, fold_leaves: bool = False) -> list[str]:
        """The modules in the order the request stays in them: into each callee and back. ``fold_leaves``: a
        call into a module that calls no other (a record's constructor, an accessor) is part of its caller's
        stay, as reading data would be."""
        out = [self.module]
        for c in self.children:
            if c.children or not fold_leaves:
                out += [*c.tour(fold_leaves), self.module]
        return out

    def edges(self) -> list[tuple[str, str]]:
        return [e for c in self.children for e in [(self.module, c.module), *c.edges()]]

    def first(self, modules: frozenset[str]) -> tuple[int, list[str]] | None:
        """The path (this module first) to the first node below this one entered in one of ``modules``, with
        when it was entered; None: none is."""
        found = [(c.entered, [c.module]) if c.module in modules else c.first(modules) for c in self.children]
        first = min(filter(None, found), default=None)
        return first and (first[0], [self.module, *first[1]])


@dataclass
class Walk:
    ranks: dict[str, int]
    roots: tuple[str, ...]
    skip: str  # this module: the caller of the traced call
    root: Node = field(default_factory=lambda: Node(""))
    stack: list[tuple[FrameType | None, Node]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stack.append((None, self.root))

    def module_of(self, frame: FrameType) -> str | None:
        name = frame.f_globals.get("__name__", "")
        return name if name != self.skip and name.split(".")[0] in self.roots else None

    def rank(self, module: str) -> int:
        return self.ranks.get(module.split(".")[0], 0)

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            module = self.module_of(frame)
            node = self.stack[-1][1]
            if module is not None and module != node.module:
                self.stack.append((frame, node.child(module)))
        elif event == "return" and self.stack[-1][0] is frame:
            self.stack.pop()

    def figures(self, fold_leaves: bool = False) -> dict[str, int]:
        (top,) = self.root.children
        stays = top.tour(fold_leaves)  # (a callee's module always differs from its caller's: no two in a row are one)
        return {"stays": len(stays), "modules": len(set(stays)), "returns": len(stays) - len(set(stays)),
                "climbs": sum(self.rank(b) > self.rank(a) for a, b in top.edges())}

    def crossings(self) -> Counter[tuple[str, str]]:
        """Calls between top-level packages (each one also returns the other way)."""
        (top,) = self.root.children
        packages = [(a.split(".")[0], b.split(".")[0]) for a, b in top.edges()]
        return Counter((a, b) for a, b in packages if a != b)


class InlineExecutor(ThreadPoolExecutor):
    """Runs each call at once on the calling thread: ``sys.setprofile`` sees one thread, so the steps
    ``build_prompt`` hands its loop's executor are traced, and where they are called from."""

    def submit(self, fn: Callable[..., object], /, *args: object, **kwargs: object) -> Future[object]:
        done: Future[object] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as exc:
            done.set_exception(exc)
        return done


def build(library: ContextLibrary, request: CompletionRequest, view: FileView) -> object:
    async def inline() -> object:
        asyncio.get_running_loop().set_default_executor(InlineExecutor())
        return await library.build_prompt(request, view, None)

    return asyncio.run(inline())


def one_request(settings: Settings, count_tokens: Callable[[str], int], after: int | None = None
                ) -> Callable[[], object]:
    """The traced call: the prompt of one request, as the completion worker builds it: the file's first (cold: its
    parse and warm-up included) or, ``after`` a request at that line, a jump in an open file."""
    text, _ = cut_out((third_party_root() / FILE).read_text(encoding="utf-8"), LINE, COLUMN)
    request = CompletionRequest(repository="sqlalchemy", path=FILE, text=text, line=LINE, column=COLUMN)
    library = ContextLibrary(settings, count_tokens, settings.model_name)
    view = FileView(text, content_hash(text), None, ("sqlalchemy",))
    if after is not None:
        build(library, request.model_copy(update={"line": after, "column": 0}), view)
    return lambda: build(library, request, view)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.request_walk", description=__doc__)
    p.add_argument("--sequence", action="store_true", help="print every stay")
    p.add_argument("--fold-leaves", action="store_true",
                   help="count a call into a module that calls no other as part of its caller's stay")
    p.add_argument("--after", type=int, metavar="LINE",
                   help="trace a jump: the request that follows one at LINE (0-based) of the open file")
    args = p.parse_args(argv)
    # the profiler slows the assembly many times over: its deadline must not cut the walk short
    settings = get_settings().model_copy(update={"assembly_timeout_ms": 600_000.0})
    count_tokens = load_tokenizer(settings)
    warm_up()  # the grammars' loading is the process's, not the request's
    call = one_request(settings, count_tokens, args.after)
    ranks, roots = layer_ranks()
    walk = Walk(ranks, roots, skip=__name__)
    sys.setprofile(walk.profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    (top,) = walk.root.children
    if args.sequence:
        print("\n".join(top.tour(args.fold_leaves)))
    print(", ".join(f"{k} {v}" for k, v in walk.figures(args.fold_leaves).items()))
    for (a, b), n in sorted(walk.crossings().items()):
        print(f"  calls {a} -> {b}: {n}")
    for a, b in top.edges():
        if walk.rank(b) > walk.rank(a):
            print(f"  climb {a} -> {b}")
    first = top.first(STAGES)
    print(f"depth {len(first[1]) - 1}: {' -> '.join(first[1])}" if first else "depth: no assembly stage entered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
