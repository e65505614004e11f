"""The baseline of the editor doors' latency table: the typing replay sent straight over NATS, in the
same run as the replays through each editor client."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Appliance
from tests.e2e.replay import direct_replay, record, replay_case

pytestmark = pytest.mark.services


async def test_straight_nats_replay_answers_every_pause(appliance: Appliance, latency_report: Path) -> None:
    replay = replay_case()
    assert len(replay.pauses) >= 3, replay.pauses
    latencies = await direct_replay(appliance.settings.effective_nats_url(), replay, "e2e-direct",
                                    f"pkg/{replay.source.name}")
    assert len(latencies) == len(replay.pauses)
    record(latency_report, "NATS ctxpress.v1.complete (direct)", latencies)
    print(f"direct NATS replay: {[round(ms) for ms in latencies]} ms")
