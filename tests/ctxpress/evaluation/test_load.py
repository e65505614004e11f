"""The load scenario's pure parts: which files the editors type in, and resident memory read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ctxpress.evaluation.bench import third_party_root
from ctxpress.evaluation.load import _children, candidate_files, report_lines, tree_rss_kib


def test_candidate_files_come_from_a_third_party_package_and_are_seeded() -> None:
    root = third_party_root()
    files = candidate_files(root, 50, seed=1)
    assert len(files) == 50 and all(f.suffix == ".py" and root in f.parents for f in files)
    assert candidate_files(root, 50, seed=1) == files and candidate_files(root, 50, seed=2) != files


def test_the_memory_of_a_process_tree_counts_its_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"])
    try:
        for _ in range(100):  # until the child has its 64 MiB
            if tree_rss_kib(child.pid, _children()) > 60 * 1024:
                break
            time.sleep(0.1)
        alone = tree_rss_kib(os.getpid(), {})
        assert tree_rss_kib(os.getpid(), _children()) - alone > 60 * 1024
    finally:
        child.kill()
        child.wait()


def test_the_report_shows_memory_per_part_over_time() -> None:
    sample = {"t_s": 0, "rss_mib": {"nats": 20.0, "triton": 900.0}, "caches": {"tree_cache_files": 3}}
    figures = {"editors": 8, "minutes": 5.0, "files_typed": 40, "requests": 100, "answered": 98,
               "answered_within_5s": 61, "errors_by_code": {"overloaded": 2}, "latency_ms_p50": 800,
               "latency_ms_p95": 4000,
               "rss_mib_end": sample["rss_mib"], "caches_end": sample["caches"],
               "memory_over_time": [sample, {**sample, "t_s": 300}]}
    text = "\n".join(report_lines(figures))
    assert "(61 within 5 s)" in text
    assert "overloaded" in text and "at 300 s" in text and "tree_cache_files" in text and "900.0" in text
