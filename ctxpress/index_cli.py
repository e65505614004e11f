"""``ctxpress index``, ``ctxpress search`` and ``ctxpress hooks``: the repository index from a shell."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ctxpress_core.repository_name import repository_name
from ctxpress_core.settings import Settings


class _Progress:
    """One line on stderr, redrawn in place on a terminal, a line per quarter otherwise."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.stage = ""
        self.last_draw = 0.0
        self.last_quarter = -1
        self.started = time.perf_counter()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if stage != self.stage:
            if self.stage and self.tty:
                sys.stderr.write("\n")
            self.stage, self.last_quarter, self.started = stage, -1, time.perf_counter()
        now = time.perf_counter()
        if self.tty:
            if done < total and now - self.last_draw < 0.1:
                return
            self.last_draw = now
            width = 30
            filled = width * done // max(total, 1)
            rate = done / max(now - self.started, 1e-6)
            sys.stderr.write(f"\r  {stage:<10} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} "
                             f"({rate:,.0f}/s)   ")
        else:
            quarter = 4 * done // max(total, 1)
            if quarter != self.last_quarter:
                self.last_quarter = quarter
                sys.stderr.write(f"  {stage:<10} {done:,}/{total:,}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self.stage:
            sys.stderr.write("\n")


def _fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from sqlalchemy.exc import OperationalError

    from ctxpress_core.errors import EmbeddingError
    from indexer.pipeline import Indexer
    from indexer.walk import WalkError, index_root
    from serving.triton_client import TritonEmbedder

    try:
        root = index_root(args.repo)
    except WalkError as exc:
        return _fail(str(exc), 2)
    name = args.name or repository_name(root)
    embedder = TritonEmbedder(settings.effective_triton_url())
    progress = _Progress(enabled=not args.json)
    try:
        embedder.check_ready()
        indexer = Indexer(settings.effective_database_url(), embedder, settings.index_max_file_bytes)
        if not args.json:
            print(f"indexing {root} as {name!r}{' (changed files only)' if args.changed else ''}", file=sys.stderr)
        run = indexer.index_changed if args.changed else indexer.index_repository
        summary = run(root, name, progress=progress)
    except (EmbeddingError, OperationalError) as exc:
        # Triton or PostgreSQL is down: `ctxpress` says which in one line (ctxpress/unavailable.py), this ends it.
        progress.close()
        exc.add_note("the index is unchanged")
        raise
    except WalkError as exc:
        progress.close()
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        progress.close()
        return _fail("interrupted; the index is unchanged", 130)
    finally:
        embedder.close()
    progress.close()
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
        return 0
    secs = max(summary.seconds, 1e-9)
    processed = summary.files_indexed + summary.files_unchanged
    print(f"{name}: {processed:,} files ({summary.files_indexed:,} indexed, {summary.files_unchanged:,} unchanged, "
          f"{summary.files_removed:,} removed), {summary.chunks_total:,} chunks "
          f"({summary.chunks_written:,} written, {summary.chunks_deleted:,} deleted; "
          f"{summary.vectors_computed:,} embedded, {summary.vectors_reused:,} vectors reused)")
    print(f"  time {summary.seconds:.1f}s ({', '.join(f'{k} {v:.1f}s' for k, v in summary.stage_seconds.items())}); "
          f"{processed / secs:,.1f} files/s, {summary.chunks_total / secs:,.1f} chunks/s")
    if summary.secret_chunks:
        print(f"  held back {len(summary.secret_chunks):,} chunks holding secrets (not embedded, not stored):")
        for held in summary.secret_chunks[:10]:
            print(f"    {held}")
    reasons = summary.skipped_by_reason()
    if reasons:
        print(f"  skipped {sum(reasons.values()):,}: " + ", ".join(f"{r} {n:,}" for r, n in reasons.most_common()))
        for s in [s for s in summary.skipped if s.reason.startswith("syntax error")][:10]:
            print(f"    {s.path}: {s.reason}")
    return 0


def _cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.search import search

    query = " ".join(args.query).strip()
    if not query:
        return _fail("empty query", 2)
    result = search(settings, args.repo, query, args.k)  # a database that is down: ctxpress/unavailable.py
    if result.warning:
        print(f"warning: {result.warning}", file=sys.stderr)
    hits, ms = result.hits, result.ms
    if args.json:
        print(json.dumps({"query": query, "repositories": args.repo, "ms": round(ms, 1), "results": [
            {"repository": h.repository, "path": h.path, "symbol": h.symbol, "kind": h.kind, "language": h.language,
             "start_line": h.start_line + 1, "end_line": h.end_line + 1, "score": round(h.score, 5),
             "similarity": None if h.similarity is None else round(h.similarity, 4), "found_by": h.found_by,
             "signature": h.signature} for h in hits]}, indent=2))
        return 0
    if not hits:
        print(f"no results in {', '.join(args.repo)} ({ms:.0f} ms)")
        return 0
    for n, h in enumerate(hits, 1):
        sim = f"{h.similarity:.2f}" if h.similarity is not None else "  - "
        found = "+".join(h.found_by)
        print(f"{n:>2}. {h.score:.4f} sim {sim} {found:<14} {h.kind:<8} {h.symbol}  "
              f"{h.repository}:{h.path}:{h.start_line + 1}-{h.end_line + 1}")
    print(f"({len(hits)} results, {ms:.0f} ms)", file=sys.stderr)
    return 0


def _cmd_hooks(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress_core.identity import TeamConfigError, load_credentials
    from indexer import hooks
    from indexer.walk import WalkError, repo_root

    try:
        if args.action == "install":
            root = repo_root(args.repo)
            nats_url, credentials = settings.effective_nats_url(), None
            if settings.nats_credentials is not None:  # team mode: a developer's or a hooks user's credentials
                nats_url = load_credentials(settings.nats_credentials).nats_url
                credentials = settings.nats_credentials.expanduser().resolve()
            report = hooks.install(root, args.name or repository_name(root), nats_url, credentials)
            if credentials is None:  # a hooks credential may not create streams: team workers create it at start
                _ensure_stream(settings)
            print(f"installed {', '.join(report.installed)} in {report.hooks_dir}")
            if report.chained:
                print(f"  existing {', '.join(report.chained)} kept and run first (as *{hooks.CHAINED_SUFFIX})")
        else:
            report = hooks.uninstall(args.repo)
            print(f"removed {', '.join(report.removed) or 'nothing'} from {report.hooks_dir}")
            if report.restored:
                print(f"  restored the previous {', '.join(report.restored)}")
    except WalkError as exc:
        return _fail(str(exc), 2)
    except TeamConfigError as exc:
        return _fail(str(exc), 2)
    return 0


def _ensure_stream(settings: Settings) -> None:
    """Create the index stream now if NATS answers, so commits made before the worker first starts are
    kept; when it does not answer, the worker creates it at start."""
    import asyncio

    async def go() -> None:
        from ctxpress_core import nats_connect
        from indexer.stream import ensure_stream

        nc = await nats_connect.connect(settings.nats_servers(), connect_timeout=1, allow_reconnect=False)
        try:
            await ensure_stream(nc.jetstream(), settings)
        finally:
            await nc.close()

    try:
        asyncio.run(asyncio.wait_for(go(), 10))  # the hooks are installed whether or not NATS answers
    except Exception:
        print(f"  (NATS at {settings.effective_nats_url()} not reachable now; hooks will say so until it is)",
              file=sys.stderr)


def register(subparsers: Any) -> None:
    index = subparsers.add_parser("index", help="index a repository for cross-file retrieval")
    index.add_argument("repo", nargs="?", default=".", help="a git work tree (default: the current directory)")
    index.add_argument("--name", help="repository name in the index (default: git config ctxpress.repository, "
                                         "else the origin remote's last component, else the folder name)")
    index.add_argument("--changed", action="store_true", help="only what git says changed since the last index")
    index.add_argument("--json", action="store_true", help="print the summary as JSON, no progress bar")
    index.set_defaults(func=_cmd_index)

    search = subparsers.add_parser("search", help="search the index (vector + lexical, fused)")
    search.add_argument("--repo", action="append", required=True, help="repository to search (repeatable)")
    search.add_argument("-k", type=int, default=10, help="results (default 10)")
    search.add_argument("--json", action="store_true")
    search.add_argument("query", nargs="+")
    search.set_defaults(func=_cmd_search)

    hooks = subparsers.add_parser("hooks", help="git hooks that keep the index fresh")
    hooks_sub = hooks.add_subparsers(dest="action", required=True)
    install = hooks_sub.add_parser("install", help="install post-commit/merge/checkout/rewrite hooks")
    install.add_argument("repo", nargs="?", default=".")
    install.add_argument("--name", help="repository name in the index (default: as `ctxpress index` names it)")
    install.set_defaults(func=_cmd_hooks)
    uninstall = hooks_sub.add_parser("uninstall", help="remove them and restore the previous hooks")
    uninstall.add_argument("repo", nargs="?", default=".")
    uninstall.set_defaults(func=_cmd_hooks)

