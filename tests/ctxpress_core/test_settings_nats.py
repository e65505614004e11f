"""NATS settings: a cluster's URLs, and the copies of the index stream."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ctxpress_core.settings import Settings
from indexer.stream import consumer_config, stream_config


def test_a_cluster_is_a_comma_separated_list_of_urls() -> None:
    settings = Settings(nats_url="nats://10.0.0.1:4222, nats://10.0.0.2:4222,,nats://10.0.0.3:4222")
    assert settings.nats_servers() == ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222", "nats://10.0.0.3:4222"]


def test_the_embedded_server_is_one_url() -> None:
    assert Settings(nats_port=4999).nats_servers() == ["nats://127.0.0.1:4999"]


def test_the_index_stream_and_its_consumer_are_replicated_as_asked() -> None:
    assert stream_config(Settings()).num_replicas == 1
    settings = Settings(index_stream_replicas=3)
    assert stream_config(settings).num_replicas == 3 and consumer_config(settings).num_replicas == 3
    with pytest.raises(ValidationError):
        Settings(index_stream_replicas=0)


def test_a_model_given_by_its_file_is_named_after_it_unless_named() -> None:
    assert Settings().model_name == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert Settings(model_path="/m/qwen2.5-coder-1.5b-instruct-q4_0.gguf").model_name == \
        "qwen2.5-coder-1.5b-instruct-q4_0"
    assert Settings(model_path="/m/other.gguf", model_name="mine").model_name == "mine"
