"""``ctxpress up`` and ``ctxpress down``: every part started in order until ready (the models fetched
first, team mode's steps between parts), or stopped in reverse with the supervisor first."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ctxpress import team
from ctxpress.parts import START_TIMEOUTS, parts
from ctxpress.parts.base import StartError
from ctxpress.parts.console import ConsolePart
from ctxpress.parts.supervisor import SupervisorPart
from ctxpress_core import identity
from ctxpress_core.settings import Settings


def check_ports(settings: Settings) -> None:
    """Refuse two embedded parts on one port up front (tritonserver would only print its usage)."""
    ports = {
        "nats_port": settings.nats_port, "nats_monitor_port": settings.nats_monitor_port,
        "postgres_port": settings.postgres_port, "triton_http_port": settings.triton_http_port,
        "triton_grpc_port": settings.triton_grpc_port, "triton_metrics_port": settings.triton_metrics_port,
        "worker_metrics_port": settings.worker_metrics_port, "console_port": settings.console_port,
    }
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port and port in seen:
            raise StartError(f"CTXPRESS_{name.upper()} and CTXPRESS_{seen[port].upper()} are both {port}")
        seen[port] = name


def up(settings: Settings, report: Callable[[str], None] = print) -> dict[str, float]:
    from serving.weights import DRAFT, TARGET, ensure_model

    timings: dict[str, float] = {}
    check_ports(settings)
    team_mode = identity.team_mode(settings)
    if team_mode:  # refuse before anything starts unless the parts can authenticate
        report(f"  team mode: NATS users from PostgreSQL, credentials in {identity.team_dir(settings)}")
        _team_step(team.prepare_up, settings)
    if settings.triton_url is None and settings.model_path is None:
        started = time.perf_counter()
        for model in (TARGET, DRAFT):
            ensure_model(model, settings.models_dir, progress=_bytes_progress(model.name, report))
        timings["models"] = time.perf_counter() - started
    # A running supervisor is stopped while the parts are checked, or it and `up` could both start a part
    # that is down (two processes, one pid file); it comes back last, once every part is ready, and
    # carries the restart history over from its state file.
    supervisor = SupervisorPart(settings)
    if supervisor.running():
        supervisor.stop()
    for part in [*parts(settings), supervisor]:
        was_running = part.running()
        report(f"  {part.name:<18} starting…" if not (was_running or part.external) else
               f"  {part.name:<18} {'external' if part.external else 'already running'}, checking…")
        seconds = part.start(START_TIMEOUTS[part.name])
        timings[part.name] = seconds
        report(f"  {part.name:<18} ready in {seconds:5.1f}s  {part.address()}")
        if team_mode:  # NATS must demand authentication; the developers come from PostgreSQL
            _team_step(team.after_part_started, settings, part.name, report)
    return timings


def _team_step(step: Callable[..., None], *args: Any) -> None:
    try:
        step(*args)
    except identity.TeamConfigError as exc:
        raise StartError(str(exc)) from None


def down(settings: Settings, report: Callable[[str], None] = print) -> list[str]:
    """Stop every part; returns the parts that could not be stopped (each reported, the others
    stopped all the same: one part's failure must not leave the rest running)."""
    failed: list[str] = []
    # The supervisor goes first, or it would restart what is stopped next.
    stopping = [SupervisorPart(settings), *reversed(parts(settings))]
    if not any(part.name == ConsolePart.name for part in stopping):  # started while team mode was on
        stopping.insert(1, ConsolePart(settings))
    for part in stopping:
        if part.external:
            continue
        try:
            if part.running():
                part.stop()
                report(f"  {part.name:<18} stopped")
        except Exception as exc:
            failed.append(part.name)
            report(f"  {part.name:<18} NOT stopped: {exc}")
    SupervisorPart(settings).state_file.unlink(missing_ok=True)  # restart history of an appliance that is gone
    return failed


def _bytes_progress(name: str, report: Callable[[str], None]) -> Callable[[int, int], None]:
    last = [-1]

    def progress(done: int, total: int) -> None:
        pct = done * 100 // max(total, 1)
        if pct // 25 != last[0]:
            last[0] = pct // 25
            report(f"  model {name}: joining parts {pct:3d}%")

    return progress
