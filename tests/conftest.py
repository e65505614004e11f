"""Session fixtures: one real appliance (NATS, PostgreSQL+pgvector, Triton + the real
model, a completion worker) started by the project's own `ctxpress up`, on free ports
and in a throw-away state directory, shared by every test that needs services."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctxpress.topology import free_ports
from ctxpress_core.settings import Settings
from serving.tokenizer import Tokenizer
from serving.triton_client import TritonEmbedder

# Each test's kinds (services, model, editors, scripted), `pytest --pure` and `--shard` (make check): a plugin,
# imported here first for `needs` (registered for rewriting, as pytest would have, so it does not warn).
pytest.register_assert_rewrite("tests.kinds")
from tests.kinds import needs  # noqa: E402

pytest_plugins = ["tests.kinds"]


def free_port() -> int:
    return free_ports(1)[0]


@pytest.fixture(scope="session")
def tokenizer(model_path: Path) -> Iterator[Tokenizer]:
    """The model's own tokenizer (vocabulary only), one per test session."""
    tok = Tokenizer(model_path)
    yield tok
    tok.close()


@pytest.fixture(scope="session")
@needs("model")
def model_path() -> Path:
    """The real target GGUF, joined once per machine in the default state directory."""
    from serving.weights import TARGET, ensure_model

    return ensure_model(TARGET, Settings(home=Path("~/.local/state/ctxpress")).models_dir)


def appliance_env(home: Path, model: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    ports = iter(free_ports(7))
    env.update({
        "CTXPRESS_HOME": str(home),
        "CTXPRESS_MODEL_PATH": str(model),
        "CTXPRESS_NATS_PORT": str(next(ports)),
        "CTXPRESS_NATS_MONITOR_PORT": str(next(ports)),
        "CTXPRESS_POSTGRES_PORT": str(next(ports)),
        "CTXPRESS_TRITON_HTTP_PORT": str(next(ports)),
        "CTXPRESS_TRITON_GRPC_PORT": str(next(ports)),
        "CTXPRESS_TRITON_METRICS_PORT": str(next(ports)),
        "CTXPRESS_WORKER_METRICS_PORT": str(next(ports)),
        "CTXPRESS_N_CTX": "2048",
        # Tests share 2 cores with the model and with each other: the product's 30 ms database
        # deadline would turn functional retrieval tests into load tests. The deadline itself is
        # tested with its own retriever (tests/context/test_retrieval.py).
        "CTXPRESS_RETRIEVAL_TIMEOUT_MS": "3000",
        # Likewise the latency plan: on a shared host it would size each prompt by the load of the moment, and the
        # tests of what a prompt holds assert the full one. The plan is tested with the scripted engine
        # (tests/workers/completion/test_service.py) and measured by `ctxpress bench`.
        "CTXPRESS_LATENCY_TARGET_MS": "0",
        **extra,
    })
    return env


def ctxpress(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxpress.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@dataclass
class Appliance:
    env: dict[str, str]
    settings: Settings

    def ctxpress(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return ctxpress(self.env, *args, timeout=timeout)

    def worker_metric(self, name: str) -> float:
        """The completion worker's unlabelled Prometheus sample ``name`` (0 before it is first counted)."""
        url = f"http://127.0.0.1:{self.settings.worker_metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(f"{name} "):
                    return float(line.split()[1])
        return 0.0


def settings_from_env(env: dict[str, str]) -> Settings:
    values = {k.removeprefix("CTXPRESS_").lower(): v for k, v in env.items() if k.startswith("CTXPRESS_")}
    return Settings(**values)


@contextmanager
def running_appliance(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """``ctxpress up`` with ``env`` (the test fails when it cannot), ``ctxpress down`` after."""
    started = ctxpress(env, "up")
    if started.returncode != 0:
        ctxpress(env, "down")
        pytest.fail(f"ctxpress up failed:\n{started.stdout}\n{started.stderr}")
    try:
        yield env
    finally:
        ctxpress(env, "down")


@pytest.fixture(scope="session")
@needs("services")
def appliance(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[Appliance]:
    home = tmp_path_factory.mktemp("ctxpress-home")
    with running_appliance(appliance_env(home, model_path)) as env:
        yield Appliance(env, settings_from_env(env))


@pytest.fixture(scope="session")
def embedder(appliance: Appliance) -> Iterator[TritonEmbedder]:
    """The appliance's embedder (served by its Triton), for tests that index with the real pipeline."""
    client = TritonEmbedder(appliance.settings.effective_triton_url())
    yield client
    client.close()


@pytest.fixture
async def nats_client(appliance: Appliance) -> AsyncIterator[object]:
    import nats

    nc = await nats.connect(appliance.settings.effective_nats_url())
    yield nc
    await nc.close()


@pytest.fixture(scope="session", autouse=True)
async def no_nats_client_left_open() -> AsyncIterator[None]:
    """Every async test shares the session's event loop. A NATS client left open whose server a module has since
    stopped keeps reconnecting, and nats-py's reconnect loop swallows the cancellation the loop's shutdown sends
    (nats-io/nats.py#981): the run would never end. Such clients are closed here, by name, before the loop is."""
    yield
    import gc
    import sys

    from nats.aio.client import Client

    left = [c for c in gc.get_objects() if isinstance(c, Client) and not c.is_closed]
    for client in left:
        print(f"a NATS client was left open (servers {[str(s.uri.netloc) for s in client._server_pool]}): "
              "closing it", file=sys.stderr)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 10)
