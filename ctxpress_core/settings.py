"""The one typed settings object. Every knob is an env var ``CTXPRESS_<NAME>``.

Each service can be pointed at an external deployment (``nats_url``, ``database_url``,
``triton_url``); left empty, the embedded service under ``home`` is used.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ctxpress_core.database import database_url, stored_password
from ctxpress_core.wire.v1 import SUBJECT_COMPLETE, SUBJECT_FEEDBACK


class PackagedModelChoice(StrEnum):
    """The models the registry packages ship (serving/weights.py joins and checks them)."""

    CODER_1_5B = "qwen2.5-coder-1.5b"
    CODER_0_5B = "qwen2.5-coder-0.5b"

    @property
    def file_stem(self) -> str:
        return {"qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m",
                "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct"}[self.value]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CTXPRESS_", extra="ignore")

    home: Path = Field(default=Path("~/.local/state/ctxpress"), description="all embedded state lives here")
    bind_host: str = "127.0.0.1"  # where the embedded parts listen unless their own host setting says otherwise
    # Team mode (ctxpress/team.py, docs/security.md): NATS users and repository grants. Also on, whatever this
    # says, when NATS is reachable from other hosts (a non-loopback nats_url or bind_host).
    team: bool = False

    # NATS: one URL, or a cluster's URLs separated by commas (clients try each; see nats_servers)
    nats_url: str | None = None
    # A credentials file written by `ctxpress users add` (JSON: nats_url, user, password; read with
    # ctxpress_core.identity.load_credentials). Team mode with an external NATS: the workers' own (the worker user).
    nats_credentials: Path | None = None
    # Team mode with an external NATS: the index worker's own (the indexer user); unset, it uses nats_credentials.
    nats_indexer_credentials: Path | None = None
    nats_port: int = 4222  # the embedded NATS client port
    nats_monitor_port: int = 8222  # the embedded NATS monitoring (HTTP) port
    # Where the embedded NATS listens (default: bind_host). A team appliance puts NATS alone on the network
    # (e.g. 0.0.0.0) and keeps PostgreSQL, Triton and the metrics endpoints on loopback.
    nats_bind_host: str | None = None
    # Team mode: TLS on the embedded NATS client port, for every client (the workers too). The server's
    # certificate, its key and the CA that signed it are the operator's when set, otherwise generated under
    # <home>/tls (ctxpress_core/tls.py). With an external NATS, nats_tls_ca is what the workers verify it with.
    nats_tls: bool = True
    nats_tls_cert: Path | None = None  # your own server certificate (PEM); set cert, key and CA together, or none
    nats_tls_key: Path | None = None  # the server certificate's private key (PEM)
    nats_tls_ca: Path | None = None  # the CA that signed the server certificate: what clients verify NATS with

    # PostgreSQL
    database_url: str | None = None  # an external PostgreSQL; unset: the embedded one
    # The URL in a file (a container's mounted secret: each service its own PostgreSQL role, `ctxpress db roles`);
    # read when ``database_url`` is not set.
    database_url_file: Path | None = None
    postgres_port: int = 5433  # the embedded PostgreSQL

    # Triton
    triton_url: str | None = None  # gRPC "host:port" of an external Triton
    triton_http_port: int = 8000  # the embedded Triton's HTTP port (readiness checks); move it if 8000 is taken
    triton_grpc_port: int = 8001  # the embedded Triton's gRPC port, where the workers send requests
    triton_metrics_port: int = 8002  # the embedded Triton's Prometheus /metrics port
    # Where the embedded Triton serves HTTP and gRPC, and where it and the completion worker serve Prometheus
    # /metrics. None of them asks for a password, so they stay on loopback whatever bind_host says.
    triton_bind_host: str = "127.0.0.1"
    metrics_bind_host: str = "127.0.0.1"  # where Triton's and the completion worker's /metrics listen
    triton_timeout_s: float = 120.0  # a cold 2,048-token prompt takes ~30 s on 2 CPU cores

    # The CPU engine served by the embedded Triton
    # The packaged model the engine runs (docs/quality.md compares them on this host's figures): the 1.5B, or the
    # 0.5B (the draft model otherwise; as the main model it leaves draft speculation off). model_path overrides it.
    model: PackagedModelChoice = Field(default=PackagedModelChoice.CODER_1_5B)
    model_path: Path | None = None  # a GGUF; unset: the packaged model
    draft_model_path: Path | None = None  # a GGUF for draft speculation; unset: see draft_model
    # Replies and cache keys name it: the packaged model's name, or model_path's file name, unless given.
    model_name: str = ""
    n_ctx: int = 4096  # per sequence: the longest prompt + completion of one file
    n_threads: int = 0  # 0: adaptive (serving.engine.host_load); N: always N
    # KV cache element type: "f16", "q8_0" (INT8) or "q4_0" (INT4, measured and not recommended).
    kv_cache_type: str = "f16"
    # Files whose KV the engine keeps at once (each up to n_ctx cells): the pool's memory budget.
    kv_pool_slots: int = 4
    # Disk budget of the pool's second tier: evicted files' KV (and every file's at shutdown) kept in
    # <home>/kv and read back instead of processed again; 0 turns the tier off.
    kv_disk_budget_mb: int = Field(default=2048, ge=0)
    # The key of each user's KV cache salt (context.prompt.cache_salt): with it, whoever reaches the engine cannot
    # compute a user's salt from their name. Unset: a plain hash of the name.
    cache_salt_secret: SecretStr | None = None
    # Default speculative decoding: "auto" (a policy over measured figures), "none", "ngram", "draft".
    speculation: str = "auto"
    # Latency-first admission to the engine (serving/engine/scheduler.py): engine time shared between users by fair
    # queuing, then a 5 ms window, urgent first, earliest deadline first, a running request giving way between prompt
    # chunks and decode steps to the one the scheduler would choose over it, warm-ups last; off: arrival order.
    batching: bool = True
    # The 0.5B draft model: on by default when its package is installed; "off" disables it.
    draft_model: str = "packaged"

    # Completion worker
    completion_subject: str = SUBJECT_COMPLETE  # the NATS subject of completion requests
    # The NATS queue group of the completion workers: workers in one group share the requests, each answered once.
    completion_queue: str = "ctxpress-completion"
    feedback_subject: str = SUBJECT_FEEDBACK  # the NATS subject of feedback (shown, accepted, dismissed)
    # Sharded deployments: this worker serves `<completion_subject>.<shard>` behind `ctxpress gateway`.
    shard: int | None = None
    shards: int = 1  # how many shards `ctxpress gateway` routes requests across (by repository and path)
    worker_metrics_port: int = 9400  # Prometheus /metrics of the completion worker; 0 = off
    # 1 MiB: twice the largest file the index takes; every pass over a request's text (parsing,
    # tokenizing) costs in proportion to it
    max_request_bytes: int = 1024 * 1024
    # Fair sharing (workers/fair_share.py), per user at the gateway and at each worker (single-user mode: the one
    # user): requests held at once (complete and file_opened), and a token bucket of requests per second with its
    # burst. A fast typist sends a few a second and cancels what a newer keystroke supersedes: far below these.
    # Past them a request is answered ``rate_limited`` with ``retry_after_ms``; feedback has twice the rate and burst
    # (shown, then accepted or dismissed: two per suggestion). 0 in flight or 0 per second: no limit of that kind.
    user_max_inflight: int = Field(default=4, ge=0)
    user_requests_per_s: float = Field(default=20.0, ge=0)  # the token bucket's rate: requests per second per user
    user_request_burst: int = Field(default=40, ge=1)  # the token bucket's size: requests a user may send at once
    # The engine's weight for a user refused for their share in the last 30 s (one who floods), against 1 for the
    # others: two users who both keep the engine busy get 1 : this of it (1: no difference).
    flooding_share: float = Field(default=0.125, gt=0, le=1)
    # Telemetry rows one user may hold in the worker's backlog (of its 20,000): a user's feedback spam drops
    # their own rows, never another user's.
    telemetry_user_backlog: int = Field(default=5_000, ge=1)
    window_lines: int = 200  # the seed's baseline: +-200 lines around the cursor
    # The seed's baseline window is uncapped (~4,000 tokens for 400 lines of code); we cap it at
    # 2,048 so a cold baseline prompt stays within tens of seconds on a 2-core CPU engine.
    baseline_budget_tokens: int = 2048
    context_budget_tokens: int = 1024  # optimized mode: the seed's personal-scale budget
    # The latency a completion is planned to (feature ``plan``, workers/completion/prompt_plan.py): a prompt whose
    # uncached part and expected decode would take longer at the engine's measured speed gets a smaller budget, the
    # full one filled in behind the answer. A GPU's full budget fits it; 0: every request gets its full budget.
    latency_target_ms: int = Field(default=1500, ge=0)
    # The smallest budget a plan gives. On the long eval the first suggestion scores EM 38 % at 128 tokens, 58 % at
    # 256, 67 % at 384, 71 % at the full 1,024 (docs/measurements/latency.md): below 256 it is not worth showing.
    plan_min_tokens: int = Field(default=256, ge=16)
    # Above this much CPU time, optimized context assembly gives up and the baseline window is used.
    assembly_timeout_ms: float = 20.0
    # Where the editor does not say (Tabby's door, `ctxpress lsp`, the evals). A block completion stops where its
    # block ends (early_stop), a line completion at its line's end: the limit is reached only by long blocks,
    # which 64 tokens cut (docs/quality.md, multi-line).
    default_max_tokens: int = 128
    # `ctxpress lsp`: milliseconds to wait after a keystroke before asking (0: adaptive).
    lsp_debounce_ms: int = 0
    # `ctxpress lsp`: past this long writing, a suggestion ends at its next line end (the wire's max_decode_ms;
    # llama.vim and llama.vscode send the same 1,000 ms by default). 0: no cap.
    lsp_max_decode_ms: int = Field(default=1000, ge=0, le=600_000)

    # `ctxpress serve-http` (ctxpress/http/): the HTTP APIs editor plugins already speak (llama.cpp's /infill,
    # Tabby's /v1/completions, OpenAI/Mistral FIM), each turned into a ctxpress.v1.complete request.
    http_host: str | None = None  # default: bind_host
    http_port: int = 8012  # where llama.vscode and llama.vim look for a llama.cpp server by default
    # A bearer token every request must carry once set (required in team mode and off loopback); the file
    # form keeps it out of the environment of every process.
    http_token: SecretStr | None = None
    http_token_file: Path | None = None  # a file holding the bearer token, read when http_token is unset
    # Where a plugin that sends no file path (llama.vscode, llama.vim, Continue) is said to be editing;
    # the X-Ctxpress-Repository, X-Ctxpress-Path and X-Ctxpress-Language headers override them per request.
    http_repository: str = "editor"
    http_path: str = "untitled"  # the file path given to requests that name none
    http_language: str | None = None  # default: from the path's suffix

    # Repository index (embedder served by Triton, chunks in PostgreSQL, events through JetStream)
    embedding_model_path: Path | None = None  # an ONNX sentence embedder; default: packaged all-MiniLM-L6-v2 int8
    embedding_threads: int = 1  # onnxruntime threads: the completion engine needs the other cores
    index_max_file_bytes: int = 512 * 1024  # larger files are not indexed (mostly generated code or data)
    index_stream: str = "CTXPRESS_INDEX"  # the JetStream stream of index events (saves, commits)
    # Copies JetStream keeps of the index stream and its consumer: 3 on a three-node NATS cluster, so that losing
    # one node loses no event; 1 on the embedded single server.
    index_stream_replicas: int = Field(default=1, ge=1, le=5)
    index_consumer: str = "ctxpress-indexer"  # the durable consumer the index worker reads the stream with
    index_status_subject: str = "ctxpress.v1.index.status"  # where the index worker answers status requests
    # An event the index worker cannot apply (database or embedder down) comes back after a delay doubling from
    # base to max; after max_deliver tries (about 1.5 h with the defaults) it goes to the dead-letter stream
    # (``<index_stream>_DEAD``, kept 30 days), which ``ctxpress status`` reports, instead of being dropped.
    index_retry_base_s: float = Field(default=2.0, gt=0)
    index_retry_max_s: float = Field(default=600.0, gt=0)  # the longest delay between two tries of one event
    index_max_deliver: int = Field(default=20, ge=2, le=1000)  # tries of one event before it is dead-lettered
    # Team mode: pending events each user may hold in the index stream per kind (saves, commits): past it JetStream
    # refuses that user's next one (an error ack to the publisher) rather than evicting anyone's; ``ctxpress status``
    # says so. Room for a rebase's commits published while the worker is busy.
    index_user_max_events: int = Field(default=64, ge=1, le=100_000)
    retrieval_timeout_ms: float = 30.0  # past this the database is skipped for the request
    retrieval_top_k: int = 6  # at most this many retrieved chunks are offered to the context per request
    retrieval_min_similarity: float = 0.30  # cosine; adapted per request (see context/sources/retrieval.py)

    # Supervisor (ctxpress/parts/supervisor.py): restarts an embedded part whose process is gone, after a backoff
    # doubling from initial to max that starts over once the part has stayed up reset_s.
    supervisor_interval_s: float = 1.0
    supervisor_backoff_initial_s: float = 1.0  # the wait before the first restart of a part
    supervisor_backoff_max_s: float = 30.0  # the longest wait between restarts of a part that keeps dying
    supervisor_backoff_reset_s: float = 60.0  # up this long, a part's next restart waits the initial backoff again
    # A worker whose live process fails this many probes in a row over at least hang_s is hung (a frozen
    # event loop) and is killed. Long enough that a worker busy on two loaded cores still gets through.
    supervisor_hang_s: float = 20.0
    supervisor_hang_checks: int = 5  # failed probes in a row (over at least supervisor_hang_s) that make a hang

    # The team console (`ctxpress console`, ctxpress/console/): a web page for the team's lead, started by `ctxpress
    # up` in team mode. Loopback by default; bound beyond it, it serves HTTPS with the team's certificate.
    console_host: str = "127.0.0.1"
    console_port: int = 8090  # 0: `ctxpress up` does not start it
    console_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)  # a sign-in lasts this long, then expires
    # Sign-in attempts that fail for one name from one address within the window before that pair must wait.
    console_login_failures: int = Field(default=5, ge=1)
    console_login_window_s: float = Field(default=300.0, gt=0)  # the window console_login_failures counts in

    @model_validator(mode="after")
    def _model_named_after_its_file(self) -> Settings:
        """Replies and the engine's cache keys name the model that runs: the packaged one's name would be wrong
        for another file given in ``model_path``."""
        if "model_name" not in self.model_fields_set or not self.model_name:
            self.model_name = self.model_path.stem if self.model_path is not None else self.model.file_stem
        return self

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
        if self.nats_url is not None:
            return self.nats_url
        host = self.nats_bind_host or self.bind_host
        # Listening on every address: connect on loopback (an address its TLS certificate names).
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
        return f"nats://{host}:{self.nats_port}"

    def nats_servers(self) -> list[str]:
        return nats_servers(self.effective_nats_url())

    def effective_triton_url(self) -> str:
        return self.triton_url or f"{self.triton_bind_host}:{self.triton_grpc_port}"

    def effective_database_url(self) -> str:
        """The external database, or the embedded one with the password it was initialised with."""
        if self.database_url is not None:
            return self.database_url
        if self.database_url_file is not None:
            return self.database_url_file.expanduser().read_text().strip()
        return database_url(self.bind_host, self.postgres_port, stored_password(self.state_dir / "postgres"))

    def metrics_url(self) -> str:
        return f"http://{self.metrics_bind_host}:{self.triton_metrics_port}/metrics"

    def console_tls(self) -> bool:
        """HTTPS once the console is reachable beyond this machine (the team's certificate, ctxpress_core/tls.py)."""
        return self.console_host not in ("127.0.0.1", "localhost", "::1")

    def console_url(self) -> str:
        host = self.console_host if ":" not in self.console_host else f"[{self.console_host}]"
        return f"{'https' if self.console_tls() else 'http'}://{host}:{self.console_port}/"


def nats_servers(url: str) -> list[str]:
    """What ``nats.connect`` takes for a NATS URL setting: every server of a cluster (comma-separated), so a client
    starts on any node that is up."""
    return [server.strip() for server in url.split(",") if server.strip()]


def get_settings() -> Settings:
    return Settings()
