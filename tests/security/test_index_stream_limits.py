"""Issue 43 (the index stream): no API call empties it, no user's burst evicts another's pending events, in team
mode it captures no user-less subject, and the dead letters' subject is one no developer can name. A real
nats-server (the embedded one, as `ctxpress up` starts it for a single user: the stream's configuration is what is
tested, made with team-mode settings where it differs) and nats-py's JetStream client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import DiscardPolicy
from nats.js.errors import APIError, NoStreamResponseError

from ctxpress import dead_letters
from ctxpress_core.identity import ensure_service_credentials, user_subject
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import HEADER_DEAD_SUBJECT, SUBJECT_FILE_SAVED, SUBJECT_INDEX_DEAD, SUBJECT_INDEX_GIT
from indexer.stream import (
    dead_letter_config,
    dead_letter_stream,
    dead_letter_subject,
    ensure_stream,
    stream_config,
    users_at_quota,
)
from tests.team_services import running_nats, team_settings

pytestmark = pytest.mark.services

UNUSED_DB = "postgresql+psycopg://unused@127.0.0.1:1/postgres"


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Settings]:
    settings = team_settings(tmp_path, UNUSED_DB, team=False, index_user_max_events=3)
    ensure_service_credentials(settings)  # the indexer's: the team-mode dead-letter subject is keyed with it
    with running_nats(settings):
        yield settings


@pytest.fixture
async def js(local: Settings) -> AsyncIterator[Any]:
    nc = await nats.connect(local.effective_nats_url())
    yield nc.jetstream()
    await nc.close()


def _saved(path: str) -> bytes:
    return json.dumps({"repository": "alpha", "path": path, "text": "x = 1\n"}).encode()


async def _purge_and_delete_are_refused(js: Any, settings: Settings) -> None:
    """Neither stream can be purged; the pending events cannot be deleted either, the dead letters can (one by
    one: the console's retry and discard; only the console's NATS user may ask)."""
    for stream, subject, deletes in ((settings.index_stream, user_subject("alice", "file_saved"), False),
                                     (dead_letter_stream(settings), dead_letter_subject(settings), True)):
        ack = await js.publish(subject, _saved("a.py"))
        with pytest.raises(APIError, match=r"(?i)purge"):
            await js.purge_stream(stream)
        assert (await js.stream_info(stream)).state.messages == 1, stream  # still there
        if deletes:
            assert await js.delete_msg(stream, ack.seq)
            continue
        with pytest.raises(APIError, match=r"(?i)delete"):
            await js.delete_msg(stream, ack.seq)
        assert (await js.stream_info(stream)).state.messages == 1, stream


async def test_neither_stream_can_be_purged_nor_its_events_deleted(js: Any, local: Settings) -> None:
    await ensure_stream(js, local)
    await _purge_and_delete_are_refused(js, local)


async def test_streams_made_by_an_older_version_gain_the_denials_and_the_quota(js: Any, local: Settings) -> None:
    """ensure_stream updated an existing stream only to add subjects: one made before kept letting a purge through
    (tested before the fix: the purge succeeded)."""
    old = replace(stream_config(local), deny_delete=False, deny_purge=False, discard=DiscardPolicy.OLD,
                  discard_new_per_subject=False, max_msgs_per_subject=-1)
    await js.add_stream(old)
    await js.add_stream(replace(dead_letter_config(local), deny_delete=False, deny_purge=False))
    team = local.model_copy(update={"team": True})
    await ensure_stream(js, team)
    info = await js.stream_info(local.index_stream)
    assert info.config.discard == DiscardPolicy.NEW and info.config.discard_new_per_subject
    assert info.config.max_msgs_per_subject == local.index_user_max_events
    await _purge_and_delete_are_refused(js, team)
    await ensure_stream(js, team)  # again: nothing left to change, no error


async def test_a_dead_letter_stream_made_before_moves_to_the_subject_nobody_else_can_name(js: Any,
                                                                                        local: Settings) -> None:
    """JetStream acks a developer's own publish at her chosen reply subject: on ``ctxpress.v1.index.dead`` the
    dead-letter stream stored it (an alert). A team's dead-letter stream, also one made before, takes only the
    subject keyed with the index worker's credential; a single-user appliance keeps the plain one."""
    await ensure_stream(js, local)
    assert (await js.stream_info(dead_letter_stream(local))).config.subjects == [SUBJECT_INDEX_DEAD]
    team = local.model_copy(update={"team": True})
    keyed = dead_letter_subject(team)
    assert keyed.startswith(f"{SUBJECT_INDEX_DEAD}.") and len(keyed) == len(SUBJECT_INDEX_DEAD) + 33
    assert keyed == dead_letter_subject(team)  # the same for the worker and the authorization block
    await ensure_stream(js, team)
    assert (await js.stream_info(dead_letter_stream(team))).config.subjects == [keyed]
    with pytest.raises((NoStreamResponseError, nats.errors.NoRespondersError)):
        await js.publish(SUBJECT_INDEX_DEAD, b'{"stream": "CTXPRESS_INDEX", "seq": 1}', timeout=2)
    assert (await js.publish(keyed, _saved("a.py"))).stream == dead_letter_stream(team)


