"""One pre-warm per user at a time: the newest opened file supersedes that user's older one, nobody else's."""

from __future__ import annotations

import asyncio

from workers.completion.prewarms import LatestPerUser


async def test_a_users_newer_prewarm_cancels_their_older_one_and_nobody_elses() -> None:
    started: list[str] = []

    async def prewarm(name: str) -> None:
        started.append(name)
        await asyncio.sleep(60)

    latest = LatestPerUser()
    bob = latest.start("bob", prewarm("bob/a.py"))
    storm = [latest.start("alice", prewarm(f"alice/{i}.py")) for i in range(50)]
    await asyncio.sleep(0)
    assert [t.cancelled() or t.cancelling() > 0 for t in storm[:-1]] == [True] * 49
    assert not storm[-1].done() and not bob.done()
    assert latest.running("alice") is storm[-1] and latest.running("bob") is bob
    for task in (bob, storm[-1]):
        task.cancel()
    await asyncio.gather(bob, storm[-1], return_exceptions=True)
    assert latest.running("alice") is None and latest.running("bob") is None
