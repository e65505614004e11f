"""The git hook's publisher runs without the package: its subjects must be the ones the package states."""

from __future__ import annotations

from ctxpress_core import identity
from ctxpress_core.wire.v1 import MAX_INDEX_PATH_BYTES, SUBJECT_INDEX_GIT
from indexer import hook_publish


def test_the_hook_publishes_on_the_subjects_the_stream_captures() -> None:
    assert hook_publish.SUBJECT == SUBJECT_INDEX_GIT
    assert hook_publish.HOOKS_USER == identity.HOOKS_USER
    assert hook_publish.USER_SUBJECT.format(user="alice") == identity.user_subject("alice", "index_git")


def test_the_hook_leaves_out_the_paths_the_worker_refuses() -> None:
    assert hook_publish.MAX_PATH_BYTES == MAX_INDEX_PATH_BYTES
    assert hook_publish._name(b"a" * MAX_INDEX_PATH_BYTES) is not None
    assert hook_publish._name(b"a" * (MAX_INDEX_PATH_BYTES + 1)) is None