async def test_a_dead_letter_stream_that_denies_deletes_does_not_stop_the_index_worker(js: Any,
                                                                                      local: Settings) -> None:
    """nats-server never switches deny_delete off: a dead-letter stream made with it (by a development build)
    keeps it, and ensure_stream (the index worker's start) must not fail on it. A retry there changes nothing (it
    would publish the event again, then fail to delete the letter) and says what to do."""
    await js.add_stream(replace(dead_letter_config(local), deny_delete=True))
    await ensure_stream(js, local)
    letter = await js.publish(SUBJECT_INDEX_DEAD, _saved("a.py"),
                              headers={HEADER_DEAD_SUBJECT: user_subject("alice", "file_saved")})
    with pytest.raises(dead_letters.DeadLetterError, match="refuses deletes"):
        await dead_letters.retry(local, letter.seq)
    assert (await js.stream_info(local.index_stream)).state.messages == 0  # not published again
    team = local.model_copy(update={"team": True})
    await ensure_stream(js, team)
    info = await js.stream_info(dead_letter_stream(local))
    assert info.config.deny_delete and info.config.subjects == [dead_letter_subject(team)]


async def test_one_users_quota_refuses_their_next_event_and_keeps_the_others(js: Any, local: Settings) -> None:
    """Before: discard-old over the whole stream, so a user's burst silently dropped the oldest pending events,
    anyone's. Now each user's subject holds at most its quota; past it that user's publish gets an error ack."""
    local = local.model_copy(update={"team": True})
    await ensure_stream(js, local)
    bob = await js.publish(user_subject("bob", "file_saved"), _saved("bob.py"))
    alice = user_subject("alice", "file_saved")
    for n in range(local.index_user_max_events):
        await js.publish(alice, _saved(f"a{n}.py"))
    with pytest.raises(APIError, match=r"(?i)maximum messages per subject"):
        await js.publish(alice, _saved("one-too-many.py"))
    assert (await js.get_msg(local.index_stream, bob.seq)).data == _saved("bob.py")  # bob's pending event stays
    await js.publish(user_subject("alice", "index_git"), b"{}")  # her other kind has its own quota
    await js.publish(user_subject("bob", "file_saved"), _saved("bob2.py"))  # bob is not refused
    assert await users_at_quota(js, local) == {"alice.file_saved": local.index_user_max_events}


async def test_team_mode_leaves_the_userless_subjects_out_of_the_stream(js: Any, local: Settings,
                                                                         tmp_path: Path) -> None:
    """Events on ctxpress.v1.index.git / file_saved carry no user, so no grant check: a team's stream must not
    take them, also when it was made before (by a single-user appliance, or an older version)."""
    await ensure_stream(js, local)  # single-user: all four subjects
    assert {SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED} <= set((await js.stream_info(local.index_stream)).config.subjects)
    team = local.model_copy(update={"team": True})
    await ensure_stream(js, team)
    subjects = set((await js.stream_info(local.index_stream)).config.subjects)
    assert subjects == {user_subject("*", "file_saved"), user_subject("*", "index_git")}
    for subject in (SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED):
        with pytest.raises((NoStreamResponseError, nats.errors.NoRespondersError)):
            await js.publish(subject, _saved("x.py"), timeout=2)


def test_a_single_users_stream_keeps_the_newest_events_of_a_long_rebase(local: Settings) -> None:
    """Nobody else to starve on a single-user appliance: no per-subject quota, the oldest event goes first."""
    config = stream_config(local)
    assert config.discard == DiscardPolicy.OLD and config.max_msgs_per_subject == -1
    assert config.deny_purge and config.deny_delete
    assert dead_letter_config(local).deny_purge and not dead_letter_config(local).deny_delete  # the console's
