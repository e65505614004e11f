"""The authorization block the NATS server includes in team mode: the developers, the hooks users and the
services, each with the subjects it may publish and subscribe to. Written by ``ctxpress up`` and ``ctxpress
users`` (``ctxpress.team``), included by the NATS part's configuration."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxpress_core.identity import (
    AUTHORIZATION_FILE,
    COMPLETION_KINDS,
    CONSOLE_USER,
    GATEWAY_USER,
    INDEXER_USER,
    RESERVED_NAMES,
    SERVICE_BCRYPT_ROUNDS,
    USER_KIND_DEVELOPER,
    USER_KIND_HOOKS,
    USER_SUBJECT_PREFIX,
    WORKER_USER,
    NatsCredentials,
    bcrypt_hash,
    ensure_service_credentials,
    inbox_prefix,
    shard_user_subject,
    user_subject,
)
from ctxpress_core.private_files import write_private_file
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import (
    SUBJECT_CANCEL,
    SUBJECT_FILE_OPENED,
    SUBJECT_FILE_SAVED,
    SUBJECT_INDEX_GIT,
)
from indexer.stream import dead_letter_stream, dead_letter_subject


@dataclass(frozen=True)
class TeamUser:
    name: str
    password_hash: str  # bcrypt
    kind: str = USER_KIND_DEVELOPER


def developer_permissions(name: str) -> dict[str, Any]:
    return {"publish": {"allow": [f"{USER_SUBJECT_PREFIX}.{name}.>"]},
            "subscribe": {"allow": [f"{inbox_prefix(name)}.>"]}}


def hooks_permissions(name: str) -> dict[str, Any]:
    # A plain publish on its own index subject, with a reply inbox: JetStream stores it and acks to the inbox.
    # The index worker indexes it only into a repository ``name`` is granted. No JetStream API (the workers
    # create the stream, so a hooks user can neither change nor read it) and no completion requests.
    return {"publish": {"allow": [user_subject(name, "index_git")]},
            "subscribe": {"allow": [f"{inbox_prefix(name)}.>"]}}


def worker_permissions(settings: Settings) -> dict[str, Any]:
    probes = [settings.completion_subject, settings.feedback_subject, settings.index_status_subject]
    return {
        # The single-user subjects: the probes of `ctxpress up` and the supervisor connect as the worker
        # (requests there carry no user and are refused). No JetStream: the index stream is the indexer's.
        "publish": {"allow": probes},
        "subscribe": {"allow": [*(user_subject("*", kind) for kind in COMPLETION_KINDS),
                                *(shard_user_subject("*", "*", kind) for kind in COMPLETION_KINDS), *probes,
                                f"{settings.completion_subject}.*", SUBJECT_FILE_OPENED, f"{SUBJECT_FILE_OPENED}.*",
                                SUBJECT_CANCEL, f"{inbox_prefix(WORKER_USER)}.>"]},
        # One reply to each request it received, and nothing else on other people's inboxes.
        "allow_responses": True,
    }


def gateway_permissions(settings: Settings) -> dict[str, Any]:
    """It reads every user's completion subjects and forwards each request to one shard, the user in the subject it
    publishes on (``ctxpress.v1.s.<shard>.u.<user>.<kind>``): it alone may publish there, so the shards trust it."""
    single_user = [settings.completion_subject, SUBJECT_FILE_OPENED]
    return {
        "publish": {"allow": [*(shard_user_subject("*", "*", kind) for kind in COMPLETION_KINDS),
                              *(f"{subject}.*" for subject in single_user)]},
        "subscribe": {"allow": [*(user_subject("*", kind) for kind in COMPLETION_KINDS), *single_user,
                                f"{inbox_prefix(GATEWAY_USER)}.>"]},
        "allow_responses": True,  # the shard's reply, relayed to the editor's inbox
    }


def indexer_api_subjects(settings: Settings) -> list[str]:
    """The JetStream API calls the index worker makes, and no others: it makes (or widens) the index stream, its
    durable consumer and the dead-letter stream, pulls from its consumer and reads the dead letters' count and the
    per-user counts of pending events. It cannot delete or purge a stream, read another stream or consumer, or list
    them."""
    stream, consumer, dead = settings.index_stream, settings.index_consumer, dead_letter_stream(settings)
    api = "$JS.API"
    return [f"{api}.STREAM.INFO.{stream}", f"{api}.STREAM.CREATE.{stream}", f"{api}.STREAM.UPDATE.{stream}",
            f"{api}.STREAM.INFO.{dead}", f"{api}.STREAM.CREATE.{dead}", f"{api}.STREAM.UPDATE.{dead}",
            f"{api}.CONSUMER.INFO.{stream}.{consumer}", f"{api}.CONSUMER.CREATE.{stream}.{consumer}",
            f"{api}.CONSUMER.CREATE.{stream}.{consumer}.>", f"{api}.CONSUMER.DURABLE.CREATE.{stream}.{consumer}",
            f"{api}.CONSUMER.MSG.NEXT.{stream}.{consumer}", f"$JS.ACK.{stream}.{consumer}.>"]


def indexer_permissions(settings: Settings, indexer_password: str) -> dict[str, Any]:
    return {
        # JetStream on its own stream and consumer only; it reads the editors' saves and hook events from the stream,
        # never from their subjects. The events it gives up on, to the dead letters, on the subject keyed with its
        # own password (nobody else can name it, so no JetStream ack lands there).
        "publish": {"allow": [*indexer_api_subjects(settings), dead_letter_subject(settings, indexer_password)]},
        "subscribe": {"allow": [settings.index_status_subject, f"{inbox_prefix(INDEXER_USER)}.>"]},
        "allow_responses": True,  # its status, to the probes
    }


def console_permissions(settings: Settings) -> dict[str, Any]:
    """The console's: the index stream's state and its dead letters (read, deleted), and a retried event published
    again on the subject it first came on, so the index worker checks the same user's grants as the first time."""
    stream, consumer, dead = settings.index_stream, settings.index_consumer, dead_letter_stream(settings)
    api = "$JS.API"
    return {
        "publish": {"allow": [f"{api}.STREAM.INFO.{stream}", f"{api}.CONSUMER.INFO.{stream}.{consumer}",
                              f"{api}.STREAM.INFO.{dead}", f"{api}.STREAM.MSG.GET.{dead}",
                              f"{api}.STREAM.MSG.DELETE.{dead}", SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED,
                              user_subject("*", "index_git"), user_subject("*", "file_saved")]},
        "subscribe": {"allow": [f"{inbox_prefix(CONSOLE_USER)}.>"]},
    }


