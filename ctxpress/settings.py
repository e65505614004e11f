"""The one typed settings object. Every knob is an env var ``CTXPRESS_<NAME>``.

Each service can be pointed at an external deployment (``nats_url``, ``database_url``,
``triton_url``); left empty, the embedded service under ``home`` is used.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CTXPRESS_", extra="ignore")

    home: Path = Field(default=Path("~/.local/state/ctxpress"), description="all embedded state lives here")
    bind_host: str = "127.0.0.1"

    # NATS
    nats_url: str | None = None
    nats_port: int = 4222
    nats_monitor_port: int = 8222

    # PostgreSQL
    database_url: str | None = None
    postgres_port: int = 5433

    # Triton
    triton_url: str | None = None  # gRPC "host:port" of an external Triton
    triton_http_port: int = 8000
    triton_grpc_port: int = 8001
    triton_metrics_port: int = 8002
    triton_timeout_s: float = 30.0

    # The CPU engine served by the embedded Triton
    model_path: Path | None = None
    draft_model_path: Path | None = None
    model_name: str = "qwen2.5-coder-1.5b-instruct-q4_k_m"
    n_ctx: int = 4096
    n_threads: int = 0  # 0 = all cores

    # Completion worker
    completion_subject: str = "ctxpress.v1.complete"
    completion_queue: str = "ctxpress-completion"
    max_request_bytes: int = 4 * 1024 * 1024
    window_lines: int = 200  # the seed's baseline: +-200 lines around the cursor
    context_budget_tokens: int = 1024
    # Above this, optimized context assembly gives up and the baseline window is used.
    assembly_timeout_ms: float = 20.0
    default_max_tokens: int = 64

    @cached_property
    def state_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def models_dir(self) -> Path:
        return self.state_dir / "models"

    def effective_nats_url(self) -> str:
        return self.nats_url or f"nats://{self.bind_host}:{self.nats_port}"

    def effective_triton_url(self) -> str:
        return self.triton_url or f"{self.bind_host}:{self.triton_grpc_port}"

    def effective_database_url(self) -> str:
        return self.database_url or f"postgresql+psycopg://postgres@{self.bind_host}:{self.postgres_port}/postgres"

    def metrics_url(self) -> str:
        return f"http://{self.bind_host}:{self.triton_metrics_port}/metrics"


def get_settings() -> Settings:
    return Settings()
