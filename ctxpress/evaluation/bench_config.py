"""What a ``ctxpress bench`` run is set to: the sizes and bounds of its scenarios, the typist's pace, the
switches it sends. Apart from the scenarios (bench.py) so that the typing replay (typing_replay.py), which
they and the replays through an editor, a peer server and the HTTP door share, reads it without them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MODES = ("baseline", "optimized")


@dataclass
class BenchConfig:
    nats_url: str
    subject: str
    modes: Sequence[str] = MODES
    requests: int = 6  # per scenario and mode
    max_seconds: float = 900.0  # per scenario
    clients: int = 3
    think_s: float = 0.5
    max_tokens: int = 16
    typing_cps: float = 6.0  # characters per second of a steady typist
    debounce_ms: float = 150.0
    accept_pause_s: float = 1.0  # from a suggestion shown to its accept (read, Tab); the editor asks again at once
    typing_pauses: int = 12  # completions asked for per typing replay
    seed: int = 0
    features: dict[str, bool] | None = None  # optimized mode's switches (ablations)
    kv_pool_slots: int = 4  # files the engine keeps in memory (the appliance's setting)
    jump_cursors: int = 8  # functions of one file a reader moves between (the jump scenario)
    jump_think_s: float = 2.0  # reading time between two jumps
    # jump: the editor says where the cursor rests (file_opened with it) this long before the request (0: it does not)
    jump_rest_s: float = 0.0
    # the prompt layouts the jump scenario compares, (label, features) each; empty: optimized with ``features``
    jump_layouts: Sequence[tuple[str, dict[str, bool] | None]] = ()
