"""The one-run host benchmark: what each part is asked, and its figures read against the goals."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctxpress.evaluation.host_report import Part, part_arguments, report_lines, rows_of


def options(**changed: Any) -> argparse.Namespace:
    base = dict(file=[], typing_pauses=12, accept_pause=1.0, max_seconds=900.0, peer_server=None,
                kernel_paths="auto,amx,avx512,avx2", baseline_python=None, editors=8, minutes=5.0)
    return argparse.Namespace(**{**base, **changed})


def kernels(auto_tps: float, amx: str) -> Part:
    def row(variant: str, tps: float, ms: float) -> dict[str, Any]:
        return {"variant": variant, "prompt_tokens_per_s": tps, "ms_per_token": ms, "amx": amx}
    return Part("kernels", {"results": {"auto": row("sapphirerapids", auto_tps, 40.0),
                                        "avx512": row("zen4", 100.0, 41.0), "avx2": row("alderlake", 70.0, 43.0)},
                            "unavailable": {} if amx == "granted" else {"amx": "EOPNOTSUPP"}})


def replays(first: float, peer_first: float, p50: float, peer_p50: float, jump_p95: float,
            fast: int, accepts: int) -> Part:
    return Part("replays", {"scenarios": {
        "typing": {"optimized": {"latency_ms_first": first, "prompt_tokens_first": 980, "latency_ms_p50": p50,
                                 "latency_ms_p95": p50 * 2},
                   "peer": {"latency_ms_first": peer_first, "latency_ms_p50": peer_p50, "latency_ms_p95": peer_p50}},
        "jump": {"optimized": {"latency_ms_p50": jump_p95 / 2, "latency_ms_p95": jump_p95}},
        "accept": {"after_accept": {"accepts": accepts, "within_50ms": fast, "latency_ms_p50": 40.0 if fast else None,
                                    "share_within_50ms": fast / accepts if accepts else None}}}})


def load(requests: int, within: int) -> Part:
    return Part("load", {"scenarios": {"load": {"requests": requests, "answered": requests,
                                                 "answered_within_5s": within, "latency_ms_p50": 900}}})


def met(rows: list[Any]) -> dict[str, bool | None]:
    return {r.figure.split(",")[0].split(" (")[0]: r.met for r in rows if r.met is not None}


def test_each_part_is_asked_what_the_host_scenario_was_given() -> None:
    plan = dict(part_arguments(options(peer_server=Path("/opt/llama-server"), typing_pauses=30, editors=4,
                                       minutes=2.0, file=[Path("a.py")], baseline_python="/old/python")))
    assert plan["kernels"] == ["--scenario", "kernels", "--kernel-paths", "auto,amx,avx512,avx2",
                               "--baseline-python", "/old/python"]
    replay = plan["replays"]
    assert [replay[i + 1] for i, a in enumerate(replay) if a == "--scenario"] == ["typing", "jump", "accept"]
    assert replay[replay.index("--typing-pauses") + 1] == "30"
    assert replay[replay.index("--peer-server") + 1] == "/opt/llama-server"
    assert replay[replay.index("--file") + 1] == "a.py"
    assert plan["load"] == ["--scenario", "load", "--editors", "4", "--minutes", "2.0"]
    assert "--peer-server" not in dict(part_arguments(options()))["replays"]


def test_figures_that_reach_the_goals_are_met_and_the_others_not() -> None:
    good = rows_of({"kernels": kernels(420.0, "granted"), "replays": replays(2_500, 10_000, 400, 3_000, 2_900, 3, 4),
                    "load": load(100, 60)}, 8, 5.0)
    assert all(met(good).values()) and len(met(good)) == 6
    assert any(r.figure.startswith("after an accept") and r.ours == "3 of 4 (p50 40 ms)" for r in good)
    bad = rows_of({"kernels": kernels(150.0, "granted"), "replays": replays(2_500, 5_000, 600, 3_000, 3_100, 1, 4),
                   "load": load(100, 40)}, 8, 5.0)
    assert not any(met(bad).values()) and len(met(bad)) == 6
    # without AMX the run-time choice is held to "no slower"
    no_amx = rows_of({"kernels": kernels(101.0, "EOPNOTSUPP")}, 8, 5.0)
    auto = next(r for r in no_amx if r.figure.startswith("prompt tokens/s, auto"))
    assert auto.met is True and "no AMX" in auto.goal and "1.01× AVX-512" in auto.beside
    assert any(r.figure == "kernel path amx" and "EOPNOTSUPP" in r.beside for r in no_amx)


def test_a_part_that_failed_is_reported_and_nothing_is_judged_from_it() -> None:
    rows = rows_of({"kernels": Part("kernels", None, "exited with 2 (its error is above)"),
                    "load": load(0, 0)}, 8, 5.0)
    assert rows[0].ours.startswith("exited with 2") and rows[0].met is None
    assert any(r.ours == "not run" for r in rows)  # the replays
    assert all(r.met is None for r in rows)  # a load with no requests proves nothing either way
    text = "\n".join(report_lines(rows))
    assert "goals met: 0 of 0" in text and "exited with 2" in text


def test_no_peer_means_the_goals_against_it_are_not_claimed() -> None:
    part = replays(2_500, 0, 400, 0, 2_900, 0, 0)
    assert part.figures is not None
    del part.figures["scenarios"]["typing"]["peer"]
    rows = rows_of({"replays": part}, 8, 5.0)
    first = next(r for r in rows if r.figure.startswith("a file's first completion (980 prompt tokens)"))
    assert first.beside == "no peer" and first.met is True  # 2.5 s, the absolute goal alone
    accept = next(r for r in rows if r.figure.startswith("after an accept"))
    assert accept.met is None and accept.ours == "0 of 0 (p50 -)" and accept.beside == "-"


def test_the_host_scenario_runs_alone(capsys: Any, tmp_path: Path) -> None:
    from ctxpress.cli import main

    assert main(["bench", "--scenario", "host", "--scenario", "typing"]) == 2
    assert "runs alone" in capsys.readouterr().err
    assert main(["bench", "--scenario", "host", "--peer-server", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_peer_that_failed_is_said_and_ours_are_still_judged() -> None:
    part = replays(2_500, 9_000, 400, 3_000, 2_900, 0, 0)
    assert part.figures is not None
    part.figures["scenarios"]["typing"]["peer"] = {"error": "llama-server exited with -11: ...\nmore"}
    rows = rows_of({"replays": part}, 8, 5.0)
    peer = next(r for r in rows if r.figure == "the peer (llama-server)")
    assert peer.ours == "failed" and peer.beside == "llama-server exited with -11: ..."
    typing = next(r for r in rows if r.figure.startswith("typing replay"))
    assert typing.beside == "no peer" and typing.met is True
