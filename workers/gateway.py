"""The gateway: IDEs keep their subjects; each file's requests go to the same shard.

A file's prompt KV cache lives on the engine behind one completion-worker shard, so the gateway reads only
``repository`` and ``path`` of a request (rendezvous hashing, ``workers/sharding.py``) and forwards it
unchanged, then relays the reply. Requests it cannot route (bad JSON, no path) go to the first live shard, whose
worker answers with the structured error; a shard that does not answer gets the IDE a structured error, not a hang.

Single-user subjects go to ``<subject>.<shard>``. In team mode the gateway also reads every user's
``ctxpress.v1.u.<user>.<kind>`` and forwards to ``ctxpress.v1.s.<shard>.u.<user>.<kind>``: NATS lets only the
gateway publish there, so the shard's worker takes the user from the subject and checks grants exactly as an
unsharded worker does. A user's cancel and feedback follow the request to the shard that served it.

Before it reads a request the gateway checks its size (``max_request_bytes``) and its user's share
(``workers/fair_share.py``): an oversized request is answered ``payload_too_large`` and one over the user's share
``rate_limited``, neither parsed nor forwarded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError, TimeoutError

from ctxpress_core import nats_connect
from ctxpress_core.errors import ErrorCode, RateLimited
from ctxpress_core.identity import (
    GATEWAY_USER,
    forwarded_to_shard,
    service_connect_options,
    subject_user,
    team_mode,
    user_subject,
)
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import HEADER_FLOODING, SUBJECT_FILE_OPENED, ErrorBody, ErrorResponse
from workers import replies
from workers.fair_share import Flooding, UserLimits
from workers.process import run_service
from workers.sharding import shard_for

log = logging.getLogger("ctxpress.gateway")

# (user, request or completion id) -> the shard that served it, for the cancel and feedback that follow a request.
REMEMBERED_REQUESTS = 50_000
# A NATS node lost: its clients reconnect to another node within seconds (nats-py waits 2 s between tries of
# one server), and until then nobody serves their shards' subjects.
NO_WORKER_GRACE_S = 5.0
NO_WORKER_PAUSE_S = 0.25
# A request id longer than the wire allows is not remembered (the worker refuses the request anyway).
MAX_ID_CHARS = 128
# A request larger than this is read on a thread: the event loop keeps relaying others' replies meanwhile.
PARSE_ON_THREAD_BYTES = 64 * 1024
# A refusal (over the user's share, too large) is answered after its retry-after, at least TARPIT_MIN_MS and at most
# TARPIT_MAX_MS: a client that asks again as soon as it is refused (a flood waits for each answer) is slowed to a
# few refusals a second per request it keeps open, instead of costing the appliance's cores a refusal at a time (a
# retry-after of a token bucket's refill is a few milliseconds). Beyond TARPIT_PER_USER refusals held for one user,
# the others are answered at once (holding them is memory).
TARPIT_MIN_MS = 500
TARPIT_MAX_MS = 2000
TARPIT_PER_USER = 64


@dataclass(frozen=True)
class Head:
    """What the gateway reads of a request: where it goes, and the id its cancel and feedback will name."""

    repository: str | None
    path: str | None
    request_id: str | None


def read_head(data: bytes) -> Head:
    try:
        head = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return Head(None, None, None)
    if not isinstance(head, dict):
        return Head(None, None, None)

    def text(key: str) -> str | None:
        value = head.get(key)
        return value if isinstance(value, str) and len(value) <= 4096 else None

    request_id = text("request_id") or text("completion_id")
    return Head(text("repository"), text("path"), request_id if request_id and len(request_id) <= MAX_ID_CHARS
                else None)


def route_head(head: Head, shards: int, exclude: frozenset[int] = frozenset()) -> int:
    if head.repository is None or head.path is None:
        return min(set(range(shards)) - exclude, default=0)
    return shard_for(head.repository, head.path, shards, exclude)


_UNAVAILABLE = f'"code":"{ErrorCode.INFERENCE_UNAVAILABLE.value}"'.encode()


def engine_unavailable(payload: bytes) -> bool:
    """A shard's error reply saying its engine cannot be reached (a short reply: no completion to parse)."""
    if len(payload) > 4096 or not payload.startswith(b'{"error"') or _UNAVAILABLE not in payload:
        return False
    try:
        return bool(json.loads(payload)["error"]["code"] == ErrorCode.INFERENCE_UNAVAILABLE.value)
    except (ValueError, KeyError, TypeError):
        return False


def error_payload(code: ErrorCode, message: str) -> bytes:
    return ErrorResponse(error=ErrorBody(code=code, message=message)).model_dump_json().encode()


