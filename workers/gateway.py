"""The gateway: IDEs keep one subject; each file's requests go to the same shard.

A file's prompt KV cache lives on the Triton instance behind one completion-worker shard,
so the gateway reads only ``repository`` and ``path`` of a request and forwards it
unchanged to ``<subject>.<shard>``, then relays the reply. Requests it cannot route
(bad JSON, no path) are forwarded to shard 0, whose worker answers with the structured
error; a shard that does not answer gets the IDE a structured error, not a hang.
"""

from __future__ import annotations

import asyncio
import json
import logging

from nats.aio.msg import Msg
from nats.errors import NoRespondersError, TimeoutError

from ctxpress.core import nats_connect
from ctxpress.core.errors import ErrorCode
from ctxpress.core.identity import TeamConfigError, team_mode
from ctxpress.core.settings import Settings
from ctxpress.core.wire.v1 import SUBJECT_FILE_OPENED, ErrorBody, ErrorResponse
from workers.process import run_service
from workers.sharding import shard_for

log = logging.getLogger("ctxpress.gateway")


def route(data: bytes, shards: int, exclude: frozenset[int] = frozenset()) -> int:
    try:
        head = json.loads(data)
        return shard_for(str(head["repository"]), str(head["path"]), shards, exclude)
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested too deeply
        return min(set(range(shards)) - exclude, default=0)


async def run_gateway(settings: Settings, stop: asyncio.Event) -> None:
    if team_mode(settings):
        # It would forward requests to the shards without the user of their subject: every one refused.
        raise TeamConfigError("team mode: the gateway does not carry the user's identity to the shards yet; "
                              "run the completion workers unsharded")
    nc = await nats_connect.connect(settings.nats_servers(), name="ctxpress-gateway", max_reconnect_attempts=-1)
    tasks: set[asyncio.Task[None]] = set()

    async def forward(msg: Msg, base: str) -> None:
        try:
            payload = await relay(msg, base)
        except Exception:  # a bug must not leave the IDE waiting for a reply that never comes
            log.exception("forwarding a request failed")
            payload = ErrorResponse(error=ErrorBody(code=ErrorCode.INTERNAL, message="internal error in the gateway")
                                    ).model_dump_json().encode()
        if msg.reply:
            await msg.respond(payload)

    async def relay(msg: Msg, base: str) -> bytes:
        # Stateless failover: the file's own shard first; if no worker is subscribed there, the
        # shard the file would have without it (rendezvous hashing: only the dead shard's files
        # move), once. Nothing to forget when the shard comes back.
        shard = route(msg.data, settings.shards)
        payload: bytes | None = None
        for attempt in range(2):
            try:
                reply = await nc.request(f"{base}.{shard}", msg.data, timeout=settings.triton_timeout_s + 10)
                payload = reply.data
                break
            except NoRespondersError:
                retry = route(msg.data, settings.shards, frozenset({shard}))
                if attempt == 1 or retry == shard:
                    break
                log.warning("shard %d has no worker: retrying on shard %d", shard, retry)
                shard = retry
            except TimeoutError:
                break  # a slow shard is not a dead one: retrying would only double the work
        if payload is None:
            body = ErrorBody(code=ErrorCode.INFERENCE_UNAVAILABLE, message=f"shard {shard} did not answer")
            payload = ErrorResponse(error=body).model_dump_json().encode()
        return payload

    def handler(base: str):  # type: ignore[no-untyped-def]
        async def on_message(msg: Msg) -> None:
            task = asyncio.create_task(forward(msg, base))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return on_message

    subs = [
        await nc.subscribe(settings.completion_subject, queue="ctxpress-gateway",
                           cb=handler(settings.completion_subject)),
        await nc.subscribe(SUBJECT_FILE_OPENED, queue="ctxpress-gateway", cb=handler(SUBJECT_FILE_OPENED)),
    ]
    log.info("gateway: %s -> %s.<0..%d>", settings.completion_subject, settings.completion_subject,
             settings.shards - 1)
    await stop.wait()
    for sub in subs:
        await sub.drain()
    if tasks:
        await asyncio.wait(tasks, timeout=settings.triton_timeout_s)
    await nc.drain()


def main() -> int:
    return run_service(run_gateway)


if __name__ == "__main__":
    raise SystemExit(main())