def render_authorization(settings: Settings, users: Iterable[TeamUser], services: dict[str, NatsCredentials]) -> str:
    """The ``authorization`` block nats-server includes (its config syntax accepts JSON values)."""
    entries: list[dict[str, Any]] = [
        {"user": WORKER_USER, "password": bcrypt_hash(services[WORKER_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": worker_permissions(settings)},
        {"user": INDEXER_USER, "password": bcrypt_hash(services[INDEXER_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": indexer_permissions(settings, services[INDEXER_USER].password)},
        {"user": GATEWAY_USER, "password": bcrypt_hash(services[GATEWAY_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": gateway_permissions(settings)},
        {"user": CONSOLE_USER, "password": bcrypt_hash(services[CONSOLE_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": console_permissions(settings)},
    ]
    for user in sorted(users, key=lambda u: u.name):
        if user.name in RESERVED_NAMES:
            continue  # never shadow a service user (the CLI refuses these names)
        permissions = hooks_permissions(user.name) if user.kind == USER_KIND_HOOKS else developer_permissions(user.name)
        entries.append({"user": user.name, "password": user.password_hash, "permissions": permissions})
    return ("# Written by ctxpress (`ctxpress up`, `ctxpress users`); changes here are overwritten.\n"
            f"authorization: {json.dumps({'users': entries}, indent=2)}\n")


def authorization_path(settings: Settings) -> Path:
    return settings.state_dir / "nats" / AUTHORIZATION_FILE


def write_authorization(settings: Settings, users: Iterable[TeamUser]) -> Path:
    path = authorization_path(settings)
    write_private_file(path, render_authorization(settings, users, ensure_service_credentials(settings)))
    return path


def ensure_authorization_file(settings: Settings) -> Path:
    """The block the embedded NATS config includes. Kept when it exists: it holds the developers last synced
    from PostgreSQL, which a NATS restarted by the supervisor must keep accepting."""
    path = authorization_path(settings)
    if not path.exists():
        write_authorization(settings, [])
    return path