class Gateway:
    def __init__(self, nc: Client, settings: Settings) -> None:
        self.nc = nc
        self.settings = settings
        self.shards = settings.shards
        self.served: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.flooding = Flooding()  # users refused lately: their requests tell the shard (HEADER_FLOODING)
        self.limits = UserLimits.requests(settings, self.flooding)
        self.feedback_limits = UserLimits.feedback(settings, self.flooding)
        self.cancel_limits = UserLimits.feedback(settings, self.flooding)  # a cancel per superseded keystroke at most
        self._tarpitted: Counter[str | None] = Counter()  # refusals held back, per user

    async def admitted(self, user: str | None, data: bytes, work: Callable[[Head], Awaitable[bytes]],
                       limits: UserLimits | None = None) -> bytes:
        """``work``'s reply for a request within the size limit and its user's share, read only then; the
        refusal otherwise. ``limits``: the user's share of this kind (default: requests, held while relayed)."""
        if len(data) > self.settings.max_request_bytes:
            limit = self.settings.max_request_bytes
            return await self.tarpit(user, TARPIT_MAX_MS, error_payload(
                ErrorCode.PAYLOAD_TOO_LARGE, f"request is {len(data)} bytes; the limit is {limit}"))
        try:
            (limits or self.limits).take(user)
        except RateLimited as exc:
            return await self.tarpit(user, exc.retry_after_ms,
                                     ErrorResponse(error=ErrorBody.of(exc)).model_dump_json().encode())
        if limits is not None:
            return await work(await self.head_of(data))
        with self.limits.held(user):
            return await work(await self.head_of(data))

    async def tarpit(self, user: str | None, delay_ms: float, refusal: bytes) -> bytes:
        """``refusal``, answered after ``delay_ms`` (within ``TARPIT_MIN_MS`` .. ``TARPIT_MAX_MS``) while the user has
        fewer than ``TARPIT_PER_USER`` refusals waiting, else at once."""
        if self._tarpitted[user] >= TARPIT_PER_USER:
            return refusal
        self._tarpitted[user] += 1
        try:
            await asyncio.sleep(max(TARPIT_MIN_MS, min(delay_ms, TARPIT_MAX_MS)) / 1000)
        finally:
            self._tarpitted[user] -= 1
            if not self._tarpitted[user]:
                del self._tarpitted[user]
        return refusal

    @staticmethod
    async def head_of(data: bytes) -> Head:
        if len(data) <= PARSE_ON_THREAD_BYTES:
            return read_head(data)
        return await asyncio.get_running_loop().run_in_executor(None, read_head, data)

    def remember(self, user: str, request_id: str | None, shard: int) -> None:
        if request_id is None:
            return
        self.served[(user, request_id)] = shard
        self.served.move_to_end((user, request_id))
        while len(self.served) > REMEMBERED_REQUESTS:
            self.served.popitem(last=False)

    async def relay(self, data: bytes, subject_of: Callable[[int], str], head: Head,
                    shard: int | None = None, headers: dict[str, str] | None = None) -> tuple[bytes, int]:
        """The reply of ``shard`` or, if it is down (no worker subscribed there, or its worker cannot reach its
        engine), of the shard the file would have without it, once: rendezvous hashing moves only the dead shard's
        files, and there is nothing to forget when it comes back. When no shard has a worker at all (a NATS node
        lost: the workers' subscriptions are moving to a live node), asked again for up to ``NO_WORKER_GRACE_S``."""
        first = route_head(head, self.shards) if shard is None else shard
        deadline = time.monotonic() + NO_WORKER_GRACE_S
        while True:
            payload, shard = await self._relay_once(data, subject_of, head, first, headers)
            if payload is not None:
                return payload, shard
            if time.monotonic() >= deadline:
                return error_payload(ErrorCode.INFERENCE_UNAVAILABLE, f"shard {shard} did not answer"), shard
            await asyncio.sleep(NO_WORKER_PAUSE_S)

    async def _relay_once(self, data: bytes, subject_of: Callable[[int], str], head: Head, shard: int,
                          headers: dict[str, str] | None = None) -> tuple[bytes | None, int]:
        """The reply of ``shard``, or of the next shard when it is down, and the shard that gave it; None when
        neither has a worker."""
        payload: bytes | None = None
        for attempt in range(2):
            try:
                reply = await self.nc.request(subject_of(shard), data, timeout=self.settings.triton_timeout_s + 10,
                                              headers=headers)
                payload = reply.data
                if not engine_unavailable(payload):
                    return payload, shard
                why = "cannot reach its engine"
            except NoRespondersError:
                why = "has no worker"
            except TimeoutError:
                # a slow shard is not a dead one: retrying would only double the work
                return payload or error_payload(ErrorCode.INFERENCE_UNAVAILABLE, f"shard {shard} did not answer"), \
                    shard
            retry = route_head(head, self.shards, frozenset({shard}))
            if attempt == 1 or retry == shard:
                break
            log.warning("shard %d %s: retrying on shard %d", shard, why, retry)
            shard = retry
        return payload, shard

    async def single_user(self, msg: Msg, base: str) -> bytes:
        async def relayed(head: Head) -> bytes:
            payload, _ = await self.relay(msg.data, lambda shard: f"{base}.{shard}", head)
            return payload
        return await self.admitted(None, msg.data, relayed)

    async def team_request(self, msg: Msg) -> bytes:
        """``complete`` and ``file_opened`` of a user: to the file's shard, the user carried in the subject."""
        user = subject_user(msg.subject)
        if user is None:  # the subscription's wildcard matched a token that is not a user name
            return error_payload(ErrorCode.FORBIDDEN, "requests are served on ctxpress.v1.u.<user>.* only")
        return await self.admitted(user, msg.data, lambda head: self._team_request(msg, user, head))

    async def _team_request(self, msg: Msg, user: str, head: Head) -> bytes:
        shard = route_head(head, self.shards)
        self.remember(user, head.request_id, shard)  # a cancel may come before the reply
        flooding = {HEADER_FLOODING: "1"} if user in self.flooding else None
        payload, shard = await self.relay(msg.data, lambda shard: forwarded_to_shard(msg.subject, user, shard), head,
                                          shard, flooding)
        self.remember(user, head.request_id, shard)
        return payload

    async def team_feedback(self, msg: Msg) -> bytes:
        """Feedback names a completion: to the shard that served it; one the gateway does not know (served before
        a restart, or through another gateway) to the shard its id hashes to."""
        user = subject_user(msg.subject)
        if user is None:
            return error_payload(ErrorCode.FORBIDDEN, "requests are served on ctxpress.v1.u.<user>.* only")
        return await self.admitted(user, msg.data, lambda head: self._team_feedback(msg, user, head),
                                   self.feedback_limits)

    async def _team_feedback(self, msg: Msg, user: str, head: Head) -> bytes:
        completion_id = head.request_id
        shard = self.served.get((user, completion_id)) if completion_id else None
        if shard is None:
            shard = shard_for("", completion_id or "", self.shards)
        payload, _ = await self.relay(msg.data, lambda shard: forwarded_to_shard(msg.subject, user, shard), head,
                                      shard)
        return payload

    async def team_cancel(self, msg: Msg) -> None:
        """A cancel goes to the shard holding the request; when the gateway does not know it, to every shard (a
        worker ignores a request id it does not hold)."""
        user = subject_user(msg.subject)
        if user is None or len(msg.data) > self.settings.max_request_bytes:
            return
        try:
            self.cancel_limits.take(user)  # an unknown id goes to every shard: a flood of them is dropped here
        except RateLimited:
            return
        request_id = (await self.head_of(msg.data)).request_id
        shard = self.served.get((user, request_id)) if request_id else None
        for target in (range(self.shards) if shard is None else (shard,)):
            await self.nc.publish(forwarded_to_shard(msg.subject, user, target), msg.data)


async def run_gateway(settings: Settings, stop: asyncio.Event) -> None:
    team = team_mode(settings)
    connect_options = service_connect_options(settings, GATEWAY_USER)  # team mode: no start without its credential
    nc = await nats_connect.connect(settings.nats_servers(), name="ctxpress-gateway", max_reconnect_attempts=-1,
                                    plaintext_credentials=not settings.nats_tls, **connect_options)
    gateway = Gateway(nc, settings)
    tasks: set[asyncio.Task[None]] = set()

    def answering(work: Callable[[Msg], Awaitable[bytes]]) -> Callable[[Msg], Awaitable[None]]:
        async def answer(msg: Msg) -> None:
            try:
                payload = await work(msg)
            except Exception:  # a bug must not leave the IDE waiting for a reply that never comes
                log.exception("forwarding a request failed")
                payload = error_payload(ErrorCode.INTERNAL, "internal error in the gateway")
            if msg.reply:
                await msg.respond(payload)

        async def on_message(msg: Msg) -> None:
            if not replies.answerable(msg, team=team, service="gateway"):  # only to the sender's own inbox
                return
            task = asyncio.create_task(answer(msg))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return on_message

    async def on_cancel(msg: Msg) -> None:
        try:
            await gateway.team_cancel(msg)
        except Exception:
            log.exception("forwarding a cancel failed")

    def single(base: str) -> Callable[[Msg], Awaitable[None]]:
        return answering(lambda msg: gateway.single_user(msg, base))

    queue = "ctxpress-gateway"
    subs = [
        await nc.subscribe(settings.completion_subject, queue=queue, cb=single(settings.completion_subject)),
        await nc.subscribe(SUBJECT_FILE_OPENED, queue=queue, cb=single(SUBJECT_FILE_OPENED)),
    ]
    if team:
        subs += [
            await nc.subscribe(user_subject("*", "complete"), queue=queue, cb=answering(gateway.team_request)),
            await nc.subscribe(user_subject("*", "file_opened"), queue=queue, cb=answering(gateway.team_request)),
            await nc.subscribe(user_subject("*", "feedback"), queue=queue, cb=answering(gateway.team_feedback)),
            await nc.subscribe(user_subject("*", "cancel"), queue=queue, cb=on_cancel),
        ]
    log.info("gateway: %s%s -> %d shards", settings.completion_subject, " and every user's subjects" if team else "",
             settings.shards)
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
